"""The (algorithm, protocol) a collective runs, and its analytical estimate.

``algorithm="auto"`` and ``protocol="auto"`` take, among the pairs NCCL enables on the
communicator (:mod:`~fabricsim.collectives.cost.nccl`) that fabricsim builds, the one whose
construction fabricsim's own analytical time (:mod:`~fabricsim.collectives.cost.analytical`)
finds fastest, so that the time reported is the time of the construction chosen.
:func:`estimate` gives that time alone, without a scenario."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import conventions
from ...exceptions import InvalidArgumentError, ZeroCapacityPathError
from ..communicator import _ARCH_INDEX, OPS, _Comm, applied_fabric, collective_size, communicator
from . import nccl
from .analytical import _nccl_name, _shape, analytical_s, finite_analytical_s, nvls_ceiling_busbw_Bps
from .model import DEFAULT as DEFAULT_COST
from .model import CostModel, checked_cost_model

if TYPE_CHECKING:
    from ...fabrics import Topology

__all__ = ["ALGORITHMS", "OPS", "PROTOCOLS", "Estimate", "channels", "estimate", "resolve_algorithm"]

ALGORITHMS = ("ring", "tree", "halving_doubling", "direct", "p2p", "nvls", "nvls_tree", "sharp", "hierarchical",
              "nvls_sharp")


# NCCL's protocols, and those fabricsim runs each algorithm with (NCCL runs NVLS and CollNet on
# Simple only; the others here are fabricsim's own constructions on Simple).
PROTOCOLS = ("simple", "ll128", "ll")


_PROTOCOLS_OF = {"ring": ("ll", "ll128", "simple"), "tree": ("ll", "ll128", "simple")}


def applicable(op: str, comm: _Comm, cost: CostModel = DEFAULT_COST) -> list[str]:
    """The algorithms fabricsim can run for ``op`` on this communicator (NVLS where the cost
    model gives it channels to run on)."""
    if op in ("all_to_all", "send_recv"):
        # NCCL's schedule needs a generated fabric's figures (its NVLink and NICs per GPU).
        return ["p2p", "direct"] if comm.view.injection_Bps is None else ["direct"]
    pof2 = comm.n & (comm.n - 1) == 0
    halving = ["halving_doubling"] if comm.n > 1 and (op == "all_reduce" or pof2 and op in ("reduce_scatter", "all_gather")) else []
    if op != "all_reduce":
        return ["ring"] + halving
    v, d, p = comm.view, comm.n_domains, comm.ppn
    algos = ["ring"]
    if comm.n > 1:  # NCCL builds its tree on any layout: each node's chain is its own ranks
        algos.append("tree")
    nvls = v.nvls and comm.n > 1 and nvls_ceiling_busbw_Bps(v, cost, d) > 0
    if d == 1 and nvls:
        algos.append("nvls")
    if d > 1 and p == 1 and v.sharp:
        algos.append("sharp")
    if d > 1 and comm.n > d:  # some domain has an intra-domain phase
        algos.append("hierarchical")
    if d > 1 and comm.heads > 1 and nvls:  # NCCL's NVLS needs >= 2 GPUs per node
        algos.append("nvls_tree")
        if v.sharp:
            algos.append("nvls_sharp")
    return algos + halving


def choose(op: str, size_bytes: float, comm: _Comm, algorithm: str = "auto",
           protocol: str = "auto", cost: CostModel = DEFAULT_COST) -> tuple[str, str]:
    """The (algorithm, protocol) ``auto`` runs: among the pairs NCCL enables on this
    communicator that fabricsim builds (NCCL's own model says which, as the deployment
    offers them: SHARP only where the fabric was built with it), the one whose construction
    fabricsim times fastest on an idle fabric, ties to NCCL's order; either fixed where it is
    not "auto". Timed by fabricsim's own analytical form, so that the time reported is the
    time of the construction chosen."""
    algos = applicable(op, comm, cost) if algorithm == "auto" else [algorithm]
    names = {a: name for a in algos if (name := _nccl_name(a, comm.view)) is not None}
    pairs = [(a, p) for a in algos if a in names for p in _PROTOCOLS_OF.get(a, ("simple",)) if protocol in ("auto", p)]
    if pairs and comm.n > 1:
        enabled = nccl.enabled_pairs(op, _shape(comm, comm.n, comm.n_domains, cost))
        order = {key: i for i, key in enumerate(enabled)}
        pairs = [ap for ap in pairs if (names[ap[0]], ap[1]) in order]
        if pairs:
            S = max(float(size_bytes), 1.0)
            return min(pairs, key=lambda ap: (analytical_s(op, ap[0], S, comm, None, ap[1], cost),
                                              order[(names[ap[0]], ap[1])]))
    # Nothing NCCL tunes here: the algorithm, on Simple unless told.
    return algos[0], "simple" if protocol == "auto" else protocol


@dataclass(frozen=True)
class Estimate:
    """The analytical (alpha-beta) answer for one collective on an idle fabric.

    Example::

        e = fs.estimate(fs.hgx_h100(), "all_reduce", "1GiB")
        e.algorithm, e.protocol, e.n_ranks   # ('nvls', 'simple', 8)
        e.time_s, e.busbw_Bps                # about 3.9 ms and 487 GB/s
        e.n_channels                         # 16: NVLS's CTAs on Hopper, one SM each

    ``n_channels`` is the number of channels the chosen algorithm runs on (:func:`channels`):
    NCCL launches one thread block per channel, so that many SMs are the collective's while it
    runs (0 on one rank, for a collective of no bytes, which NCCL discards, or where NCCL has no
    kernel for the call).
    """

    op: str
    algorithm: str
    protocol: str
    n_ranks: int
    size_bytes: float
    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    n_channels: int = 0


def estimate(fabric: Topology, op: str, size_bytes: Any = None, ranks: Any = None, *, algorithm: str = "auto",
             protocol: str = "auto", sizes: Any = None, cost_model: CostModel | None = None) -> Estimate:
    """The analytical estimate of ``op`` on ``size_bytes`` (as nccl-tests counts it) over
    ``ranks`` (default: every GPU of ``fabric``) without simulating: the same alpha-beta form
    as ``Result.collectives.analytical_s``, in tens of microseconds, for sweeps.
    ``cost_model`` (default :data:`fabricsim.cost_model.DEFAULT`) holds the constants.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        fs.estimate(fabric, "all_reduce", "1GiB").algorithm          # 'nvls_tree', NCCL's choice
        fs.estimate(fabric, "all_reduce", "1GiB", algorithm="ring").time_s   # about 5.3 ms
        fs.estimate(fabric, "all_gather", "256MiB", ranks=range(8)).busbw_Bps  # about 351 GB/s in one domain
    """
    cost = checked_cost_model(cost_model)
    comm = communicator(applied_fabric(fabric, cost), op, ranks)
    cut = comm.ranks[np.isin(comm.ranks, comm.view.cut_off)] if comm.view.cut_off.size else comm.ranks[:0]
    if cut.size:  # in a scenario its flows would fail; an estimate has no time to give
        raise ZeroCapacityPathError(
            f"rank {int(cut[0])} has every link down (fabric.fail): {op} over it cannot run")
    S, sizes = collective_size(op, size_bytes, sizes, comm.n)
    algo, proto = resolve_algorithm(op, algorithm, protocol, S, comm, cost)
    t = finite_analytical_s(op, algo, S, comm, sizes, proto, cost)
    algbw = S / t if t > 0 else float("nan")
    factor = conventions.busbw_factor(op, comm.n)
    # NCCL discards a collective of no elements before launching anything (src/enqueue.cc,
    # taskAppend), so it holds no SMs; its algorithm is the one auto takes for the smallest call
    discarded = op != "send_recv" and S == 0 and sizes is None
    return Estimate(op, algo, proto, comm.n, S, t, algbw, algbw * factor,
                    0 if discarded else channels(op, algo, comm, cost))


def channels(op: str, algorithm: str, comm: _Comm, cost: CostModel = DEFAULT_COST) -> int:
    """Channels ``algorithm`` runs ``op`` on over ``comm``, as NCCL's ``topoGetAlgoInfo`` sets
    them for a large message (NCCL v2.30.7 src/enqueue.cc:2069-2114): NVLS the cost model's
    ``nvls_channels`` in one domain, across domains ``nvls_channels_multi_node`` and for NVLS
    with SHARP no more than the communicator's channels; NVLSTree ``nvls_channels_multi_node``;
    ring, tree, CollNet and fabricsim's own constructions the communicator's channels
    (:func:`fabricsim.collectives.cost.nccl.comm_channels`); 0 on one rank and for the
    point-to-point operations NCCL does not tune. Each channel is one thread block of the
    collective's kernel, one SM: NCCL's launch grid is ``nChannels`` blocks (src/enqueue.cc:1756-1758,
    ``ncclLaunchKernel``). NCCL's reduction of channels for small messages is left out."""
    if comm.n < 2 or op not in nccl.OPS:
        return 0
    arch = _ARCH_INDEX[comm.view.arch]
    if algorithm == "nvls" and comm.n_domains == 1:
        return int(cost.nvls_channels[arch])
    if algorithm in ("nvls", "nvls_tree", "nvls_sharp"):
        nvls = int(cost.nvls_channels_multi_node[arch])
        return nvls if algorithm == "nvls_tree" else min(nvls, nccl.comm_channels(comm, cost))
    return nccl.comm_channels(comm, cost)


