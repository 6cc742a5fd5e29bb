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
    "ChakraTraceError",
    "CablingError",
]


class FabricsimError(Exception):
    """Base class of every fabricsim error.

    Example::

        try: fs.catalog.part("h1000")
        except fs.FabricsimError as e: print(type(e).__name__)   # UnknownPartError
    """


class InvalidArgumentError(FabricsimError, ValueError):
    """A value outside its domain: NaN, negative, infinite, wrong length or type of unit.

    Example::

        try: fs.units.size_bytes("lots")
        except fs.InvalidArgumentError as e: print(e)   # cannot parse size 'lots': ...
    """


class UnknownNodeError(InvalidArgumentError):
    """A node id or label that the topology does not have.

    Example::

        try: fs.hgx_h100().route(0, 99)
        except fs.UnknownNodeError as e: print(e)
    """


class UnknownLinkError(InvalidArgumentError):
    """A link id that the topology does not have.

    Example::

        try: fs.hgx_h100().fail(links=[1000])
        except fs.UnknownLinkError as e: print(e)   # link 1000 does not exist: link ids run from 0 to 287
    """


class UnknownPartError(InvalidArgumentError):
    """A catalog part name that is neither a part nor an alias.

    Example::

        try: fs.catalog.part("h1000")
        except fs.UnknownPartError as e: print(e)   # ... did you mean 'h100', 'h800', 'h200'? ...
    """


class UnknownActivityError(InvalidArgumentError):
    """An activity (flow or delay) id that the scenario does not have.

    Example::

        try: fs.Scenario(fs.hgx_h100()).add_flow(0, 1, "1MiB", after=7)
        except fs.UnknownActivityError as e: print(e)   # no activity with id 7 ...
    """


class SameEndpointsError(InvalidArgumentError):
    """A flow or link whose source is its destination.

    Example::

        try: fs.Scenario(fs.hgx_h100()).add_flow(3, 3, "1MiB")
        except fs.SameEndpointsError as e: print(e)   # flow from gpu3 to itself ...
    """


class RoutingError(FabricsimError, ValueError):
    """No usable path for a flow.

    Example::

        try: fs.Topology.from_arrays([0], [1], "1GB/s", n_nodes=3).route(0, 2)
        except fs.RoutingError as e: print(type(e).__name__)   # UnreachableError
    """


class UnreachableError(RoutingError):
    """No path at all between two nodes.

    Example::

        try: fs.Topology.from_arrays([0], [1], "1GB/s", n_nodes=3).route(0, 2)
        except fs.UnreachableError as e: print(e)   # no path from node 0 to node 2
    """


class ZeroCapacityPathError(RoutingError):
    """Every path, or the given route, crosses a link of zero capacity.

    Example::

        try: fs.Topology.from_arrays([0], [1], 0.0).route(0, 1)
        except fs.ZeroCapacityPathError as e: print(e)
    """


class DependencyCycleError(FabricsimError, ValueError):
    """Activities that wait for each other in a cycle.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        a = sc.add_flow(0, 1, "1MiB")
        sc.add_dependency(a, sc.add_flow(1, 2, "1MiB", after=a))   # a waits for what waits for a
        try: sc.run()
        except fs.DependencyCycleError as e: print(e)   # dependency cycle among activities 0 -> 1 ...
    """


class ScenarioTooLargeError(FabricsimError, MemoryError):
    """A scenario too large for this machine, refused before allocating (a log of rate
    changes, which only the run can size, as it grows).

    Example::

        try: fs.Topology.from_arrays([0], [1], "1GB/s", n_nodes=4_000_000_000)
        except fs.ScenarioTooLargeError as e: print(e)   # ... needs about 59.6 GiB of memory ...
    """


class RunInterruptedError(FabricsimError):
    """A run stopped early on request.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "1GiB")
        try: sc.run(progress=lambda n_done, n_total, t_s: False)   # returning False stops it at the next report
        except fs.RunInterruptedError as e: print(e)   # a run too short for a report just finishes
    """


class ScenarioRunningError(FabricsimError, RuntimeError):
    """A scenario changed while it runs (from a progress callback or another thread).

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "1GiB")
        try: sc.run(progress=lambda *report: sc.add_flow(0, 1, "1MiB"))   # changes it mid-run
        except fs.ScenarioRunningError as e: print(e)   # a run too short for a report just finishes
    """


