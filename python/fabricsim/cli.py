"""The ``fabricsim`` command line.

``fabricsim demo`` runs the built-in default scenario: one step of a data-parallel job on an
oversubscribed leaf-spine fabric (compute, then a random permutation of transfers, then an
incast into one host), and prints what happened and which links were the bottleneck.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ._core import __version__
from ._checks import parsed
from ._files import output_directory
from .exceptions import FabricsimError, InvalidArgumentError
from .fabrics import Fabric, Topology
from .fabrics.generators import _preset, cluster
from .fabrics.specs import _DOMAINS, _nvlink_spec, _part
from .collectives.conventions import DTYPE_SIZE_BYTES, size_flag_bytes
from .scenario import Scenario
from .studies.demo import demo_scenario
from .units import bandwidth_Bps, format_bytes, format_duration, size_bytes

if TYPE_CHECKING:
    from .collectives.cost.model import CostModel


def _GBps(rate_Bps: float) -> str:
    """A bandwidth as every output of the command line shows one: GB/s (1e9 bytes/s), two
    decimals, as nccl-tests prints algbw and busbw."""
    return f"{rate_Bps / 1e9:.2f} GB/s"


def _phase_table(flows: pa.Table) -> str:
    lines = [f"{'phase':<12} {'flows':>6} {'bytes':>11} {'first start':>12} {'last finish':>12} {'mean rate':>12}"]
    tags = flows.column("tag").cast(pa.string())

    def shown(format_value: Callable[[float], str], value: float | None) -> str:
        # A phase whose flows all failed has no finish.
        return "-" if value is None else format_value(value)

    for tag in pc.unique(tags).to_pylist():
        # A null tag equals nothing, not even another null: untagged flows are picked by is_null.
        sub = flows.filter(pc.is_null(tags) if tag is None else pc.equal(tags, tag))
        lines.append(
            f"{'(untagged)' if tag is None else tag:<12} {sub.num_rows:>6} {format_bytes(pc.sum(sub['bytes']).as_py()):>11} "
            f"{shown(format_duration, pc.min(sub['start_s']).as_py()):>12} "
            f"{shown(format_duration, pc.max(sub['finish_s']).as_py()):>12} "
            f"{shown(_GBps, pc.mean(sub['mean_rate_Bps']).as_py()):>12}"
        )
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    if args.parquet is not None:  # a bad directory is reported now, not after the whole run
        output_directory("--parquet", args.parquet)
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
    res = _run_with_progress(sc, args.progress, "demo")
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
    from .studies.nccl_tests import nccl_tests
    from .collectives.conventions import format_footer, format_header, format_row

    fabric = _cli_fabric(args)
    cost = _cli_cost_model(args)
    extras = ("algorithm", "protocol", "analytical_s")

    bars = _SizeProgress(args.progress)
    if args.plot is not None:  # a bad path or no matplotlib is reported now, not after the sweep
        _need_matplotlib("--plot")
        output_directory("--plot", os.path.dirname(os.path.abspath(args.plot)))

    def header(sizes: list[int]) -> None:  # once every argument is checked: a bad one prints only its error
        print(f"# fabricsim {__version__}: simulated nccl-tests on {args.nodes} x {args.fabric} ({fabric.n_gpus} GPUs"
              f"{_scale_out_of(fabric)}), {args.op}, algorithm {args.algorithm}, protocol {args.protocol}")
        print(format_header(extras), flush=True)
        bars.start(sizes)

    def show(row: dict[str, Any]) -> None:  # each size as it finishes, as nccl-tests prints
        bars.write(format_row(row, op=args.op, dtype=args.datatype, extras=extras))
        bars.row_done()

    try:
        table = nccl_tests(fabric, args.op, args.minbytes, args.maxbytes, args.stepfactor, algorithm=args.algorithm,
                           protocol=args.protocol, dtype=args.datatype, on_row=show, on_start=header,
                           progress=bars.run_callback, cost_model=cost)
    finally:
        bars.close()
    print(format_footer(table["busbw_Bps"].to_pylist()))
    if args.plot is not None:
        from .studies import plot

        print(f"wrote {plot.save(plot.busbw(table, by='algorithm'), args.plot)}")
    return 0


_CABLING = "ibnetdiscover:"


def _cabling(fabric: str) -> tuple[str, str | None] | None:
    """(file, NVLink domain preset or None) of ``--fabric ibnetdiscover:FILE[:DOMAIN]``, or
    None for a preset name."""
    if not fabric.startswith(_CABLING):
        return None
    spec = fabric[len(_CABLING):]
    head, _, tail = spec.rpartition(":")
    return (head, tail) if head and tail.lower() in _DOMAINS else (spec, None)


def _cli_fabric(args: argparse.Namespace) -> Topology:
    """The fabric of --fabric, --nodes, --scale-out and --sharp: a preset's domains, or the
    cabling of ``ibnetdiscover:FILE[:DOMAIN]`` (GPU i of a host on its i-th HCA, the host's
    GPUs joined by DOMAIN's NVLink)."""
    cabled = _cabling(args.fabric)
    if cabled is not None:
        import pathlib

        if args.nodes != 1 or args.sharp:
            raise InvalidArgumentError(f"--fabric {args.fabric}: the cabling file gives the nodes and switches; "
                                       "--nodes and --sharp do not apply")
        path, domain = cabled
        try:
            return Topology.from_ibnetdiscover(pathlib.Path(path), nvlink=domain)
        except OSError as err:
            raise InvalidArgumentError(f"--fabric {args.fabric}: cannot read {path!r}: {err.strerror or err}") from None
    if args.nodes < 1:
        raise InvalidArgumentError(f"--nodes must be a whole number >= 1, got {args.nodes}")
    if args.nodes == 1:
        if args.scale_out is not None:  # unused on one node, but a typo is still one
            _part(args.scale_out, "switch", "--scale-out")
        if args.sharp:
            raise InvalidArgumentError("--sharp needs --nodes > 1: SHARP reduces across the scale-out fabric")
        return _preset(args.fabric, None)
    return cluster(domain=args.fabric, n_domains=args.nodes, scale_out=args.scale_out, sharp=args.sharp)


def _scale_out_of(fabric: Topology) -> str:
    """``, quantum-2 switches, cx7 NICs`` for a generated fabric with a scale-out network, else ""
    (a fabric from cabling names no parts)."""
    parts = getattr(fabric, "_parts", {})
    if "scale_out" not in parts:
        return ""
    return f", {parts['switch'].name} switches, {parts['nic'].name} NICs"


def _cli_cost_model(args: argparse.Namespace) -> CostModel | None:
    from .collectives.cost.model import CostModel

    return None if args.cost_model is None else CostModel.from_json(args.cost_model)


def _add_fabric_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fabric", default="hgx-h100", help="NVLink domain preset, e.g. hgx-h100, gb200-nvl72, or "
                   "ibnetdiscover:FILE[:DOMAIN], a cluster's cabling (default: %(default)s)")
    p.add_argument("--nodes", type=int, default=1, help="domains, joined by a rail-optimised scale-out fabric "
                   "(default: %(default)s)")
    p.add_argument("--scale-out", help="scale-out switch (catalog name) when --nodes > 1 (default: the switch of "
                   "the GPUs' NIC generation: quantum-2 for ConnectX-7 (H100, H200, B200, GB200), quantum-x800 for "
                   "ConnectX-8 (B300, GB300); docs/fabrics.md)")
    p.add_argument("--sharp", action="store_true", help="the deployment runs SHARP (InfiniBand switches with "
                   "SHARP, the SHARP plugin, NCCL_COLLNET_ENABLE=1)")


