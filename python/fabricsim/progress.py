"""Progress bars for long runs and sweeps, drawn by tqdm on stderr, and the hint a slow exact
run gives.

Every entry point that can take long (:meth:`Scenario.run`, :meth:`TrainingStep.run`, ``fabricsim
run``, ``demo``, ``nccl-tests``, ``train``, :func:`fabricsim.sweep`) shows progress by default
when stderr is a terminal and stays silent when it is not (a pipe, a file, CI, a worker
process), so logs and captured output hold only results. ``progress=True`` or ``False``
(``--progress`` / ``--no-progress``) overrides the default. A bar drawn by default appears only
once its run has taken :data:`AUTO_DELAY_S`, so short runs print nothing.

:class:`RunProgress` is a callable for ``Scenario.run(progress=...)``: activities done out of
all and the time left, with the simulated time reached. :class:`ToleranceHint` watches an
exact run and says once per session, as a :class:`PerformanceHint` warning, that the fast mode
exists when the run has long been going with many activities.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, TextIO

from tqdm import tqdm

from .exceptions import InvalidArgumentError
from .units import format_duration

__all__ = ["enabled", "RunProgress", "ToleranceHint", "PerformanceHint", "write", "AUTO_DELAY_S"]

#: Seconds a run shows nothing for when its bar is drawn by default (on a terminal, not
#: asked for): runs shorter than this print no bar at all.
AUTO_DELAY_S = 1.0

# How a run's bar reads, running and finished: "run:  40%|####  | 400/1000 activities
# [00:02<00:03, sim 1.2 ms]" (no rate: activities finish too unevenly for one to mean much).
_RUN_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} activities [{elapsed}<{remaining}{postfix}]"


def enabled(progress: Any, stream: TextIO | None = None) -> bool:
    """Whether to draw progress: ``progress`` if it is True or False; for None (the
    default of every entry point), whether ``stream`` (default stderr) is a terminal."""
    if progress is None:
        stream = sys.stderr if stream is None else stream
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError):  # no isatty, or a closed stream
            return False
    if isinstance(progress, bool):
        return progress
    raise InvalidArgumentError(f"progress must be True, False or None (on a terminal), got {progress!r}")


class RunProgress:
    """A progress bar for one run, as a ``Scenario.run(progress=...)`` callback.

    The engine reports ``(n_done, n_activities, sim_time_s)`` about every tenth of a second
    of wall time; the bar shows activities done out of all (``total``, when known before the
    first report), the time left (tqdm's estimate) and the simulated time reached. ``desc``
    names what runs (a size, a case); ``leave=False`` clears the bar when it is closed (a bar
    under a sweep's); ``delay`` (s) keeps the bar hidden until the run has taken that long.
    Use it as a context manager, or :meth:`close` it (the finished bar shows as complete).

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "1GiB")
        with fs.progress.RunProgress("all-reduce", total=sc.n_activities) as bar:
            result = sc.run(progress=bar)
            bar.finish(result.makespan_s)   # "all-reduce: 100%|...| 3/3 activities [00:00<00:00, sim 4.4 ms]"
    """

    def __init__(self, desc: str = "run", *, total: int = 0, leave: bool = True, position: int | None = None,
                 disable: bool = False, delay: float = 0.0) -> None:
        self._bar = tqdm(total=total, desc=desc, leave=leave, position=position, disable=disable, delay=delay,
                         dynamic_ncols=True, file=sys.stderr, bar_format=_RUN_FORMAT)

    def __call__(self, n_done: int, n_activities: int, sim_time_s: float) -> None:
        bar = self._bar
        if bar.total != n_activities:
            bar.total = n_activities
        bar.set_postfix_str(f"sim {format_duration(sim_time_s)}", refresh=False)
        bar.update(n_done - bar.n)

    def reset(self, desc: str | None = None) -> None:
        """Starts the bar again, for the next run (the next size of a sweep)."""
        if desc is not None:
            self._bar.set_description_str(desc, refresh=False)
        self._bar.reset(total=0)

    def finish(self, makespan_s: float | None = None, n_activities: int | None = None) -> None:
        """Shows the run as complete (the engine's last report may be well before the end, or
        never came: a run shorter than a report's interval): every activity done, the
        simulated time at the makespan."""
        bar = self._bar
        if n_activities is not None and bar.total != n_activities:
            bar.total = n_activities
        if makespan_s is not None:
            bar.set_postfix_str(f"sim {format_duration(makespan_s)}", refresh=False)
        if bar.total:
            bar.update(bar.total - bar.n)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PerformanceHint(UserWarning):
    """A run could be much faster with an option it did not use (:class:`ToleranceHint`).

    Example::

        import warnings
        warnings.simplefilter("ignore", fs.progress.PerformanceHint)   # no hints
    """


class ToleranceHint:
    """A ``Scenario.run`` progress callback that watches an exact run: once it has run
    :attr:`AFTER_S` seconds of wall time with at least :attr:`MIN_ACTIVITIES` activities, it
    warns (:class:`PerformanceHint`, once per session) that ``run(tolerance=...)`` exists.
    Such runs are slow because many flows that started together finish one after another,
    each finish an instant at which every other rate is solved again; the fast mode finishes
    the flows due within the tolerance together.

    Example::

        hint = fs.progress.ToleranceHint()
        hint(10, 50_000, 0.001)   # called as the engine reports; silent this early in a run
    """

    #: Wall seconds an exact run goes before the hint.
    AFTER_S = 10.0
    #: Activities a run must have for the hint (fewer run fast whatever their sizes).
    MIN_ACTIVITIES = 10_000
    _given = False  # once per session

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def __call__(self, n_done: int, n_activities: int, sim_time_s: float) -> None:
        if ToleranceHint._given or n_activities < self.MIN_ACTIVITIES:
            return
        if time.perf_counter() - self._t0 < self.AFTER_S:
            return
        ToleranceHint._given = True
        warnings.warn(
            f"this exact run of {n_activities:,} activities has taken over {self.AFTER_S:g} s: where many flows "
            "of unequal sizes or paths start together and finish one after another, run(tolerance=1e-3) runs the "
            "fast mode, often many times faster, each flow finishing within 0.1% of its exact time "
            "(docs/performance.md, 'Fast mode')", PerformanceHint, stacklevel=2)


def write(text: str, file: TextIO | None = None) -> None:
    """Prints a line (default: on stdout) without breaking the progress bars on the screen."""
    tqdm.write(text, file=sys.stdout if file is None else file)


def bar(total: int, desc: str, unit: str, *, disable: bool = False, position: int | None = None,
        leave: bool = True, delay: float = 0.0) -> tqdm:
    """A tqdm bar on stderr as the entry points draw it (for sweeps over sizes or points, a
    training step's build)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, position=position, leave=leave,
                dynamic_ncols=True, file=sys.stderr, delay=delay)
