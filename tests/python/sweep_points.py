"""Module-level functions for the sweep tests: a process pool runs what it can import."""

from __future__ import annotations

import fabricsim as fs


def all_reduce_point(n_domains: int, size: str, routing: str) -> dict:
    """One all-reduce over every GPU of ``n_domains`` HGX H100 servers on Quantum-2."""
    fabric = fs.cluster(domain="hgx-h100", n_domains=n_domains, scale_out="quantum-2")
    sc = fs.Scenario(fabric, seed=1, routing={"scale_out": routing})
    sc.add_collective("all_reduce", range(fabric.n_gpus), size)
    row = sc.run().collectives.to_pylist()[0]
    return {"algorithm": row["algorithm"], "time_s": row["finish_s"] - row["start_s"], "busbw_Bps": row["busbw_Bps"]}


def run_tables(scenario: fs.Scenario) -> dict:
    """A scenario (unpickled in the worker) run there: its tables, to compare with a run here."""
    res = scenario.run(record_rates=True)
    return {name: getattr(res, name) for name in ("flows", "delays", "links", "collectives", "rate_changes")}


def fabric_point(fabric: fs.Fabric, size: str) -> dict:
    """An all-reduce on a fabric that was pickled to the worker as a grid value."""
    sc = fs.Scenario(fabric)
    sc.add_collective("all_reduce", fabric.gpus, size)
    row = sc.run().collectives.to_pylist()[0]
    return {"time_s": row["finish_s"] - row["start_s"], "n_links": fabric.n_links}
