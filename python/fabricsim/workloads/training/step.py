"""A training step: :class:`Parallelism` (Megatron-LM's layout of the ranks: tensor, pipeline,
data, context and expert parallel sizes, the schedule, the sharding, the rank order) and
:class:`TrainingStep` (a model under a parallelism on a fabric, checked on creation; its
chunks' work, its memory and its communication as it issues it). The step's estimate, its DAG
on a scenario and its results are the modules beside this one.

A :class:`~fabricsim.jobs.Job` adds a step to its GPUs by asking the parallelism for it
(``Parallelism._step``), so that jobs, which sit below the workloads, never import them.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..._checks import COUNT, I64, choice, flag, integer, integers, known_fields, parsed, real_in, shown
from ...collectives import estimate, fabric_view
from ...collectives.cost.model import checked_cost_model
from ...exceptions import InvalidArgumentError, ZeroCapacityPathError
from ...fabrics import Topology
from ...fabrics import catalog as _catalog
from ...progress import AUTO_DELAY_S
from ...progress import bar as progress_bar
from ...progress import enabled as progress_enabled
from ...scenario import Scenario
from ...scenario_args import checked_progress
from ...units import size_bytes
from .compute import RECOMPUTE_MODULES, ComputeModel, _Chunk, _peak, adam_bytes_per_param, chunks, memory_bound_s
from .precision import Precision
from .precision import precision as _precision
from . import data_parallel
from .construction import _Builder, _Built
from .estimate import _estimate
from .memory import memory_table
from .model import Model
from .model import model as _model
from .moe import MoeOptions, add_experts, checked_options, expert_groups
from .placement import layout, straddling
from .results import StepEstimate, StepResult

__all__ = ["Parallelism", "TrainingStep", "TrainingConfigError", "PlacementWarning", "train_step", "estimate_step"]


class TrainingConfigError(InvalidArgumentError):
    """An impossible model/parallelism/fabric combination; the message names the numbers.

    Example::

        try:
            fs.TrainingStep("llama3-8b", fs.Parallelism(tp=3), fs.hgx_h100())
        except fs.training.TrainingConfigError as e:
            print(e)   # llama3-8b: heads 32 not divisible by tp 3
    """


class PlacementWarning(UserWarning):
    """A step's tensor- or expert-parallel groups straddle NVLink domains (its ``straddling``).

    Example::

        import warnings
        warnings.simplefilter("error", fs.training.PlacementWarning)   # refuse such steps
    """


def _bad(message: str) -> TrainingConfigError:
    return TrainingConfigError(message)


_DIMS = ("tp", "cp", "ep", "dp", "pp")


#: ``dp_sharding`` spellings -> the canonical name. Megatron-FSDP's ``ShardingStrategy`` names
#: (https://docs.nvidia.com/megatron-core/developer-guide/latest/apidocs/core/core.distributed.fsdp.src.megatron_fsdp.fully_shard.html:
#: no_shard, optim, optim_grads, optim_grads_params) and ZeRO's stages (Rajbhandari et al. 2020,
#: https://arxiv.org/abs/1910.02054) map onto the four cases.
_DP_SHARDING = {
    "none": "none", "no_shard": "none", "zero0": "none",
    "zero1": "zero1", "optim": "zero1", "distributed_optimizer": "zero1",
    "optim_grads": "optim_grads", "zero2": "optim_grads",
    "fsdp": "fsdp", "optim_grads_params": "fsdp", "zero3": "fsdp",
}


@known_fields
@dataclass(frozen=True)
class Parallelism:
    """Parallelism as Megatron-LM's arguments spell it.

    ``tp``, ``pp``, ``dp``, ``cp`` (context), ``ep`` (expert) and ``etp`` (expert tensor
    parallel, default ``tp``): Megatron splits each stage's tp x dp x cp ranks of MoE layers
    into etp x ep x expert-dp, etp innermost, in rank order. ``micro_batch_size``
    and ``global_batch_size`` are in sequences (global default: one micro-batch per pipeline
    stage per replica, ``dp * micro_batch_size * pp``). ``schedule``: "1f1b" or "interleaved"
    with ``virtual_stages`` model chunks per stage. ``dp_sharding`` (what the dp x cp ranks
    shard; Megatron-FSDP's names are accepted too): "none" ("no_shard": all-reduce of
    gradients, every rank keeps everything), "zero1" ("optim": Megatron's distributed
    optimizer, optimizer state sharded, gradients reduce-scattered, parameters all-gathered),
    "optim_grads" ("zero2": optimizer state and gradients sharded, weights kept whole through
    forward and backward, as Llama 3's FSDP) or "fsdp" ("optim_grads_params", "zero3": also the
    weights sharded, each chunk's parameters all-gathered before its first forward and first
    backward). ``recompute`` is full activation recomputation (each layer keeps its input and is
    re-run before its backward), of every layer or, with ``recompute_layers`` = N, of the first
    N layers of each model chunk (Megatron's ``--recompute-method block --recompute-num-layers
    N``); ``selective_recompute`` is Megatron's selective recomputation of the attention kernel
    (its scores are not kept, which changes memory only with ``flash_attention=False``: a fused
    attention kernel never keeps them), and ``recompute_modules`` names the parts of each layer
    re-run before their backward instead of keeping their activations, as Megatron's
    ``--recompute-modules`` does ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act",
    "moe", "shared_experts"; ``selective_recompute`` is ("core_attn",)). ``adam_moment_bytes``
    is 4 (FP32 Adam moments) or 2 (BF16, Megatron's ``--use-precision-aware-optimizer
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``).
    ``stage_layers`` gives each stage's layer count (default: equal; Llama 3 405B used one layer
    fewer on the first and last stage). ``order`` is Megatron's rank order, innermost first
    (default "tp-cp-ep-dp-pp"); ``placement`` maps Megatron rank i to GPU ``placement[i]`` of the
    fabric (default: rank i on GPU i). ``tp_in_domain`` refuses a TP group that leaves an NVLink
    domain.

    Each field is checked (a :class:`TrainingConfigError` naming the field and the value): the
    sizes (``tp`` to ``virtual_stages``, ``global_batch_size`` unless None) are integers >= 1,
    with tp x pp x dp x cp below 2**32; the flags are True or False (``sequence_parallel`` also
    None: on where tp > 1); ``bucket_size_bytes`` is a size > 0 (bytes, or a string such as
    "40MB"); ``grad_reduce_bytes`` is 2 (bf16) or 4 (fp32); ``ep_imbalance``, the busiest EP
    rank's tokens over the mean, is in [1, ep]; ``stage_layers`` is pp integers >= 1;
    ``placement`` is tp x pp x dp x cp distinct GPU ids >= 0 (the step checks them against its
    fabric).

    Example::

        par = fs.Parallelism(tp=8, pp=2, dp=1)
        par.n_gpus, par.n_micro_batches, par.sequence_parallel   # (16, 2, True)
        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        fs.TrainingStep("llama3-8b", par, fabric).estimate().step_s   # about 0.24
    """

    _field_error = TrainingConfigError

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch_size: int = 1
    global_batch_size: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    dp_sharding: str = "none"
    sequence_parallel: bool | None = None
    recompute: bool = False
    selective_recompute: bool = False
    recompute_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    adam_moment_bytes: int = 4
    flash_attention: bool = True
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    bucket_size_bytes: float = 160e6
    grad_reduce_bytes: int = 4
    ep_imbalance: float = 1.0
    stage_layers: tuple[int, ...] | None = None
    order: str = "tp-cp-ep-dp-pp"
    placement: tuple[int, ...] | None = None
    tp_in_domain: bool = True
    etp: int | None = None

    def __post_init__(self) -> None:
        try:
            self._check()
        except TrainingConfigError:
            raise
        except InvalidArgumentError as err:  # as every other refusal of a Parallelism
            raise TrainingConfigError(str(err)) from None

    def _check(self) -> None:
        at = "Parallelism:"
        for f in ("tp", "pp", "dp", "cp", "ep", "micro_batch_size", "virtual_stages"):
            object.__setattr__(self, f, integer(f"{at} {f}", getattr(self, f), COUNT))
        object.__setattr__(self, "etp", self.tp if self.etp is None else integer(f"{at} etp (or None: tp)", self.etp, COUNT))
        for f in ("recompute", "selective_recompute", "flash_attention", "tp_comm_overlap", "overlap_grad_reduce",
                  "overlap_param_gather", "tp_in_domain"):
            flag(f"{at} {f}", getattr(self, f))
        if self.n_gpus >= COUNT[1]:
            raise _bad(f"{at} tp {self.tp} x pp {self.pp} x dp {self.dp} x cp {self.cp} = {shown(self.n_gpus)} GPUs; "
                       f"fabricsim counts GPUs in 32 bits (fewer than 2**32)")
        if self.global_batch_size is not None:
            object.__setattr__(self, "global_batch_size", integer(f"{at} global_batch_size", self.global_batch_size, COUNT))
        choice(f"{at} schedule", self.schedule, ("1f1b", "interleaved"))
        if self.schedule == "1f1b" and self.virtual_stages != 1:
            raise _bad(f"{at} virtual_stages={self.virtual_stages} needs schedule='interleaved'")
        key = self.dp_sharding.strip().lower() if isinstance(self.dp_sharding, str) else self.dp_sharding
        object.__setattr__(self, "dp_sharding", _DP_SHARDING[choice(f"{at} dp_sharding", key, _DP_SHARDING)])
        if self.sequence_parallel is None:
            object.__setattr__(self, "sequence_parallel", self.tp > 1)
        flag(f"{at} sequence_parallel (or None: on where tp > 1)", self.sequence_parallel)
        if self.recompute and self.selective_recompute:
            raise _bad(f"{at} recompute=True (full recomputation) and selective_recompute=True exclude each other")
        if self.recompute_layers is not None:
            object.__setattr__(self, "recompute_layers", integer(f"{at} recompute_layers", self.recompute_layers, COUNT))
            if not self.recompute:
                raise _bad(f"{at} recompute_layers={self.recompute_layers} needs recompute=True (full recomputation "
                           "of that many layers per model chunk)")
        mods = self.recompute_modules
        if isinstance(mods, str) or not isinstance(mods, (tuple, list)):
            raise _bad(f"{at} recompute_modules must be a tuple of module names ({', '.join(RECOMPUTE_MODULES)}), got "
                       f"{type(mods).__name__} {shown(mods)}")
        for name in mods:
            choice(f"{at} recompute_modules entry", name, RECOMPUTE_MODULES)
        if mods and self.recompute:
            raise _bad(f"{at} recompute=True (full recomputation) and recompute_modules={tuple(mods)} exclude each other")
        object.__setattr__(self, "recompute_modules", tuple(dict.fromkeys(mods)))
        a = self.adam_moment_bytes
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) or a not in (2, 4):
            raise _bad(f"{at} adam_moment_bytes must be 4 (fp32) or 2 (bf16), got {type(a).__name__} {shown(a)}")
        object.__setattr__(self, "adam_moment_bytes", int(a))
        if not isinstance(self.order, str) or sorted(self.order.split("-")) != sorted(_DIMS):
            raise _bad(f"{at} order must name each of tp, cp, ep, dp, pp once (e.g. 'tp-cp-ep-dp-pp'), got "
                       f"{type(self.order).__name__} {shown(self.order)}")
        # the busiest EP rank's share over the mean: at least the mean, at most all of it
        object.__setattr__(self, "ep_imbalance", real_in(f"{at} ep_imbalance (the busiest EP rank's share over the "
                                                         f"mean, at most ep = {self.ep})", self.ep_imbalance, 1.0, self.ep))
        g = self.grad_reduce_bytes
        if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or g not in (2, 4):
            raise _bad(f"{at} grad_reduce_bytes must be 2 (bf16) or 4 (fp32), got {type(g).__name__} {shown(g)}")
        object.__setattr__(self, "grad_reduce_bytes", int(g))
        bucket = parsed(f"{at} bucket_size_bytes", size_bytes, self.bucket_size_bytes)
        object.__setattr__(self, "bucket_size_bytes", real_in(f"{at} bucket_size_bytes", bucket, 0.0, math.inf,
                                                              open_low=True, open_high=True))
        if self.stage_layers is not None:
            layers = integers(f"{at} stage_layers", self.stage_layers, COUNT)
            if len(layers) != self.pp:
                raise _bad(f"{at} stage_layers must give one layer count per stage (pp={self.pp}), got {len(layers)}: "
                           f"{layers.tolist()}")
            object.__setattr__(self, "stage_layers", tuple(layers.tolist()))
        if self.placement is not None:
            gpus = integers(f"{at} placement", self.placement, (0, I64[1]))
            if len(gpus) != self.n_gpus:
                raise _bad(f"{at} placement must list {self.n_gpus} GPUs (one per rank: tp x pp x dp x cp), got {len(gpus)}")
            first: dict[int, int] = {}
            for i, g in enumerate(gpus.tolist()):
                if first.setdefault(g, i) != i:
                    raise _bad(f"{at} placement puts ranks {first[g]} and {i} both on GPU {g}: each rank needs a GPU of its own")
            object.__setattr__(self, "placement", tuple(gpus.tolist()))

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel ranks: ``etp`` (``tp`` where it was given as None)."""
        return self.tp if self.etp is None else self.etp

    @property
    def n_gpus(self) -> int:
        """GPUs the layout needs: tp x pp x dp x cp."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def n_micro_batches(self) -> int:
        """Micro-batches per pipeline per step: global batch / (dp x micro_batch_size)."""
        return self.global_batch() // (self.dp * self.micro_batch_size)

    def global_batch(self) -> int:
        """Sequences per step: ``global_batch_size``, or dp x micro_batch_size x pp when it is not given.

        Example::

            fs.Parallelism(tp=8, pp=2).global_batch()                       # 2
            fs.Parallelism(tp=8, pp=2, global_batch_size=8).global_batch()  # 8
        """
        return self.global_batch_size if self.global_batch_size is not None else self.dp * self.micro_batch_size * self.pp

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """Megatron's global rank of a (tp, cp, dp, pp) coordinate, under ``order`` (ep
        divides the dp x cp ranks for MoE layers only, so it has no coordinate of its own).

        Example::

            par = fs.Parallelism(tp=4, dp=2, pp=2)   # order "tp-cp-ep-dp-pp": tp innermost
            par.rank(tp=1, dp=1, pp=1)   # 13 = 1 + 1 x 4 + 1 x 8
        """
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "ep": 1}
        coords = {d: integer(f"rank: {d}", x, (0, sizes[d])) for d, x in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp))}
        coords["ep"] = 0
        r, stride = 0, 1
        for d in self.order.split("-"):
            r += coords[d] * stride
            stride *= sizes[d]
        return r

    def _step(self, model: str | Model, fabric: Any, **options: Any) -> TrainingStep:
        """``TrainingStep(model, self, fabric, **options)``: how a job (fabricsim.jobs) makes
        its steps, asking the parallelism it was given, so that jobs never import training."""
        return TrainingStep(model, self, fabric, **options)

    def rank_map(self) -> np.ndarray:
        """Megatron's global rank of every (pp, dp, cp, tp) coordinate under ``order``, shape
        (pp, dp, cp, tp): :meth:`gpu_map` before ``placement``.

        Example::

            fs.Parallelism(tp=2, dp=2, order="dp-tp-cp-ep-pp").rank_map()[0, :, 0, :]   # [[0, 2], [1, 3]]
        """
        return Parallelism._gpu_map(self, None)

    def gpu_map(self) -> np.ndarray:
        """GPU of every (pp, dp, cp, tp) coordinate, shape (pp, dp, cp, tp).

        Example::

            gpus = fs.Parallelism(tp=4, dp=2, pp=2).gpu_map()
            gpus.shape            # (2, 2, 1, 4)
            gpus[:, :, 0, 0]      # array([[0, 4], [8, 12]]): TP rank 0 of each stage and replica
        """
        return self._gpu_map(self.placement)

    def _gpu_map(self, placement: tuple[int, ...] | None) -> np.ndarray:
        pp, dp, cp, tp = np.meshgrid(np.arange(self.pp), np.arange(self.dp), np.arange(self.cp), np.arange(self.tp), indexing="ij")
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "ep": 1}
        coords: dict[str, np.ndarray | int] = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": 0}
        r = np.zeros_like(tp)
        stride = 1
        for d in self.order.split("-"):
            r = r + coords[d] * stride
            stride *= sizes[d]
        if placement is not None:
            r = np.asarray(placement, dtype=np.int64)[r]
        return r


@functools.lru_cache(maxsize=8)
def _wire_only(cost: Any) -> Any:
    """``cost`` without software latency (kept: a cost model checks every table as it is made)."""
    return cost.without_software_latency()


_EXPECTED = {
    "parallelism": "a fabricsim.Parallelism",
    "fabric": "a fabricsim.Topology or a generated Fabric (fs.hgx_h100(), fs.cluster(...))",
    "compute": "a fabricsim.training.ComputeModel (None for the default)",
}


def _gpu_part(fabric: Any, gpu: str | None) -> Any:
    if gpu is not None:
        part = _catalog.part(gpu)
        if part.kind != "gpu":
            raise InvalidArgumentError(f"gpu={gpu!r} is a catalog {part.kind}, not a GPU")
        return part
    parts = getattr(fabric, "_parts", None) or {}
    p = parts.get("gpu")
    if p is None:
        raise InvalidArgumentError("this fabric has no GPU part (a plain topology): pass gpu='h100' (a catalog GPU)")
    return p


class TrainingStep:
    """One training step of ``model`` under ``parallelism`` on ``fabric``; checked on creation.

    ``compute``: a :class:`ComputeModel` (default: the published matmul and attention
    efficiencies, memory-bound work as eager PyTorch kernels move it, the setting the measured
    layers validate; the published Megatron/NeMo runs used Transformer Engine's fused kernels,
    with which the model runs 5-45 points faster still: ``ComputeModel(kernels="fused")``); ``precision``: a recipe name or :class:`Precision` (default
    "bf16"; "fp8-delayed", "fp8-current", "fp8-blockwise", and on Blackwell "mxfp8" and
    "nvfp4"); ``gpu``: catalog GPU
    name when the fabric does not say; ``cost_model``: for the collectives;
    ``check_memory``: refuse a configuration whose busiest GPU needs more than its HBM.
    ``tp_comm``: "flow" (TP collectives simulated on the fabric) or "analytical" (TP
    collectives as delays of their :func:`fabricsim.estimate` time: exact where nothing else
    shares the TP group's NVLink, and about 20x cheaper to build).
    ``moe``: how the mixture-of-experts layers run (:class:`~fabricsim.training.MoeOptions`, or
    a dict of its fields): dispatcher, routing, FP8 dispatch, overlap.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
        step.memory.column("total_bytes")   # per stage: about 13.6 GB and 11.9 GB of 80
        step.estimate().step_s, step.run().step_s   # closed form and simulated: about 0.47 s each
    """

    def __init__(
        self,
        model: str | Model,
        parallelism: Parallelism,
        fabric: Any,
        *,
        compute: ComputeModel | None = None,
        precision: str | Precision | None = None,
        gpu: str | None = None,
        cost_model: Any = None,
        check_memory: bool = True,
        tp_comm: str = "flow",
        moe: MoeOptions | dict[str, Any] | None = None,
    ) -> None:
        self.model: Model = _model(model)
        for name, value, kind in (("parallelism", parallelism, Parallelism), ("fabric", fabric, Topology),
                                  ("compute", compute, (ComputeModel, type(None)))):
            if not isinstance(value, kind):
                raise InvalidArgumentError(
                    f"{name} must be {_EXPECTED[name]}, got {type(value).__name__} {shown(value)}")
        self.par = parallelism
        self.fabric = fabric
        self.compute = compute or ComputeModel()
        checked_cost_model(cost_model)
        self.cost_model = cost_model
        self.tp_comm = choice("tp_comm", tp_comm, ("flow", "analytical"))
        flag("check_memory", check_memory)
        self.gpu = _gpu_part(fabric, gpu)
        self.precision: Precision = _precision(precision)
        self.precision.check_gpu(self.gpu)
        #: the dense peak of the linear layers' GEMM format, the denominator of MFU
        self.peak_flop_per_s: float = _peak(self.gpu, self.precision.gemm_format)
        self.moe = checked_options(moe)
        self._check()
        self.gpus = parallelism.gpu_map()  # (pp, dp, cp, tp)
        self.ranks = parallelism.rank_map()  # Megatron's rank of each, the same shape
        self._check_placement()
        self.straddling = straddling(self)
        if any(self.straddling.values()):
            where = ", ".join(f"{n} {k.upper()} groups" for k, n in self.straddling.items() if n)
            warnings.warn(f"{where} of this step span more NVLink domains than their size needs: their traffic "
                          "crosses the scale-out network. "
                          "fs.training.domain_aware(parallelism, fabric) keeps each group in one domain",
                          PlacementWarning, stacklevel=2)
        if self._faulted:
            self._check_reachable()
        self.chunks = chunks(self)
        add_experts(self, self.chunks)
        self.memory = memory_table(self)
        if check_memory:
            self._check_memory()
        self._est_cache: dict[Any, Any] = {}

    # ---- checks
    def _check(self) -> None:
        m, p = self.model, self.par
        n = getattr(self.fabric, "n_gpus", None)
        if n is not None and p.n_gpus > n:
            raise _bad(f"tp {p.tp} x pp {p.pp} x dp {p.dp} x cp {p.cp} = {p.n_gpus} GPUs, but the fabric has {n}")
        if m.heads % p.tp:
            raise _bad(f"{m.name}: heads {m.heads} not divisible by tp {p.tp}")
        if m.ffn % p.tp:
            raise _bad(f"{m.name}: FFN width {m.ffn} not divisible by tp {p.tp}")
        if m.seq_len % p.cp or (m.seq_len // p.cp) % max(1, p.tp if p.sequence_parallel else 1):
            raise _bad(f"{m.name}: seq_len {m.seq_len} not divisible by cp {p.cp}"
                       + (f" x tp {p.tp} (sequence parallelism)" if p.sequence_parallel else ""))
        if p.ep > 1:
            if not m.is_moe:
                raise _bad(f"ep {p.ep} > 1 but {m.name} has no experts")
            if m.n_experts % p.ep:
                raise _bad(f"{m.name}: n_experts {m.n_experts} not divisible by ep {p.ep}")
            if (p.tp * p.dp * p.cp) % (p.ep * p.expert_tp):
                raise _bad(f"ep {p.ep} x etp {p.expert_tp} must divide tp {p.tp} x dp {p.dp} x cp {p.cp} = {p.tp * p.dp * p.cp} "
                           "(Megatron carves expert parallelism out of each stage's ranks)")
        if m.is_moe and m.expert_ffn % p.expert_tp:
            raise _bad(f"{m.name}: expert_ffn {m.expert_ffn} not divisible by etp {p.expert_tp}")
        if m.is_moe and p.expert_tp > 1 and self.moe.mode == "deepep":
            # MoEFlexTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py) sends each
            # token to every expert-TP rank of its destination over one TP x EP group, with no
            # gather after it: a dispatch this model does not build (it gathers over the ETP group
            # as the alltoall dispatcher does), so it is refused rather than mis-timed.
            raise _bad(f"dispatcher {self.moe.dispatcher!r} with etp {p.expert_tp} > 1 is not modelled "
                       "(the flex dispatcher's TP x EP dispatch); use etp=1 or dispatcher='alltoall'")
        if m.is_moe and p.tp > 1 and not p.sequence_parallel:
            # megatron/training/arguments.py: "When using MoE and tensor parallelism, sequence
            # parallelism must be used."
            raise _bad(f"{m.name} has experts and tp {p.tp} > 1: Megatron needs sequence_parallel=True there")
        gb = p.global_batch()
        if gb % (p.dp * p.micro_batch_size):
            raise _bad(f"global_batch_size {gb} is not divisible by dp {p.dp} x micro_batch_size {p.micro_batch_size} = {p.dp * p.micro_batch_size}")
        mb = p.n_micro_batches
        if p.schedule == "interleaved" and mb % p.pp:
            raise _bad(f"the interleaved schedule needs the number of micro-batches ({gb} / ({p.dp} x {p.micro_batch_size}) = {mb}) divisible by pp {p.pp}")
        if p.stage_layers is not None:
            # a stage may hold fewer layers than chunks: the rest hold none, as Megatron's splits
            # that count the embedding and the loss as layers leave the first and last chunk
            if len(p.stage_layers) != p.pp or sum(p.stage_layers) != m.layers:
                raise _bad(f"stage_layers {list(p.stage_layers)} must give pp={p.pp} stages summing to {m.name}'s {m.layers} layers")
        elif m.layers % (p.pp * p.virtual_stages):
            raise _bad(f"{m.name}: {m.layers} layers are not divisible by pp {p.pp} x virtual_stages {p.virtual_stages} = {p.pp * p.virtual_stages}; give stage_layers=")

    def _check_placement(self) -> None:
        p = self.par
        n = getattr(self.fabric, "n_gpus", None)
        if p.placement is not None and n is not None:  # each entry a GPU >= 0, distinct (Parallelism)
            beyond = [k for k, g in enumerate(p.placement) if g >= n]
            if beyond:
                k = beyond[0]
                raise _bad(f"placement[{k}] = {p.placement[k]}, but the fabric has GPUs 0..{n - 1}"
                           + (f" ({len(beyond)} entries beyond)" if len(beyond) > 1 else ""))
        dom = (getattr(self.fabric, "structure", None) or {}).get("domain") if hasattr(self.fabric, "structure") else None
        if p.tp_in_domain and dom is not None and p.tp > 1:
            size = dom["n_endpoints"]
            if p.tp > size:
                raise _bad(f"tp {p.tp} is wider than an NVLink domain of {size} GPUs (tp_in_domain=True; pass tp_in_domain=False to span domains)")
            d = self.gpus // size
            bad = np.nonzero((d != d[..., :1]).any(axis=-1))
            if bad[0].size:
                i = tuple(int(x[0]) for x in bad)
                raise _bad(f"the TP group at pp={i[0]} dp={i[1]} cp={i[2]} (GPUs {self.gpus[i].tolist()}) spans NVLink domains of {size} GPUs (tp_in_domain=True)")

    def _check_memory(self) -> None:
        hbm = self.gpu.get("hbm_bytes")
        if hbm is None:
            return
        tot = self.memory["total_bytes"].to_numpy()
        s = int(np.argmax(tot))
        if tot[s] > hbm:
            r = {k: self.memory[k][s].as_py() / 1e9 for k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes")}
            raise _bad(
                f"{self.model.name} does not fit: stage {s} needs {tot[s] / 1e9:.1f} GB per GPU (weights {r['weights_bytes']:.1f}, "
                f"grads {r['grads_bytes']:.1f}, optimizer {r['optimizer_bytes']:.1f}, activations {r['activations_bytes']:.1f}) "
                f"but a {self.gpu.name} has {hbm / 1e9:.0f} GB (dp_sharding={self.par.dp_sharding!r}, "
                f"{self.par.n_micro_batches} micro-batches, {self.par.schedule} schedule); try dp_sharding='zero1', "
                "'optim_grads' or 'fsdp', recompute=True, more pp or tp, or check_memory=False")

    # ---- common figures
    @property
    def tokens_per_step(self) -> float:
        """Tokens per step: global batch x sequence length."""
        return self.par.global_batch() * self.model.seq_len

    @property
    def model_flops_per_step(self) -> float:
        """Model FLOPs per step (3 x forward per sequence, without recomputation), the numerator of MFU."""
        return self.par.global_batch() * self.model.model_flops_per_sequence()

    def _optimizer_s(self, s: int) -> float:
        p = self.par
        dense = sum(ch.params for ch in self.chunks[s])
        expert = sum(ch.expert_params for ch in self.chunks[s])
        if p.dp_sharding != "none":
            dense, expert = dense / (p.dp * p.cp), expert / self.expert_dp
        return memory_bound_s(adam_bytes_per_param(p.adam_moment_bytes) * (dense + expert), gpu=self.gpu,
                              compute=self.compute)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts (expert data parallel): tp x dp x cp / (etp x ep)."""
        p = self.par
        return p.tp * p.dp * p.cp // (p.expert_tp * p.ep)

    # ---- communication, as the step issues it
    @property
    def _faulted(self) -> bool:
        """Whether the fabric has faults (``fabric.fail``), which the collectives' closed forms
        (per-GPU NVLink and network rates) cannot see."""
        return bool((getattr(self.fabric, "_parts", None) or {}).get("faults"))

    def _chains(self, kind: str, s: int, size: float, every: bool, gather: float | None = None,
                over: str = "dp") -> list[tuple[tuple[int, ...], list[tuple[str, float, Any]]]]:
        """One communication of stage ``s`` as the step issues it at once on every group of
        ranks: per group, its chain of (op, size_bytes, sizes); ``every=False`` gives only the
        first group, replica 0's (TP rank 0's). ``kind`` is "tp", "tp.gather" (the TP group's
        all-gather alone: a backward's gather of its inputs again), "cp", "etp" (the routed
        experts' all-gather and reduce-scatter over each expert-tensor-parallel group), or a
        data-parallel op ("all_reduce", "reduce_scatter", "all_gather") over each group of
        ``over`` (:func:`~.data_parallel.groups`). ``gather``: the bytes of the TP all-gather with
        sequence parallelism, where they are not ``size`` (the reduce-scatter's)."""
        p, g = self.par, size if gather is None else gather
        ops = {"tp": [("reduce_scatter", size), ("all_gather", g)] if p.sequence_parallel else [("all_reduce", size)],
               "tp.gather": [("all_gather", size)], "cp": [("send_recv", size)],
               "etp": [("all_gather", size), ("reduce_scatter", size)]}.get(kind, [(kind, size)])
        chain: list[tuple[str, float, Any]] = [(op, n, None) for op, n in ops]
        return [(grp, chain) for grp in self._groups(kind, s, every, over)]

    def _groups(self, kind: str, s: int, every: bool, over: str) -> list[tuple[int, ...]]:
        """The groups of two or more ranks :meth:`_chains` of ``kind`` runs on (every group or the
        first), found once per step: a step issues each group's communication at many sizes."""
        name = "tp" if kind == "tp.gather" else kind if kind in ("tp", "cp", "etp") else over
        key = ("groups", name, s, every)
        hit: list[tuple[int, ...]] | None = self._est_cache.get(key)
        if hit is None:
            p, G = self.par, self.gpus
            n = None if every else 1
            if name == "tp":
                groups = list(G[s].reshape(-1, p.tp)[:n])  # (dp, cp) replicas, cp innermost
            elif name == "cp":
                groups = list(G[s].transpose(0, 2, 1).reshape(-1, p.cp)[:n])  # per (dp, tp), the cp ranks
            elif name == "etp":
                groups = [np.asarray(g) for g, _ in expert_groups(self, s, "etp")[:n]]
            else:
                groups = [np.asarray(g) for g, _ in data_parallel.groups(self, s, over)[:n]]
            hit = self._est_cache[key] = [tuple(int(x) for x in g) for g in groups if g.size >= 2]
        return hit

    def _comm_s(self, kind: str, s: int, size: float, gather: float | None = None, over: str = "dp") -> float:
        """Seconds one communication of stage ``s`` (:meth:`_chains`) of ``size`` bytes (and
        ``gather`` bytes of the TP all-gather) takes on an otherwise idle fabric: on a fabric
        without faults, replica 0's chain timed by :func:`fabricsim.estimate` (every group has
        its shape); on a fabric with faults, every group's chain simulated together at flow
        level, so that a degraded link on any group's path, and the groups that share it, set
        the time. Groups laid out alike (:func:`~.placement.layout`) are timed once."""
        if size <= 0:
            return 0.0
        key = (kind, over, s, round(size)) + (() if gather is None else (round(gather),))
        hit = self._est_cache.get(key)
        if hit is None:
            chains = self._chains(kind, s, size, every=self._faulted, gather=gather, over=over)
            if not chains:
                hit = 0.0
            elif self._faulted:
                hit = self._simulated_s(chains)
            else:
                ranks, ops = chains[0]
                alike = (kind, over, layout(self.fabric, ranks)) + key[3:]
                hit = self._est_cache.get(alike)
                if hit is None:
                    es = [estimate(self.fabric, op, None if sizes is not None else n, list(ranks), sizes=sizes,
                                   cost_model=self.cost_model) for op, n, sizes in ops]
                    hit = self._est_cache[alike] = sum(e.time_s for e in es)
                    self._est_cache[("channels",) + alike] = es[0].n_channels
                self._est_cache[("channels",) + key] = self._est_cache[("channels",) + alike]
            self._est_cache[key] = hit
        return hit

    def _comm_channels(self, kind: str, s: int, size: float, over: str = "dp") -> int:
        """Channels (one SM each) the collective of :meth:`_comm_s` runs on: replica 0's first
        collective's, as :func:`fabricsim.estimate` chooses its algorithm (on a fabric with
        faults too: NCCL's choice does not see them)."""
        if size <= 0:
            return 0
        key = ("channels", kind, over, s, round(size))
        hit = self._est_cache.get(key)
        if hit is None:
            self._comm_s(kind, s, size, over=over)  # on a fabric without faults, times it and keeps its channels
            hit = self._est_cache.get(key)
        if hit is None:
            chains = self._chains(kind, s, size, every=False, over=over)
            hit = 0
            if chains:
                ranks, ops = chains[0]
                op, n, _ = ops[0]
                hit = estimate(self.fabric, op, n, list(ranks), cost_model=self.cost_model).n_channels
            self._est_cache[key] = hit
        return hit

    def _simulated_s(self, chains: Sequence[tuple[tuple[int, ...], list[tuple[str, float, Any]]]] = (),
                     flows: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Makespan of ``chains`` (:meth:`_chains`) or of pipeline ``flows`` (sources,
        destinations) run alone on the fabric."""
        sc = Scenario(self.fabric, **({} if self.cost_model is None else {"cost_model": self.cost_model}))
        for ranks, ops in chains:
            prev: list[int] = []
            for op, size, sizes in ops:
                prev = [sc.add_collective(op, list(ranks), None if sizes is not None else size, sizes=sizes, after=prev)]
        if flows is not None:
            sc.add_flows(flows[0], flows[1], self._pp_bytes())
        return float(sc.run().summary.makespan_s)

    def _pp_bytes(self) -> float:
        m, p = self.model, self.par
        return p.micro_batch_size * m.seq_len / p.cp * m.hidden * 2.0 / p.tp

    def _pp_s(self, a: int, b: int) -> float:
        """Seconds of a pipeline transfer from stage ``a`` to stage ``b``, plain flows as the
        step sends them (one per TP rank, no NCCL software latency): on a fabric without faults,
        replica 0's first GPUs of the two stages exchanging its bytes, timed by
        :func:`fabricsim.estimate` without software latency (route latency and the per-GPU
        rate, as a lone flow takes); with faults, every replica's and TP rank's flows of that
        boundary and direction at once, simulated."""
        if a == b:  # one stage (pp = 1) holding consecutive chunks: nothing to send
            return 0.0
        # a send/recv pair times both ways at once: one key for both directions unless faults
        # (which may take one direction's links) make them differ
        key = ("pp", a, b) if self._faulted else ("pp", min(a, b), max(a, b))
        hit = self._est_cache.get(key)
        if hit is None:
            G = self.gpus
            if self._faulted:
                hit = self._simulated_s(flows=(G[a].ravel(), G[b].ravel()))
            else:
                hit = estimate(self.fabric, "send_recv", self._pp_bytes(), [int(G[a, 0, 0, 0]), int(G[b, 0, 0, 0])],
                               algorithm="direct", cost_model=_wire_only(checked_cost_model(self.cost_model))).time_s
            self._est_cache[key] = hit
        return hit

    def _check_reachable(self) -> None:
        """Refuses a step with a GPU that the fabric's faults cut off (every link down): its
        transfers would fail, and the step cannot complete."""
        cut = fabric_view(self.fabric).cut_off
        hit = np.isin(self.gpus, cut) if cut.size else np.zeros(0, dtype=bool)
        if hit.any():
            s, d, c, t = (int(x[0]) for x in np.nonzero(hit))
            raise ZeroCapacityPathError(
                f"GPU {int(self.gpus[s, d, c, t])} (stage {s}, dp {d}, cp {c}, tp {t}) has every link down "
                "(fabric.fail): the step cannot run on it")

    # ---- analytical
    def estimate(self) -> "StepEstimate":
        """The step without simulating it at flow level: every operation of the step
        (:meth:`build`) with the time it takes on an otherwise idle fabric, in the step's
        order. Each stage runs its schedule (forward and backward of each chunk: compute, its
        exposed TP, CP and EP communication), each op waiting for the pipeline transfer that
        brings its input; then each stage's data-parallel reduction (overlapping its last
        backwards), optimizer step and, where it is not overlapped, parameter all-gather. The
        step ends with the last stage. What it leaves out is contention: communication that
        runs at the same time on shared links (a DP reduction beside TP traffic on one NVLink
        domain) takes longer in :meth:`run`.

        Collectives are timed as the step issues them: by :func:`fabricsim.estimate` on
        replica 0's groups; on a fabric with faults (``fabric.fail``), which those closed forms
        cannot see, each communication is simulated alone on the fabric, all its groups at
        once, so that a degraded link slows what crosses it (``comm_timing`` says which).

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
            print(step.estimate())   # step time, tokens/s, MFU, and each part of the step
        """
        return _estimate(self)


    # ---- simulation
    def build(self) -> "_Built":
        """The step as one :class:`~fabricsim.Scenario` (not run).

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
            built = step.build()
            built.scenario.n_activities        # 102: compute, collectives and pipeline flows
            built.scenario.run().summary.makespan_s   # about 0.24, the step time
        """
        return _Builder(self).build()

    def run(self, *, progress: Any = None, **run_options: Any) -> "StepResult":
        """Builds the step, simulates it at flow level and returns a :class:`StepResult`.

        ``progress`` covers both: None (the default) draws a bar for the build (its scheduled
        ops, then each stage's reduction and optimizer) and one for the run on stderr when it
        is a terminal and each has taken a second; True draws them from the start, False
        never; a callable is given to :meth:`Scenario.run` (the build then draws none). Other
        options go to :meth:`Scenario.run`.

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
            result = step.run(tolerance=1e-3)   # options go to Scenario.run
            result.step_s, result.mfu           # about 0.24 s and 0.22
        """
        checked_progress(progress)
        t0 = time.perf_counter()
        builder = _Builder(self)
        bars: list[Any] = []
        if progress is True or (progress is None and progress_enabled(None)):
            def built_so_far(done: int, total: int) -> None:
                if not bars:  # made at the first report, which knows how many parts there are
                    bars.append(progress_bar(total, "build", " ops", delay=0.0 if progress else AUTO_DELAY_S))
                bars[0].update(done - bars[0].n)

            builder.on_progress = built_so_far
        try:
            built = builder.build()
        finally:
            for bar in bars:
                bar.close()
        t1 = time.perf_counter()
        res = built.scenario.run(progress=progress, **run_options)
        t2 = time.perf_counter()
        return StepResult(self, built, res, build_s=t1 - t0, run_s=t2 - t1)

    def _into(self, scenario: Scenario, start: int | None) -> _Built:
        """Adds the step to ``scenario``, which has other work (a job's), its first activities
        waiting for activity ``start``: how a job adds its steps and a scenario replays a kept
        one, each calling it on the step it holds, so that neither imports the workloads."""
        return _Builder(self, scenario, start).build()


def train_step(model: str | Model, parallelism: Parallelism, fabric: Any, **options: Any) -> StepResult:
    """``TrainingStep(model, parallelism, fabric, **options).run()``.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1, global_batch_size=8)   # so 8 micro-batches
        print(fs.training.train_step("llama3-8b", par, fabric))   # bubble 9% of the step; 28% with 2
    """
    return TrainingStep(model, parallelism, fabric, **options).run()


def estimate_step(model: str | Model, parallelism: Parallelism, fabric: Any, **options: Any) -> StepEstimate:
    """``TrainingStep(model, parallelism, fabric, **options).estimate()``.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1)
        fs.training.estimate_step("llama3-8b", par, fabric).mfu   # about 0.22, in about a millisecond
    """
    return TrainingStep(model, parallelism, fabric, **options).estimate()
