"""Scenario files: a whole study in one TOML file, run by ``fabricsim run FILE``.

A file names a fabric (a generator and its arguments, faults applied before the run), the
scenario's options (seed, routing, cost model), a workload of delays, flows and collectives
joined by ``after`` (names of earlier entries), faults during the run, run options and where
the results go. Its keys are the Python API's argument names and take the same values
(numbers in SI units, or strings with units such as "1GiB", "400Gb/s", "5us")::

    [fabric]
    generator = "cluster"          # hgx_h100, hgx_b200, nvl72, nvlink_domain, clos, cluster,
    domain = "hgx-h100"            # pcie_server, leaf_spine, links
    n_domains = 4
    scale_out = "quantum-2"

    [scenario]
    seed = 1
    routing = "adaptive"           # or { scale_up = "adaptive", scale_out = "ecmp" }

    [[workload]]
    name = "compute"
    type = "delay"                 # delay, flow, flows, collective
    duration_s = "2ms"

    [[workload]]
    name = "grads"
    type = "collective"
    op = "all_reduce"
    size_bytes = "1GiB"            # ranks: every GPU unless given
    after = ["compute"]

    [[fault]]                      # during the run (Scenario.add_fault)
    at_s = "2.5ms"
    planes = [0]
    factor = 0.5

    [run]
    tolerance = 0.0                # record_rates, verify_rates

    [output]
    directory = "out"              # relative to this file; Parquet tables, PNGs, trace
    plots = ["utilization", "fct", "timeline"]
    trace = true                   # trace.json for Perfetto / chrome://tracing

``data/scenario.schema.json`` (:data:`SCHEMA_PATH`, ``fabricsim schema``) is the format's
JSON Schema, for editors that check TOML against one. Every error names the file, the line
and the key: ``study.toml:14: workload[1].size_bytes: ...``.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import fabrics
from .._checks import COUNT, did_you_mean, integer, parsed
from .._files import path_argument, read_bytes, reason, write_files
from ..exceptions import FabricsimError, ScenarioFileError
from ..fabrics import Topology
from ..fabrics.generators import leaf_spine
from ..results import Result
from ..scenario import Scenario
from ..scenario_args import checked_run_options
from ..units import bandwidth_Bps, duration_s

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["load_scenario", "ScenarioFile", "SCHEMA_PATH", "PLOTS", "GENERATORS", "WORKLOAD_KEYS"]

#: The JSON Schema of scenario files.
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "data", "scenario.schema.json")

#: Plots ``[output] plots`` can ask for, each written as ``<directory>/<name>.png``.
PLOTS = ("utilization", "fct", "timeline")


def _leaf_spine(*, n_leaves: int, hosts_per_leaf: int, n_spines: int, link_Bps: Any = "400Gb/s",
                latency_s: Any = "1us") -> Topology:
    """The demo's leaf-spine: hosts ``host0..``, leaves ``leaf0..``, spines ``spine0..``."""
    return leaf_spine(integer("n_leaves", n_leaves, COUNT), integer("hosts_per_leaf", hosts_per_leaf, COUNT),
                      integer("n_spines", n_spines, COUNT), parsed("link_Bps", bandwidth_Bps, link_Bps),
                      parsed("latency_s", duration_s, latency_s))


def _links(*, src: Any, dst: Any, capacity_Bps: Any, latency_s: Any = 0.0, n_nodes: int | None = None,
           node_names: Any = None) -> Topology:
    return Topology.from_arrays(src, dst, capacity_Bps, latency_s, n_nodes=n_nodes, node_names=node_names)


#: ``[fabric] generator`` names and the functions they call with the table's other keys.
GENERATORS: dict[str, Callable[..., Topology]] = {
    "hgx_h100": fabrics.hgx_h100,
    "hgx_b200": fabrics.hgx_b200,
    "nvl72": fabrics.nvl72,
    "nvlink_domain": fabrics.nvlink_domain,
    "clos": fabrics.clos,
    "cluster": fabrics.cluster,
    "pcie_server": fabrics.pcie_server,
    "leaf_spine": _leaf_spine,
    "links": _links,
}

#: Where a key is: table and key names, and indices into arrays of tables.
KeyPath = tuple[Any, ...]