def _validate(args: argparse.Namespace) -> int:
    from .studies.validation import format_validation, validate

    from . import progress as bars
    from .studies.validation import _checked_cases

    cost = _cli_cost_model(args)
    cases = args.case or None
    n_rows = sum(len(c.sizes_bytes) for c in _checked_cases(cases))
    with bars.bar(n_rows, "validate", "size", disable=not bars.enabled(args.progress)) as bar:
        def done(row: dict[str, Any]) -> None:  # which case ran last, sizes per second, time left
            bar.set_postfix_str(f"{row['case']}", refresh=False)
            bar.update(1)

        table = validate(cases, cost_model=cost, on_row=done)
    print(format_validation(table))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from .collectives.calibration import calibrate, format_calibration
    from .collectives.nccl_logs import read_nccl_tests

    if args.out is not None:  # a bad path is reported now, not after the fit
        output_directory("--out", os.path.dirname(os.path.abspath(args.out)))
    fabric = _cli_fabric(args)
    if not isinstance(fabric, Fabric):  # its payload efficiencies are what calibration fits
        raise InvalidArgumentError(f"calibrate needs a generated fabric (--fabric a preset), got --fabric {args.fabric}")
    logs = [read_nccl_tests(path, op=args.op) for path in args.logs]
    ranks = None if args.ranks is None else list(range(args.ranks))
    for log in logs:  # said in the command line's terms, before the fit would say it in the API's
        n = fabric.n_gpus if ranks is None else len(ranks)
        if n and log.n_ranks != n:
            given = f"--ranks {len(ranks)}" if ranks is not None else (
                f"--fabric {args.fabric} --nodes {args.nodes}: {fabric.n_gpus} GPUs")
            raise InvalidArgumentError(
                f"{log.source}: the log ran {log.op} on {log.n_ranks} ranks, but {given}: give --ranks "
                f"{log.n_ranks} (the log ran on the first {log.n_ranks} GPUs) or the --fabric and --nodes it ran on")
    cal = calibrate(fabric, logs, ranks=ranks, algorithm=args.algorithm, holdout_every=args.holdout_every,
                    cost_model=_cli_cost_model(args))
    if args.out is not None:  # the fit is kept before anything else can go wrong
        cal.cost_model.to_json(args.out)
    print(format_calibration(cal))
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0


