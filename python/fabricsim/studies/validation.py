"""The validation table: fabricsim against every public measurement of docs/sources.md section 6,
one case per measurement, simulated as nccl-tests would run it.

Each :class:`Case` names the fabric, the ranks, the op, the algorithm the measurement ran
("auto" where NCCL chose), the sizes the source gives (512 MiB and up; a "large" plateau is
taken at 4 GiB), the measured bus bandwidth and its source. :func:`validate` simulates each
size (a full flow-level run, as ``fabricsim nccl-tests`` does) and reports simulated vs
measured with the error against the case's tolerance: 5% within one NVLink domain, 10%
across domains. No case carries a factor of its own: the model is the same for all, and a
case it does not meet is reported as missed, with the mechanism that would account for it
(``known_miss``), never tuned away. ``fabricsim validate`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa

from ..exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from ..fabrics import Fabric

__all__ = ["CASES", "Case", "validate", "format_validation"]

GiB, MiB = 2**30, 2**20
_LARGE = (4 * GiB,)  # where a source gives only "large": nccl-tests' plateau (docs/sources.md 5)


def _domain(preset: str) -> Callable[[], Fabric]:
    def build() -> Fabric:
        from ..fabrics.generators import _preset
        return _preset(preset, None)
    return build


def _cluster(domain: Any, n_domains: int, scale_out: str, **kw: Any) -> Callable[[], Fabric]:
    def build() -> Fabric:
        from ..fabrics import cluster
        return cluster(domain=domain, n_domains=n_domains, scale_out=scale_out, **kw)
    return build


# Fabrics by the name the table shows; each is built once per validate() call.
FABRICS: dict[str, Callable[[], Fabric]] = {
    "HGX H100": _domain("hgx-h100"),
    "HGX H200": _domain("hgx-h200"),
    "GB200 NVL72": _domain("gb200-nvl72"),
    "GB300 NVL72": _domain("gb300-nvl72"),
    **{f"{n} x HGX H100, Quantum-2 IB": _cluster("hgx-h100", n, "quantum-2") for n in (2, 4, 8, 32)},
    "8 x HGX H100, Quantum-2 IB, SHARP": _cluster("hgx-h100", 8, "quantum-2", sharp=True),
    **{f"{n} x HGX H100, 400G RoCE (SN5600)": _cluster("hgx-h100", n, "sn5600", nic="cx7") for n in (2, 4)},
    "248 x HGX H200, Quantum-2 IB": _cluster("hgx-h200", 248, "quantum-2"),
    **{f"3 x GB200 NVL{k} partitions, IB": _cluster(
        dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=k), 3, "quantum-2")
       for k in (4, 8)},
}


@dataclass(frozen=True)
class Case:
    """One public measurement (docs/sources.md section 6; ``section`` is its subsection there)
    and how to simulate it.

    Example::

        from fabricsim.studies import validation
        case = validation.CASES[0]   # Case(id='h100-nvls-8', ..., measured_busbw_Bps=480000000000.0, ...)
        fs.validate([case]).select(["case", "simulated_busbw_Bps", "error", "within"])
    """

    id: str
    section: str
    system: str
    fabric: str
    op: str
    sizes_bytes: tuple[int, ...]
    measured_busbw_Bps: float
    source: str
    n_ranks: int | None = None  # the first n GPUs; None: every GPU of the fabric
    algorithm: str = "auto"
    tolerance: float = 0.05
    #: Why the model misses this case (the mechanism that would account for it); None where
    #: it is expected within tolerance.
    known_miss: str | None = None


_ROCE_NODE = ("this cluster's one-node runs sit 11-13% below every other H100 measurement (ring 330 vs "
              "365-370 in #1455 and #212, NVLS 430 vs 480): a per-cluster NVLink efficiency under NCCL "
              "2.19.3, which `fabricsim calibrate` fits from the cluster's own logs")
_ROCE_NET = ("not explained by a modelled mechanism: with the NVLink efficiency fitted to this cluster's "
             "one-node ring (330), its 2- and 4-node rings stay 14-16% above what it measured, and the "
             "4-node NVLSTree is held by NCCL's per-channel cap, which the NVLink rate does not move. IB "
             "clusters of the same nodes and NICs measure 370-380 (#1649); this RoCE fabric's 32 NICs sit "
             "on one SN5600, so ECMP has no collision to model: the shortfall is its Ethernet transport's "
             "(NCCL 2.19.3 over RoCE), which fabricsim does not model")


_CLIFF_LEVEL = ("#2169's 4 H100s reach 121 GB/s up to 512 MiB, a third of what H100 NVLink carries point to point "
                "(371-377, NVIDIA/nccl#1264) and in every collective of 6.1; fabricsim's all-to-all there is held "
                "by its channels (24 CTAs at NCCL's 15 GB/s per ring CTA: 356 GB/s). What holds that cluster to a "
                "third the issue does not show. ")
_CLIFF_DROP = ("The drop is the channels' mechanism and is reproduced: 10.9% just above 512 MiB (12-15% measured), "
               "where every operation doubles its channels and shares each with another, 4 receive warps where it "
               "had 9 (NCCL src/device/sendrecv.h:107-113)")
_OCI_GB300 = "oracle-quickstart/oci-gpu-quickstarts nvidia/GB300/README-GB300.md"
_GB300_CTA = ("fabricsim holds a point-to-point channel to NCCL's per-CTA ring bandwidth, 22.5 GB/s on Blackwell "
              "(45 GB/s graph channels run as 2 CTAs); these runs need 29 GB/s per channel (4 GPUs, 4 operations "
              "sharing each of 32 channels) and 27.5 (8 GPUs, 8 sharing), where the rack's 64, batches of 4, are met "
              "within 6%: a Blackwell CTA moves more than the ring's figure, which NCCL's source does not give for "
              "point-to-point")


def _cases() -> tuple[Case, ...]:
    h100 = "HGX H100"
    out = [
        Case("h100-nvls-8", "6.1", "8 x H100 SXM, all-reduce, NVLS (NCCL's default)", h100, "all_reduce", _LARGE,
             480e9, "NVIDIA/nccl-tests#212"),
        Case("h100-ring-8", "6.1", "8 x H100 SXM, all-reduce, NCCL_ALGO=RING", h100, "all_reduce", _LARGE, 370e9,
             "NVIDIA/nccl-tests#212; NVIDIA/nccl#2140", algorithm="ring"),
        Case("h100-allgather-8", "6.1", "8 x H100 SXM, all-gather, 128M-16G", h100, "all_gather",
             tuple(2**k for k in range(29, 35)), 360e9, "NVIDIA/nccl-tests#326"),
        Case("h100-reducescatter-8", "6.1", "8 x H100, reduce-scatter", h100, "reduce_scatter", _LARGE, 360e9,
             "NVIDIA/nccl#1281"),
        Case("h100-allgather-8b", "6.1", "8 x H100, all-gather", h100, "all_gather", _LARGE, 350e9,
             "NVIDIA/nccl#1281", known_miss="two sources measure the same all-gather on 8 H100s 3% apart (360 in "
             "nccl-tests#326, 350 here); fabricsim's ring, at the NVLink payload rate that meets every ring "
             "all-reduce of #1455 within 1%, is 2.6% above the one and 5.6% above the other"),
    ]
    out += [Case(f"h100-ring-n{n}", "6.1", f"{n} GPUs of one H100 node, all-reduce ring", h100, "all_reduce",
                 (2 * GiB, 4 * GiB), 367.5e9, "NVIDIA/nccl#1455 (365-370 for every n)", n_ranks=n,
                 algorithm="ring") for n in range(2, 9)]
    out += [Case(f"h100-nvls-n{n}", "6.1", f"{n} GPUs of one H100 node, all-reduce NVLS", h100, "all_reduce",
                 (2 * GiB, 4 * GiB), busbw, "NVIDIA/nccl#1455", n_ranks=n, algorithm="nvls")
            for n, busbw in ((5, 420e9), (6, 440e9), (7, 460e9), (8, 480e9))]
    out += [Case(f"h100-auto-n{n}", "6.1", f"{n} GPUs of one H100 node, all-reduce with NVLS enabled (NCCL's "
                 "choice; 365-370 for n = 2..4)", h100, "all_reduce", (2 * GiB, 4 * GiB), 367.5e9,
                 "NVIDIA/nccl#1455", n_ranks=n)
            for n in (2, 3, 4)]
    out += [
        Case("h200-8", "6.1", "8 x H200, all-reduce (NCCL 2.20.3), up to 4 GiB", "HGX H200", "all_reduce",
             (512 * MiB, GiB, 2 * GiB, 4 * GiB), 475e9, "NVIDIA/nccl-tests#272"),
        Case("h100-p2p", "6.1", "8 x H100 SXM, point-to-point, one direction per pair (sendrecv)", h100,
             "send_recv", _LARGE, 374e9, "NVIDIA/nccl#1264 (371-377)"),
        # 6.2: several nodes of 8 x 400G NICs
        Case("h100-nvlstree-8n", "6.2", "multi-node H100, NVLSTree (NVIDIA's expected figure)",
             "8 x HGX H100, Quantum-2 IB", "all_reduce", _LARGE, 375e9, "NVIDIA/nccl#1649 (370-380)",
             algorithm="nvls_tree", tolerance=0.10),
        Case("h100-nosharp-8n", "6.2", "multi-node H100 without SHARP", "8 x HGX H100, Quantum-2 IB",
             "all_reduce", _LARGE, 380e9, "NVIDIA/nccl#1649", tolerance=0.10),
        Case("h100-sharp-8n", "6.2", "multi-node H100 with SHARP (NVLS over CollNet)",
             "8 x HGX H100, Quantum-2 IB, SHARP", "all_reduce", _LARGE, 375e9,
             "NVIDIA/nccl#1649; docs/sources.md 3.2 (about the busbw without SHARP)", tolerance=0.10),
        Case("roce-nvls-1n", "6.2", "1 node x 8 H100, NVLS on (NCCL 2.19.3)", h100, "all_reduce",
             (4 * GiB, 8 * GiB), 430e9, "NVIDIA/nccl#1221", tolerance=0.05, known_miss=_ROCE_NODE),
        Case("roce-ring-1n", "6.2", "1 node x 8 H100, NVLS off (NCCL 2.19.3)", h100, "all_reduce",
             (4 * GiB, 8 * GiB), 330e9, "NVIDIA/nccl#1221", algorithm="ring", known_miss=_ROCE_NODE),
        Case("roce-nvls-2n", "6.2", "2 nodes x 8 H100, 8 x 400G RoCE, NVLS on (NCCL 2.19.3)",
             "2 x HGX H100, 400G RoCE (SN5600)", "all_reduce", (4 * GiB, 8 * GiB), 430e9, "NVIDIA/nccl#1221",
             algorithm="nvls_tree", tolerance=0.10),
        Case("roce-ring-2n", "6.2", "2 nodes x 8 H100, 8 x 400G RoCE, NVLS off (NCCL 2.19.3)",
             "2 x HGX H100, 400G RoCE (SN5600)", "all_reduce", (4 * GiB, 8 * GiB), 330e9, "NVIDIA/nccl#1221",
             algorithm="ring", tolerance=0.10, known_miss=_ROCE_NET),
        Case("roce-nvls-4n", "6.2", "4 nodes x 8 H100, 8 x 400G RoCE, NVLS on (NCCL 2.19.3)",
             "4 x HGX H100, 400G RoCE (SN5600)", "all_reduce", (4 * GiB, 8 * GiB), 320e9, "NVIDIA/nccl#1221",
             algorithm="nvls_tree", tolerance=0.10, known_miss=_ROCE_NET),
        Case("roce-ring-4n", "6.2", "4 nodes x 8 H100, 8 x 400G RoCE, NVLS off (NCCL 2.19.3)",
             "4 x HGX H100, 400G RoCE (SN5600)", "all_reduce", (4 * GiB, 8 * GiB), 320e9, "NVIDIA/nccl#1221",
             algorithm="ring", tolerance=0.10, known_miss=_ROCE_NET),
        Case("h100-allreduce-32n", "6.2", "32 nodes x 8 H100 (256 GPUs), all-reduce", "32 x HGX H100, Quantum-2 IB",
             "all_reduce", (2 * GiB,), 340e9, "NVIDIA/nccl#1218", tolerance=0.10,
             known_miss="NVIDIA's expected figure for the same nodes and NICs is 370-380 (#1649, met within "
                        "2.2%), and 248 nodes measure 350 at 512 MiB (met within 3.0%); #1218's 340 at 32 "
                        "nodes sits 10% below the first. fabricsim's tree is NIC-bound at 2 GiB (its latency "
                        "is 2% of the time), and nothing in a 32-node rail-optimised fabric (every rail on one "
                        "leaf) loads it further: the spread is between clusters, not a modelled mechanism"),
        Case("h100-allgather-32n", "6.2", "32 nodes x 8 H100 (256 GPUs), all-gather", "32 x HGX H100, Quantum-2 IB",
             "all_gather", (2 * GiB,), 200e9, "NVIDIA/nccl#1218", tolerance=0.10,
             known_miss="NCCL's ring all-gather at 256 ranks reaches about half the NIC aggregate there (the "
                        "source asks why); fabricsim's ring all-gather keeps each NIC busy with one channel "
                        "and pays NCCL's 255-step latency, reaching ~318: a per-step cost of all-gather at "
                        "scale beyond NCCL's latency model is not modelled"),
        Case("h200-allreduce-248n", "6.2", "248 nodes x 8 H200 (1,984 GPUs), all-reduce",
             "248 x HGX H200, Quantum-2 IB", "all_reduce", (512 * MiB,), 350e9, "NVIDIA/nccl-tests#283",
             tolerance=0.10),
    ]
    out += [Case(f"h100-alltoall-{n}n", "6.2", f"{n} nodes x 8 H100, all-to-all (N/(N-1) x one NIC's 48-49 GB/s)",
                 f"{n} x HGX H100, Quantum-2 IB", "all_to_all", _LARGE, 48.5e9 * n / (n - 1),
                 "NVIDIA/nccl-tests#267, #130", tolerance=0.10) for n in (2, 4)]
    out += [
        Case("h100-alltoall-4gpu", "6.1", "4 H100s of one node, all-to-all (NCCL 2.28.3): 121.2 at 500 MiB, "
             "stable through 512 MiB", h100, "all_to_all", (512 * MiB,), 121.2e9, "NVIDIA/nccl#2169", n_ranks=4,
             tolerance=0.10, known_miss=_CLIFF_LEVEL),
        Case("h100-alltoall-4gpu-cliff", "6.1", "same, just above 512 MiB: 12-15% lower", h100,
             "all_to_all", (513 * MiB,), 121.2e9 * (1 - 0.135), "NVIDIA/nccl#2169 ([derived] 121.2 less 13.5%)",
             n_ranks=4, tolerance=0.10, known_miss=_CLIFF_LEVEL + _CLIFF_DROP),
    ]
    out += [Case(f"gb300-alltoall-{n}", "6.3", f"{n} GB300s of one NVL72 ({what}), all-to-all (NCCL 2.28.7)",
                 "GB300 NVL72", "all_to_all", (16 * GiB,), busbw, _OCI_GB300, n_ranks=n, tolerance=0.10,
                 known_miss=miss)
            for n, what, busbw, miss in ((4, "1 tray", 627.7e9, _GB300_CTA), (8, "2 trays", 685.1e9, _GB300_CTA),
                                         (64, "16 trays", 666.9e9, None))]
    out += [
        Case("gb200-mnnvl-8", "6.3", "2 compute trays (8 GPUs) of a GB200 NVL72, MNNVL", "GB200 NVL72",
             "all_reduce", _LARGE, 811e9, "[2nd] https://www.lixueduan.com/posts/ai/13-gb200-mnnvl-nccl-test",
             n_ranks=8),
    ]
    for k, ring, tree in ((4, 196.7e9, 234.4e9), (8, 393.7e9, 485.7e9)):
        for algo, busbw in (("ring", ring), ("tree", tree)):
            out.append(Case(f"gb200-nvl{k}x3-{algo}", "6.3", f"3 NVL{k} partitions in different racks, IB only, "
                            f"NVLS off, {algo}", f"3 x GB200 NVL{k} partitions, IB", "all_reduce", (16 * GiB,),
                            busbw, "NVIDIA/nccl#1801", algorithm=algo, tolerance=0.10))
    return tuple(out)


CASES: tuple[Case, ...] = _cases()

#: Rows of section 6 that no case simulates, and why.
NOT_MODELLED: tuple[tuple[str, str], ...] = (
    ("8 x H800 (8 NVLinks per GPU), all-reduce 215 (NVIDIA/nccl#1374)",
     "the catalog has no H800 part (an H100 with 8 of its 18 NVLinks)"),
    ("8 x A100 SXM, all-reduce ~200-232 (NVIDIA/nccl-tests#149, NVIDIA/nccl#1048)",
     "the catalog has no Ampere GPU or NVSwitch gen 2"),
    ("GB200, 4 GPUs per host, nvbandwidth point-to-point ~770 (Azure/AI-benchmarking-guide#7)",
     "a copy-engine measurement, not NCCL: fabricsim's NVLink payload efficiency is NCCL's"),
    ("2 nodes x 8 H20, 16 CX-7 NDR, NVLSTree 343 (NVIDIA/nccl#1244)",
     "the catalog has no H20 and no nodes of two NICs per GPU"),
    ("2 compute trays of an NVL72 over IB, 85 (lixueduan.com MNNVL test)",
     "the source does not say how many NICs carried it: 85 is below one tray's 4 x 48 GB/s"),
)


def _checked_cases(cases: Any) -> tuple[Case, ...]:
    if cases is None:
        return CASES
    if isinstance(cases, str):
        cases = [cases]
    by_id = {c.id: c for c in CASES}
    out = []
    for c in cases:
        if isinstance(c, Case):
            out.append(c)
        elif isinstance(c, str) and c in by_id:
            out.append(by_id[c])
        else:
            from .._checks import did_you_mean
            raise InvalidArgumentError(
                f"unknown validation case {c!r}{did_you_mean(str(c), by_id)}; cases are {', '.join(by_id)}")
    return tuple(out)


def validate(cases: Sequence[Case | str] | None = None, *, cost_model: Any = None,
             on_row: Callable[[dict[str, Any]], Any] | None = None) -> pa.Table:
    """Simulate every case (default :data:`CASES`, or some of them, by id) at each of its
    sizes, with ``cost_model`` (default the defaults), and return one row per case and size:
    measured and simulated busbw (bytes/s), ``error`` (simulated / measured - 1), its
    ``tolerance``, ``within`` it or not, ``known_miss`` (the reason, where the case is a
    known miss) and the source. ``on_row`` gets each row as it is made.

    Example::

        table = fs.validate(["h100-nvls-8"])   # one public measurement: 8 x H100, NVLS all-reduce
        table.select(["case", "measured_busbw_Bps", "simulated_busbw_Bps", "within"]).to_pylist()
    """
    from ..collectives import checked_cost_model
    from .nccl_tests import nccl_tests

    cost = checked_cost_model(cost_model)
    built: dict[str, Fabric] = {}
    rows = []
    for case in _checked_cases(cases):
        if case.fabric not in built:
            built[case.fabric] = FABRICS[case.fabric]()
        fabric = built[case.fabric]
        ranks = None if case.n_ranks is None else list(range(case.n_ranks))
        for size in case.sizes_bytes:
            r = nccl_tests(fabric, case.op, size, size, 2, algorithm=case.algorithm, ranks=ranks,
                           cost_model=cost).to_pylist()[0]
            error = r["busbw_Bps"] / case.measured_busbw_Bps - 1
            row = dict(
                case=case.id, section=case.section, system=case.system, fabric=case.fabric,
                n_ranks=case.n_ranks if case.n_ranks is not None else fabric.n_gpus, op=case.op,
                algorithm=r["algorithm"], size_bytes=r["size_bytes"], measured_busbw_Bps=case.measured_busbw_Bps,
                simulated_busbw_Bps=r["busbw_Bps"], error=error, tolerance=case.tolerance,
                within=bool(abs(error) <= case.tolerance), known_miss=case.known_miss, source=case.source,
            )
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return pa.Table.from_pylist(rows, schema=_SCHEMA)


_SCHEMA = pa.schema([
    ("case", pa.string()), ("section", pa.string()), ("system", pa.string()), ("fabric", pa.string()),
    ("n_ranks", pa.int64()), ("op", pa.string()), ("algorithm", pa.string()), ("size_bytes", pa.int64()),
    ("measured_busbw_Bps", pa.float64()), ("simulated_busbw_Bps", pa.float64()), ("error", pa.float64()),
    ("tolerance", pa.float64()), ("within", pa.bool_()), ("known_miss", pa.string()), ("source", pa.string()),
])


def _size(n: int) -> str:
    for unit, k in (("GiB", GiB), ("MiB", MiB)):
        if n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def format_validation(table: pa.Table) -> str:
    """The table as ``fabricsim validate`` prints it: one line per case and size, then the
    reasons of the misses and the rows section 6 has that no case simulates.

    Example::

        from fabricsim.studies import validation
        print(validation.format_validation(fs.validate(["h100-nvls-8", "h100-ring-8"])))
    """
    lines = [f"{'case':<22} {'sec':<4} {'op':<14} {'algorithm':<10} {'size':>7} {'ranks':>6} "
             f"{'measured':>9} {'simulated':>9} {'error':>7}  result"]
    misses: dict[str, str] = {}
    for r in table.to_pylist():
        verdict = "ok" if r["within"] else "MISS"
        if not r["within"] and r["known_miss"]:
            verdict = "miss (known)"
            misses[r["case"]] = r["known_miss"]
        elif r["known_miss"] and r["within"]:
            verdict = "ok (was a known miss)"
        lines.append(
            f"{r['case']:<22} {r['section']:<4} {r['op']:<14} {r['algorithm']:<10} {_size(r['size_bytes']):>7} "
            f"{r['n_ranks']:>6} {r['measured_busbw_Bps'] / 1e9:>9.1f} {r['simulated_busbw_Bps'] / 1e9:>9.1f} "
            f"{r['error'] * 100:>+6.1f}%  {verdict} (tol {r['tolerance'] * 100:.0f}%)")
    n = table.num_rows
    ok = sum(table["within"].to_pylist())
    lines.append(f"\n{ok} of {n} rows within tolerance (busbw in GB/s; 5% within one NVLink domain, 10% across "
                 "and for all-to-all).")
    if misses:
        lines.append("\nKnown misses and the mechanism that would account for them:")
        lines += [f"  {case}: {why}" for case, why in misses.items()]
    lines.append("\nSection 6 rows not simulated:")
    lines += [f"  {what}: {why}" for what, why in NOT_MODELLED]
    return "\n".join(lines)