_COMMON = ("type", "name", "after", "start_s", "tag")
#: Keys of each workload type (besides type, name, after, start_s and tag), required first.
WORKLOAD_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "delay": (("duration_s",), ()),
    "flow": (("src", "dst", "size_bytes"), ("route", "max_rate_Bps")),
    "flows": (("src", "dst", "size_bytes"), ("routes",)),
    "collective": (("op",), ("ranks", "size_bytes", "sizes", "algorithm", "protocol")),
}
_SECTIONS = {
    "fabric": "a table: [fabric] with generator = ... and its arguments",
    "scenario": "a table: [scenario] with seed, routing, cost_model",
    "workload": "an array of tables: [[workload]] entries",
    "fault": "an array of tables: [[fault]] entries",
    "run": "a table: [run] with tolerance, record_rates, verify_rates",
    "output": "a table: [output] with directory, plots, trace",
}
_FAULT_KEYS = ("at_s", "until_s", "links", "nodes", "planes", "factor")
_FAIL_KEYS = ("links", "nodes", "planes", "factor")
_SCENARIO_KEYS = ("seed", "routing", "cost_model")
_RUN_KEYS = ("tolerance", "record_rates", "verify_rates")
_OUTPUT_KEYS = ("directory", "plots", "trace")


# ---- where a key is ----------------------------------------------------------------------

# One way to match each line (the name's blanks are stripped after): patterns where runs of
# blanks could go to either of two parts take time cubic in the blanks of a line like "[   ...".
_HEADER = re.compile(r"^\s*(\[\[?)([^\]]*)\]\]?\s*(#.*)?$")
_BARE = r"[A-Za-z0-9_-]+|\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_KEY = re.compile(rf"^\s*((?:{_BARE})(?:\s*\.\s*(?:{_BARE}))*)\s*=")


def _key_parts(text: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(rf"{_BARE}", text)]


class _Lines:
    """Line numbers of a TOML text's tables and keys, by key path (``("workload", 2,
    "src")``): enough to point at what an error is about (inline tables and keys inside
    multi-line values point at the line of the key that holds them)."""

    def __init__(self, text: str) -> None:
        self.at: dict[KeyPath, int] = {}
        counts: dict[KeyPath, int] = {}
        table: KeyPath = ()
        for n, line in enumerate(text.splitlines(), start=1):
            m = _HEADER.match(line)
            if m and m.group(2).strip() and not _KEY.match(line):
                parts = tuple(_key_parts(m.group(2)))
                if m.group(1) == "[[":
                    i = counts.get(parts, 0)
                    counts[parts] = i + 1
                    table = (*parts, i)
                else:
                    table = parts
                self.at.setdefault(table, n)
                continue
            m = _KEY.match(line)
            if m:
                self.at.setdefault((*table, *_key_parts(m.group(1))), n)

    def line(self, path: KeyPath) -> int | None:
        for k in range(len(path), 0, -1):
            if path[:k] in self.at:
                return self.at[path[:k]]
        return None


def _key_text(path: KeyPath) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# ---- loading -----------------------------------------------------------------------------