def _size_flag(text: str) -> float:
    try:
        return size_flag_bytes(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fabricsim",
        description="fabricsim: flow-level, max-min fair simulation of AI-factory fabrics (NVLink, "
                    "InfiniBand, Ethernet, photonics). Run a subcommand with --help for its options.")
    parser.add_argument("--version", action="version", version=f"fabricsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the built-in default scenario and print a summary")
    demo.add_argument("--leaves", type=int, default=4, help="leaf switches (default: %(default)s)")
    demo.add_argument("--hosts-per-leaf", type=int, default=8, help="hosts on each leaf (default: %(default)s)")
    demo.add_argument("--spines", type=int, default=2,
                      help="spine switches, every leaf linked to each (default: %(default)s)")
    demo.add_argument("--link", default="400Gb/s", help="rate of every link (default: %(default)s)")
    demo.add_argument("--size", default="1GiB", help="bytes per permutation flow (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the permutation and of ECMP (default: %(default)s)")
    demo.add_argument("--parquet", metavar="DIR", help="also write the result tables here")
    demo.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="a progress bar on stderr (default: when stderr is a terminal)")
    demo.set_defaults(func=_demo)
    nt = sub.add_parser("nccl-tests", help="a simulated nccl-tests sweep, printed in its layout")
    _add_fabric_flags(nt)
    nt.add_argument("--cost-model", metavar="JSON", help="a cost model (CostModel.to_json, fabricsim calibrate --out)")
    nt.add_argument("--op", default="all_reduce", help="all_reduce, all_gather, reduce_scatter, all_to_all, ...")
    nt.add_argument("-b", "--minbytes", default="8M", type=_size_flag,
                    help="smallest size, as nccl-tests: K/M/G are powers of 1024 (default: %(default)s)")
    nt.add_argument("-e", "--maxbytes", default="8G", type=_size_flag, help="largest size (default: %(default)s)")
    nt.add_argument("-f", "--stepfactor", type=float, default=2.0,
                    help="each size is the last times this (default: %(default)s)")
    nt.add_argument("-d", "--datatype", default="float", choices=list(DTYPE_SIZE_BYTES), metavar="TYPE",
                    help=f"element type, sizes are cut to whole elements: {', '.join(DTYPE_SIZE_BYTES)} "
                         "(default: %(default)s)")
    nt.add_argument("--algorithm", default="auto",
                    help="auto (the fastest of what NCCL enables there), ring, tree, nvls, nvls_tree, sharp, "
                         "nvls_sharp, hierarchical, halving_doubling, p2p, direct (default: %(default)s)")
    nt.add_argument("--protocol", default="auto",
                    help="auto (as for the algorithm), simple, ll128 or ll (default: %(default)s)")
    nt.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bars on stderr, over the sizes and within each (default: when stderr is a terminal)")
    nt.add_argument("--plot", metavar="PNG", help="also draw busbw against size into this file (needs matplotlib)")
    nt.set_defaults(func=_nccl_tests)
    va = sub.add_parser("validate", help="simulated vs measured for every public measurement of the validation table")
    va.add_argument("case", nargs="*", help="case ids (default: every case)")
    va.add_argument("--cost-model", metavar="JSON", help="a cost model (CostModel.to_json) instead of the defaults")
    va.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="a progress bar on stderr over the cases' sizes (default: when stderr is a terminal)")
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
    _add_train_command(sub)
    _add_scenario_file_commands(sub)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
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


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers given to ``flag``."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InvalidArgumentError(f"{flag} must be whole numbers separated by commas, e.g. 7,8,8,7; got {text!r}") from None


