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
