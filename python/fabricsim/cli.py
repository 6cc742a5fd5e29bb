"""The ``fabricsim`` command line.

``fabricsim demo`` runs the built-in default scenario: one step of a data-parallel job on an
oversubscribed leaf-spine fabric (compute, then a random permutation of transfers, then an
incast into one host), and prints what happened and which links were the bottleneck.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import __version__, _core
from ._checks import parsed
from .exceptions import FabricsimError, InvalidArgumentError
from .fabrics import Topology
from .nccl_conventions import DTYPE_SIZE_BYTES, size_flag_bytes
from .scenario import Scenario
from .units import bandwidth_Bps, duration_s, format_bytes, format_duration, format_rate, size_bytes


def leaf_spine(
    n_leaves: int, hosts_per_leaf: int, n_spines: int, link_Bps: float, latency_s: float
) -> Topology:
    """Hosts 0..H-1, then leaves, then spines; one cable (two links) per host-leaf and
    leaf-spine pair. Oversubscription is hosts_per_leaf : n_spines."""
    n_hosts = n_leaves * hosts_per_leaf
    leaf0, spine0 = n_hosts, n_hosts + n_leaves
    hosts = np.arange(n_hosts, dtype=np.int64)
    # Cable ends: each host to its leaf, then each leaf to every spine.
    a = np.concatenate([hosts, leaf0 + np.repeat(np.arange(n_leaves, dtype=np.int64), n_spines)])
    b = np.concatenate([leaf0 + hosts // hosts_per_leaf, spine0 + np.tile(np.arange(n_spines, dtype=np.int64), n_leaves)])
    src, dst = np.concatenate([a, b]), np.concatenate([b, a])
    names = (
        [f"host{h}" for h in range(n_hosts)]
        + [f"leaf{i}" for i in range(n_leaves)]
        + [f"spine{i}" for i in range(n_spines)]
    )
    return Topology.from_arrays(src, dst, link_Bps, latency_s, node_names=names)


# Memory of the demo, measured with demo_scenario at 10^6 to 10^7 links (peak RSS growth),
# rounded up: per link (arrays, the core's topology), per node (its name), per host (its
# flows, with their routes). Routing on a plain topology also keeps each destination's hop
# distance from every node (a u32 each), up to the router's cache of 2^28 of them
# (CACHE_MAX_ENTRIES, src/routing/mod.rs): the most of it from 10^4 hosts on.
_DEMO_BYTES_PER_LINK, _DEMO_BYTES_PER_NODE, _DEMO_BYTES_PER_HOST = 80, 200, 400
_ROUTER_CACHE_ENTRY_BYTES, _ROUTER_CACHE_MAX_ENTRIES = 4, 1 << 28


def demo_scenario(
    *,
    n_leaves: int = 4,
    hosts_per_leaf: int = 8,
    n_spines: int = 2,
    link_Bps: float = bandwidth_Bps("400Gb/s"),
    latency_s: float = duration_s("1us"),
    transfer_bytes: float = size_bytes("1GiB"),
    compute_s: float = duration_s("5ms"),
    seed: int = 0,
) -> Scenario:
    for name, value in (("leaves", n_leaves), ("hosts per leaf", hosts_per_leaf), ("spines", n_spines)):
        if value < 1:
            raise InvalidArgumentError(f"the demo needs at least 1 of {name}, got {value}")
    if n_leaves * hosts_per_leaf < 2:
        raise InvalidArgumentError(
            f"the demo needs at least 2 hosts, got {n_leaves} leaves x {hosts_per_leaf} hosts per leaf")
    n_hosts = n_leaves * hosts_per_leaf
    n_links, n_nodes = 2 * (n_hosts + n_leaves * n_spines), n_hosts + n_leaves + n_spines
    # Every host is a flow's destination.
    distances = min(n_hosts * n_nodes, _ROUTER_CACHE_MAX_ENTRIES)
    estimate = (_DEMO_BYTES_PER_LINK * n_links + _DEMO_BYTES_PER_NODE * n_nodes + _DEMO_BYTES_PER_HOST * n_hosts
                + _ROUTER_CACHE_ENTRY_BYTES * distances)
    _core.check_fits(
        f"the demo's {n_leaves} leaves x {hosts_per_leaf} hosts per leaf and {n_spines} spines "
        f"({n_links} links, {n_hosts} flows and more)",
        # The counts are Python ints of any size; one past double range is infinitely large.
        float(estimate) if estimate < sys.float_info.max else math.inf,
    )
    topo = leaf_spine(n_leaves, hosts_per_leaf, n_spines, link_Bps, latency_s)
    sc = Scenario(topo, seed=seed)
    rng = np.random.default_rng(seed)
    compute = sc.add_delay(compute_s, tag="compute")
    # A random permutation with no fixed point: every host sends to another one.
    perm = rng.permutation(n_hosts)
    while np.any(perm == np.arange(n_hosts)):
        perm = rng.permutation(n_hosts)
    shuffle = [
        sc.add_flow(f"host{h}", f"host{perm[h]}", transfer_bytes, after=compute, tag="permutation")
        for h in range(n_hosts)
    ]
    # Then every fourth host sends a quarter of that to host 0, all after one barrier: each
    # incast flow waiting on every permutation flow itself took n_hosts^2/4 dependencies.
    shuffled = sc.add_delay(0.0, after=shuffle, tag="shuffled")
    for h in range(1, n_hosts, 4):
        sc.add_flow(f"host{h}", "host0", transfer_bytes / 4, after=shuffled, tag="incast")
    return sc


def _phase_table(flows: pa.Table) -> str:
    lines = [f"{'phase':<12} {'flows':>6} {'bytes':>11} {'first start':>12} {'last finish':>12} {'mean rate':>12}"]
    tags = flows.column("tag").cast(pa.string())

    def shown(format_value, value) -> str:
        # A phase whose flows all failed has no finish.
        return "-" if value is None else format_value(value)

    for tag in pc.unique(tags).to_pylist():
        # A null tag equals nothing, not even another null: untagged flows are picked by is_null.
        sub = flows.filter(pc.is_null(tags) if tag is None else pc.equal(tags, tag))
        lines.append(
            f"{'(untagged)' if tag is None else tag:<12} {sub.num_rows:>6} {format_bytes(pc.sum(sub['bytes']).as_py()):>11} "
            f"{shown(format_duration, pc.min(sub['start_s']).as_py()):>12} "
            f"{shown(format_duration, pc.max(sub['finish_s']).as_py()):>12} "
            f"{shown(format_rate, pc.mean(sub['mean_rate_Bps']).as_py()):>12}"
        )
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    sc = demo_scenario(
        n_leaves=args.leaves,
        hosts_per_leaf=args.hosts_per_leaf,
        n_spines=args.spines,
        link_Bps=parsed("--link", bandwidth_Bps, args.link),
        transfer_bytes=parsed("--size", size_bytes, args.size),
        seed=args.seed,
    )
    topo = sc.topology
    print(
        f"fabricsim {__version__} demo: {args.leaves} leaves x {args.hosts_per_leaf} hosts, "
        f"{args.spines} spines, {args.link} links "
        f"({args.hosts_per_leaf}:{args.spines} oversubscribed), ECMP seed {args.seed}"
    )
    print(f"{topo.n_nodes} nodes, {topo.n_links} links, {sc.n_activities} activities\n")
    t0 = time.perf_counter()
    res = sc.run(progress=args.progress)
    wall_s = time.perf_counter() - t0
    print(_phase_table(res.flows))
    print()
    print(res.summary)
    print(f"\nsimulated in {format_duration(wall_s)} wall time ({res.n_instants} event instants)")
    if args.parquet is not None:  # --parquet "" is refused by to_parquet, not skipped
        for path in res.to_parquet(args.parquet):
            print(f"wrote {path}")
    return 0


def _nccl_tests(args: argparse.Namespace) -> int:
    from .nccl_sweep import nccl_tests
    from .nccl_conventions import format_footer, format_header, format_row

    fabric = _cli_fabric(args)
    cost = _cli_cost_model(args)
    extras = ("algorithm", "protocol", "analytical_s")

    def header(sizes: list[int]) -> None:  # once every argument is checked: a bad one prints only its error
        print(f"# fabricsim {__version__}: simulated nccl-tests on {args.nodes} x {args.fabric}"
              f" ({fabric.n_gpus} GPUs), {args.op}, algorithm {args.algorithm}, protocol {args.protocol}")
        print(format_header(extras), flush=True)

    def show(row: dict) -> None:  # each size as it finishes, as nccl-tests prints
        print(format_row(row, op=args.op, dtype=args.datatype, extras=extras), flush=True)

    table = nccl_tests(fabric, args.op, args.minbytes, args.maxbytes, args.stepfactor, algorithm=args.algorithm,
                       protocol=args.protocol, dtype=args.datatype, on_row=show, on_start=header,
                       progress=args.progress, cost_model=cost)
    print(format_footer(table["busbw_Bps"].to_pylist()))
    return 0


def _cli_fabric(args: argparse.Namespace):
    """The fabric of --fabric, --nodes, --scale-out and --sharp."""
    from . import fabrics

    if args.nodes < 1:
        raise InvalidArgumentError(f"--nodes must be a whole number >= 1, got {args.nodes}")
    if args.nodes == 1:
        fabrics._part(args.scale_out, "switch", "--scale-out")  # unused on one node, but a typo is still one
        if args.sharp:
            raise InvalidArgumentError("--sharp needs --nodes > 1: SHARP reduces across the scale-out fabric")
        return fabrics._preset(args.fabric, None)
    return fabrics.cluster(domain=args.fabric, n_domains=args.nodes, scale_out=args.scale_out, sharp=args.sharp)


def _cli_cost_model(args: argparse.Namespace):
    from .cost_model import CostModel

    return None if args.cost_model is None else CostModel.from_json(args.cost_model)


def _add_fabric_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fabric", default="hgx-h100", help="NVLink domain preset, e.g. hgx-h100, gb200-nvl72 "
                   "(default: %(default)s)")
    p.add_argument("--nodes", type=int, default=1, help="domains, joined by a rail-optimised scale-out fabric "
                   "(default: %(default)s)")
    p.add_argument("--scale-out", default="quantum-x800", help="scale-out switch (catalog name) when --nodes > 1 "
                   "(default: %(default)s)")
    p.add_argument("--sharp", action="store_true", help="the deployment runs SHARP (InfiniBand switches with "
                   "SHARP, the SHARP plugin, NCCL_COLLNET_ENABLE=1)")


def _validate(args: argparse.Namespace) -> int:
    from .validation import format_validation, validate

    cost = _cli_cost_model(args)
    print(format_validation(validate(args.case or None, cost_model=cost)))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from .calibration import calibrate, format_calibration
    from .nccl_logs import read_nccl_tests

    fabric = _cli_fabric(args)
    logs = [read_nccl_tests(path, op=args.op) for path in args.logs]
    ranks = None if args.ranks is None else list(range(args.ranks))
    cal = calibrate(fabric, logs, ranks=ranks, algorithm=args.algorithm, holdout_every=args.holdout_every,
                    cost_model=_cli_cost_model(args))
    print(format_calibration(cal))
    if args.out is not None:
        cal.cost_model.to_json(args.out)
        print(f"wrote {args.out}")
    return 0


def _size_flag(text: str) -> float:
    try:
        return size_flag_bytes(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fabricsim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"fabricsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the built-in default scenario and print a summary")
    demo.add_argument("--leaves", type=int, default=4)
    demo.add_argument("--hosts-per-leaf", type=int, default=8)
    demo.add_argument("--spines", type=int, default=2)
    demo.add_argument("--link", default="400Gb/s", help="rate of every link, e.g. 400Gb/s")
    demo.add_argument("--size", default="1GiB", help="bytes per permutation flow, e.g. 1GiB")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--parquet", metavar="DIR", help="also write the result tables here")
    demo.add_argument("--progress", action="store_true", help="show progress on stderr")
    demo.set_defaults(func=_demo)
    nt = sub.add_parser("nccl-tests", help="a simulated nccl-tests sweep, printed in its layout")
    _add_fabric_flags(nt)
    nt.add_argument("--cost-model", metavar="JSON", help="a cost model (CostModel.to_json, fabricsim calibrate --out)")
    nt.add_argument("--op", default="all_reduce", help="all_reduce, all_gather, reduce_scatter, all_to_all, ...")
    nt.add_argument("-b", "--minbytes", default="8M", type=_size_flag, help="as nccl-tests: K/M/G are powers of 1024")
    nt.add_argument("-e", "--maxbytes", default="8G", type=_size_flag)
    nt.add_argument("-f", "--stepfactor", type=float, default=2.0)
    nt.add_argument("-d", "--datatype", default="float", choices=list(DTYPE_SIZE_BYTES))
    nt.add_argument("--algorithm", default="auto", help="auto (NCCL's choice), ring, tree, nvls, ...")
    nt.add_argument("--protocol", default="auto", help="auto (NCCL's choice), simple, ll128 or ll")
    nt.add_argument("--progress", action="store_true", help="show each size's progress on stderr")
    nt.set_defaults(func=_nccl_tests)
    va = sub.add_parser("validate", help="simulated vs measured for every public measurement of the validation table")
    va.add_argument("case", nargs="*", help="case ids (default: every case)")
    va.add_argument("--cost-model", metavar="JSON", help="a cost model (CostModel.to_json) instead of the defaults")
    va.set_defaults(func=_validate)
    ca = sub.add_parser("calibrate", help="fit the cost model to real nccl-tests logs from a cluster")
    ca.add_argument("logs", nargs="+", help="nccl-tests output files (any op and size range)")
    _add_fabric_flags(ca)
    ca.add_argument("--ranks", type=int, help="the logs ran on the first N GPUs (default: every GPU)")
    ca.add_argument("--op", help="the op, where a log does not say (all_reduce, all_gather, ...)")
    ca.add_argument("--algorithm", default="auto", help="the algorithm the runs used (default: %(default)s)")
    ca.add_argument("--holdout-every", type=int, default=3,
                    help="hold every Nth size out of the fit, to report its error (0: none; default: %(default)s)")
    ca.add_argument("--cost-model", metavar="JSON", help="start from this cost model instead of the defaults")
    ca.add_argument("--out", metavar="JSON", help="write the fitted cost model here")
    ca.set_defaults(func=_calibrate)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (FabricsimError, ValueError, MemoryError) as e:  # a message, not a traceback
        print(f"fabricsim: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    except KeyboardInterrupt:  # what was printed stays; the shell's code for SIGINT
        print("fabricsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped to `head`: stop quietly, as Unix tools do
        # Python flushes stdout again at exit; point it at /dev/null so that cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # e.g. --parquet in a directory that cannot be made or written
        print(f"fabricsim: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