def _add_train_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``fabricsim train``: one training step's breakdown (fabricsim.training)."""
    tr = sub.add_parser("train", help="a training step's time, MFU and breakdown for a model and parallelism")
    tr.add_argument("model", nargs="?",
                    help="preset: gpt3-175b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b, deepseek-v3, "
                         "qwen3-235b-a22b, gpt-oss-120b, grok1-314b-proxy")
    tr.add_argument("--validate", action="store_true",
                    help="the validation table instead: every published training step the model is held to, "
                         "reported against modelled")
    _add_fabric_flags(tr)
    for dim, what in (("tp", "tensor-parallel ranks: GPUs sharing each layer's matrices"),
                      ("pp", "pipeline stages: the layers split into this many stages"),
                      ("dp", "data-parallel replicas: copies of the model, each on its own micro-batches"),
                      ("cp", "context-parallel ranks: each sequence split over this many GPUs"),
                      ("ep", "expert-parallel ranks: a mixture-of-experts model's experts split over this many "
                             "of each stage's tp x dp x cp ranks")):
        tr.add_argument(f"--{dim}", type=int, default=1, help=f"{what} (default: %(default)s)")
    tr.add_argument("--etp", type=int, help="expert tensor-parallel ranks (default: tp)")
    tr.add_argument("--dispatcher", default="alltoall", choices=["alltoall", "deepep", "flex", "hybridep"],
                    help="how a MoE layer's tokens reach their experts, as Megatron's moe_token_dispatcher_type: "
                         "alltoall (a copy per routed expert) or DeepEP's node-deduplicated dispatch (deepep, "
                         "flex, hybridep) (default: %(default)s)")
    tr.add_argument("--routing", default="balanced", choices=["balanced", "dirichlet"],
                    help="tokens per expert: balanced (forced, as benchmarks run) or drawn from a Dirichlet "
                         "distribution of expert popularity, seeded by --seed (default: %(default)s)")
    tr.add_argument("--seed", type=int, default=0, help="seed of --routing dirichlet (default: %(default)s)")
    tr.add_argument("--fp8-dispatch", action="store_true", help="MoE dispatch in FP8 with its scales")
    tr.add_argument("--ep-overlap", action="store_true",
                    help="MoE dispatch and combine beside compute (Megatron's 1F1B all-to-all overlap, DualPipe)")
    tr.add_argument("--placement", default="megatron", choices=["megatron", "domain"],
                    help="rank i on GPU i (megatron), or each TP and EP group kept in one NVLink domain "
                         "(domain) (default: %(default)s)")
    tr.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch")
    tr.add_argument("--global-batch", type=int, help="sequences per step (default: dp x micro-batch x pp)")
    tr.add_argument("--vp", type=int, default=1, help="virtual stages (interleaved schedule when > 1)")
    tr.add_argument("--dp-sharding", default="none", choices=["none", "zero1", "optim_grads", "fsdp"],
                    help="data-parallel sharding: zero1 shards the optimizer state, optim_grads also the "
                         "gradients (as Llama 3), fsdp also the weights (default: none)")
    tr.add_argument("--stage-layers", help="layers of each pipeline stage, comma-separated (default: equal; "
                    "Llama 3 405B: 7,8,...,8,7)")
    tr.add_argument("--recompute", action="store_true",
                    help="full activation recomputation: each layer keeps its input and runs its forward again "
                         "before its backward (less memory, about a third more compute)")
    tr.add_argument("--recompute-modules",
                    help="parts of each layer re-run before their backward instead of keeping their activations, "
                         "comma-separated, as Megatron's --recompute-modules: core_attn, layernorm, mla_up_proj, mlp, "
                         "moe_act, moe, shared_experts")
    tr.add_argument("--bf16-adam", action="store_true",
                    help="Adam's moments in BF16 (Megatron's --use-precision-aware-optimizer with bf16 exp_avg "
                         "and exp_avg_sq)")
    tr.add_argument("--efficiency", type=float,
                    help="every GEMM's fraction of its format's dense peak (default: the GPU's published best)")
    tr.add_argument("--precision", default="bf16",
                    help="training precision recipe: bf16 (default), fp8-delayed (fp8), fp8-current (fp8-cs), "
                         "fp8-blockwise, and on Blackwell mxfp8 or nvfp4")
    tr.add_argument("--no-memory-check", action="store_true",
                    help="run even where the busiest GPU needs more memory than its HBM")
    tr.add_argument("--analytical", action="store_true", help="closed form only (no flow simulation)")
    tr.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="progress bars on stderr for the step's build and its run (default: when stderr is a "
                         "terminal, once each has taken a second)")

    def run(args: argparse.Namespace) -> int:
        from .workloads import training

        if args.validate:
            rows = training.validate_training().to_pylist()
            print(f"{'case':40s} {'GPUs':>6s} {'precision':20s} {'metric':17s} {'reported':>10s} {'modelled':>10s} error")
            for r in rows:
                print(f"{r['case']:40s} {r['n_gpus']:6d} {r['precision']:20s} {r['metric']:17s} {r['reported']:10.4g} "
                      f"{r['modelled']:10.4g} {r['error']:+.1%}" + ("  (known miss)" if r["miss"] else ""))
            return 0
        if args.model is None:
            raise InvalidArgumentError("fabricsim train needs a model (e.g. llama3-8b), or --validate")
        par = training.Parallelism(
            tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, micro_batch_size=args.micro_batch,
            global_batch_size=args.global_batch, schedule="interleaved" if args.vp > 1 else "1f1b",
            virtual_stages=args.vp, dp_sharding=args.dp_sharding, recompute=args.recompute,
            recompute_modules=tuple(m for m in (args.recompute_modules or "").split(",") if m),
            adam_moment_bytes=2 if args.bf16_adam else 4,
            stage_layers=None if args.stage_layers is None else _int_list("--stage-layers", args.stage_layers),
            etp=args.etp)
        compute = training.ComputeModel(gemm_efficiency=args.efficiency)
        cabled = _cabling(args.fabric)
        if cabled is not None and cabled[1] is None:
            raise InvalidArgumentError(f"--fabric {args.fabric}: name the GPUs' NVLink domain, e.g. "
                                       f"{args.fabric}:hgx-h100, for a training step's GPUs")
        gpu = _nvlink_spec(cabled[1], None)[1]["gpu"].name if cabled is not None else None
        fabric = _cli_fabric(args)
        if args.placement == "domain":
            par = training.domain_aware(par, fabric)
        moe = training.MoeOptions(dispatcher=args.dispatcher, routing=args.routing, seed=args.seed,
                                  fp8_dispatch=args.fp8_dispatch, overlap=args.ep_overlap)
        with warnings.catch_warnings():  # said once, in the breakdown printed below
            warnings.simplefilter("ignore", training.PlacementWarning)
            step = training.TrainingStep(args.model, par, fabric, compute=compute, gpu=gpu, precision=args.precision,
                                         check_memory=not args.no_memory_check, moe=moe)
        out = step.estimate() if args.analytical else step.run(progress=args.progress)
        print(out)
        mem = step.memory
        worst = max(range(mem.num_rows), key=lambda i: mem["total_bytes"][i].as_py())
        print(f"  memory: {mem['total_bytes'][worst].as_py() / 1e9:.1f} GB per GPU on stage {worst} "
              f"(HBM {step.gpu.get('hbm_bytes', 0) / 1e9:.0f} GB)")
        return 0

    tr.set_defaults(func=run)


