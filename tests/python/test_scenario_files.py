"""Scenario files (fabricsim run FILE): the examples run, the schema agrees with the loader,
and every error names the file, the line and the key."""

from __future__ import annotations

import inspect
import json
import pathlib
import shutil

import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from fabricsim import cli
from fabricsim.studies.scenario_file import GENERATORS, SCHEMA_PATH, WORKLOAD_KEYS, _COMMON

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


def test_there_are_three_examples():
    assert [p.name for p in EXAMPLES] == ["ethernet_ecmp.toml", "hgx_cluster_allreduce.toml", "leaf_spine_incast.toml"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_from_the_command_line(path, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="every example draws plots")
    assert cli.main(["run", str(path), "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "busiest links" in out
    spec = fs.load_scenario(path)
    for name in ("flows", "delays", "links"):
        assert pq.read_table(tmp_path / f"{name}.parquet").num_rows == getattr(spec.run(), name).num_rows
    for kind in spec.plots:
        assert (tmp_path / f"{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {tmp_path / kind}.png" in out
    if spec.trace:
        trace = json.loads((tmp_path / "trace.json").read_text())
        assert any(e["ph"] == "X" for e in trace["traceEvents"])


def test_the_leaf_spine_example_is_the_demo():
    file = fs.load_scenario(ROOT / "examples" / "leaf_spine_incast.toml").run()
    demo = cli.demo_scenario().run()
    for name in ("flows", "delays", "links"):
        assert getattr(file, name).equals(getattr(demo, name)), name


def test_hgx_example_builds_what_it_says():
    spec = fs.load_scenario(ROOT / "examples" / "hgx_cluster_allreduce.toml")
    sc = spec.scenario
    assert sc.topology.n_gpus == 32 and sc.seed == 1
    assert sc.routing == {"scale_up": "adaptive", "scale_out": "adaptive"}
    assert set(spec.names) == {"forward_backward", "gradients", "experts"}
    assert spec.run_options == {"record_rates": True}
    res = spec.run()
    coll = res.collectives.to_pylist()
    assert [c["op"] for c in coll] == ["all_reduce", "all_to_all"]
    assert [c["n_ranks"] for c in coll] == [32, 8]
    assert coll[0]["start_s"] == pytest.approx(2e-3)  # after the compute delay
    # the optimizer waits for both collectives
    opt = [r for r in res.delays.to_pylist() if r["tag"] == "optimizer"][0]
    assert opt["ready_s"] == pytest.approx(max(c["finish_s"] for c in coll))
    # the output directory is relative to the file
    assert spec.output_directory == str(ROOT / "examples" / "out" / "hgx_cluster_allreduce")


def test_output_directory_relative_to_the_file(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the example draws plots")
    shutil.copy(ROOT / "examples" / "ethernet_ecmp.toml", tmp_path / "study.toml")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    assert cli.main(["run", str(tmp_path / "study.toml"), "--no-progress"]) == 0
    assert (tmp_path / "out" / "ethernet_ecmp" / "flows.parquet").exists()
    assert (tmp_path / "out" / "ethernet_ecmp" / "utilization.png").exists()


def test_static_faults_and_bulk_flows_as_written():
    spec = fs.load_scenario(ROOT / "examples" / "ethernet_ecmp.toml")
    links = spec.scenario.topology.links.to_pydict()
    assert links["capacity_Bps"][512] == 0 and links["capacity_Bps"][513] == 0
    res = spec.run()
    staggered = [r for r in res.flows.to_pylist() if r["tag"] == "staggered"]
    assert [r["bytes"] for r in staggered] == [2**26, 2**27, 2**28, 2**29] * 2
    assert all(r["ready_s"] == pytest.approx(2e-3) for r in staggered)


# ---- schema -------------------------------------------------------------------------------


def _schema():
    return json.loads(pathlib.Path(SCHEMA_PATH).read_text())


def test_schema_agrees_with_the_loader():
    schema = _schema()
    branches = {b["if"]["properties"]["generator"]["const"]: b["then"] for b in schema["properties"]["fabric"]["allOf"]}
    assert set(branches) == set(GENERATORS)
    for name, fn in GENERATORS.items():
        params = {p.name for p in inspect.signature(fn).parameters.values()}
        assert set(branches[name]["properties"]) == params | {"generator", "fail"}, name
        required = {p.name for p in inspect.signature(fn).parameters.values() if p.default is p.empty}
        assert set(branches[name].get("required", [])) == required, name
    kinds = {b["if"]["properties"]["type"]["const"]: b["then"] for b in schema["properties"]["workload"]["items"]["allOf"]}
    assert set(kinds) == set(WORKLOAD_KEYS)
    for kind, (required, optional) in WORKLOAD_KEYS.items():
        assert set(kinds[kind]["properties"]) == set(_COMMON + required + optional), kind
        assert set(kinds[kind]["required"]) == set(required), kind
    # The command prints it, for editors.
    assert SCHEMA_PATH.endswith("scenario.schema.json")


def test_examples_validate_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from fabricsim.studies.scenario_file import tomllib

    validator = jsonschema.Draft7Validator(_schema())
    for path in EXAMPLES:
        errors = list(validator.iter_errors(tomllib.loads(path.read_text())))
        assert not errors, (path.name, [e.message for e in errors])


def test_schema_command(capsys):
    assert cli.main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "fabricsim scenario file"
    assert cli.main(["schema", "--path"]) == 0
    assert capsys.readouterr().out.strip() == SCHEMA_PATH


# ---- errors name the file, the line and the key -------------------------------------------

BASE = """[fabric]
generator = "hgx_h100"

[[workload]]
name = "compute"
type = "delay"
duration_s = "1ms"
"""

BAD = {
    "toml syntax": (BASE + "\n[[workload]]\ntype = \n", 10, None, "invalid TOML", False),
    "unknown workload key": (BASE + '\n[[workload]]\ntype = "flow"\nsrc = 0\ndst = 1\nsize = "1MiB"\n', 13,
                             "workload[1].size", "unknown key; workload[1] takes type, name, after", True),
    "missing required": (BASE + '\n[[workload]]\ntype = "flow"\nsrc = 0\ndst = 1\n', 9, "workload[1]",
                         "needs size_bytes", True),
    "bad value from the API": (BASE + '\n[[workload]]\ntype = "collective"\nop = "all_reduce"\nsize_bytes = "1 GiBB"\n',
                               12, "workload[1].size_bytes", "unknown size unit 'GiBB'", False),
    "unknown op": (BASE + '\n[[workload]]\ntype = "collective"\nop = "allreduce"\nsize_bytes = "1GiB"\n', 11,
                   "workload[1].op", "got 'allreduce'", True),
    "after an unknown name": (BASE + '\n[[workload]]\ntype = "delay"\nduration_s = 1\nafter = ["compte"]\n', 12,
                              "workload[1].after", "'compte' is not the name of an earlier workload entry (did you mean "
                              "'compute'?)", False),
    "unknown generator": ('[fabric]\ngenerator = "hgx-h100"\n', 2, "fabric.generator", "did you mean 'hgx_h100'", True),
    "generator argument": ('[fabric]\ngenerator = "cluster"\ndomain = "hgx-h100"\nn_domains = 2\nscale_out = "qm9999"\n',
                           5, "fabric.scale_out", "no catalog part named 'qm9999'", False),
    "unknown section": (BASE + "\n[outputs]\ndirectory = 'x'\n", 9, "outputs", "unknown section (did you mean 'output'?)",
                        True),
    "no fabric": ('[scenario]\nseed = 1\n', None, None, "needs a [fabric] table", True),
    "fault": (BASE + "\n[[fault]]\nat_s = '1ms'\nlinks = [100000]\n", 11, "fault[0].links", "link 100000 does not exist", False),
    "plot name": (BASE + "\n[output]\nplots = ['heatmap']\n", 10, "output.plots", "'utilization'", True),
    "workload not an array": ('[fabric]\ngenerator = "hgx_h100"\n[workload]\ntype = "delay"\n', 3, "workload",
                              "an array of tables", True),
}


@pytest.mark.parametrize("case", BAD)
def test_errors_name_the_file_line_and_key(case, tmp_path):
    text, line, key, words, schema_rejects = BAD[case]
    path = tmp_path / "study.toml"
    path.write_text(text)
    with pytest.raises(fs.ScenarioFileError) as e:
        fs.load_scenario(path)
    err = e.value
    assert isinstance(err, fs.InvalidArgumentError)
    assert err.path == str(path) and err.line == line and err.key == key
    prefix = f"{path}:{line}: " if line else f"{path}: "
    assert str(err).startswith(prefix + (f"{key}: " if key else "")), str(err)
    assert words in str(err)


@pytest.mark.parametrize("case", [c for c, (*_, schema_rejects) in BAD.items() if schema_rejects and c != "toml syntax"])
def test_the_schema_flags_what_it_can_see_of_a_bad_file(case):
    # What the schema can see, an editor flags too.
    jsonschema = pytest.importorskip("jsonschema")
    from fabricsim.studies.scenario_file import tomllib

    assert list(jsonschema.Draft7Validator(_schema()).iter_errors(tomllib.loads(BAD[case][0])))


def test_cli_reports_a_bad_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "study.toml"
    path.write_text(BAD["unknown workload key"][0])
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fabricsim: error: {path}:13: workload[1].size: unknown key") and err.count("\n") == 1
    assert cli.main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read the scenario file" in capsys.readouterr().err
    (tmp_path / "binary.toml").write_bytes(b"a = 1\n\xff\xfe")
    assert cli.main(["run", str(tmp_path / "binary.toml")]) == 2
    assert f"{tmp_path / 'binary.toml'}:2: not UTF-8" in capsys.readouterr().err


def test_plots_need_a_directory(tmp_path, capsys):
    path = tmp_path / "study.toml"
    path.write_text(BASE)
    assert cli.main(["run", str(path), "--plot", "fct", "--no-progress"]) == 2
    assert "give an output directory" in capsys.readouterr().err
    assert cli.main(["run", str(path), "--no-progress"]) == 0  # no output: prints only
    assert list(tmp_path.iterdir()) == [path]


def test_cost_model_file_and_table(tmp_path):
    fs.CostModel().replace(latency_scale=0.5).to_json(tmp_path / "model.json")
    for value in ('"model.json"', "{ latency_scale = 0.5 }"):
        path = tmp_path / "study.toml"
        path.write_text(BASE.replace("[[workload]]", f"[scenario]\ncost_model = {value}\n\n[[workload]]", 1))
        assert fs.load_scenario(path).scenario.cost_model.latency_scale == 0.5


def test_a_plain_topology_by_its_links(tmp_path):
    # The README's first scenario, as a file: routes by link id, nodes by label.
    path = tmp_path / "line.toml"
    path.write_text("""
[fabric]
generator = "links"
src = [0, 1, 1, 2]
dst = [1, 2, 0, 1]
capacity_Bps = "400Gb/s"
latency_s = "1us"
node_names = ["a", "b", "c"]

[[workload]]
name = "compute"
type = "delay"
duration_s = "2ms"

[[workload]]
name = "grads"
type = "flow"
src = "a"
dst = "c"
size_bytes = "1GiB"
route = [0, 1]
after = "compute"

[[workload]]
name = "more"
type = "flow"
src = "b"
dst = "c"
size_bytes = "256MiB"
after = ["compute"]

[[workload]]
type = "delay"
duration_s = "1ms"
after = ["grads", "more"]
tag = "optimizer"
""")
    spec = fs.load_scenario(path)
    sc = fs.Scenario(fs.Topology.from_arrays([0, 1, 1, 2], [1, 2, 0, 1], "400Gb/s", "1us", node_names=["a", "b", "c"]))
    compute = sc.add_delay("2ms")
    a = sc.add_flow("a", "c", "1GiB", after=compute, route=[0, 1])
    b = sc.add_flow("b", "c", "256MiB", after=compute)
    sc.add_delay("1ms", after=[a, b], tag="optimizer")
    mine, theirs = spec.run(), sc.run()
    assert spec.names == {"compute": 0, "grads": 1, "more": 2}
    assert mine.flows["finish_s"].equals(theirs.flows["finish_s"])
    assert mine.makespan_s == theirs.makespan_s
    assert fs.sweep({"x": [1]}, lambda x: None, progress=False).to_pydict() == {"x": [1]}
