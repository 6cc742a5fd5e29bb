"""Strict typing: ``mypy --strict`` passes on the package and on a user's
script written against the public API, and stubtest finds the compiled core agreeing with its
stubs (``_core.pyi``). Each check runs mypy in a subprocess, as a user or CI would, and a
failure shows mypy's output.

The three checks take about 10 s together: mypy reads NumPy's and the standard library's
stubs once into a cache shared by the first two; stubtest keeps no cache.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed: pip install -e '.[test]' brings it")

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO / "python"  # holds the fabricsim package, its sources and _core.pyi
# Generous: a cold mypy run takes a few seconds here, but CI machines can be slow and busy.
TIMEOUT_S = 600


def run_mypy(*args: str | Path, cwd: Path) -> None:
    """``python -m <args>`` in ``cwd``, which must exit 0; else the failure shows its output."""
    cmd = [sys.executable, "-m", *map(str, args)]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} (in {cwd}) exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    )


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for this module's mypy runs: the second reuses what the first read."""
    return tmp_path_factory.mktemp("mypy_cache")


def test_the_package_is_strict_clean(mypy_cache: Path) -> None:
    # The package's own settings (pyproject.toml: pyarrow and tqdm ship no types), given
    # explicitly: older mypy releases do not look for them above the working directory.
    run_mypy("mypy", "--strict", "--config-file", REPO / "pyproject.toml", "--cache-dir", mypy_cache, "fabricsim",
             cwd=PACKAGE_ROOT)


# A user's study. Each function returns what fabricsim gives it under the type it declares, so
# an API result typed Any fails it (no-any-return): a decorator that hid the add_* methods'
# signatures did. It runs as written too (main()).
USER_SCRIPT = '''
    """A study as a user writes it, against fabricsim's public API only."""

    from __future__ import annotations

    from pathlib import Path

    import fabricsim as fs
    from fabricsim import training


    def two_boxes() -> fs.Fabric:
        return fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")


    def all_reduce_s(fabric: fs.Topology, size: str | float) -> float:
        estimate: fs.Estimate = fs.estimate(fabric, "all_reduce", size, algorithm="ring")
        return estimate.time_s


    def gradients(sc: fs.Scenario, fabric: fs.Fabric) -> int:
        compute = sc.add_delay("2ms", tag="compute")
        return sc.add_collective("all_reduce", fabric.gpus, "256MiB", after=compute, tag="grads")


    def one_step(fabric: fs.Fabric, cost: fs.CostModel) -> fs.Result:
        sc = fs.Scenario(fabric, seed=1, routing="ecmp", cost_model=cost)
        sc.add_flow(0, 8, "1GiB", after=[gradients(sc, fabric)], tag="checkpoint")
        return sc.run()


    def makespan_s(result: fs.Result) -> float:
        return result.makespan_s


    def busiest_links(result: fs.Result) -> str:
        summary: fs.Summary = result.summary
        return str(summary)


    def busbw_Bps(fabric: fs.Fabric, cost: fs.CostModel) -> list[float]:
        table = fs.nccl_tests(fabric, "all_gather", "1M", "64M", 2, cost_model=cost)
        return [float(x) for x in table["busbw_Bps"].to_pylist()]


    def fitted(fabric: fs.Fabric, log: Path) -> fs.CostModel:
        calibration: fs.Calibration = fs.calibrate(fabric, log, holdout_every=0)
        errors: dict[str, float] = calibration.error_summary()
        print(errors["fit_max"], calibration.fitted, calibration.not_determined)
        return calibration.cost_model


    def step_s(fabric: fs.Fabric) -> float:
        step = training.TrainingStep("llama3-8b", training.Parallelism(tp=8, dp=2), fabric)
        estimate: training.StepEstimate = step.estimate()
        return estimate.step_s


    def unknown_node(fabric: fs.Topology) -> str:
        try:
            fabric.node_id(10**6)
        except fs.UnknownNodeError as e:
            # The exception tree as the checker sees it: an unknown node is an invalid
            # argument, which is both a fabricsim error and a ValueError.
            invalid: fs.InvalidArgumentError = e
            ours: fs.FabricsimError = invalid
            value_error: ValueError = invalid
            return f"{ours} {value_error}"
        except (fs.RoutingError, fs.ScenarioTooLargeError, fs.exceptions.InternalError) as e:
            return str(e)
        return ""


    def main(log: Path | None = None) -> None:
        fabric = two_boxes()
        cost = fs.CostModel().replace(latency_scale=1.2)
        print(all_reduce_s(fabric, "1GiB"), makespan_s(one_step(fabric, cost)), busiest_links(one_step(fabric, cost)))
        print(busbw_Bps(fabric, cost)[-1], step_s(fabric), unknown_node(fabric))
        if log is not None:
            print(fitted(fabric, log))


    if __name__ == "__main__":
        main()
'''


def test_a_user_script_is_strict_clean(tmp_path: Path, mypy_cache: Path) -> None:
    # Checked as a user's project sees fabricsim: installed, with none of this repository's
    # settings (an empty configuration, so that none is picked up from a parent directory).
    (tmp_path / "study.py").write_text(textwrap.dedent(USER_SCRIPT))
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    run_mypy("mypy", "--strict", "--config-file", tmp_path / "mypy.ini", "--cache-dir", mypy_cache, "study.py",
             cwd=tmp_path)


def test_the_core_stubs_match_the_compiled_module(tmp_path: Path) -> None:
    # Run outside the repository, so that the fabricsim it checks is the one Python imports,
    # with its compiled core beside its stubs (a fresh clone's python/fabricsim has no core
    # until it is built in place).
    run_mypy("mypy.stubtest", "fabricsim._core", cwd=tmp_path)