# ---- scenario files, plots, progress --------------------------------------------------------


def _run_with_progress(sc: Scenario, progress: bool | None, desc: str,
                       run: Callable[..., Any] | None = None) -> Any:
    """``sc.run()`` (or ``run``, which runs it: a scenario file's, with its options) with a
    tqdm bar when ``progress`` says so (None: on a terminal), shown from the start."""
    from . import progress as bars

    run = run or sc.run
    if not bars.enabled(progress):
        return run(progress=False)
    with bars.RunProgress(desc, total=sc.n_activities) as bar:
        res = run(progress=bar)
        bar.finish(res.makespan_s, sc.n_activities)
    return res


class _SizeProgress:
    """nccl-tests' bars: one over the sizes (sizes done, their rate, the time left and the
    size running) and, for a size that runs long enough for the engine to report, one within
    it; the rows print above them."""

    def __init__(self, progress: bool | None) -> None:
        from . import progress as bars

        self._bars = bars
        self.on = bars.enabled(progress)
        self._outer: Any = None
        self._inner: Any = None
        self._sizes: list[int] = []
        self.run_callback: Any = self._run if self.on else False

    def start(self, sizes: list[int]) -> None:
        if not self.on:
            return
        self._sizes = list(sizes)
        self._outer = self._bars.bar(len(sizes), "sizes", "size", position=0)
        self._show_running()

    def _size(self) -> str:
        from .units import format_bytes

        i = self._outer.n
        return format_bytes(self._sizes[i]) if i < len(self._sizes) else ""

    def _show_running(self) -> None:
        size = self._size()
        self._outer.set_postfix_str(f"running {size}" if size else "", refresh=True)

    def _run(self, n_done: int, n_total: int, sim_time_s: float) -> None:
        if self._outer is None:
            return
        if self._inner is None:  # only a size that runs long gets a bar of its own
            self._inner = self._bars.RunProgress(f"size {self._size()}", leave=False, position=1)
        self._inner(n_done, n_total, sim_time_s)

    def write(self, line: str) -> None:
        if self.on:
            self._bars.write(line)
        else:
            print(line, flush=True)

    def row_done(self) -> None:
        if self._outer is None:
            return
        if self._inner is not None:
            self._inner.close()
            self._inner = None
        self._outer.update(1)
        self._show_running()

    def close(self) -> None:
        for bar in (self._inner, self._outer):
            if bar is not None:
                bar.close()
        self._inner = self._outer = None


