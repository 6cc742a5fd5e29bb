"""nccl-tests, simulated: one collective per size, each alone on its fabric, in nccl-tests'
own conventions (sizes cut to whole elements, algbw and busbw)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from ..collectives import conventions
from .._checks import callback, parsed, real, shown
from ..collectives.communicator import applied_fabric, communicator
from ..collectives.cost.choice import resolve_algorithm
from ..collectives.cost.model import CostModel, checked_cost_model
from ..exceptions import InvalidArgumentError
from ..fabrics.describe import label as fabric_label
from ..scenario import Scenario
from ..scenario_args import checked_progress

if TYPE_CHECKING:
    from ..fabrics import Topology


# nccl-tests bounds no sweep (each of its sizes runs in microseconds), but here each size is a
# simulation of milliseconds to seconds: 10,000 sizes are more than any plot needs (1% steps
# over the whole int64 range are 4,390) and still a bounded wait, while a step factor a hair
# above 1 (1.0000001: 69 million sizes from 8 MiB to 8 GiB) is a slip, not a sweep.
_MAX_SWEEP_SIZES = 10_000


def nccl_tests(
    fabric: Topology,
    op: str = "all_reduce",
    min_bytes: Any = "8M",
    max_bytes: Any = "8G",
    step_factor: float = 2,
    *,
    algorithm: str = "auto",
    protocol: str = "auto",
    ranks: Any = None,
    dtype: str = "float",
    seed: int = 0,
    on_row: Callable[[dict[str, Any]], Any] | None = None,
    on_start: Callable[[list[int]], Any] | None = None,
    progress: Any = False,
    cost_model: CostModel | None = None,
) -> pa.Table:
    """nccl-tests, simulated: one collective per size from ``min_bytes`` to ``max_bytes``
    (multiplied by ``step_factor``), each alone on ``fabric`` over ``ranks`` (default every
    GPU). As nccl-tests, each size is cut to whole ``dtype`` elements (and per-rank blocks for
    all_gather, reduce_scatter and all_to_all) before it runs; ``size_bytes`` is that size.
    Columns: size_bytes, count, time_s, algbw_Bps, busbw_Bps, algorithm, protocol, analytical_s;
    the schema's metadata names the op (``fabricsim.op``), the fabric (``fabricsim.fabric``)
    and the number of ranks (``fabricsim.n_ranks``);
    ``fabricsim.collectives.conventions.format_table`` prints it in nccl-tests' layout. ``on_row`` gets each
    row (a dict of those columns) as soon as its size has run, so a caller can print as
    nccl-tests does; ``on_start`` gets the list of sizes (bytes, as the rows will have them)
    once every argument is checked, before the first size runs, so that a caller can print a
    header and be sure no bad argument follows it; ``progress`` is passed to each
    ``Scenario.run``; ``cost_model`` holds the collectives' constants (default
    :data:`fabricsim.cost_model.DEFAULT`). At most 10,000 sizes.

    Example::

        table = fs.nccl_tests(fs.hgx_h100(), "all_reduce", "1M", "1G", 4)   # sizes from 1 MiB to 1 GiB, x4 each step
        table.select(["size_bytes", "busbw_Bps", "algorithm"]).to_pylist()[-1]   # NVLS at 1 GiB
    """
    from ..units import size_bytes as parse_size

    if not isinstance(dtype, str) or dtype not in conventions.DTYPE_SIZE_BYTES:
        raise InvalidArgumentError(
            f"dtype={dtype!r}: expected one of {', '.join(conventions.DTYPE_SIZE_BYTES)}")
    lo, hi = parsed("min_bytes", parse_size, min_bytes), parsed("max_bytes", parse_size, max_bytes)
    # The size column is int64.
    if not 0 < lo <= hi < 2**63:
        raise InvalidArgumentError(f"need 0 < min_bytes <= max_bytes < 2**63, got {lo!r} and {hi!r}")
    factor = real(step_factor)
    if factor is None or not 1 < factor < math.inf:
        raise InvalidArgumentError(f"step_factor must be a finite number > 1, got {shown(step_factor)}")
    # As many as the loop below takes, but for rounding at the last size.
    n_sizes = math.floor(math.log(hi * (1 + 1e-12) / lo) / math.log(factor)) + 1
    if n_sizes > _MAX_SWEEP_SIZES:
        raise InvalidArgumentError(
            f"step_factor={shown(step_factor)} from min_bytes={lo:.0f} to max_bytes={hi:.0f} makes {n_sizes} sizes, "
            f"more than the {_MAX_SWEEP_SIZES} a sweep runs (each size is a simulation)"
        )
    for name, hook, arg, takes in (("on_row", on_row, "row", "each row (a dict)"),
                                   ("on_start", on_start, "sizes", "the list of sizes")):
        if hook is None:
            continue
        if not callable(hook):
            raise InvalidArgumentError(
                f"{name} must be None or a callable taking {takes}, got {type(hook).__name__} {hook!r}"
            )
        callback(name, hook, (arg,))
    checked_progress(progress)
    cost = checked_cost_model(cost_model)
    fabric = applied_fabric(fabric, cost)
    comm = communicator(fabric, op, ranks)
    sizes = []
    s = lo
    while s <= hi * (1 + 1e-12):
        sizes.append(conventions.rounded_size_bytes(op, int(s), comm.n, dtype))
        s *= factor
    # NCCL's choice can change with the size: every size is resolved before any runs.
    for size in sizes:
        resolve_algorithm(op, algorithm, protocol, size, comm, cost)
    if on_start is not None:
        on_start(sizes)
    rows = []
    for size in sizes:
        sc = Scenario(fabric, seed=seed, cost_model=cost)
        sc.add_collective(op, comm.ranks if ranks is None else ranks, size, algorithm=algorithm, protocol=protocol)
        r = sc.run(progress=progress).collectives.to_pylist()[0]
        row = {"size_bytes": size, "count": conventions.element_count(op, size, comm.n, dtype),
               "time_s": r["finish_s"] - r["start_s"], "algbw_Bps": r["algbw_Bps"], "busbw_Bps": r["busbw_Bps"],
               "algorithm": r["algorithm"], "protocol": r["protocol"], "analytical_s": r["analytical_s"]}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    # What ran where, for titles (fabricsim.plot.busbw) and for a Parquet file to say.
    meta = {"fabricsim.op": op, "fabricsim.fabric": fabric_label(fabric), "fabricsim.n_ranks": str(comm.n)}
    return pa.Table.from_pylist(rows, schema=_NCCL_TESTS_SCHEMA.with_metadata(meta))


_NCCL_TESTS_SCHEMA = pa.schema([
    ("size_bytes", pa.int64()), ("count", pa.int64()), ("time_s", pa.float64()), ("algbw_Bps", pa.float64()),
    ("busbw_Bps", pa.float64()), ("algorithm", pa.string()), ("protocol", pa.string()),
    ("analytical_s", pa.float64()),
])

