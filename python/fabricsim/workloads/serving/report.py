"""What a serving run comes to (:class:`ServingReport`): per request the network part of
time to first token and of time per output token, their percentiles, and two runs compared."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...exceptions import InvalidArgumentError

__all__ = ["ServingReport", "compare"]


_METRICS = (("ttft_network_s", "network part of time to first token"),
            ("per_token_network_s", "network part of time per output token"),
            ("kv_network_s", "KV-cache transfer"))


def _percentiles(table: pa.Table) -> pa.Table:
    cols: dict[str, list[Any]] = {"metric": [], "p50_s": [], "p90_s": [], "p99_s": [], "mean_s": [], "n": []}
    for name, _ in _METRICS:
        x = table.column(name).to_numpy(zero_copy_only=False)
        x = x[np.isfinite(x)]
        q = np.percentile(x, [50, 90, 99]) if x.size else np.full(3, np.nan)
        cols["metric"].append(name)
        for key, v in zip(("p50_s", "p90_s", "p99_s"), q):
            cols[key].append(float(v))
        cols["mean_s"].append(float(x.mean()) if x.size else math.nan)
        cols["n"].append(int(x.size))
    return pa.table(cols)


@dataclass(frozen=True, eq=False)
class ServingReport:
    """What :meth:`Serving.report` returns: ``requests``, one row per request (request_id,
    arrival_s, prompt_tokens, output_tokens, prefill_instance, decode_instance,
    prefill_start_s, kv_start_s, kv_bytes, kv_network_s, prefill_network_s, ttft_network_s,
    per_token_network_s, decode_start_s, decode_end_s; times in seconds, NaN for a request
    whose KV transfer failed); ``percentiles``, p50/p90/p99 and mean of ttft_network_s,
    per_token_network_s and kv_network_s; ``summary``, counts and the decode pace.

    Example::

        from fabricsim import serving
        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        sv = serving.add_serving(sc, "llama3-8b", serving.poisson_requests(50.0, 0.2, seed=0),
                                 prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
        report = sv.report(sc.run())
        report.percentiles.select(["metric", "p99_s"])   # the network part of TTFT, TPOT and the KV transfer
    """

    requests: pa.Table
    percentiles: pa.Table
    summary: dict[str, Any]

    def __repr__(self) -> str:
        lines = [f"ServingReport: {self.summary['n_requests']} requests"]
        for row in self.percentiles.to_pylist():
            lines.append(f"  {row['metric']:<22} p50 {row['p50_s'] * 1e6:10.1f} us  p90 {row['p90_s'] * 1e6:10.1f} us  "
                         f"p99 {row['p99_s'] * 1e6:10.1f} us")
        return "\n".join(lines)


def compare(alone: ServingReport, beside: ServingReport) -> pa.Table:
    """Percentiles of the same serving traffic alone and beside a neighbour, side by side:
    one row per metric and percentile, with ``alone_s``, ``beside_s`` and ``ratio``
    (beside / alone).

    Example::

        from fabricsim import serving
        fabric = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        reports = []
        for neighbour in (False, True):
            sc = fs.Scenario(fabric)
            if neighbour:   # an all-to-all on the other two nodes
                sc.add_collective("all_to_all", range(16, 32), "1GiB")
            sv = serving.add_serving(sc, "llama3-8b", serving.poisson_requests(50.0, 0.2, seed=0),
                                     prefill=serving.Pool(range(8), tp=8), decode=serving.Pool(range(8, 16), tp=8))
            reports.append(sv.report(sc.run()))
        serving.compare(*reports).select(["metric", "percentile", "ratio"])   # beside / alone
    """
    for name, r in (("alone", alone), ("beside", beside)):
        if not isinstance(r, ServingReport):
            raise InvalidArgumentError(f"{name} must be a ServingReport, got {type(r).__name__}")
    a, b = alone.percentiles.to_pylist(), beside.percentiles.to_pylist()
    cols: dict[str, list[Any]] = {"metric": [], "percentile": [], "alone_s": [], "beside_s": [], "ratio": []}
    for ra, rb in zip(a, b):
        for p in ("p50_s", "p90_s", "p99_s"):
            cols["metric"].append(ra["metric"])
            cols["percentile"].append(p[:-2])
            cols["alone_s"].append(ra[p])
            cols["beside_s"].append(rb[p])
            cols["ratio"].append(rb[p] / ra[p] if ra[p] else math.nan)
    return pa.table(cols)