def resolve_algorithm(op: str, algorithm: str, protocol: str, size_bytes: float, comm: _Comm,
                      cost: CostModel = DEFAULT_COST) -> tuple[str, str]:
    """(algorithm, protocol): as given, or NCCL's choice where "auto"; a precise error where
    they cannot run."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS and protocol != "auto":
        raise InvalidArgumentError(f"protocol must be 'auto' or one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not isinstance(algorithm, str):
        raise InvalidArgumentError(f"algorithm must be a name, got {algorithm!r}")
    # A workload repeats its collectives (a training step's TP all-reduces): the choice for the
    # same call on the same communicator is made once (a handful of entries per communicator).
    resolved: dict[tuple[Any, ...], tuple[str, str]] = comm.memo.setdefault("resolved", {})
    key = (op, algorithm, protocol, float(size_bytes), cost)
    hit = resolved.get(key)
    if hit is not None:
        return hit
    algos = applicable(op, comm, cost)
    if algorithm == "auto" or algorithm in algos:
        algo, proto = choose(op, size_bytes, comm, algorithm, protocol, cost)
        if proto in _PROTOCOLS_OF.get(algo, ("simple",)):
            if len(resolved) >= 256:
                resolved.clear()
            resolved[key] = (algo, proto)
            return algo, proto
        raise InvalidArgumentError(
            f"protocol {proto!r} cannot run {algo}: fabricsim runs LL and LL128 on ring and tree "
            "(NCCL runs NVLS, CollNet and point-to-point on Simple)")
    algo = algorithm
    why = {
        "nvls": "NVLS needs NVSwitch chips that reduce (NVSwitch gen 3+), all ranks in one NVLink domain and, "
                "in the cost model, NVLS efficiency > 0 and nvls_channels >= 2 for the GPU's architecture",
        "sharp": "SHARP needs a fabric built with SHARP enabled (fs.cluster(..., sharp=True) on InfiniBand "
                 "switches with SHARP) and one rank per NVLink domain",
        "nvls_sharp": "NVLS+SHARP needs reducing NVSwitches, a fabric built with SHARP enabled "
                      "(fs.cluster(..., sharp=True)) and >= 2 ranks in each of several domains",
        "nvls_tree": "NVLSTree needs reducing NVSwitches (NVSwitch gen 3+, Hopper or later), >= 2 ranks in "
                     "each of several domains and, in the cost model, nvls_channels_multi_node >= 2",
        "hierarchical": "hierarchical needs ranks in several domains, one of them holding >= 2",
        "p2p": "NCCL's point-to-point schedule runs all_to_all and send_recv on a generated fabric "
               "(fs.hgx_h100(), fs.cluster(...)), whose GPUs' NVLink and NICs it is made from",
        "tree": "the double binary tree runs all_reduce on >= 2 ranks",
        "halving_doubling": "recursive halving-doubling runs all_reduce, or reduce_scatter and all_gather "
                            "on a power-of-two number of ranks",
    }.get(algo, "")
    known = algo in ALGORITHMS
    raise InvalidArgumentError(
        f"algorithm {algo!r} cannot run {op} here (can: {', '.join(algos)})"
        + (f": {why}" if why and known else "" if known else f"; algorithms are {', '.join(ALGORITHMS)}")
    )