class InternalError(FabricsimError, RuntimeError):
    """A bug in fabricsim, caught before it could crash Python. Please report it.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "1GiB")
        sc.run(verify_rates=True)   # would raise InternalError if the engine disagreed with itself
    """


class NcclLogError(InvalidArgumentError):
    """A file or text that :func:`fabricsim.read_nccl_tests` cannot read as nccl-tests output:
    missing, binary, not UTF-8, not nccl-tests' layout, or numbers that do not agree with the
    op and rank count (the message names the source, the line and what was expected).

    Example::

        try: fs.read_nccl_tests("not a log\\n")
        except fs.NcclLogError as e: print(e)   # <text> is not nccl-tests output: ...
    """


class WriteError(FabricsimError, OSError):
    """A file that could not be written (:meth:`Result.to_parquet`, :meth:`ScenarioFile.write`,
    :meth:`CostModel.to_json`, :func:`fabricsim.trace.write_trace`, :func:`fabricsim.plot.save`
    and the CLI's ``--parquet``, ``--out`` and ``--plot``): a directory that cannot be made or
    written, a file where a directory should be or a directory where a file should be, a full
    disk, an I/O error, a path with a NUL in it. The message names the path and the cause;
    every write is whole or not at all, so one that fails leaves the files that were there as
    they were, byte for byte. Also an ``OSError``, as the errors it stands for are.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_flow(0, 1, "1MiB")
        open("taken", "w").close()
        try: sc.run().to_parquet("taken")   # a file where the directory should be
        except fs.WriteError as e: print(e)   # cannot write 'taken': File exists
    """


class SweepError(FabricsimError, RuntimeError):
    """A point of :func:`fabricsim.sweep` raised: the message names the point (its index and
    parameters) and the error, which is the ``__cause__``. The points not yet started were
    cancelled.

    Example::

        try: fs.sweep({"x": [1, 0]}, lambda x: {"y": [1 / x]})
        except fs.SweepError as e: print(e)   # grid point 1 (x=0) failed: ZeroDivisionError: ...
    """


class ScenarioFileError(InvalidArgumentError):
    """A scenario file (``fabricsim run FILE``, :func:`fabricsim.load_scenario`) that cannot be
    read or built: the message starts with ``file:line:`` and names the key (``workload[2].src``)
    and what is wrong with it. ``path``, ``line`` and ``key`` hold them (line and key may be
    None).

    Example::

        open("bad.toml", "w").write("[fabric]\\nkind = 'hgx_h100'\\n")
        try: fs.load_scenario("bad.toml")
        except fs.ScenarioFileError as e: print(e.line, e.key)   # 1 fabric
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.path, self.line, self.key = path, line, key


class ChakraTraceError(InvalidArgumentError):
    """Chakra execution traces that :func:`fabricsim.chakra.load` cannot run as written: a
    file that is not a trace or ends early, a rank's file missing, a node type or attribute it
    does not know (unless told to ignore them), a dependency on a node the rank does not have,
    a cycle, a collective or send without its partners on the other ranks. The message names
    the file, the rank and the node; ``path``, ``rank`` and ``node_id`` hold them (each may be
    None).

    Example::

        open("bad.0.et", "wb").write(b"\\x05ab")   # a length of 5, then 2 bytes
        try: fs.chakra.load("bad.0.et", fs.hgx_h100())
        except fs.ChakraTraceError as e: print(e)   # bad.0.et: the file ends inside message 0 ...
    """

    def __init__(self, message: str, path: str | None = None, rank: int | None = None,
                 node_id: int | None = None) -> None:
        super().__init__(message)
        self.path, self.rank, self.node_id = path, rank, node_id


class CablingError(InvalidArgumentError):
    """Cabling that :meth:`fabricsim.Topology.from_ibnetdiscover` cannot build a fabric from:
    text that is not ``ibnetdiscover`` output, a port line outside a node, the two ends of a
    cable that disagree (each names the other's port differently, or a different width or
    speed), a width or speed it does not know. The message starts with the line number;
    ``line`` holds it.

    Example::

        # a port line before any Switch or Ca line:
        try: fs.Topology.from_ibnetdiscover("[1] \\"S-0001\\"[2] # \\"leaf\\" lid 1 4xNDR\\n")
        except fs.CablingError as e: print(e.line)   # 1
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line
