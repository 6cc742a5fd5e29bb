"""The exceptions fabricsim raises. Every one is a :class:`FabricsimError`; those caused by a
bad argument are also :class:`ValueError`, so ``except ValueError`` keeps working.

The Rust core maps each of its error kinds to the class of the same name here.
"""

from __future__ import annotations

__all__ = [
    "FabricsimError",
    "InvalidArgumentError",
    "UnknownNodeError",
    "UnknownLinkError",
    "UnknownPartError",
    "UnknownActivityError",
    "SameEndpointsError",
    "RoutingError",
    "UnreachableError",
    "ZeroCapacityPathError",
    "DependencyCycleError",
    "ScenarioTooLargeError",
    "RunInterruptedError",
    "ScenarioRunningError",
    "InternalError",
    "NcclLogError",
    "SweepError",
    "ScenarioFileError",
    "WriteError",
]


class FabricsimError(Exception):
    """Base class of every fabricsim error."""


class InvalidArgumentError(FabricsimError, ValueError):
    """A value outside its domain: NaN, negative, infinite, wrong length or type of unit."""


class UnknownNodeError(InvalidArgumentError):
    """A node id or label that the topology does not have."""


class UnknownLinkError(InvalidArgumentError):
    """A link id that the topology does not have."""


class UnknownPartError(InvalidArgumentError):
    """A catalog part name that is neither a part nor an alias."""


class UnknownActivityError(InvalidArgumentError):
    """An activity (flow or delay) id that the scenario does not have."""


class SameEndpointsError(InvalidArgumentError):
    """A flow or link whose source is its destination."""


class RoutingError(FabricsimError, ValueError):
    """No usable path for a flow."""


class UnreachableError(RoutingError):
    """No path at all between two nodes."""


class ZeroCapacityPathError(RoutingError):
    """Every path, or the given route, crosses a link of zero capacity."""


class DependencyCycleError(FabricsimError, ValueError):
    """Activities that wait for each other in a cycle."""


class ScenarioTooLargeError(FabricsimError, MemoryError):
    """A scenario too large for this machine, refused before allocating (a log of rate
    changes, which only the run can size, as it grows)."""


class RunInterruptedError(FabricsimError):
    """A run stopped early on request."""


class ScenarioRunningError(FabricsimError, RuntimeError):
    """A scenario changed while it runs (from a progress callback or another thread)."""


class InternalError(FabricsimError, RuntimeError):
    """A bug in fabricsim, caught before it could crash Python. Please report it."""


class NcclLogError(InvalidArgumentError):
    """A file or text that :func:`fabricsim.read_nccl_tests` cannot read as nccl-tests output:
    missing, binary, not UTF-8, not nccl-tests' layout, or numbers that do not agree with the
    op and rank count (the message names the source, the line and what was expected)."""


class WriteError(FabricsimError, OSError):
    """Results that could not be written (:meth:`Result.to_parquet`, ``fabricsim demo
    --parquet``): a directory that cannot be made or written, a file where a directory should
    be, a full disk, a path with a NUL in it. The message names the path and the cause; a
    write that fails leaves the files that were there as they were. Also an ``OSError``, as
    the errors it stands for are."""


class SweepError(FabricsimError, RuntimeError):
    """A point of :func:`fabricsim.sweep` raised: the message names the point (its index and
    parameters) and the error, which is the ``__cause__``. The points not yet started were
    cancelled."""


class ScenarioFileError(InvalidArgumentError):
    """A scenario file (``fabricsim run FILE``, :func:`fabricsim.load_scenario`) that cannot be
    read or built: the message starts with ``file:line:`` and names the key (``workload[2].src``)
    and what is wrong with it. ``path``, ``line`` and ``key`` hold them (line and key may be
    None)."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.path, self.line, self.key = path, line, key
