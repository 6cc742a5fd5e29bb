"""Progress without being asked, on a terminal only: runs, training builds and the command line;
finished bars that read as finished; and the one hint an exact run that takes long gives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fabricsim as fs
from fabricsim import cli, progress
from test_api import _terminal_line


def small():
    sc = fs.Scenario(fs.hgx_h100())
    sc.add_flows([0, 1, 2], [1, 2, 3], "1MiB")
    return sc


def sequential(n=5_000):
    """n flows one after another on one link: enough instants for the engine to report."""
    sc = fs.Scenario(fs.Topology.from_arrays([0], [1], 1.0))
    sc.add_flows(np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64), 0.5, start_s=np.arange(n, dtype=float))
    return sc


def test_a_run_shows_nothing_in_a_pipe_and_a_short_run_nothing_on_a_terminal(capsys, monkeypatch):
    small().run()
    assert capsys.readouterr().err == ""  # not a terminal
    monkeypatch.setattr(fs.scenario, "progress_enabled", lambda p, stream=None: True)
    small().run()  # a terminal, but done well within AUTO_DELAY_S: no bar
    assert capsys.readouterr().err == ""
    assert progress.AUTO_DELAY_S == 1.0


def test_a_long_run_shows_its_bar_on_a_terminal_without_being_asked(capsys, monkeypatch):
    monkeypatch.setattr(fs.scenario, "progress_enabled", lambda p, stream=None: True)
    monkeypatch.setattr(fs.scenario, "AUTO_DELAY_S", 0.0)  # as if the run had taken a second
    sc = sequential()
    sc.run()
    last = _terminal_line(capsys.readouterr().err)
    assert last.startswith("run: 100%") and "5000/5000 activities" in last, last


def test_a_finished_bar_reads_as_finished_even_without_a_report(capsys):
    # A run shorter than a report's interval left "0act [00:00, ?act/s]".
    small().run(progress=True)
    last = _terminal_line(capsys.readouterr().err)
    assert last.startswith("run: 100%") and "3/3 activities" in last and "sim " in last, last
    assert "?" not in last and "act/s" not in last


def test_progress_false_and_callables_draw_nothing(capsys, monkeypatch):
    monkeypatch.setattr(fs.scenario, "progress_enabled", lambda p, stream=None: True)
    monkeypatch.setattr(fs.scenario, "AUTO_DELAY_S", 0.0)
    sequential(2_000).run(progress=False)
    calls = []
    sequential(2_000).run(progress=lambda *a: calls.append(a))
    assert capsys.readouterr().err == "" and calls


def test_a_long_exact_run_says_once_that_tolerance_exists(monkeypatch):
    monkeypatch.setattr(progress.ToleranceHint, "AFTER_S", 0.0)
    monkeypatch.setattr(progress.ToleranceHint, "MIN_ACTIVITIES", 1_000)
    monkeypatch.setattr(progress.ToleranceHint, "_given", False)
    with pytest.warns(progress.PerformanceHint, match=r"run\(tolerance=1e-3\) runs the fast mode"):
        sequential().run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sequential().run()  # once per session
        monkeypatch.setattr(progress.ToleranceHint, "_given", False)
        sequential().run(tolerance=1e-3)  # the fast mode needs no hint
        small().run()  # too few activities for one
    hint = progress.ToleranceHint()
    monkeypatch.setattr(progress.ToleranceHint, "AFTER_S", 3600.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hint(10, 50_000, 1.0)  # early in a run: silent


def test_a_training_step_shows_its_build_and_its_run(capsys):
    fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
    step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
    res = step.run(progress=True)
    err = capsys.readouterr().err
    lines = [_terminal_line(part) for part in err.split("\n") if part]
    build = next(line for line in lines if line.startswith("build:"))
    run = next(line for line in lines if line.startswith("run:"))
    # 2 stages x 2 x 8 micro-batches scheduled, then each stage's reduction and optimizer.
    n_parts = 2 * 2 * step.par.n_micro_batches + 2 * 2
    assert "100%" in build and f"{n_parts}/{n_parts}" in build, build
    n = res.built.scenario.n_activities
    assert "100%" in run and f"{n}/{n} activities" in run, run
    step.run(progress=False)
    assert capsys.readouterr().err == ""
    calls = []
    step.run(progress=lambda *a: calls.append(a))  # a callable is the run's
    assert capsys.readouterr().err == ""
    with pytest.raises(fs.InvalidArgumentError, match="progress must be True, False, None"):
        step.run(progress="yes")


def test_fabricsim_train_shows_the_build(capsys):
    assert cli.main(["train", "llama3-8b", "--tp", "8", "--pp", "2", "--nodes", "2", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "build:" in err and "run:" in err and "MFU" in out.upper()
    assert cli.main(["train", "llama3-8b", "--tp", "8", "--pp", "2", "--nodes", "2"]) == 0
    assert capsys.readouterr().err == ""  # not a terminal
