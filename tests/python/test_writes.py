"""Every file fabricsim writes is written whole or not at all, and every path argument is a
path, never a file descriptor (python/fabricsim/_files.py).

The writers are driven into a failure at each step they take (the temporary file's write, its
fsync, the hard link that keeps the earlier file, the renames, the directory's fsync), by an
I/O error and by Ctrl-C, and the directory must then hold exactly what it held before, byte
for byte, with no temporary left behind."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fabricsim as fs
from fabricsim import cli
from fabricsim.exceptions import InvalidArgumentError, WriteError

EIO = OSError(errno.EIO, os.strerror(errno.EIO))


def snapshot(directory):
    """{name: bytes} of every file in ``directory``, hidden ones included."""
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def fail_nth(monkeypatch, name, n, error):
    """The n-th call of ``os.<name>`` raises ``error`` (the others run)."""
    real, calls = getattr(os, name), []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, failing)
    return calls


class _FailingWrites:
    """A file whose writes raise ``error``: a full disk under the n-th temporary file."""

    def __init__(self, handle, error):
        self._handle, self._error = handle, error

    def write(self, data):
        raise self._error

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


def fail_nth_file(monkeypatch, n, error):
    real, opened = os.fdopen, []

    def fdopen(*args, **kwargs):
        handle = real(*args, **kwargs)
        opened.append(handle)
        return _FailingWrites(handle, error) if len(opened) == n else handle

    monkeypatch.setattr(os, "fdopen", fdopen)
    return opened


def inject(monkeypatch, step, error):
    """Makes ``step`` ("write 2": the second temporary's write; "replace 1": the first
    os.replace; ...) raise ``error``."""
    name, n = step.split()
    if name == "write":
        return fail_nth_file(monkeypatch, int(n), error)
    return fail_nth(monkeypatch, name, int(n), error)


def expect_failure(call, error, path_text):
    if isinstance(error, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            call()
    else:
        with pytest.raises(WriteError, match=r"^cannot write .*" + path_text + r".*: Input/output error"):
            call()


def _result(*, rich):
    """A run with five tables (rates recorded, a collective) or three."""
    fabric = fs.hgx_h100()
    sc = fs.Scenario(fabric)
    if rich:
        sc.add_collective("all_reduce", fabric.gpus, "1MiB", algorithm="ring")
    sc.add_flow(0, 1, "1MiB")
    return sc.run(record_rates=rich)


# ---- one result's tables: to_parquet --------------------------------------------------------

# A second run (three tables) written over a first (five): three temporaries written and
# synced, three earlier tables linked aside and replaced, two earlier tables renamed aside
# (this run lacks them), then the directory synced.
PARQUET_STEPS = ["write 1", "write 2", "write 3", "fsync 1", "fsync 2", "fsync 3", "fsync 4",
                 "link 1", "link 2", "link 3", "replace 1", "replace 2", "replace 3", "rename 1", "rename 2"]


@pytest.mark.parametrize("error", [EIO, KeyboardInterrupt()], ids=["EIO", "ctrl-c"])
@pytest.mark.parametrize("step", PARQUET_STEPS)
def test_to_parquet_failing_at_any_step_leaves_the_directory_byte_for_byte(tmp_path, monkeypatch, step, error):
    # A rename that set an earlier table aside failing once (EIO, or Ctrl-C landing there) made
    # the rollback write an empty file over that table.
    _result(rich=True).to_parquet(tmp_path)
    before = snapshot(tmp_path)
    assert len(before) == 5
    second = _result(rich=False)
    calls = inject(monkeypatch, step, error)
    expect_failure(lambda: second.to_parquet(tmp_path), error, re.escape(str(tmp_path)))
    monkeypatch.undo()
    assert len(calls) >= int(step.split()[1])  # the step was reached
    assert snapshot(tmp_path) == before
    written = second.to_parquet(tmp_path)  # and the directory takes the next write
    assert sorted(os.listdir(tmp_path)) == ["delays.parquet", "flows.parquet", "links.parquet"]
    assert pq.read_table(written[0]).num_rows == second.flows.num_rows


@pytest.mark.parametrize("step", ["replace 1", "replace 2", "replace 3", "rename 1", "rename 4", "rename 5", "fsync 4"])
def test_without_hard_links_the_earlier_tables_are_renamed_aside_and_put_back(tmp_path, monkeypatch, step):
    # A file system without hard links (FAT, some network shares): each earlier table is
    # renamed aside, so its name is empty until the new one takes it.
    _result(rich=True).to_parquet(tmp_path)
    before = snapshot(tmp_path)
    second = _result(rich=False)

    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_links)
    inject(monkeypatch, step, EIO)
    expect_failure(lambda: second.to_parquet(tmp_path), EIO, re.escape(str(tmp_path)))
    assert snapshot(tmp_path) == before
    monkeypatch.undo()
    monkeypatch.setattr(os, "link", no_links)
    second.to_parquet(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["delays.parquet", "flows.parquet", "links.parquet"]


def test_a_directory_sync_that_cannot_be_done_is_not_a_failure(tmp_path, monkeypatch):
    # Some file systems answer EINVAL to fsync on a directory: nothing to make durable there.
    real = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert len(_result(rich=False).to_parquet(tmp_path)) == 3


def test_every_file_is_synced_before_it_takes_its_name(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", os.path.basename(b))), real_replace(a, b))[1])
    _result(rich=False).to_parquet(tmp_path)
    assert events == [("fsync", False)] * 3 + [("replace", n) for n in
                                               ("flows.parquet", "delays.parquet", "links.parquet")] + [("fsync", True)]


# ---- single files: the cost model, the trace, a plot ----------------------------------------


def _writers(tmp_path):
    res = _result(rich=False)
    writers = {
        "cost model": (tmp_path / "model.json", lambda p: fs.CostModel(latency_scale=2.0).to_json(p)),
        "trace": (tmp_path / "trace.json", lambda p: fs.trace.write_trace(res, p)),
    }
    try:
        import matplotlib  # noqa: F401

        writers["plot"] = (tmp_path / "fct.png", lambda p: fs.plot.save(fs.plot.fct_cdf(res), p))
    except ImportError:  # pragma: no cover - the plot extra not installed
        pass
    return writers


SINGLE_STEPS = ["write 1", "fsync 1", "fsync 2", "link 1", "replace 1"]


@pytest.mark.parametrize("error", [EIO, KeyboardInterrupt()], ids=["EIO", "ctrl-c"])
@pytest.mark.parametrize("step", SINGLE_STEPS)
@pytest.mark.parametrize("which", ["cost model", "trace", "plot"])
def test_a_single_file_write_failing_at_any_step_leaves_the_good_file(tmp_path, monkeypatch, which, step, error):
    # to_json and write_trace opened the target for writing: a full disk left a truncated
    # file where the good one was, with a bare OSError.
    writers = _writers(tmp_path)
    if which not in writers:
        pytest.skip("matplotlib is not installed")
    path, write = writers[which]
    path.write_bytes(b"the previous run's file\n")
    before = snapshot(tmp_path)
    inject(monkeypatch, step, error)
    expect_failure(lambda: write(path), error, path.name)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before
    write(path)
    assert os.listdir(tmp_path) == [path.name] and path.read_bytes() != before[path.name]


def test_a_failed_first_write_leaves_no_file_at_all(tmp_path, monkeypatch):
    inject(monkeypatch, "write 1", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with pytest.raises(WriteError, match=r"^cannot write '.*model\.json': No space left on device$"):
        fs.CostModel().to_json(tmp_path / "model.json")
    assert os.listdir(tmp_path) == []


def test_a_written_file_keeps_the_earlier_files_permissions_and_links(tmp_path):
    path = tmp_path / "model.json"
    path.write_text("{}")
    path.chmod(0o640)
    fs.CostModel(latency_scale=3.0).to_json(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert fs.CostModel.from_json(path).latency_scale == 3.0
    # A symbolic link is written through: the file it names changes, the link stays.
    (tmp_path / "models").mkdir()
    real = tmp_path / "models" / "current.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    fs.CostModel(latency_scale=4.0).to_json(link)
    assert link.is_symlink() and fs.CostModel.from_json(real).latency_scale == 4.0
    assert sorted(os.listdir(tmp_path / "models")) == ["current.json"]


def test_a_file_its_owner_made_read_only_is_refused_as_open_would(tmp_path, monkeypatch):
    # A rename would replace it regardless (only the directory's permissions count).
    path = tmp_path / "model.json"
    path.write_text("{}")
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False)
    with pytest.raises(WriteError, match=r"^cannot write '.*model\.json': Permission denied$"):
        fs.CostModel().to_json(path)
    assert path.read_text() == "{}" and os.listdir(tmp_path) == ["model.json"]


def test_to_json_into_a_directory_is_a_write_error_naming_it(tmp_path):
    # It was IsADirectoryError.
    with pytest.raises(WriteError, match=rf"^cannot write {str(tmp_path)!r}: Is a directory$"):
        fs.CostModel().to_json(tmp_path)
    with pytest.raises(WriteError, match=r"^cannot write '.*missing/model\.json': No such file or directory$"):
        fs.CostModel().to_json(tmp_path / "missing" / "model.json")
    with pytest.raises(WriteError, match=r"embedded null byte"):
        fs.CostModel().to_json(str(tmp_path / "a\0b"))
    assert os.listdir(tmp_path) == []


# ---- a scenario file's outputs: tables, plots and trace together ----------------------------


def test_a_scenario_files_outputs_are_written_together(tmp_path, monkeypatch):
    path = tmp_path / "study.toml"
    path.write_text('[fabric]\ngenerator = "hgx_h100"\n\n[[workload]]\ntype = "flow"\nsrc = 0\ndst = 1\n'
                    'size_bytes = "1MiB"\n\n[output]\ndirectory = "out"\ntrace = true\n')
    study = fs.load_scenario(path)
    first = study.write(study.run())
    assert [os.path.basename(p) for p in first][-1] == "trace.json"
    out = tmp_path / "out"
    before = snapshot(out)
    study.scenario.add_flow(1, 2, "2MiB")
    second = study.run()
    inject(monkeypatch, "replace 4", EIO)  # the trace, after the three tables took their names
    with pytest.raises(WriteError, match=r"trace\.json'?: Input/output error"):
        study.write(second)
    assert snapshot(out) == before


# ---- paths, never descriptors ---------------------------------------------------------------


def _path_takers(tmp_path):
    """{name: function of a path} for every public function taking one."""
    res = _result(rich=False)
    study_file = tmp_path / "study.toml"
    study_file.write_text('[fabric]\ngenerator = "hgx_h100"\n')
    study = fs.load_scenario(study_file)
    takers = {
        "CostModel.from_json": fs.CostModel.from_json,
        "CostModel.to_json": fs.CostModel().to_json,
        "Result.to_parquet": res.to_parquet,
        "ScenarioFile.write": lambda p: study.write(res, p),
        "write_trace": lambda p: fs.trace.write_trace(res, p),
        "load_parts": fs.catalog.load_parts,
        "load_scenario": fs.load_scenario,
    }
    try:
        import matplotlib  # noqa: F401

        takers["plot.save"] = lambda p: fs.plot.save(fs.plot.fct_cdf(res), p)
    except ImportError:  # pragma: no cover
        pass
    return takers


# These take a log's text as well as its path (calibrate a list of them too).
LOG_TAKERS = {"read_nccl_tests": fs.read_nccl_tests, "calibrate": lambda p: fs.calibrate(fs.hgx_h100(), p)}


@pytest.mark.parametrize("which", ["CostModel.from_json", "CostModel.to_json", "Result.to_parquet",
                                   "ScenarioFile.write", "write_trace", "load_parts", "load_scenario", "plot.save",
                                   *LOG_TAKERS])
def test_a_file_descriptor_is_refused_and_left_open(tmp_path, which):
    # from_json(True) read stdout and closed it; from_json(log.fileno()) closed the caller's log.
    takers = {**_path_takers(tmp_path), **LOG_TAKERS}
    if which not in takers:
        pytest.skip("matplotlib is not installed")
    with open(tmp_path / "caller.log", "w") as log:
        log.write("mine\n")
        log.flush()
        for fd in (log.fileno(), True, False, 1):
            with pytest.raises(InvalidArgumentError) as e:
                takers[which](fd)
            if which != "calibrate":  # calibrate says it wants logs, without the value
                assert f"{type(fd).__name__} {fd!r}" in str(e.value), str(e.value)
            os.fstat(log.fileno())  # still open
            os.fstat(1)
        log.write("still mine\n")
    assert (tmp_path / "caller.log").read_text() == "mine\nstill mine\n"


@pytest.mark.parametrize("bad", [None, 2.5, b"model.json", "", 10**400])
def test_what_is_not_a_path_is_refused_naming_it(tmp_path, bad):
    # None was a TypeError from open(); an int of 400 digits is named by its length.
    for name, take in _path_takers(tmp_path).items():
        if bad is None and name in ("CostModel.to_json", "ScenarioFile.write"):
            continue  # None there: no file (the text only; the file's own directory)
        with pytest.raises(InvalidArgumentError, match=r"must be a path \(a non-empty str or os.PathLike\), got "
                                                       + re.escape(type(bad).__name__)):
            take(bad)
    for take in LOG_TAKERS.values():
        with pytest.raises(InvalidArgumentError):
            take(bad)


def test_an_int_is_named_as_the_file_descriptor_it_would_be(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"got int 7 \(an int is a file descriptor, which fabricsim "
                                                   r"does not take: pass the file's path\)"):
        fs.CostModel().to_json(7)
    with pytest.raises(InvalidArgumentError, match=r"got int 1000000000\d*\.\.\. \(an int of 401 digits\)$"):
        fs.CostModel().to_json(10**400)


# ---- calibrate keeps its fit ---------------------------------------------------------------

_LOG_HEADER = ("#     size     count  type  redop  root     time   algbw   busbw  #wrong     time   algbw   busbw  "
               "#wrong")


def _log(rows):
    ranks = [f"#  Rank {i:2d} Group  0 Pid {4000 + i:5d} on   node0 device {i:2d} [0x{i:02x}] NVIDIA H100 80GB HBM3"
             for i in range(8)]
    return "\n".join(ranks + [_LOG_HEADER] + [f"{s} {s // 4} float sum -1 {t} 0 0 0 {t} 0 0 0" for s, t in rows]) + "\n"


GOOD_ROWS = [(2**20, 30.0), (2**24, 100.0), (2**28, 1100.0), (2**30, 4000.0)]


@pytest.mark.parametrize("rows", [
    # The held-out 256 MiB row took 1e300 us: its default-model error is -100%, and the
    # report divided by 1 + that error (ZeroDivisionError) after the fit, before --out.
    GOOD_ROWS[:2] + [(2**28, 1e300)] + GOOD_ROWS[3:],
    # A fitted row of 1e300 us drove latency_scale past exp()'s range (OverflowError).
    [(2**20, 1e300)] + GOOD_ROWS[1:],
    # Sizes near 2**63 and times near 0: busbw and errors beyond the doubles.
    GOOD_ROWS[:3] + [(2**63 - 8, 1e-300)],
], ids=["minus-100-percent", "huge-time", "huge-size"])
def test_calibrate_writes_its_fit_and_prints_a_report_whatever_the_times(tmp_path, capsys, rows):
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_log(rows))
    out = tmp_path / "fit.json"
    assert cli.main(["calibrate", str(log), "--op", "all_reduce", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("all_reduce ") == 4 and f"wrote {out}" in printed
    model = fs.CostModel.from_json(out)
    cal = fs.calibrate(fs.hgx_h100(), fs.read_nccl_tests(str(log), op="all_reduce"))
    assert model == cal.cost_model
    default = cal.table["default_busbw_Bps"].to_numpy()
    assert (default > 0).all()  # from the default model's time, not through the error
    if rows[2][1] == 1e300:
        assert "-100.0%  held out" in printed


def test_calibrate_writes_the_fit_before_it_builds_the_report(tmp_path, monkeypatch, capsys):
    from fabricsim.collectives import calibration

    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_log(GOOD_ROWS))
    out = tmp_path / "fit.json"

    def broken(cal):
        raise ValueError("the report could not be built")

    monkeypatch.setattr(calibration, "format_calibration", broken)
    assert cli.main(["calibrate", str(log), "--op", "all_reduce", "--out", str(out)]) == 2
    assert "the report could not be built" in capsys.readouterr().err
    assert fs.CostModel.from_json(out).latency_scale != 1.0  # the fit is kept


def test_calibrate_checks_out_before_the_fit(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(_log(GOOD_ROWS))
    assert cli.main(["calibrate", str(log), "--op", "all_reduce", "--out", str(tmp_path / "file" / "fit.json")]) == 1
    err = capsys.readouterr()
    assert f"cannot write {str(tmp_path / 'file')!r}: File exists" in err.err and err.out == ""


# ---- sweep keeps its points ----------------------------------------------------------------


def test_a_sweep_over_mixed_types_keeps_every_point_as_text():
    # The join raised ArrowTypeError after every point had run.
    t = fs.sweep({"nodes": [1, 2, "auto"]}, lambda nodes: {"n": 3 if nodes == "auto" else nodes})
    assert t.schema.field("nodes").type == pa.string() and t.schema.field("n").type == pa.int64()
    assert t.to_pylist() == [{"nodes": "1", "n": 1}, {"nodes": "2", "n": 2}, {"nodes": "auto", "n": 3}]
    # A result that is a number at one point and a string at another.
    t = fs.sweep({"x": [1, 2]}, lambda x: {"y": 0.5 if x == 1 else "n/a"})
    assert t.column("y").to_pylist() == ["0.5", "n/a"] and t.column("x").to_pylist() == [1, 2]


def test_a_sweep_over_integers_beyond_64_bits_keeps_them_exactly():
    # pa.array raised OverflowError for the grid's labels; a result of 2**70 failed its point.
    t = fs.sweep({"n": [1, 2**70]}, lambda n: {"double": 2 * n, "fits": 1})
    assert t.column("n").to_pylist() == ["1", str(2**70)]
    assert t.column("double").to_pylist() == ["2", str(2**71)]
    assert t.column("fits").type == pa.int64()
    t = fs.sweep({"n": [3]}, lambda n: [{"v": -(2**64)}, {"v": "text"}])
    assert t.column("v").to_pylist() == [str(-(2**64)), "text"]
    assert fs.sweep({"n": [3]}, lambda n: 2**80).column("value").to_pylist() == [str(2**80)]


def test_a_result_column_named_as_a_parameter_is_refused_at_the_first_point():
    # It was refused at the join, once every point had run.
    ran = []

    def point(x):
        ran.append(x)
        return {"x": x}

    with pytest.raises(InvalidArgumentError, match=r"column\(s\) 'x', named as grid parameters"):
        fs.sweep({"x": [1, 2, 3]}, point)
    assert ran == [1]
    with pytest.raises(InvalidArgumentError, match=r"two columns named 'a'"):
        fs.sweep({"x": [1]}, lambda x: pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]))