@dataclass
class ScenarioFile:
    """A loaded scenario file: the :class:`Scenario` it builds and what to do with it.

    ``names`` maps each workload entry's name to its activity id (a ``flows`` entry: an array
    of ids); ``run_options`` are ``Scenario.run``'s keyword arguments from ``[run]``;
    ``output_directory`` (absolute, or None), ``plots`` and ``trace`` come from ``[output]``.

    Example::

        open("study.toml", "w").write('''
        [fabric]
        generator = "hgx_h100"

        [[workload]]
        name = "grads"
        type = "collective"
        op = "all_reduce"
        size_bytes = "256MiB"

        [output]
        directory = "out"
        ''')
        study = fs.load_scenario("study.toml")
        study.names["grads"], study.output_directory   # the entry's activity id; the absolute output path
    """

    path: str
    scenario: Scenario
    names: dict[str, Any] = field(default_factory=dict)
    run_options: dict[str, Any] = field(default_factory=dict)
    output_directory: str | None = None
    plots: tuple[str, ...] = ()
    trace: bool = False

    def run(self, *, progress: Any = False) -> Result:
        """Runs the scenario with the file's ``[run]`` options (and ``record_rates`` on when
        the utilization plot is asked for: it needs the rates over time).

        Example::

            open("study.toml", "w").write('''
            [fabric]
            generator = "hgx_h100"

            [[workload]]
            name = "grads"
            type = "collective"
            op = "all_reduce"
            size_bytes = "256MiB"

            [output]
            directory = "out"
            ''')
            result = fs.load_scenario("study.toml").run()   # with the file's [run] options
            result.summary.makespan_s
        """
        options = dict(self.run_options)
        if "utilization" in self.plots:
            options["record_rates"] = True
        return self.scenario.run(progress=progress, **options)

    def write(self, result: Result, directory: str | os.PathLike[str] | None = None) -> list[str]:
        """Writes the result's Parquet tables, the plots and the trace the file asks for into
        ``directory`` (default the file's ``[output] directory``); returns the paths written.
        All of them or none: a write that fails (a full disk, Ctrl-C) leaves the directory as
        it was and raises :class:`WriteError` naming the path.

        Example::

            open("study.toml", "w").write('''
            [fabric]
            generator = "hgx_h100"

            [[workload]]
            name = "grads"
            type = "collective"
            op = "all_reduce"
            size_bytes = "256MiB"

            [output]
            directory = "out"
            ''')
            study = fs.load_scenario("study.toml")
            paths = study.write(study.run(), "elsewhere")   # instead of the file's [output] directory
        """
        target = self.output_directory if directory is None else path_argument("directory", directory)
        if target is None:
            return []
        files = result._parquet_files()
        for kind in self.plots:
            from . import plot

            files[f"{kind}.png"] = plot.image(plot.by_name(kind, result, self.scenario))
        if self.trace:
            from . import trace

            files["trace.json"] = trace.trace_json(result, scenario=self.scenario)
        return write_files("directory", target, files)


