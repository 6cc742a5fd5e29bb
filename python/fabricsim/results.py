"""Results of a run as Arrow tables.

Numeric columns are NumPy arrays that own the Rust core's buffers, wrapped by Arrow without a
copy. Every table is a :class:`pyarrow.Table`, so it exposes ``__arrow_c_stream__`` and
polars (``pl.from_arrow`` / ``pl.DataFrame``), DuckDB and pandas read it directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._columns import table_from_columns
from ._files import Content, write_files
from .fabrics.links import compact_names, with_names
from .units import format_bytes, format_duration

__all__ = ["Result", "Summary", "table_from_columns"]

# Every table to_parquet can write, in the order it writes them.
_TABLES = ("flows", "delays", "links", "collectives", "jobs", "job_links", "rate_changes")


@dataclass(frozen=True)
class Summary:
    """Headline figures of a run.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        summary = sc.run().summary
        print(summary)   # makespan, counts, bytes moved and the busiest links
        summary.makespan_s, summary.bytes_moved
    """

    makespan_s: float
    n_flows: int
    n_delays: int
    #: Bytes the finished flows delivered, over every edge: the one flow of a pipelined
    #: collective counts each of its edges (DESIGN section 2), so a ring all-reduce of S bytes
    #: on n ranks moves 2(n-1)S.
    bytes_moved: float
    #: The five links with the highest mean utilization.
    busiest_links: pa.Table
    #: Node labels of the topology, if it has them (used when printing).
    node_names: Sequence[Hashable] | None = None
    #: Flows that failed (no path, or a link down under them) and activities skipped
    #: because something they wait for failed.
    n_failed: int = 0
    n_skipped: int = 0

    def __str__(self) -> str:
        def node(i: int) -> str:
            return str(i if self.node_names is None else self.node_names[i])

        lines = [
            f"makespan      {format_duration(self.makespan_s)}",
            f"flows         {self.n_flows}",
            f"delays        {self.n_delays}",
            f"bytes moved   {format_bytes(self.bytes_moved)}",
            *([f"failed        {self.n_failed} flows, {self.n_skipped} activities skipped"]
              if self.n_failed else []),
            "busiest links:",
            f"  {'link':>6} {'src':>8} {'dst':>8} {'mean util':>10} {'peak util':>10} {'carried':>12}",
        ]
        for row in self.busiest_links.to_pylist():
            lines.append(
                f"  {row['link_id']:>6} {node(row['src']):>8} {node(row['dst']):>8} "
                f"{row['mean_utilization']:>10.1%} {row['peak_utilization']:>10.1%} "
                f"{format_bytes(row['bytes_carried']):>12}"
            )
        return "\n".join(lines)


class Result:
    """What :meth:`Scenario.run` returns: ``flows``, ``delays``, ``links`` tables (and
    ``rate_changes`` when the run recorded rates) plus a :attr:`summary`.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        result = sc.run()
        result.summary.makespan_s, result.flows.num_rows   # the run's tables are Arrow tables
        result.links.sort_by([("bytes_carried", "descending")]).slice(0, 3)   # the busiest links
    """

    def __init__(self, raw: dict[str, Any], node_names: Sequence[Hashable] | None = None,
                 edge_bytes_per_byte: Mapping[int, float] | None = None, names: pa.Array | None = None) -> None:
        self._node_names = node_names
        self._edge_bytes_per_byte = edge_bytes_per_byte or {}

        def named(table: pa.Table) -> pa.Table:  # src_name and dst_name beside the ids
            return table if names is None else with_names(table, names)

        #: One row per flow: its ends (``src``, ``dst`` and their names), size, times, rate, status.
        self.flows: pa.Table = named(table_from_columns(raw["flows"]))
        self.delays: pa.Table = table_from_columns(raw["delays"])
        #: One row per link the run loaded: its ends (ids and names), what it carried, its utilisation.
        self.links: pa.Table = named(table_from_columns(raw["links"]))
        #: One row per collective (``Scenario.add_collective``): nccl-tests' algbw and busbw,
        #: and the analytical estimate beside the simulated time.
        self.collectives: pa.Table = pa.table({})
        #: One row per job (``Scenario.add_job``): its time shared and alone, its slowdown
        #: and the links it met other jobs on (empty without jobs).
        self.jobs: pa.Table = pa.table({})
        #: The links two or more jobs loaded, with the jobs and the shared run's load.
        self.job_links: pa.Table = pa.table({})
        self._rate_changes = (
            table_from_columns(raw["rate_changes"]) if "rate_changes" in raw else None
        )
        self.makespan_s: float = raw["makespan_s"]
        #: Distinct instants at which events happened.
        self.n_instants: int = raw["n_instants"]
        #: Max-min re-solves run (one per instant where rates can change).
        self.n_solves: int = raw["n_solves"]
        #: Of those, re-solves of every transferring flow by the plain progressive filling,
        #: which the engine takes where an instant changes most rates (docs/performance.md, "Fast mode").
        self.n_full_solves: int = raw.get("n_full_solves", 0)
        #: Flow rates re-solved, summed over solves: the work the engine did.
        self.n_flows_resolved: int = raw["n_flows_resolved"]
        #: Flow rate changes applied, summed over instants.
        self.n_rate_changes: int = raw["n_rate_changes"]
        #: Groups of flows sharing one bottleneck whose rate changed, summed over instants.
        self.n_group_share_changes: int = raw["n_group_share_changes"]
        #: Flows whose bottleneck changed while transferring, summed over instants.
        self.n_bottleneck_moves: int = raw["n_bottleneck_moves"]
        #: "exact", or "fast" where ``run(tolerance=...)`` asked for the fast mode.
        self.mode: str = "exact"
        #: The fast mode's relative tolerance (0 for the exact engine).
        self.tolerance: float = 0.0
        #: The scenario's seed (ECMP hashing), None where the result was not made by a run.
        self.seed: int | None = None

    @property
    def rate_changes(self) -> pa.Table:
        """time_s, flow_id, rate_Bps: from time_s on, the flow transfers at rate_Bps."""
        if self._rate_changes is None:
            raise AttributeError("rate_changes were not recorded: run with record_rates=True")
        return self._rate_changes

    @property
    def summary(self) -> Summary:
        """Makespan, counts, bytes moved, failures and the busiest links; prints as a short report."""
        links = self.links
        top = links.take(
            # Ties by link id, so which of many equally busy links show is not left to chance.
            pc.select_k_unstable(
                links, k=min(5, links.num_rows),
                sort_keys=[("mean_utilization", "descending"), ("link_id", "ascending")],
            )
        ).select(["link_id", "src", "dst", "mean_utilization", "peak_utilization", "bytes_carried"])
        def count(table: pa.Table, status: str) -> int:
            return int(pc.sum(pc.equal(table["status"].cast(pa.string()), status)).as_py() or 0)

        done = pc.equal(self.flows["status"].cast(pa.string()), "done").to_numpy(zero_copy_only=False)
        moved = np.where(done, self.flows["bytes"].to_numpy(), 0.0)
        if self._edge_bytes_per_byte:
            coupled = np.fromiter(self._edge_bytes_per_byte, np.int64, len(self._edge_bytes_per_byte))
            rows = np.searchsorted(self.flows["flow_id"].to_numpy(), coupled)  # ids ascend
            moved[rows] *= np.fromiter(self._edge_bytes_per_byte.values(), np.float64, len(coupled))
        return Summary(
            makespan_s=self.makespan_s,
            n_flows=self.flows.num_rows,
            n_delays=self.delays.num_rows,
            bytes_moved=float(moved.sum()),
            busiest_links=top,
            node_names=self._node_names,
            n_failed=count(self.flows, "failed"),
            n_skipped=count(self.flows, "skipped") + count(self.delays, "skipped"),
        )

    def _parquet_metadata(self, table: pa.Table) -> dict[bytes, bytes]:
        """What a Parquet file says of the run it comes from: fabricsim's version, the seed, the
        engine's mode and tolerance, the makespan, and each column's unit (SI, by its name's
        suffix: DESIGN's convention)."""
        import json

        from ._core import __version__

        units = {name: unit for name in table.column_names
                 for suffix, unit in (("_Bps", "bytes/s"), ("_s", "s"), ("bytes", "bytes"), ("_bytes", "bytes"))
                 if name.endswith(suffix)}
        return {
            b"fabricsim.version": __version__.encode(),
            b"fabricsim.seed": repr(self.seed).encode(),
            b"fabricsim.mode": self.mode.encode(),
            b"fabricsim.tolerance": repr(self.tolerance).encode(),
            b"fabricsim.makespan_s": repr(self.makespan_s).encode(),
            b"fabricsim.units": json.dumps(units).encode(),
        }

    def to_parquet(self, directory: str | os.PathLike[str]) -> list[str]:
        """Writes every table as ``<directory>/<name>.parquet``; returns the paths written.
        A table this run does not have (collectives, rate_changes) left there by an earlier
        write is removed, so the directory holds one run.

        All or nothing: every table is written to a temporary file in the directory and synced
        to the disk, and they take their names together; a write that fails (a full disk, an
        I/O error, Ctrl-C) leaves the directory as it was, byte for byte. A directory that
        cannot be made or written raises :class:`WriteError` naming the path and the cause.

        Example::

            sc = fs.Scenario(fs.hgx_h100())
            sc.add_flow(0, 1, "1GiB")
            sc.run().to_parquet("out")   # ['out/flows.parquet', 'out/delays.parquet', 'out/links.parquet']
        """
        return write_files("directory", directory, self._parquet_files())

    def _parquet_files(self) -> dict[str, Content | None]:
        """``{file name: writer}`` of every table :meth:`to_parquet` writes, and None for
        each table this run lacks (so that an earlier run's file of that name goes)."""
        import pyarrow.parquet as pq

        tables = {"flows": self.flows, "delays": self.delays, "links": self.links}
        for name in ("collectives", "jobs", "job_links"):
            if getattr(self, name).num_rows:
                tables[name] = getattr(self, name)
        if self._rate_changes is not None:
            tables["rate_changes"] = self._rate_changes

        def writer(table: pa.Table) -> Content:
            table = compact_names(table)
            meta = dict(table.schema.metadata or {})
            meta.update(self._parquet_metadata(table))
            return lambda handle: pq.write_table(table.replace_schema_metadata(meta), handle)

        return {f"{name}.parquet": writer(tables[name]) if name in tables else None
                for name in [*tables, *(n for n in _TABLES if n not in tables)]}

    def __repr__(self) -> str:
        return (
            f"Result(makespan_s={self.makespan_s!r}, flows={self.flows.num_rows}, "
            f"delays={self.delays.num_rows}, links={self.links.num_rows})"
        )
