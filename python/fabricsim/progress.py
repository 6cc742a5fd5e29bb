"""Progress bars for long runs and sweeps, drawn by tqdm on stderr.

Every entry point that can take long (``fabricsim run``, ``demo``, ``nccl-tests``,
:func:`fabricsim.sweep`) shows progress by default when stderr is a terminal and stays
silent when it is not (a pipe, a file, CI, a worker process), so logs and captured output
hold only results. ``progress=True`` or ``False`` (``--progress`` / ``--no-progress``)
overrides the default.

:class:`RunProgress` is a callable for ``Scenario.run(progress=...)``: activities done out of
all, their rate and the time left, with the simulated time reached.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

from .exceptions import InvalidArgumentError
from .units import format_duration

__all__ = ["enabled", "RunProgress", "write"]


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
    of wall time; the bar shows activities done out of all, their rate, the time left (tqdm's
    estimate from that rate) and the simulated time reached. ``desc`` names what runs (a
    size, a case); ``leave=False`` clears the bar when it is closed (a bar under a sweep's).
    Use it as a context manager, or :meth:`close` it (the finished bar shows as complete).
    """

    def __init__(self, desc: str = "run", *, leave: bool = True, position: int | None = None,
                 disable: bool = False) -> None:
        self._bar = tqdm(total=0, desc=desc, unit="act", leave=leave, position=position, disable=disable,
                         dynamic_ncols=True, file=sys.stderr)

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

    def finish(self, makespan_s: float | None = None) -> None:
        """Shows the run as complete (the engine's last report may be well before the end)."""
        bar = self._bar
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


def write(text: str, file: TextIO | None = None) -> None:
    """Prints a line (default: on stdout) without breaking the progress bars on the screen."""
    tqdm.write(text, file=sys.stdout if file is None else file)


def bar(total: int, desc: str, unit: str, *, disable: bool = False, position: int | None = None,
        leave: bool = True) -> tqdm:
    """A tqdm bar on stderr as the entry points draw it (for sweeps over sizes or points)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, position=position, leave=leave,
                dynamic_ncols=True, file=sys.stderr)