class _Loader:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = _Lines(text)
        self.base = os.path.dirname(os.path.abspath(path))

    def error(self, key: KeyPath, message: str) -> ScenarioFileError:
        line = self.lines.line(key)
        where = f"{self.path}:{line}" if line is not None else self.path
        shown = _key_text(key)
        return ScenarioFileError(f"{where}: {shown + ': ' if shown else ''}{message}", self.path, line, shown or None)

    def table(self, key: KeyPath, value: Any, what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, f"must be {what}, got {_toml_type(value)}")
        return value

    def keys(self, key: KeyPath, table: dict[str, Any], allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
        for k in table:
            if k not in allowed:
                raise self.error((*key, k), f"unknown key{did_you_mean(k, allowed)}; {_key_text(key) or 'here'} takes "
                                            f"{', '.join(allowed)}")
        for k in required:
            if k not in table:
                raise self.error(key, f"needs {k} = ...")

    def call(self, key: KeyPath, table: dict[str, Any], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, an error naming the key of ``table`` it is about."""
        try:
            return fn(*args, **kwargs)
        except (FabricsimError, ValueError, TypeError, OSError) as e:
            if isinstance(e, ScenarioFileError):
                raise
            raise self.error(_blamed(key, table, str(e)), str(e)) from e

    # -- sections --

    def load(self, data: dict[str, Any]) -> ScenarioFile:
        for k, v in data.items():
            if k == "$schema":
                continue
            if k not in _SECTIONS:
                raise self.error((k,), f"unknown section{did_you_mean(k, _SECTIONS)}; a scenario file has "
                                       f"{', '.join(_SECTIONS)}")
        if "fabric" not in data:
            raise self.error((), "needs a [fabric] table (generator = ... and its arguments)")
        topology = self.fabric(self.table(("fabric",), data["fabric"], _SECTIONS["fabric"]))
        scenario = self.scenario(topology, self.table(("scenario",), data.get("scenario", {}), _SECTIONS["scenario"]))
        names = self.workload(scenario, self.array(("workload",), data.get("workload", [])))
        for i, entry in enumerate(self.array(("fault",), data.get("fault", []))):
            key = ("fault", i)
            entry = self.table(key, entry, "a table")
            self.keys(key, entry, _FAULT_KEYS, ("at_s",))
            self.call(key, entry, scenario.add_fault, **entry)
        run = self.table(("run",), data.get("run", {}), _SECTIONS["run"])
        self.keys(("run",), run, _RUN_KEYS)
        self.call(("run",), run, checked_run_options, **run)  # here, with the file and line, not at run time
        out = self.table(("output",), data.get("output", {}), _SECTIONS["output"])
        self.keys(("output",), out, _OUTPUT_KEYS)
        directory = out.get("directory")
        if directory is not None and (not isinstance(directory, str) or not directory):
            raise self.error(("output", "directory"), f"must be a path (a non-empty string), got {directory!r}")
        plots = out.get("plots", [])
        if not isinstance(plots, list) or any(p not in PLOTS for p in plots):
            raise self.error(("output", "plots"), f"must be a list of {', '.join(map(repr, PLOTS))}, got {plots!r}")
        trace = out.get("trace", False)
        if not isinstance(trace, bool):
            raise self.error(("output", "trace"), f"must be true or false, got {trace!r}")
        return ScenarioFile(
            path=self.path, scenario=scenario, names=names, run_options=dict(run),
            output_directory=None if directory is None else os.path.join(self.base, directory),
            plots=tuple(dict.fromkeys(plots)), trace=trace,
        )

    def array(self, key: KeyPath, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(key, f"must be {_SECTIONS[key[0]]}, got {_toml_type(value)}")
        return value

    def fabric(self, table: dict[str, Any]) -> Topology:
        key = ("fabric",)
        generator = table.get("generator")
        if generator is None:
            raise self.error(key, f"needs generator = one of {', '.join(map(repr, GENERATORS))}")
        if not isinstance(generator, str) or generator not in GENERATORS:  # an array is no key
            raise self.error((*key, "generator"), f"unknown generator {generator!r}{did_you_mean(str(generator), GENERATORS)}; "
                                                  f"known: {', '.join(GENERATORS)}")
        fn = GENERATORS[generator]
        args = {k: v for k, v in table.items() if k not in ("generator", "fail")}
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY]
        self.keys(key, {k: None for k in args}, tuple(p.name for p in params))
        missing = [p.name for p in params if p.default is p.empty and p.name not in args]
        if missing:
            raise self.error(key, f"generator {generator!r} needs {', '.join(missing)}")
        args = {k: tuple(v) if k == "oversubscription" and isinstance(v, list) else v for k, v in args.items()}
        topology: Topology = self.call(key, table, fn, **args)
        fails = table.get("fail", [])
        if not isinstance(fails, list):
            raise self.error((*key, "fail"), f"must be an array of tables ([[fabric.fail]]), got {_toml_type(fails)}")
        for i, entry in enumerate(fails):
            fkey = (*key, "fail", i)
            entry = self.table(fkey, entry, "a table")
            self.keys(fkey, entry, _FAIL_KEYS)
            if not isinstance(topology, fabrics.Fabric):
                raise self.error(fkey, f"generator {generator!r} makes a plain topology, which cannot fail links "
                                       "before the run: use a [[fault]] at at_s = 0")
            topology = self.call(fkey, entry, topology.fail, **entry)
        return topology

    def scenario(self, topology: Topology, table: dict[str, Any]) -> Scenario:
        key = ("scenario",)
        self.keys(key, table, _SCENARIO_KEYS)
        kwargs = dict(table)
        cost = kwargs.get("cost_model")
        if cost is not None:
            from ..collectives.cost.model import CostModel

            ckey = (*key, "cost_model")
            if isinstance(cost, str):
                path = os.path.join(self.base, cost)
                kwargs["cost_model"] = self.call(ckey, {}, CostModel.from_json, path)
            elif isinstance(cost, dict):
                kwargs["cost_model"] = self.call(ckey, {}, CostModel.from_dict, cost)
            else:
                raise self.error(ckey, f"must be a JSON file's path (relative to this file) or a table of the "
                                       f"cost model's fields, got {_toml_type(cost)}")
        scenario: Scenario = self.call(key, table, Scenario, topology, **kwargs)
        return scenario

    def workload(self, sc: Scenario, entries: list[Any]) -> dict[str, Any]:
        names: dict[str, Any] = {}
        for i, entry in enumerate(entries):
            key = ("workload", i)
            entry = self.table(key, entry, "a table")
            kind = entry.get("type")
            if not isinstance(kind, str) or kind not in WORKLOAD_KEYS:
                raise self.error((*key, "type") if "type" in entry else key,
                                 f"type must be one of {', '.join(map(repr, WORKLOAD_KEYS))}, got {kind!r}"
                                 f"{did_you_mean(str(kind), WORKLOAD_KEYS) if isinstance(kind, str) else ''}")
            required, optional = WORKLOAD_KEYS[kind]
            self.keys(key, entry, _COMMON + required + optional, required)
            name = entry.get("name")
            if name is not None and (not isinstance(name, str) or not name):
                raise self.error((*key, "name"), f"must be a non-empty string, got {name!r}")
            if name in names:
                raise self.error((*key, "name"), f"{name!r} names an earlier entry too; names must be distinct")
            kwargs = {k: v for k, v in entry.items() if k not in ("type", "name")}
            if "after" in kwargs:
                kwargs["after"] = self.after((*key, "after"), kwargs["after"], names)
            if kind == "delay":
                out = self.call(key, entry, sc.add_delay, **kwargs)
            elif kind == "flow":
                out = self.call(key, entry, sc.add_flow, **kwargs)
            elif kind == "flows":
                out = self.call(key, entry, sc.add_flows, **kwargs)
            else:
                kwargs.setdefault("ranks", None)  # every GPU
                out = self.call(key, entry, sc.add_collective, **kwargs)
            if name is not None:
                names[name] = out
        return names

    def after(self, key: KeyPath, value: Any, names: dict[str, Any]) -> np.ndarray:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise self.error(key, f"must be a name or a list of names of earlier workload entries, got {value!r}")
        ids = []
        for v in items:
            if v not in names:
                raise self.error(key, f"{v!r} is not the name of an earlier workload entry"
                                      f"{did_you_mean(v, names)}{'; named so far: ' + ', '.join(names) if names else ''}")
            ids.append(np.atleast_1d(np.asarray(names[v], dtype=np.int64)))
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)


def _blamed(key: KeyPath, table: dict[str, Any], message: str) -> KeyPath:
    """The key of ``table`` an API error is about: the first of its keys the message names
    (errors name the argument, and the file's keys are the arguments' names)."""
    best: tuple[int, str] | None = None
    for k in table:
        # "links" is blamed for "link 7 does not exist", "nodes" for "node 3"
        word = re.escape(k[:-1]) + "s?" if k.endswith("s") and len(k) > 3 else re.escape(k)
        m = re.search(rf"(?<![A-Za-z0-9_]){word}(?![A-Za-z0-9_])", message)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), k)
    return key if best is None else (*key, best[1])


def _toml_type(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def load_scenario(path: str | os.PathLike[str]) -> ScenarioFile:
    """Reads a scenario file (TOML; module docs) and builds its scenario.

    Raises :class:`fabricsim.ScenarioFileError` (an ``InvalidArgumentError``) whose message
    starts with ``file:line: key:``, for a file that cannot be read, TOML that does not parse,
    an unknown or missing key, or a value the API refuses.

    Example::

        open("study.toml", "w").write('''
        [fabric]
        generator = "hgx_h100"

        [[workload]]
        name = "grads"
        type = "collective"
        op = "all_reduce"
        size_bytes = "256MiB"

        [output]
        directory = "out"
        ''')
        study = fs.load_scenario("study.toml")   # a ScenarioFile
        result = study.run()
        study.write(result)   # ['.../out/flows.parquet', ...]
    """
    try:
        path, raw = read_bytes("path", path)
    except OSError as e:  # the path is one: read_bytes checked it
        shown = os.fspath(path)
        raise ScenarioFileError(f"{shown}: cannot read the scenario file: {reason(e)}", shown) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        at = raw[: e.start].count(b"\n") + 1
        raise ScenarioFileError(f"{path}:{at}: not UTF-8 text (TOML files are UTF-8)", path, at) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line = int(m.group(1)) if m else None
        what = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e)) if m else str(e)
        where = f"{path}:{line}" if line else path
        col = f" (column {m.group(2)})" if m else ""
        raise ScenarioFileError(f"{where}: invalid TOML{col}: {what}", path, line) from None
    return _Loader(path, text).load(data)