def _need_matplotlib(what: str) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidArgumentError(f"{what} need matplotlib: pip install 'fabricsim[plot]'") from None


def _run_file(args: argparse.Namespace) -> int:
    from .studies.scenario_file import load_scenario

    spec = load_scenario(args.file)
    if args.plot:
        spec.plots = tuple(dict.fromkeys(spec.plots + tuple(args.plot)))
    if args.trace:
        spec.trace = True
    if args.out is not None and args.out.lower() == "none":  # print only: nothing written
        if args.plot or args.trace:
            raise InvalidArgumentError("--out none writes nothing: --plot and --trace need an output directory")
        out, spec.plots, spec.trace = None, (), False
    else:
        out = args.out if args.out is not None else spec.output_directory
    if out is None and (spec.plots or spec.trace):
        raise InvalidArgumentError("plots and traces are files: give an output directory (--out DIR, or "
                                   "[output] directory in the scenario file)")
    if spec.plots:
        _need_matplotlib("plots")
    if out is not None:  # a bad directory is reported now, not after the whole run
        output_directory("--out" if args.out is not None else "[output] directory", out)
    sc = spec.scenario
    print(f"fabricsim {__version__}: {args.file}: {sc.topology!r}, {sc.n_activities} activities")
    t0 = time.perf_counter()
    res = _run_with_progress(sc, args.progress, os.path.basename(args.file), spec.run)
    wall_s = time.perf_counter() - t0
    print(res.summary)
    if res.collectives.num_rows:
        print("collectives:")
        for r in res.collectives.to_pylist():
            print(f"  {r['collective_id']:>6} {r['op']:<15} {r['algorithm']:<12} {r['n_ranks']:>5} ranks "
                  f"{format_bytes(r['size_bytes']):>10}  {format_duration((r['finish_s'] or 0) - (r['start_s'] or 0)):>10}"
                  f"  busbw {_GBps(r['busbw_Bps'] or 0.0)}")
    print(f"simulated in {format_duration(wall_s)} wall time ({res.n_instants} event instants)")
    if out is not None:
        for path in spec.write(res, out):
            print(f"wrote {path}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from .studies.scenario_file import SCHEMA_PATH

    if args.path:
        print(SCHEMA_PATH)
    else:
        with open(SCHEMA_PATH, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
    return 0


def _plot_dir(args: argparse.Namespace) -> int:
    """``fabricsim plot KIND DIR``: a plot from tables written before (Parquet)."""
    import pyarrow.parquet as pq

    _need_matplotlib("plots")
    from .studies import plot

    if args.kind == "busbw":
        if not os.path.isfile(args.source):
            raise InvalidArgumentError(
                f"{args.source}: no such file; give a Parquet table with size_bytes and busbw_Bps columns (one "
                "row per size, as fs.nccl_tests or a sweep of it returns, written with pyarrow.parquet.write_table)")
        try:
            table = pq.read_table(args.source)
        except (pa.ArrowException, OSError) as e:
            raise InvalidArgumentError(f"{args.source}: cannot be read as a Parquet table ({e})") from None
        fig = plot.busbw(table, by=args.by)
    else:
        raise InvalidArgumentError(f"unknown plot {args.kind!r}")
    print(f"wrote {plot.save(fig, args.out)}")
    return 0


def _add_scenario_file_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``fabricsim run FILE`` and ``fabricsim schema``: scenario files."""
    from .studies.scenario_file import PLOTS

    ru = sub.add_parser("run", help="run a scenario file (TOML) and write its tables, plots and trace",
                        description="Runs a scenario file: builds its fabric and workload, runs it, prints the "
                        "summary and writes the Parquet tables (and the plots and trace asked for) into the "
                        "output directory. `fabricsim schema` prints the file format's JSON Schema.")
    ru.add_argument("file", help="the scenario file (TOML)")
    ru.add_argument("--out", metavar="DIR", help="write the results here (default: the file's [output] directory, "
                    "relative to the file); --out none prints the summary only and writes nothing, plots and trace "
                    "included")
    ru.add_argument("--plot", action="append", choices=PLOTS, metavar="KIND",
                    help=f"also draw this plot into DIR/KIND.png: {', '.join(PLOTS)} (repeatable; needs matplotlib)")
    ru.add_argument("--trace", action="store_true", help="also write DIR/trace.json, for ui.perfetto.dev or "
                    "chrome://tracing")
    ru.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="a progress bar on stderr (default: when stderr is a terminal)")
    ru.set_defaults(func=_run_file)
    sc = sub.add_parser("schema", help="print the JSON Schema of scenario files (for editors)")
    sc.add_argument("--path", action="store_true", help="print the schema file's path instead")
    sc.set_defaults(func=_schema)
    pl = sub.add_parser("plot", help="draw busbw against size from a table written before (Parquet)")
    pl.add_argument("kind", choices=["busbw"], help="busbw: from nccl-tests' or a sweep's table")
    pl.add_argument("source", help="the Parquet file")
    pl.add_argument("-o", "--out", required=True, metavar="PNG", help="the image to write")
    pl.add_argument("--by", help="one line per value of this column (e.g. algorithm, or a sweep parameter)")
    pl.set_defaults(func=_plot_dir)


if __name__ == "__main__":
    sys.exit(main())
