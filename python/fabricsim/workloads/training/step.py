"""Training steps: a model and its parallelism, as one scenario DAG on any fabric (issue 25).

A :class:`Model` (presets in ``data/models.json``, each figure with its source) and a
:class:`Parallelism` as Megatron-LM users write it make a :class:`TrainingStep`. It checks the
configuration (sizes that do not divide, TP wider than an NVLink domain, memory over HBM: each
error names the numbers), then either

* :meth:`TrainingStep.run` builds one step as one :class:`~fabricsim.Scenario` and simulates it
  at flow level (contention, ECMP, faults and other tenants act on every transfer), or
* :meth:`TrainingStep.estimate` gives the same step without simulating it: every operation at
  its time on an otherwise idle fabric (:func:`fabricsim.estimate` timing each collective),
  walked in the step's order, in milliseconds, for sweeps. It leaves out only contention, so
  it is the simulated step where no two transfers share a link at once and within 0.5% of it
  on the tested grid of TP, PP, DP, CP and EP layouts (tests/python/test_training.py). The
  closed forms see nominal per-GPU rates, not faults: on a fabric with faults (``fabric.fail``)
  each communication of the step is simulated alone instead (``StepEstimate.comm_timing``).

**Arguments** are checked where they are given, each refusal naming the field, the value and
what it takes: counts are integers (not floats, not bools) of at least 1 (0 for the optional
ones: experts, latent-attention ranks, first dense layers), flags are True or False, names are
one of the listed strings, quantities are real numbers in their range (sizes also as unit
strings), a placement lists distinct GPU ids of the fabric. Fields that only mean something
with experts (or latent attention) must stay at their defaults without them.

**FLOPs** (as reference/compute.md counts them): a layer's forward is 2 x tokens x (its matmul
weights: attention projections, MLP or the routed and shared experts a token visits) plus
causal attention, 2 x seq^2 x heads x (d_qk + d_v) / 2 per sequence; the vocabulary projection
adds 2 x tokens x vocab x hidden. Backward is twice the forward; full recomputation adds one
forward. Model FLOPs (for MFU) are 3 x forward, without recomputation.

**Compute time** is FLOPs / (peak x efficiency). Peak is the GPU's dense BF16 (or FP8) FLOP/s
from the catalog. The efficiency is :data:`DEFAULT_COMPUTE_EFFICIENCY` = 0.50, calibrated on
reference/compute.md's H100 fwd+bwd Llama-3 layers (8B TP1: 0.527 of peak, 405B TP8: 0.495),
derated in proportion where tensor parallelism leaves the FFN shard narrower than
:data:`DEFAULT_FULL_WIDTH` = 4,608 (70B at TP8, 3,584 wide, measured 0.388; modelled 0.389).
These are unfused PyTorch layers; production stacks with fused kernels may pass a higher
``efficiency``.

**Granularity** (so that a 16,384-GPU step stays a few hundred thousand activities): per
pipeline replica (one (dp, cp) index), per stage, per micro-batch and per model chunk
(interleaved schedules have ``virtual_stages`` chunks per stage), one compute delay for the
chunk's layers, followed by one TP collective carrying all of the chunk's TP traffic
(all-reduce, or with sequence parallelism reduce-scatter then all-gather) on the TP group's
GPUs: exposed, or beside the compute with ``tp_comm_overlap``. A MoE chunk adds one all-to-all
per TP rank on its EP group carrying the dispatch and combine of all its MoE layers; context
parallelism adds a ring exchange (send/recv over the CP group) of the chunk's K and V beside
the compute. Per-collective latencies of the layers grouped in a chunk are paid once.
Pipeline transfers are point-to-point flows, one per TP rank carrying its 1/tp slice of
micro_batch x seq x hidden x 2 bytes (Megatron's scatter/gather of the activation). The data
parallel gradient reduction (fp32 by default, Megatron's main grads) runs per stage, chunk and
TP rank over the (dp x cp) ranks, in buckets of ``bucket_size_bytes``; with
``overlap_grad_reduce`` the chunk's last backward is cut into as many pieces as bucket groups
(at most 8) and each group starts as its piece ends, as the layers' gradients become final,
the last group as the whole backward ends (its TP, CP and EP traffic too: the chunk's first
layer's gradients are final only then); without it, every bucket after the stage's last
backward.
Then each GPU's optimizer step (a delay: Adam's memory traffic over the HBM bandwidth) and,
for a sharded optimizer without ``overlap_param_gather``, the parameter all-gather.

**Memory** per GPU, per stage, at its activation peak (``TrainingStep.memory``; checked against
the GPU's HBM): model state in Megatron's mixed-precision Adam bytes per parameter of the stage's
TP/PP shard (bf16 weights :data:`WEIGHT_BYTES`, gradients ``grad_reduce_bytes``, fp32 main
weight and Adam moments :data:`OPTIMIZER_STATE_BYTES`, plus :data:`MAIN_GRAD_COPY_BYTES` with
16-bit gradients: 18 bytes, or 6 + 12/d with the distributed optimizer, d = dp x cp), divided by
``dp_sharding``: "zero1" shards the optimizer state, "optim_grads" also the gradients (plus the
one chunk whose gradients are whole until their reduce-scatter), "fsdp" also the weights (plus
the one chunk gathered). Activations: each layer's kept tensors (Korthikanti et al. 2022,
without dropout; fused attention unless ``flash_attention=False``), per micro-batch, summed over
the forwards the stage's schedule holds before their backwards (1F1B: pp - s micro-batches;
interleaved: Megatron's warm-up), with full recomputation each layer's input only, and the fp32
logits of one micro-batch on the last stage. Not counted: CUDA/NCCL workspaces, allocator
fragmentation, communication buffers.

Each stage runs its operations in Megatron's order (1F1B: warm-up forwards, one forward one
backward, cool-down backwards; interleaved: Megatron's chunked order), one at a time.

**Breakdown** (per step, seconds; they add up to the step time): ``compute`` the busiest
stage's compute, ``tp``/``cp``/``ep``/``pp``/``dp`` the communication of each dimension on
the critical path (exposed communication), ``optimizer``, and ``bubble`` the rest (pipeline
fill and drain, waits for other stages). The critical path is found from the results: from
the last activity back, each step to the dependency that finished last.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import time
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence, cast

import numpy as np
import pyarrow as pa

from ...fabrics import catalog as _catalog
from ..._checks import COUNT, I64, U32, choice, did_you_mean, flag, integer, integers, parsed, real_in, shown
from ...exceptions import InvalidArgumentError, ZeroCapacityPathError
from ...units import size_bytes

__all__ = [
    "Model",
    "Parallelism",
    "ComputeModel",
    "TrainingStep",
    "StepResult",
    "StepEstimate",
    "TrainingConfigError",
    "model",
    "models",
    "train_step",
    "estimate_step",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_FULL_WIDTH",
    "VALIDATION",
    "validation_step",
    "validate_training",
    "schedule_order",
]

#: Achievable fraction of dense peak for transformer layers: reference/compute.md's H100
#: forward+backward Llama-3 layers, 8B TP1 seq 8192 (0.527) and 405B TP8 (0.495).
DEFAULT_COMPUTE_EFFICIENCY = 0.50
#: Per-GPU FFN width (ffn / tp) below which efficiency falls in proportion (reference/compute.md:
#: Llama 3 70B at TP8, 3,584 wide, reaches 0.388 of peak where wider shards reach ~0.5).
DEFAULT_FULL_WIDTH = 4608
#: Memory a built step takes per scheduled operation (one chunk's forward or backward of one
#: micro-batch on one replica and stage, with its collectives and pipeline flows): [measured]
#: 2.6 kB on an 8-way TP, 2-stage, 2-replica step of 65,536 operations (360,516 activities,
#: 172 MB); the build's lower bound, refused up front where it cannot fit.
STEP_BYTES_PER_OP = 2.5e3
#: Bytes Adam moves per parameter it updates (read fp32 grad, master, m, v; write master, m,
#: v; write the bf16 weight): 4 x 4 + 3 x 4 + 2.
ADAM_BYTES_PER_PARAM = 30.0
#: Fraction of HBM bandwidth an elementwise optimizer kernel reaches ([assumed], as STREAM-like
#: kernels do on H100).
HBM_EFFICIENCY = 0.8

# Memory accounting (TrainingStep.memory): bytes per parameter or per stored value. The model-state
# bytes are Megatron's mixed-precision Adam (https://docs.nvidia.com/megatron-core/developer-guide/
# latest/api-guide/dist_optimizer.html, "bytes per parameter": bf16 parameters with fp32 gradients
# 18 = 2 + 4 + 12, distributed 6 + 12/d; 16-bit parameters and gradients 20 = 2 + 2 + 4 + 12,
# distributed 4 + 16/d; "We always use fp32 main parameters for optimizer steps").
#: bf16 model weights: 2 bytes per parameter (the page above: bf16 parameters).
WEIGHT_BYTES = 2.0
#: Adam's optimizer state per parameter: fp32 main (master) weight, fp32 first and second
#: moments, 4 + 4 + 4 (the page above: 18 - 2 - 4 for bf16 parameters and fp32 gradients).
OPTIMIZER_STATE_BYTES = 12.0
#: With 16-bit gradients (``grad_reduce_bytes=2``) the optimizer also keeps fp32 main gradients
#: to step on, 4 bytes per parameter (the page above: 20 - 2 - 2 - 12, sharded as 16/d).
MAIN_GRAD_COPY_BYTES = 4.0
#: Bytes per stored activation value: bf16 (Korthikanti et al. 2022, "Reducing Activation
#: Recomputation in Large Transformer Models", https://arxiv.org/abs/2205.05198, count 16-bit
#: activations: 2 bytes per value of each tensor a layer keeps for its backward).
ACTIVATION_BYTES = 2.0
#: Bytes per logit kept for the loss's backward ([assumed] the vocabulary-parallel cross-entropy
#: works on fp32 logits, as Megatron's does; one micro-batch's logits at a time on the last stage).
LOGIT_BYTES = 4.0


class TrainingConfigError(InvalidArgumentError):
    """An impossible model/parallelism/fabric combination; the message names the numbers.

    Example::

        try:
            fs.TrainingStep("llama3-8b", fs.Parallelism(tp=3), fs.hgx_h100())
        except fs.training.TrainingConfigError as e:
            print(e)   # llama3-8b: heads 32 not divisible by tp 3
    """


def _bad(message: str) -> TrainingConfigError:
    return TrainingConfigError(message)


# ------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. Sizes are counts (not bytes).

    ``ffn`` is the dense MLP width (SwiGLU: ``gated_mlp=True``, three matrices; else two).
    Mixture of experts: ``n_experts`` routed experts of width ``expert_ffn``, of which
    ``experts_per_token`` are visited, plus ``n_shared_experts`` always visited; layers
    ``first_dense_layers`` onward are MoE every ``moe_layer_frequency``-th layer. Multi-head
    latent attention (DeepSeek) when ``kv_lora_rank`` is set.

    Sizes are integers >= 1 (``layers`` below 2**16, ``head_dim`` None for hidden / heads),
    the expert and latent-attention fields integers >= 0 that must keep their defaults without
    experts (``n_experts`` 0) or latent attention (``kv_lora_rank`` 0), ``gated_mlp`` and
    ``tied_embeddings`` True or False; anything else is refused naming the field and the value.

    Example::

        tiny = fs.Model(name="tiny", layers=2, hidden=512, ffn=2048, heads=8, kv_heads=8,
                        vocab=1000, seq_len=256)
        tiny.head_dim, tiny.n_params   # (64, 9412608)
        fs.training.model("llama3-8b").n_params   # 8029995008, a preset
    """

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    seq_len: int
    head_dim: int | None = None
    gated_mlp: bool = True
    tied_embeddings: bool = False
    n_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    expert_ffn: int = 0
    first_dense_layers: int = 0
    moe_layer_frequency: int = 1
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(f"Model: name must be a non-empty str, got {type(self.name).__name__} {shown(self.name)}")
        at = f"Model {self.name!r}:"
        if not isinstance(self.sources, Mapping):
            raise InvalidArgumentError(f"{at} sources must be a mapping of field to source, got {type(self.sources).__name__}")
        for f in fields(self):
            domain = _MODEL_FIELDS.get(f.name)
            v = getattr(self, f.name)
            if domain is bool:
                flag(f"{at} {f.name}", v)
            elif domain is not None and not (v is None and f.default is None):
                object.__setattr__(self, f.name, integer(f"{at} {f.name}", v, domain))
        # head_dim is derived where it is not given, and derived again by replace()
        object.__setattr__(self, "_derived_head_dim", self.head_dim is None)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise InvalidArgumentError(f"{at} hidden {self.hidden} is not divisible by heads {self.heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.heads % self.kv_heads:
            raise InvalidArgumentError(f"{at} heads {self.heads} not divisible by kv_heads {self.kv_heads}")
        # fields that only mean something with experts, or with latent attention, must be
        # left at 0 without them (they would be ignored)
        unused = [(u, "n_experts") for u in _MOE_FIELDS if not self.n_experts and getattr(self, u) != _FIELD_DEFAULTS[u]]
        unused += [(u, "kv_lora_rank") for u in _MLA_FIELDS if not self.kv_lora_rank and getattr(self, u) != 0]
        if unused:
            name, needs = unused[0]
            raise InvalidArgumentError(f"{at} {name}={getattr(self, name)} means nothing without {needs} > 0 (got {needs}=0)")
        if self.n_experts:
            if not 1 <= self.experts_per_token <= self.n_experts or self.expert_ffn < 1:
                raise InvalidArgumentError(
                    f"{at} MoE needs 1 <= experts_per_token ({self.experts_per_token}) <= n_experts "
                    f"({self.n_experts}) and expert_ffn >= 1 (got {self.expert_ffn})")
            if self.first_dense_layers >= self.layers:
                raise InvalidArgumentError(
                    f"{at} first_dense_layers {self.first_dense_layers} leaves none of its {self.layers} layers MoE")
        if self.kv_lora_rank and self.v_head_dim < 1:
            raise InvalidArgumentError(f"{at} latent attention (kv_lora_rank {self.kv_lora_rank}) needs v_head_dim >= 1, "
                                       f"got {self.v_head_dim}")

    # ---- structure
    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts (``n_experts > 0``)."""
        return self.n_experts > 0

    def is_moe_layer(self, i: int) -> bool:
        """Layer ``i`` (0-based) has a MoE FFN.

        Example::

            ds = fs.training.model("deepseek-v3")   # its first 3 layers are dense
            ds.is_moe_layer(0), ds.is_moe_layer(3)   # (False, True)
        """
        i = self._layer(i)
        return self.is_moe and i >= self.first_dense_layers and (i - self.first_dense_layers) % self.moe_layer_frequency == 0

    def _layer(self, i: Any) -> int:
        """``i`` if it is the index of one of the layers, else an error."""
        if type(i) is int and 0 <= i < self.layers:  # the model's own loops: checked at once
            return i
        return integer(f"Model {self.name!r}: layer index", i, (0, self.layers))

    def _seq(self, seq_len: Any) -> float:
        """The model's ``seq_len`` for None, else ``seq_len`` if it is a number of tokens >= 0,
        or an array of them (a serving workload's requests at once: the FLOPs come out per
        element)."""
        if seq_len is None:
            return self.seq_len
        if isinstance(seq_len, np.ndarray) and seq_len.dtype.kind in "iuf":
            ok = np.isfinite(seq_len) & (seq_len >= 0)
            if not ok.all():
                raise InvalidArgumentError(f"seq_len must hold numbers of tokens >= 0, got {seq_len[~ok][0].item()!r} among them")
            return cast(float, seq_len)
        if type(seq_len) is int and seq_len >= 0:
            return seq_len
        return real_in("seq_len", seq_len, 0.0, math.inf, open_high=True)

    @property
    def n_moe_layers(self) -> int:
        """How many layers have a MoE FFN."""
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def _head_dim(self) -> int:
        """``head_dim``, which ``__post_init__`` sets when it is not given."""
        assert self.head_dim is not None
        return self.head_dim

    @property
    def _d_qk(self) -> int:
        return self._head_dim + self.qk_rope_head_dim if self.kv_lora_rank else self._head_dim

    @property
    def _d_v(self) -> int:
        return self.v_head_dim if self.kv_lora_rank else self._head_dim

    # ---- parameters
    def attention_params(self) -> int:
        """Weights of one layer's attention projections (Q, K, V and output; MLA's down and up projections where ``kv_lora_rank`` is set).

        Example::

            m = fs.training.model("llama3-8b")   # 32 heads of 128, 8 KV heads, hidden 4096
            m.attention_params()   # 41943040: Q and output 4096 x 4096 each, K and V 4096 x 1024 each
        """
        h = self.hidden
        if self.kv_lora_rank:  # MLA: down/up projections of Q and of the joint KV latent
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * self._d_qk) if self.q_lora_rank else h * self.heads * self._d_qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.heads * (self._head_dim + self._d_v)
            return q + kv + self.heads * self._d_v * h
        hd = self._head_dim
        return h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    def dense_mlp_params(self) -> int:
        """Weights of one dense MLP of width ``ffn`` (gated: three matrices, else two).

        Example::

            fs.training.model("llama3-8b").dense_mlp_params()   # 176160768 = 3 x 4096 x 14336
        """
        return self._mlp(self.ffn)

    def expert_params(self) -> int:
        """One routed expert.

        Example::

            fs.training.model("deepseek-v3").expert_params()   # 44040192 = 3 x 7168 x 2048
        """
        return self._mlp(self.expert_ffn)

    def layer_params(self, i: int) -> int:
        """All parameters of layer ``i`` (every expert).

        Example::

            m = fs.training.model("mixtral-8x7b")
            m.layer_params(0)   # 1451261952: attention, 8 experts and the router
        """
        if self.is_moe_layer(i):
            return (self.attention_params() + (self.n_experts + self.n_shared_experts) * self.expert_params()
                    + self.hidden * self.n_experts)
        return self.attention_params() + self.dense_mlp_params()

    def layer_active_params(self, i: int) -> int:
        """Parameters one token's forward multiplies by in layer ``i``.

        Example::

            m = fs.training.model("mixtral-8x7b")   # 2 of 8 experts per token
            m.layer_active_params(0) < m.layer_params(0)   # True
        """
        if self.is_moe_layer(i):
            return (self.attention_params() + (self.experts_per_token + self.n_shared_experts) * self.expert_params()
                    + self.hidden * self.n_experts)
        return self.attention_params() + self.dense_mlp_params()

    def embedding_params(self) -> int:
        """Input embedding and output projection weights (once if ``tied_embeddings``).

        Example::

            fs.training.model("llama3-8b").embedding_params()   # 1050673152 = 2 x 128256 x 4096
        """
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def n_params(self) -> int:
        """Total weights: every layer (all experts) plus the embeddings."""
        return sum(self.layer_params(i) for i in range(self.layers)) + self.embedding_params()

    @property
    def n_active_params(self) -> int:
        """Weights a token uses: every layer with only its routed and shared experts, plus the embeddings."""
        return sum(self.layer_active_params(i) for i in range(self.layers)) + self.embedding_params()

    # ---- FLOPs (forward, per sequence of seq_len tokens unless said)
    def attention_core_flops(self, seq_len: float | None = None) -> float:
        """Causal attention scores and values of one layer, forward, one sequence.

        Example::

            m = fs.training.model("llama3-8b")
            m.attention_core_flops()       # 5.5e11 at its seq_len, 8192
            m.attention_core_flops(4096)   # 1.4e11: a quarter, quadratic in the length
        """
        s = self._seq(seq_len)
        return 2.0 * s * s * self.heads * (self._d_qk + self._d_v) / 2.0

    def layer_forward_flops(self, i: int, seq_len: float | None = None) -> float:
        """Forward FLOPs of layer ``i`` for one sequence: 2 x tokens x active weights, plus causal attention.

        Example::

            fs.training.model("llama3-8b").layer_forward_flops(0)   # 4.1e12 for 8192 tokens
        """
        s = self._seq(seq_len)
        return 2.0 * s * self.layer_active_params(i) + self.attention_core_flops(s)

    def logits_forward_flops(self, seq_len: float | None = None) -> float:
        """Forward FLOPs of the vocabulary projection for one sequence: 2 x tokens x vocab x hidden.

        Example::

            fs.training.model("llama3-8b").logits_forward_flops(seq_len=1024)   # 1.1e12
        """
        s = self._seq(seq_len)
        return 2.0 * s * self.vocab * self.hidden

    def forward_flops(self, seq_len: float | None = None) -> float:
        """Forward FLOPs of the whole model for one sequence (every layer and the logits).

        Example::

            fs.training.model("llama3-8b").forward_flops()   # 1.4e14 for 8192 tokens
        """
        return sum(self.layer_forward_flops(i, seq_len) for i in range(self.layers)) + self.logits_forward_flops(seq_len)

    def model_flops_per_sequence(self) -> float:
        """Forward + backward (3 x forward), the FLOPs MFU counts.

        Example::

            m = fs.training.model("llama3-8b")
            m.model_flops_per_sequence() == 3 * m.forward_flops()   # True, 4.2e14
        """
        return 3.0 * self.forward_flops()

    def replace(self, **changes: Any) -> "Model":
        """A copy with the given fields changed, e.g. ``model("llama3-8b").replace(seq_len=4096)``;
        a ``head_dim`` that was derived (hidden / heads) is derived again.

        Example::

            short = fs.training.model("llama3-8b").replace(name="llama3-8b-4k", seq_len=4096)
            short.seq_len, short.n_params   # (4096, 8029995008): same weights, shorter sequences
        """
        if getattr(self, "_derived_head_dim", False):
            changes.setdefault("head_dim", None)
        return replace(self, **changes)


#: Each Model field's domain: integers in [lo, hi) (None allowed where None is the default),
#: or bool.
_MODEL_FIELDS: dict[str, Any] = {
    # the model is computed layer by layer: [assumption] a bound far above any published model
    # (Llama 3 405B has 126 layers) keeps a mistyped count from running for hours
    "layers": (1, 2**16),
    **{f: COUNT for f in ("hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len", "head_dim", "moe_layer_frequency")},
    **{f: U32 for f in ("n_experts", "experts_per_token", "n_shared_experts", "expert_ffn", "first_dense_layers",
                        "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim")},
    "gated_mlp": bool,
    "tied_embeddings": bool,
}
_MOE_FIELDS = ("experts_per_token", "n_shared_experts", "expert_ffn", "first_dense_layers", "moe_layer_frequency")
_MLA_FIELDS = ("q_lora_rank", "qk_rope_head_dim", "v_head_dim")
_FIELD_DEFAULTS = {f.name: f.default for f in fields(Model)}


def _load_models() -> dict[str, Model]:
    text = resources.files(__package__).joinpath("data/models.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    out = {}
    names = {f.name for f in fields(Model)}
    for name, entry in doc["models"].items():
        entry = dict(entry)
        sources = entry.pop("sources")
        missing = [k for k in entry if k not in sources]
        if missing:  # every figure has a source
            raise AssertionError(f"models.json: {name} has no source for {missing}")
        unknown = [k for k in entry if k not in names]
        if unknown:
            raise AssertionError(f"models.json: {name} has unknown fields {unknown}")
        out[name] = Model(name=name, sources=sources, **entry)
    return out


_MODELS = _load_models()


def models() -> list[str]:
    """Names of the preset models.

    Example::

        fs.training.models()   # ['gpt3-175b', 'llama3-8b', 'llama3-70b', 'llama3-405b', ...]
    """
    return list(_MODELS)


def model(name: str | Model) -> Model:
    """A preset :class:`Model` by name ("gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b",
    "mixtral-8x7b", "deepseek-v3"), or a Model as is.

    Example::

        m = fs.training.model("Llama3-70B")   # case and spaces around do not matter
        m.layers, m.hidden, m.n_params        # (80, 8192, 70552387584)
        fs.training.model(m) is m             # True
    """
    if isinstance(name, Model):
        return name
    if not isinstance(name, str):
        raise InvalidArgumentError(
            f"model must be a preset's name ({', '.join(_MODELS)}) or a fabricsim.training.Model, got "
            f"{type(name).__name__} {shown(name)}")
    key = name.strip().lower()
    if key not in _MODELS:
        raise InvalidArgumentError(f"unknown model {name!r}; presets are {', '.join(_MODELS)}{did_you_mean(key, _MODELS)}")
    return _MODELS[key]


# ------------------------------------------------------------------------------------------
# Parallelism
# ------------------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class Parallelism:
    """Parallelism as Megatron-LM's arguments spell it.

    ``tp``, ``pp``, ``dp``, ``cp`` (context), ``ep`` (expert; Megatron splits the dp x cp ranks
    of MoE layers into ep x expert-dp, ep innermost; expert TP = ``tp``). ``micro_batch_size``
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
    re-run before its backward); ``selective_recompute`` is Megatron's selective recomputation
    (the attention scores are not kept), which changes memory only with
    ``flash_attention=False`` (a fused attention kernel never keeps them).
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
        fs.TrainingStep("llama3-8b", par, fabric).estimate().step_s   # about 0.47
    """

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

    def gpu_map(self) -> np.ndarray:
        """GPU of every (pp, dp, cp, tp) coordinate, shape (pp, dp, cp, tp).

        Example::

            gpus = fs.Parallelism(tp=4, dp=2, pp=2).gpu_map()
            gpus.shape            # (2, 2, 1, 4)
            gpus[:, :, 0, 0]      # array([[0, 4], [8, 12]]): TP rank 0 of each stage and replica
        """
        pp, dp, cp, tp = np.meshgrid(np.arange(self.pp), np.arange(self.dp), np.arange(self.cp), np.arange(self.tp), indexing="ij")
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp, "ep": 1}
        coords: dict[str, np.ndarray | int] = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": 0}
        r = np.zeros_like(tp)
        stride = 1
        for d in self.order.split("-"):
            r = r + coords[d] * stride
            stride *= sizes[d]
        if self.placement is not None:
            r = np.asarray(self.placement, dtype=np.int64)[r]
        return r


@dataclass(frozen=True)
class ComputeModel:
    """How FLOPs become seconds: ``efficiency`` of the GPU's dense peak at ``precision``
    ("bf16" or "fp8"), derated by ``ffn_shard / full_width`` where TP leaves the FFN shard
    narrower than ``full_width`` (see the module docstring for the calibration).

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1)
        fused = fs.training.ComputeModel(efficiency=0.6)   # faster kernels than the default 0.5
        fs.TrainingStep("llama3-8b", par, fabric, compute=fused).estimate().breakdown
        # compute about 225 ms of the step, where the default gives 270
    """

    efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    full_width: float = DEFAULT_FULL_WIDTH
    precision: str = "bf16"

    def __post_init__(self) -> None:
        object.__setattr__(self, "efficiency", real_in("ComputeModel: efficiency", self.efficiency, 0.0, 1.0, open_low=True))
        object.__setattr__(self, "full_width", real_in("ComputeModel: full_width", self.full_width, 0.0, math.inf,
                                                       open_high=True))
        choice("ComputeModel: precision", self.precision, ("bf16", "fp8"))

    def layer_efficiency(self, ffn_shard_width: float) -> float:
        """The fraction of peak a layer reaches whose FFN shard is ``ffn_shard_width`` wide: ``efficiency``, derated in proportion below ``full_width``.

        Example::

            cm = fs.training.ComputeModel()
            cm.layer_efficiency(28672 / 8)   # 0.389: Llama 3 70B's FFN at TP8, 3,584 wide
            cm.layer_efficiency(8192)        # 0.5: wide enough
        """
        ffn_shard_width = real_in("ffn_shard_width", ffn_shard_width, 0.0, math.inf, open_high=True)
        if self.full_width <= 0:
            return self.efficiency
        return self.efficiency * min(1.0, ffn_shard_width / self.full_width)


# ------------------------------------------------------------------------------------------
# The plan: checks, per-stage work, memory
# ------------------------------------------------------------------------------------------


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


@dataclass
class _Chunk:
    """One model chunk of one stage (virtual stage ``c * pp + s``)."""

    stage: int
    chunk: int
    layers: list[int]
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    tp_bytes: float = 0.0  # nccl-tests size of the chunk's TP collective, one direction, per micro-batch
    ep_bytes: float = 0.0  # all-to-all size (each rank sends) per direction per micro-batch
    cp_bytes: float = 0.0  # per send/recv step total over the ring, per direction
    params: float = 0.0  # parameters on one GPU (dense part)
    expert_params: float = 0.0  # on one GPU
    flops_fwd: float = 0.0  # per GPU per micro-batch


class TrainingStep:
    """One training step of ``model`` under ``parallelism`` on ``fabric``; checked on creation.

    ``compute``: a :class:`ComputeModel` (default 0.50 of BF16 peak); ``gpu``: catalog GPU
    name when the fabric does not say; ``cost_model``: for the collectives;
    ``check_memory``: refuse a configuration whose busiest GPU needs more than its HBM.
    ``tp_comm``: "flow" (TP collectives simulated on the fabric) or "analytical" (TP
    collectives as delays of their :func:`fabricsim.estimate` time: exact where nothing else
    shares the TP group's NVLink, and about 20x cheaper to build).

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
        gpu: str | None = None,
        cost_model: Any = None,
        check_memory: bool = True,
        tp_comm: str = "flow",
    ) -> None:
        from ...collectives import checked_cost_model
        from ...fabrics import Topology

        self.model: Model = globals()["model"](model)  # the function model(), which the argument hides
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
        key = "bf16_dense_flop_per_s" if self.compute.precision == "bf16" else "fp8_dense_flop_per_s"
        peak = self.gpu.get(key)
        if peak is None:
            raise InvalidArgumentError(f"catalog GPU {self.gpu.name!r} has no {key}: add it (fs.catalog.add_part) or pass gpu=")
        self.peak_flop_per_s: float = peak
        self._check()
        self.gpus = parallelism.gpu_map()  # (pp, dp, cp, tp)
        self._check_placement()
        if self._faulted:
            self._check_reachable()
        self.chunks = self._chunks()
        self.memory = self._memory()
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
        if m.ffn % p.tp or (m.is_moe and m.expert_ffn % p.tp):
            raise _bad(f"{m.name}: FFN width {m.ffn if m.ffn % p.tp else m.expert_ffn} not divisible by tp {p.tp}")
        if m.seq_len % p.cp or (m.seq_len // p.cp) % max(1, p.tp if p.sequence_parallel else 1):
            raise _bad(f"{m.name}: seq_len {m.seq_len} not divisible by cp {p.cp}"
                       + (f" x tp {p.tp} (sequence parallelism)" if p.sequence_parallel else ""))
        if p.ep > 1:
            if not m.is_moe:
                raise _bad(f"ep {p.ep} > 1 but {m.name} has no experts")
            if m.n_experts % p.ep:
                raise _bad(f"{m.name}: n_experts {m.n_experts} not divisible by ep {p.ep}")
            if (p.dp * p.cp) % p.ep:
                raise _bad(f"ep {p.ep} must divide dp {p.dp} x cp {p.cp} = {p.dp * p.cp} (Megatron carves EP out of the data-parallel ranks)")
        gb = p.global_batch()
        if gb % (p.dp * p.micro_batch_size):
            raise _bad(f"global_batch_size {gb} is not divisible by dp {p.dp} x micro_batch_size {p.micro_batch_size} = {p.dp * p.micro_batch_size}")
        mb = p.n_micro_batches
        if p.schedule == "interleaved" and mb % p.pp:
            raise _bad(f"the interleaved schedule needs the number of micro-batches ({gb} / ({p.dp} x {p.micro_batch_size}) = {mb}) divisible by pp {p.pp}")
        if p.stage_layers is not None:
            if len(p.stage_layers) != p.pp or sum(p.stage_layers) != m.layers or min(p.stage_layers) < p.virtual_stages:
                raise _bad(f"stage_layers {list(p.stage_layers)} must give pp={p.pp} stages, each >= virtual_stages {p.virtual_stages}, summing to {m.name}'s {m.layers} layers")
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

    # ---- work per chunk
    def _split_layers(self) -> list[list[list[int]]]:
        """Layer indices of chunk c of stage s: ``out[s][c]``; virtual stages in Megatron order."""
        m, p = self.model, self.par
        v = p.virtual_stages
        per_stage = list(p.stage_layers) if p.stage_layers is not None else [m.layers // p.pp] * p.pp
        sizes = [[per_stage[s] // v + (1 if c < per_stage[s] % v else 0) for c in range(v)] for s in range(p.pp)]
        out: list[list[list[int]]] = [[[] for _ in range(v)] for _ in range(p.pp)]
        i = 0
        for c in range(v):
            for s in range(p.pp):
                out[s][c] = list(range(i, i + sizes[s][c]))
                i += sizes[s][c]
        return out

    def _chunks(self) -> list[list[_Chunk]]:
        m, p, cm = self.model, self.par, self.compute
        tokens = p.micro_batch_size * m.seq_len / p.cp  # per GPU (one CP rank)
        seq = m.seq_len
        rec = 1.0 if p.recompute else 0.0
        act_bytes = 2.0
        out = []
        split = self._split_layers()
        for s in range(p.pp):
            row = []
            for c in range(p.virtual_stages):
                ch = _Chunk(s, c, split[s][c])
                flops = 0.0
                secs = 0.0
                for i in ch.layers:
                    # per GPU: matmuls of the tokens it holds over its 1/tp shard; attention over
                    # the full causal sequence, 1/cp of it (Megatron balances CP's causal load)
                    if m.is_moe_layer(i):
                        dense = (m.attention_params() + m.hidden * m.n_experts) / p.tp
                        experts = (m.experts_per_token + m.n_shared_experts) * m.expert_params() / p.tp
                        lf = 2 * tokens * (dense + experts)
                        width = m.expert_ffn / p.tp
                        ch.ep_bytes += tokens / (p.tp if p.sequence_parallel else 1) * m.experts_per_token * m.hidden * act_bytes
                        ch.expert_params += (m.n_experts / p.ep + m.n_shared_experts * 0) * m.expert_params() / p.tp
                        ch.params += (m.attention_params() + m.hidden * m.n_experts + m.n_shared_experts * m.expert_params()) / p.tp
                        # routed experts: derating on the expert width is not calibrated; use the base
                        eff = cm.efficiency
                    else:
                        lf = 2 * tokens * m.layer_active_params(i) / p.tp
                        width = m.ffn / p.tp
                        ch.params += m.layer_params(i) / p.tp
                        eff = cm.layer_efficiency(width)
                    lf += p.micro_batch_size * m.attention_core_flops(seq) / p.tp / p.cp
                    flops += lf
                    secs += lf / (self.peak_flop_per_s * eff)
                    # Megatron: 2 TP collectives per layer per direction of micro_batch x seq x hidden
                    ch.tp_bytes += 2 * tokens * m.hidden * act_bytes
                    if p.cp > 1:  # K and V of the local tokens, per ring step
                        kv = 2 * tokens * (m.kv_lora_rank + m.qk_rope_head_dim if m.kv_lora_rank else m.kv_heads * m._head_dim) / p.tp * act_bytes
                        ch.cp_bytes += kv * (p.cp - 1)
                vs = c * p.pp + s
                if vs == p.pp * p.virtual_stages - 1:  # logits + loss
                    lf = 2 * tokens * m.vocab * m.hidden / p.tp
                    flops += lf
                    secs += lf / (self.peak_flop_per_s * cm.efficiency)
                    ch.params += m.vocab * m.hidden / p.tp
                if vs == 0:
                    ch.params += m.vocab * m.hidden / p.tp if not (m.tied_embeddings and p.pp * p.virtual_stages == 1) else 0.0
                ch.flops_fwd = flops
                ch.fwd_s = secs
                ch.bwd_s = secs * (2.0 + rec)
                if p.tp == 1:
                    ch.tp_bytes = 0.0
                row.append(ch)
            out.append(row)
        return out

    # ---- memory
    def _layer_activation_bytes(self, i: int) -> float:
        """Bytes layer ``i`` keeps for its backward, per micro-batch, on one GPU, without recomputation.

        Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198, section 4) count, per layer of a
        GPT block, s*b*h*(34 + 5*a*s/h) bytes: 16-bit inputs of the two norms, of the QKV and
        output projections and of both MLP matrices, Q, K, V, the MLP's hidden activations, two
        one-byte dropout masks (the 34) and the attention scores, softmax and its dropout (the
        5*a*s/h). Per token this counts the same tensors for any decoder: the norms' inputs and
        the two linear inputs they feed (4 h values; split by tp only with sequence parallelism,
        else kept whole on every TP rank, Korthikanti's 10 + 24/t), Q, K, V (grouped KV heads
        are narrower) and the attention output (the output projection's input), and the MLP's
        first-matrix outputs (two with a gated MLP) and the second matrix's input; for a MoE
        layer the MLP terms of the experts each token visits. No dropout (none of the presets
        trains with it, so no masks). Without ``flash_attention`` and without
        ``selective_recompute`` the a x s softmax probabilities per token are kept too (fused
        attention keeps only Q, K, V, the output and a per-row statistic).
        """
        m, p = self.model, self.par
        tokens = p.micro_batch_size * m.seq_len / p.cp
        rep = p.tp if p.sequence_parallel else 1
        if m.kv_lora_rank:  # MLA: per-head keys and values after the up-projection, plus the latents
            q = m.heads * m._d_qk
            kv = m.heads * (m._d_qk + m._d_v)
            latent = m.q_lora_rank + m.kv_lora_rank
        else:
            q = m.heads * m._head_dim
            kv = 2 * m.kv_heads * m._head_dim
            latent = 0
        o = m.heads * m._d_v
        width = (m.experts_per_token + m.n_shared_experts) * m.expert_ffn if m.is_moe_layer(i) else m.ffn
        mlp = (3 if m.gated_mlp else 2) * width
        per_token = (4 * m.hidden + latent) / rep + (q + kv + o + mlp) / p.tp
        if not p.flash_attention and not p.selective_recompute:
            per_token += m.heads * m.seq_len / p.tp  # softmax probabilities: a x s per token
        return ACTIVATION_BYTES * tokens * per_token

    def _chunk_activations(self, s: int) -> tuple[list[float], list[float]]:
        """Per chunk of stage ``s``: the bytes one micro-batch's forward leaves held until its
        backward, and the extra bytes its backward holds (full recomputation: the layer being
        re-run). The last virtual stage adds the final norm's and the output projection's inputs
        and the fp32 logits."""
        m, p = self.model, self.par
        tokens = p.micro_batch_size * m.seq_len / p.cp
        rep = p.tp if p.sequence_parallel else 1
        last_vs = p.pp * p.virtual_stages - 1
        kept, extra = [], []
        for ch in self.chunks[s]:
            full = [self._layer_activation_bytes(i) for i in ch.layers]
            if p.recompute:  # Megatron's full recomputation: each layer keeps its input only
                k = len(full) * ACTIVATION_BYTES * tokens * m.hidden / rep
                x = max(full, default=0.0)
            else:
                k, x = sum(full), 0.0
            if ch.chunk * p.pp + ch.stage == last_vs:
                k += ACTIVATION_BYTES * tokens * 2 * m.hidden / rep + LOGIT_BYTES * tokens * m.vocab / p.tp
            kept.append(k)
            extra.append(x)
        return kept, extra

    def _peak_activations(self, s: int) -> float:
        """Stage ``s``'s activation peak under its schedule: Megatron's order of forwards and
        backwards (:func:`schedule_order`; 1F1B keeps at most pp - s micro-batches in flight, the
        interleaved schedule 2 (pp - s - 1) + (v - 1) pp + 1 chunk forwards), adding each forward's
        kept bytes and releasing them after its backward. The schedule repeats every pp
        micro-batches after its warm-up, so a few groups past the warm-up give the peak."""
        p = self.par
        v = p.virtual_stages
        mb = p.n_micro_batches
        if p.schedule == "1f1b":
            m_sim = min(mb, p.pp + 1)
        else:
            warm = 2 * (p.pp - 1) + (v - 1) * p.pp
            m_sim = min(mb, p.pp * (-(-warm // (p.pp * v)) + 2))
        kept, extra = self._chunk_activations(s)
        held = peak = 0.0
        for kind, _, c in schedule_order(p.pp, s, m_sim, v):
            if kind == "F":
                held += kept[c]
                peak = max(peak, held)
            else:
                peak = max(peak, held + extra[c])
                held -= kept[c]
        return peak

    def _memory(self) -> pa.Table:
        """Per stage, bytes per GPU at the activation peak (see the module docstring, Memory)."""
        p = self.par
        dpcp = p.dp * p.cp
        edp = dpcp // p.ep
        sh = p.dp_sharding
        g = float(p.grad_reduce_bytes)
        opt_per_param = OPTIMIZER_STATE_BYTES + (MAIN_GRAD_COPY_BYTES if p.grad_reduce_bytes == 2 else 0.0)
        rows = []
        for s in range(p.pp):
            dense = sum(ch.params for ch in self.chunks[s])
            expert = sum(ch.expert_params for ch in self.chunks[s])
            whole = dense + expert
            shard = dense / dpcp + expert / edp
            # the one chunk whose parameters (fsdp) or gradients (optim_grads, fsdp) are whole
            # between its all-gather / first backward and its reduce-scatter
            chunk = max(ch.params + ch.expert_params for ch in self.chunks[s]) if dpcp > 1 else 0.0
            w = WEIGHT_BYTES * (shard + chunk if sh == "fsdp" else whole)
            gr = g * (shard + chunk if sh in ("optim_grads", "fsdp") else whole)
            opt = opt_per_param * (whole if sh == "none" else shard)
            act = self._peak_activations(s)
            rows.append((s, w, gr, opt, act, w + gr + opt + act))
        cols = list(zip(*rows))
        return pa.table({
            "stage": pa.array(cols[0], pa.int32()),
            "weights_bytes": pa.array(cols[1], pa.float64()),
            "grads_bytes": pa.array(cols[2], pa.float64()),
            "optimizer_bytes": pa.array(cols[3], pa.float64()),
            "activations_bytes": pa.array(cols[4], pa.float64()),
            "total_bytes": pa.array(cols[5], pa.float64()),
            "hbm_bytes": pa.array([self.gpu.get("hbm_bytes")] * len(rows), pa.float64()),
        })

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
            dense, expert = dense / (p.dp * p.cp), expert / (p.dp * p.cp // p.ep)
        bw = self.gpu.get("hbm_Bps") or 3.35e12
        return ADAM_BYTES_PER_PARAM * (dense + expert) / (bw * HBM_EFFICIENCY)

    def _groups(self) -> np.ndarray:
        """Rank lists: tp[s][r] (r = dp*cp + cp index), dp[s][t], ep[s][g][t], cp[s][d][t]."""
        return self.gpus

    def _dp_ranks(self, s: int, t: int) -> list[int]:
        return self.gpus[s, :, :, t].ravel().tolist()

    def _ep_groups(self, s: int, t: int) -> list[list[int]]:
        """EP groups of TP rank t at stage s: ep consecutive (dp x cp) replicas (cp innermost)."""
        reps = self.gpus[s, :, :, t].ravel()  # replica index r = dp * cp_size + cp
        ep = self.par.ep
        return [reps[i:i + ep].tolist() for i in range(0, reps.size, ep)]

    def _buckets(self, ch: _Chunk) -> list[float]:
        """Bytes per bucket group of one chunk's gradient reduction (per GPU), at most 8 groups."""
        p = self.par
        total = (ch.params + ch.expert_params) * p.grad_reduce_bytes
        if total <= 0:
            return []
        n = max(1, math.ceil(total / p.bucket_size_bytes))
        k = min(n, 8)
        return [total / k] * k

    # ---- communication, as the step issues it
    @property
    def _faulted(self) -> bool:
        """Whether the fabric has faults (``fabric.fail``), which the collectives' closed forms
        (per-GPU NVLink and network rates) cannot see."""
        return bool((getattr(self.fabric, "_parts", None) or {}).get("faults"))

    def _ep_sizes(self, size: float) -> np.ndarray | None:
        """The all-to-all-v matrix of an EP exchange of ``size`` bytes (nccl-tests' size) whose
        busiest rank, the group's first, receives ``ep_imbalance`` x the mean (None when even)."""
        p = self.par
        if p.ep_imbalance == 1.0:
            return None
        n = p.ep
        w = np.full(n, (n - p.ep_imbalance) / (n - 1))
        w[0] = p.ep_imbalance
        sizes = np.outer(np.ones(n), w * (size / n))
        np.fill_diagonal(sizes, 0.0)
        return sizes

    def _chains(self, kind: str, s: int, size: float, every: bool) -> list[tuple[tuple[int, ...], list[tuple[str, float, Any]]]]:
        """One communication of stage ``s`` as the step issues it at once on every group of
        ranks: per group, its chain of (op, size_bytes, sizes); ``every=False`` gives only the
        first group, replica 0's (TP rank 0's). ``kind`` is "tp", "ep", "cp", or a
        data-parallel op ("all_reduce", "reduce_scatter", "all_gather") over each TP rank's
        replicas."""
        p, G = self.par, self.gpus
        ops: list[tuple[str, float, Any]]
        n = None if every else 1
        if kind == "tp":
            ops = [("reduce_scatter", size, None), ("all_gather", size, None)] if p.sequence_parallel else [("all_reduce", size, None)]
            groups = list(G[s].reshape(-1, p.tp)[:n])  # (dp, cp) replicas, cp innermost
        elif kind == "ep":
            ops = [("all_to_all", size, self._ep_sizes(size))]
            groups = [np.asarray(g) for t in range(p.tp if every else 1) for g in self._ep_groups(s, t)][:n]
        elif kind == "cp":
            ops = [("send_recv", size, None)]
            groups = list(G[s].transpose(0, 2, 1).reshape(-1, p.cp)[:n])  # per (dp, tp), the cp ranks
        else:
            ops = [(kind, size, None)]
            groups = list(G[s].reshape(-1, p.tp).T[:n])  # per TP rank, its dp x cp replicas
        return [(tuple(int(x) for x in g), ops) for g in groups if g.size >= 2]

    def _comm_s(self, kind: str, s: int, size: float) -> float:
        """Seconds one communication of stage ``s`` (:meth:`_chains`) of ``size`` bytes takes
        on an otherwise idle fabric: on a fabric without faults, replica 0's chain timed by
        :func:`fabricsim.estimate` (every group has its shape); on a fabric with faults, every
        group's chain simulated together at flow level, so that a degraded link on any group's
        path, and the groups that share it, set the time."""
        if size <= 0:
            return 0.0
        key = (kind, s, round(size))
        hit = self._est_cache.get(key)
        if hit is None:
            chains = self._chains(kind, s, size, every=self._faulted)
            if not chains:
                hit = 0.0
            elif self._faulted:
                hit = self._simulated_s(chains)
            else:
                ranks, ops = chains[0]
                hit = sum(self._analytical_s(op, n, ranks, sizes) for op, n, sizes in ops)
            self._est_cache[key] = hit
        return hit

    def _analytical_s(self, op: str, size: float, ranks: Sequence[int], sizes: Any = None) -> float:
        from ...collectives import estimate

        return estimate(self.fabric, op, None if sizes is not None else size, list(ranks), sizes=sizes,
                        cost_model=self.cost_model).time_s

    def _simulated_s(self, chains: Sequence[tuple[tuple[int, ...], list[tuple[str, float, Any]]]] = (),
                     flows: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Makespan of ``chains`` (:meth:`_chains`) or of pipeline ``flows`` (sources,
        destinations) run alone on the fabric."""
        from ...scenario import Scenario

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
        from ...collectives import checked_cost_model, estimate

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
                               cost_model=_wire_only(checked_cost_model(self.cost_model))).time_s
            self._est_cache[key] = hit
        return hit

    def _check_reachable(self) -> None:
        """Refuses a step with a GPU that the fabric's faults cut off (every link down): its
        transfers would fail, and the step cannot complete."""
        from ...collectives import fabric_view
        from ...exceptions import ZeroCapacityPathError

        cut = fabric_view(self.fabric).cut_off
        hit = np.isin(self.gpus, cut) if cut.size else np.zeros(0, dtype=bool)
        if hit.any():
            s, d, c, t = (int(x[0]) for x in np.nonzero(hit))
            raise ZeroCapacityPathError(
                f"GPU {int(self.gpus[s, d, c, t])} (stage {s}, dp {d}, cp {c}, tp {t}) has every link down "
                "(fabric.fail): the step cannot run on it")

    def _op_s(self, ch: _Chunk, fwd: bool) -> dict[str, float]:
        """One forward or backward of chunk ``ch`` on one replica as the step issues it: the
        compute, then its TP collective (beside the compute with ``tp_comm_overlap``), the CP
        ring exchange beside both, then the EP all-to-all. Seconds each part adds (exposed),
        by part: they add up to the op's duration."""
        p = self.par
        mult = 1.0 if fwd else 1.0 + p.recompute
        comp = ch.fwd_s if fwd else ch.bwd_s
        tp = self._comm_s("tp", ch.stage, ch.tp_bytes * mult)
        cp = self._comm_s("cp", ch.stage, ch.cp_bytes * (1.0 if fwd else 2.0))
        ep = self._comm_s("ep", ch.stage, 2.0 * ch.ep_bytes * mult)
        with_tp = max(comp, tp) if p.tp_comm_overlap else comp + tp
        return {"compute": comp, "tp": with_tp - comp, "cp": max(with_tp, cp) - with_tp, "ep": ep}

    def _param_gather_s(self, s: int) -> float:
        """Seconds of stage ``s``'s parameter all-gathers after its optimizer step (a sharded
        optimizer without ``overlap_param_gather``), chunk after chunk."""
        p = self.par
        if p.dp_sharding == "none" or p.overlap_param_gather or p.dp * p.cp == 1:
            return 0.0
        return sum(self._comm_s("all_gather", s, (ch.params + ch.expert_params) * WEIGHT_BYTES) for ch in self.chunks[s])

    def _grads_done_s(self, s: int, last_b: dict[int, tuple[float, float]], stage_end_s: float) -> float:
        """When stage ``s``'s gradient reduction ends, given each chunk's last backward (start,
        end) and when the stage's last op ends, as the step chains it per TP rank: chunk by
        chunk in the order their last backwards run, each chunk's bucket groups in turn. With
        ``overlap_grad_reduce`` group i starts as the (i+1)-th piece of that backward's compute
        ends, the last group as the whole backward (its communication too) ends; without, after
        the stage's last op."""
        p = self.par
        if p.dp * p.cp == 1:
            return stage_end_s
        op = "all_reduce" if p.dp_sharding == "none" else "reduce_scatter"
        t = 0.0
        for c in sorted(last_b, key=lambda c_: last_b[c_]):
            ch = self.chunks[s][c]
            start, end = last_b[c]
            groups = self._buckets(ch)
            for i, g in enumerate(groups):
                if not p.overlap_grad_reduce:
                    ready = stage_end_s
                elif i == len(groups) - 1:
                    ready = end
                else:
                    ready = start + (i + 1) * ch.bwd_s / len(groups)
                t = max(t, ready) + self._comm_s(op, s, g)
        return max(t, stage_end_s)

    def _walk(self, mb: int, dur: list[list[tuple[float, float]]], ready_f: list[list[float]],
              ready_b: list[list[float]]) -> tuple[list[list[tuple[str, int, int]]], list[list[float]]]:
        """Every stage's schedule of ``mb`` micro-batches (:func:`schedule_order`) and when each
        of its ops ends, walked as the step is built: an op starts once its stage is free, its
        input has come from the neighbouring virtual stage (plus the transfer) and, with FSDP,
        its chunk's parameters are gathered (``ready_f``, ``ready_b``); it lasts
        ``dur[stage][chunk][is backward]``."""
        p = self.par
        pp, v = p.pp, p.virtual_stages
        orders, plan, at = _walk_plan(pp, mb, v)
        hop = [[self._pp_s(a, b) if (b - a) % pp in (1, pp - 1) else 0.0 for b in range(pp)] for a in range(pp)]
        e = [0.0] * len(plan)
        for k, (s, back, c, prev, src, src_stage) in enumerate(plan):
            start = (ready_b if back else ready_f)[s][c]
            if prev >= 0 and e[prev] > start:
                start = e[prev]
            if src >= 0 and e[src] + hop[src_stage][s] > start:
                start = e[src] + hop[src_stage][s]
            e[k] = start + dur[s][c][back]
        return orders, [[e[k] for k in row] for row in at]

    def _schedule_ends(self, dur: list[list[tuple[float, float]]], ready_f: list[list[float]],
                       ready_b: list[list[float]]) -> tuple[list[float], list[dict[int, tuple[float, float]]]]:
        """When each stage's last op ends, and each chunk's last backward (start, end) on each
        stage (:meth:`_walk`). After its warm-up a schedule repeats every pp micro-batches (2 pp
        v ops per stage) with the same durations, so once two such rounds in a row come out
        as the round before shifted by one time on every stage, every later round does too
        (each op waits only for ops at most one round back): a long schedule is walked for a
        few rounds and the rest added as that shift, exactly; where the rounds do not repeat
        within the few, the whole schedule is walked."""
        p = self.par
        pp, v, mb = p.pp, p.virtual_stages, p.n_micro_batches
        period = 2 * pp * v
        short = 8 * pp + mb % pp
        shift = 0.0
        walked = mb
        if mb > short:
            orders, ends = self._walk(short, dur, ready_f, ready_b)
            warm = [_warm_up(pp, s, short, v) for s in range(pp)]
            w = warm[0]
            lam = ends[0][w + 2 * period] - ends[0][w + period]
            tol = 1e-12 * ends[0][-1]
            if all(abs(e[i + period] - e[i] - lam) <= tol
                   for e, w in zip(ends, warm) for i in range(w + period, w + 3 * period)):
                shift, walked = (mb - short) // pp * lam, short
        if walked == mb:
            orders, ends = self._walk(mb, dur, ready_f, ready_b)
        last_b: list[dict[int, tuple[float, float]]] = [{} for _ in range(pp)]
        for s, (order, e) in enumerate(zip(orders, ends)):
            for (kind, _, c), end in zip(order, e):
                if kind == "B":
                    last_b[s][c] = (end - dur[s][c][1] + shift, end + shift)
        return [e[-1] + shift for e in ends], last_b

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
        t0 = time.perf_counter()
        p = self.par
        mb, v, pp = p.n_micro_batches, p.virtual_stages, p.pp
        ops = [[(self._op_s(ch, True), self._op_s(ch, False)) for ch in row] for row in self.chunks]
        dur = [[(sum(f.values()), sum(b.values())) for f, b in row] for row in ops]
        # FSDP: each chunk's parameters gathered before its forwards (chunk after chunk from
        # the start) and again before its backwards
        gather = [[0.0] * v for _ in range(pp)]
        if p.dp_sharding == "fsdp" and p.dp * p.cp > 1:
            gather = [[self._comm_s("all_gather", s, (ch.params + ch.expert_params) * WEIGHT_BYTES) for ch in row]
                      for s, row in enumerate(self.chunks)]
        ready_f = [list(itertools.accumulate(row)) for row in gather]
        ready_b = [[f + g for f, g in zip(rf, row)] for rf, row in zip(ready_f, gather)]
        free, last_b = self._schedule_ends(dur, ready_f, ready_b)
        ends = []
        for s in range(pp):
            grads = self._grads_done_s(s, last_b[s], free[s])
            opt = self._optimizer_s(s)
            ends.append((grads + opt + self._param_gather_s(s), grads - free[s] + self._param_gather_s(s), opt))
        step, dp, opt = max(ends)
        work = [sum(f + b for f, b in row) for row in dur]
        k = int(np.argmax(work))
        parts = {c: mb * sum(f[c] + b[c] for f, b in ops[k]) for c in ("compute", "tp", "cp", "ep")}
        # a micro-batch crosses each boundary between virtual stages once each way
        hops = [(vs % pp, (vs + 1) % pp) for vs in range(pp * v - 1)]
        parts.update(pp=sum((self._pp_s(a, b) + self._pp_s(b, a) for a, b in hops), 0.0), dp=dp + gather[0][0], optimizer=opt)
        parts["bubble"] = max(0.0, step - sum(parts.values()))
        return StepEstimate(self, step, parts, time.perf_counter() - t0,
                            comm_timing="simulated" if self._faulted else "analytical")

    # ---- simulation
    def build(self) -> "_Built":
        """The step as one :class:`~fabricsim.Scenario` (not run).

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
            built = step.build()
            built.scenario.n_activities        # 90: compute, collectives and pipeline flows
            built.scenario.run().summary.makespan_s   # about 0.47, the step time
        """
        return _Builder(self).build()

    def run(self, **run_options: Any) -> "StepResult":
        """Builds the step, simulates it at flow level and returns a :class:`StepResult`.

        Example::

            fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
            step = fs.TrainingStep("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
            result = step.run(tolerance=1e-3)   # options go to Scenario.run
            result.step_s, result.mfu           # about 0.47 s and 0.11
        """
        t0 = time.perf_counter()
        built = self.build()
        t1 = time.perf_counter()
        res = built.scenario.run(**run_options)
        t2 = time.perf_counter()
        return StepResult(self, built, res, build_s=t1 - t0, run_s=t2 - t1)


def step_into(step: TrainingStep, scenario: Any, start: int | None) -> "_Built":
    """Adds ``step`` to ``scenario`` (which has other work: a job's, fabricsim.jobs), its
    first activities waiting for activity ``start``."""
    return _Builder(step, scenario, start).build()


# ------------------------------------------------------------------------------------------
# Schedules
# ------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _walk_plan(pp: int, mb: int, v: int) -> tuple[list[list[tuple[str, int, int]]], list[tuple[int, int, int, int, int, int]],
                                                  list[list[int]]]:
    """The ops of every stage's schedule (:func:`schedule_order`) in one order that respects
    their dependencies, as the step's builder takes them (each stage advanced while its next op's
    input exists): per op (stage, is backward, chunk, index of the stage's previous op or -1,
    index of the op that sends its input or -1, that op's stage); and each stage's ops' indices.
    Made once per (pp, micro-batches, virtual stages): a sweep walks the same schedules."""
    orders = [schedule_order(pp, s, mb, v) for s in range(pp)]
    index: dict[tuple[str, int, int, int], int] = {}
    plan: list[tuple[int, int, int, int, int, int]] = []
    at: list[list[int]] = [[] for _ in range(pp)]
    pos = [0] * pp
    n_left = sum(len(o) for o in orders)
    while n_left:
        for s in range(pp):
            while pos[s] < len(orders[s]):
                kind, m, c = orders[s][pos[s]]
                vs = c * pp + s
                if kind == "F":
                    src = ((s - 1, c) if s > 0 else (pp - 1, c - 1)) if vs > 0 else None
                else:
                    src = ((s + 1, c) if s < pp - 1 else (0, c + 1)) if vs < pp * v - 1 else None
                j = -1
                if src is not None:
                    j = index.get((kind, src[0], m, src[1]), -2)
                    if j == -2:
                        break
                index[(kind, s, m, c)] = len(plan)
                plan.append((s, int(kind == "B"), c, at[s][-1] if at[s] else -1, j, src[0] if src else -1))
                at[s].append(len(plan) - 1)
                pos[s] += 1
                n_left -= 1
    return orders, plan, at


def _warm_up(pp: int, stage: int, n_micro_batches: int, virtual_stages: int = 1) -> int:
    """How many forwards ``stage`` runs before its first backward under Megatron's schedule
    (:func:`schedule_order`): pp - stage - 1 micro-batches (1F1B), 2 (pp - stage - 1) +
    (v - 1) pp chunk forwards (interleaved), at most all of them."""
    if virtual_stages == 1:
        return min(pp - stage - 1, n_micro_batches)
    return min((pp - stage - 1) * 2 + (virtual_stages - 1) * pp, n_micro_batches * virtual_stages)


def schedule_order(pp: int, stage: int, n_micro_batches: int, virtual_stages: int = 1) -> list[tuple[str, int, int]]:
    """Megatron's order of operations on ``stage``: ("F" or "B", micro-batch, chunk).

    Example::

        fs.training.schedule_order(pp=2, stage=0, n_micro_batches=3)
        # [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('F', 2, 0), ('B', 1, 0), ('B', 2, 0)]:
        # one warm-up forward, then one forward one backward, then the cool-down backward
    """
    p = integer("pp", pp, COUNT)
    s = integer("stage", stage, (0, p))
    m = integer("n_micro_batches", n_micro_batches, COUNT)
    v = integer("virtual_stages", virtual_stages, COUNT)
    if v > 1 and m % p:
        raise InvalidArgumentError(f"the interleaved schedule (virtual_stages {v}) takes micro-batches in groups of pp: "
                                   f"n_micro_batches {m} is not divisible by pp {p}")
    warm = _warm_up(pp, stage, n_micro_batches, virtual_stages)
    if v == 1:
        ops = [("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            ops += [("F", warm + i, 0), ("B", i, 0)]
        ops += [("B", m - warm + j, 0) for j in range(warm)]
        return ops
    total = m * v

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    ops = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        ops += [fwd(warm + k), bwd(k)]
    ops += [bwd(k) for k in range(total - warm, total)]
    return ops


# ------------------------------------------------------------------------------------------
# Builder: the DAG
# ------------------------------------------------------------------------------------------

_CATS = ("compute", "tp", "cp", "ep", "pp", "dp", "optimizer")
_CAT_INDEX = {c: i for i, c in enumerate(_CATS)}

# (replica, stage, micro-batch, chunk) -> the ids the next op waits for (pipeline outputs).
_Outputs = dict[tuple[int, int, int, int], list[int]]


@dataclass
class _Built:
    scenario: Any
    ids: np.ndarray  # activity ids we made
    cat: np.ndarray  # index into _CATS
    stage: np.ndarray
    replica: np.ndarray
    micro_batch: np.ndarray
    chunk: np.ndarray
    deps: dict[int, list[int]]
    n_activities: int


class _Builder:
    """Adds a step's activities to a scenario. Its arguments are known good (made here from a
    checked step), so it adds them straight through the scenario's core, without the add_*
    methods' checks and per-call records: the whole step is one change, kept for pickling as
    ``Scenario._training_step(step, start)`` (:meth:`Scenario._one_change`), and each
    distinct collective is constructed once and made again from its core calls
    (:meth:`Builder.add_known`). The activities, their ids and order are those the public
    add_* methods would make."""

    def __init__(self, step: TrainingStep, scenario: Any = None, start: int | None = None) -> None:
        from ...collectives.construction import Builder
        from ...scenario import Scenario

        self.st = step
        kw = {} if step.cost_model is None else {"cost_model": step.cost_model}
        self.sc = Scenario(step.fabric, **kw) if scenario is None else scenario
        self.start_id = start
        # Into a scenario with other work: what the step's first activities wait for.
        self.start: list[int] = [] if start is None else [start]
        self.ids: list[int] = []
        self.meta: list[tuple[int, int, int, int, int]] = []
        self.deps: dict[int, list[int]] = {}
        self.core = self.sc._core
        if self.sc._collectives is None:
            self.sc._collectives = Builder(self.sc)
        self.colls = self.sc._collectives
        self._ranks: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._pp: dict[tuple[int, int, int, int], tuple[np.ndarray, ...] | None] = {}

    def _rec(self, aid: int, cat: int, after: Sequence[int], s: int = -1, r: int = -1, m: int = -1, c: int = -1) -> int:
        self.ids.append(aid)
        self.meta.append((cat, s, r, m, c))
        self.deps[aid] = list(after)
        return aid

    def delay(self, dur: float, after: Sequence[int], cat: str, tag: str, *meta: int) -> int:
        after = after or self.start
        aid: int = self.core.add_delay(max(0.0, dur), 0.0, after, tag)
        return self._rec(aid, _CAT_INDEX[cat], after, *meta)

    def coll(self, op: str, ranks: Sequence[int], size: float, after: Sequence[int], cat: str, tag: str, *meta: int,
             sizes: np.ndarray | None = None) -> int:
        after = after or self.start
        key = ranks if type(ranks) is tuple else tuple(ranks)
        aid = self.colls.add_known(op, key, None if sizes is not None else float(size), after, tag, sizes)
        return self._rec(aid, _CAT_INDEX[cat], after, *meta)

    def flows(self, pp: tuple[np.ndarray, ...], after: list[int], tag: str) -> list[int]:
        """Pipeline flows ``pp`` (:meth:`_pp_arrays`) after ``after``, as
        ``Scenario.add_flows(src, dst, size, after=after, tag=tag)`` adds them."""
        src, dst, nbytes, zeros = pp
        ids: list[int] = self.core.add_flows(src, dst, nbytes, zeros, tag, None, None, after).tolist()
        return ids

    def _group(self, key: tuple[Any, ...], *index: Any) -> tuple[int, ...]:
        """The GPUs of ``gpus[index]`` (one communicator's ranks), made once per ``key``."""
        g = self._ranks.get(key)
        if g is None:
            g = self._ranks[key] = tuple(int(x) for x in self.st.gpus[index])
        return g

    def build(self) -> _Built:
        from ... import _core

        p = self.st.par
        n_ops = p.dp * p.cp * p.pp * p.virtual_stages * p.n_micro_batches * 2
        # before its schedules are made: a global batch of 2**31 would fill memory first
        _core.check_fits(f"a {self.st.model.name} step of {n_ops:,} scheduled forwards and backwards (replicas x "
                         f"stages x chunks x micro-batches x 2)", n_ops * STEP_BYTES_PER_OP)
        # One change of the scenario, kept (where it is the outermost) as the call that makes
        # the step again; the step is kept as a shallow copy, safe from its attributes being
        # set again.
        with self.sc._one_change("_training_step", (copy.copy(self.st), self.start_id)):
            return self._build()

    def _build(self) -> _Built:
        st, p = self.st, self.st.par
        mb, v = p.n_micro_batches, p.virtual_stages
        n_rep = p.dp * p.cp
        G = st.gpus  # (pp, dp, cp, tp)
        orders = [schedule_order(p.pp, s, mb, v) for s in range(p.pp)]
        # position of the last backward of each chunk in each stage's order
        last_b = [{c: max(i for i, o in enumerate(orders[s]) if o[0] == "B" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        first_f = [{c: min(i for i, o in enumerate(orders[s]) if o[0] == "F" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        first_b = [{c: min(i for i, o in enumerate(orders[s]) if o[0] == "B" and o[2] == c) for c in range(v)} for s in range(p.pp)]
        fsdp = p.dp_sharding == "fsdp" and n_rep > 1
        # FSDP: parameter all-gathers, per stage, chunk and TP rank, before the first forward
        # (chained in chunk order from the start) and, prefetched after the chunk's last
        # forward, before its first backward
        fsdp_f: dict[tuple[int, int], list[int]] = {}
        if fsdp:
            for s in range(p.pp):
                prev: list[int] = []
                for c in range(v):
                    ch = st.chunks[s][c]
                    size = (ch.params + ch.expert_params) * 2.0
                    ids = [self.coll("all_gather", st._dp_ranks(s, t), size, prev[t:t + 1], "dp", "fsdp.gather", s, -1, -1, c)
                           for t in range(p.tp)]
                    fsdp_f[(s, c)] = ids
                    prev = ids
        # per (replica, stage): the end of the previous op; outputs per (r, s, kind, mb, chunk)
        out_f: dict[tuple[int, int, int, int], list[int]] = {}  # (r, s, m, c) -> ids to wait on (PP recv at the consumer)
        out_b: dict[tuple[int, int, int, int], list[int]] = {}
        last_op: dict[tuple[int, int], int] = {}
        pieces: dict[tuple[int, int, int], list[int]] = {}  # (s, c, r) -> ids of the last backward's pieces
        fsdp_b: dict[tuple[int, int], list[int]] = {}
        # Walk the schedules in a global order that respects data dependencies: repeatedly
        # advance each stage while its next op's inputs exist (identical for every replica).
        pos = [0] * p.pp
        n_left = sum(len(o) for o in orders)
        ep_pending: dict[tuple[int, str, int, int], dict[int, int]] = {}
        while n_left:
            progressed = False
            for s in range(p.pp):
                while pos[s] < len(orders[s]):
                    kind, m, c = orders[s][pos[s]]
                    vs = c * p.pp + s
                    if kind == "F" and vs > 0:
                        ps, pc = (s - 1, c) if s > 0 else (p.pp - 1, c - 1)
                        if (0, ps, m, pc) not in out_f:
                            break
                    if kind == "B" and vs < p.pp * v - 1:
                        ns, nc = (s + 1, c) if s < p.pp - 1 else (0, c + 1)
                        if (0, ns, m, nc) not in out_b:
                            break
                    self._op(s, kind, m, c, pos[s], last_b, first_b, first_f, out_f, out_b, last_op, pieces, fsdp_f, fsdp_b)
                    pos[s] += 1
                    n_left -= 1
                    progressed = True
            if not progressed:  # pragma: no cover - the schedules are deadlock-free
                raise AssertionError("pipeline schedule deadlocked")
        # data-parallel reduction per stage and chunk, per TP rank over the replicas
        dp_last: dict[int, list[int]] = {s: [] for s in range(p.pp)}
        if n_rep > 1:
            op = "all_reduce" if p.dp_sharding == "none" else "reduce_scatter"
            for s in range(p.pp):
                prev_t: list[int | None] = [None] * p.tp
                for c in sorted(range(v), key=lambda c_: last_b[s][c_]):
                    groups = st._buckets(st.chunks[s][c])
                    for g, size in enumerate(groups):
                        for t in range(p.tp):
                            # without overlap_grad_reduce, after the stage's last backward
                            after = ([pieces[(s, c, r)][g] for r in range(n_rep)] if p.overlap_grad_reduce
                                     else [last_op[(r, s)] for r in range(n_rep)])
                            prev_g = prev_t[t]
                            if prev_g is not None:
                                after.append(prev_g)
                            prev_t[t] = self.coll(op, st._dp_ranks(s, t), size, after, "dp", "dp.grads", s, -1, -1, c)
                dp_last[s] = [x for x in prev_t if x is not None]
        # optimizer per GPU (one delay per replica and stage) and the parameter all-gather
        for s in range(p.pp):
            opt_s = st._optimizer_s(s)
            opts = []
            for r in range(n_rep):
                after = [last_op[(r, s)]] + dp_last[s]
                opts.append(self.delay(opt_s, after, "optimizer", "optimizer", s, r))
            if p.dp_sharding != "none" and not p.overlap_param_gather and n_rep > 1:
                for t in range(p.tp):
                    prev = opts
                    for c in range(v):
                        ch = st.chunks[s][c]
                        prev = [self.coll("all_gather", st._dp_ranks(s, t), (ch.params + ch.expert_params) * 2.0, prev,
                                          "dp", "dp.params", s, -1, -1, c)]
        meta = np.array(self.meta, dtype=np.int64).reshape(-1, 5)
        return _Built(self.sc, np.array(self.ids, dtype=np.int64), meta[:, 0], meta[:, 1], meta[:, 2], meta[:, 3], meta[:, 4],
                      self.deps, self.sc.n_activities)

    # one scheduled op on every replica
    def _op(self, s: int, kind: str, m: int, c: int, i: int, last_b: list[dict[int, int]],
            first_b: list[dict[int, int]], first_f: list[dict[int, int]], out_f: _Outputs, out_b: _Outputs,
            last_op: dict[tuple[int, int], int], pieces: dict[tuple[int, int, int], list[int]],
            fsdp_f: dict[tuple[int, int], list[int]], fsdp_b: dict[tuple[int, int], list[int]]) -> None:
        st, p = self.st, self.st.par
        ch = st.chunks[s][c]
        n_rep = p.dp * p.cp
        vs = c * p.pp + s
        fwd = kind == "F"
        comp_s = ch.fwd_s if fwd else ch.bwd_s
        tp_mult = 1.0 if fwd else (1.0 + p.recompute)
        ep_mult = 1.0 if fwd else (1.0 + p.recompute)
        tag = f"{'fwd' if fwd else 'bwd'}"
        ends: list[list[int]] = []
        comp_ids: list[int] = []
        # with overlap_grad_reduce the chunk's last backward is cut into one compute piece per
        # bucket group, and each group's reduction starts as its piece ends (the last group's as
        # the whole backward ends, its TP, CP and EP communication too: the chunk's first layer's
        # gradients are final only then)
        split = (not fwd) and i == last_b[s][c] and n_rep > 1 and p.overlap_grad_reduce
        groups = st._buckets(ch) if split else []
        # FSDP: the chunk's parameters for its backward, gathered after its last forward... here
        # issued at the chunk's first backward (prefetched one op earlier in the DAG: the gather
        # waits only for the forward gather, so it overlaps the forwards)
        fs_after: list[int] = []
        if p.dp_sharding == "fsdp" and n_rep > 1:
            if fwd and i == first_f[s][c]:
                fs_after = fsdp_f[(s, c)]
            if not fwd and i == first_b[s][c]:
                if (s, c) not in fsdp_b:
                    size = (ch.params + ch.expert_params) * 2.0
                    fsdp_b[(s, c)] = [self.coll("all_gather", st._dp_ranks(s, t), size, fsdp_f[(s, c)][t:t + 1], "dp", "fsdp.gather", s, -1, -1, c)
                                      for t in range(p.tp)]
                fs_after = fsdp_b[(s, c)]
        for r in range(n_rep):
            d, cp_i = divmod(r, p.cp)
            after = list(fs_after) + self._inputs(r, s, kind, m, c, last_op, out_f, out_b)
            if groups:
                k = len(groups)
                ids = []
                prev = after
                for g in range(k):
                    prev = [self.delay(comp_s / k, prev, "compute", tag, s, r, m, c)]
                    ids.append(prev[0])
                pieces[(s, c, r)] = ids
                cid = ids[-1]
            else:
                cid = self.delay(comp_s, after, "compute", tag, s, r, m, c)
            comp_ids.append(cid)
            end = [cid]
            # TP
            if p.tp > 1 and ch.tp_bytes > 0:
                base = [cid] if not p.tp_comm_overlap else after
                ranks = self._group(("tp", s, d, cp_i), s, d, cp_i)
                size = ch.tp_bytes * tp_mult
                if st.tp_comm == "analytical":
                    tid = self.delay(st._comm_s("tp", s, size), base, "tp", f"tp.{tag}", s, r, m, c)
                elif p.sequence_parallel:
                    a = self.coll("reduce_scatter", ranks, size, base, "tp", f"tp.{tag}", s, r, m, c)
                    tid = self.coll("all_gather", ranks, size, [a], "tp", f"tp.{tag}", s, r, m, c)
                else:
                    tid = self.coll("all_reduce", ranks, size, base, "tp", f"tp.{tag}", s, r, m, c)
                end = [cid, tid] if p.tp_comm_overlap else [tid]
            # CP: ring exchange of K and V beside the compute, one ring per TP rank, shared by
            # the cp replicas of this dp index (issued once, by its first)
            if p.cp > 1 and ch.cp_bytes > 0 and cp_i == 0:
                ring_after = sorted({x for rr in range(r, r + p.cp) for x in self._inputs(rr, s, kind, m, c, last_op, out_f, out_b)})
                cps = self._ensure_cp()
                for t in range(p.tp):
                    ring = self._group(("cp", s, d, t), s, d, slice(None), t)
                    x = self.coll("send_recv", ring, ch.cp_bytes * (1 if fwd else 2), ring_after, "cp", f"cp.{tag}",
                                  s, r, m, c)
                    cps.setdefault((d, s, kind, m, c), []).append(x)
            ends.append(end)
        # CP joins: every replica of the dp index waits for its ring exchanges
        if p.cp > 1 and ch.cp_bytes > 0:
            for r in range(n_rep):
                ends[r] = ends[r] + self._ensure_cp().get((r // p.cp, s, kind, m, c), [])
        # EP: one all-to-all (dispatch + combine) per TP rank per EP group, the TP ranks' at
        # once (each waits for its replicas' compute and TP, not for another TP rank's)
        if p.ep > 1 and ch.ep_bytes > 0:
            size = 2 * ch.ep_bytes * ep_mult
            before = list(ends)
            for t in range(p.tp):
                for grp_i, grp in enumerate(st._ep_groups(s, t)):
                    reps = list(range(grp_i * p.ep, grp_i * p.ep + p.ep))
                    after = sorted({x for r in reps for x in before[r]})
                    x = self.coll("all_to_all", grp, size, after, "ep", f"ep.{tag}", s, -1, m, c, sizes=st._ep_sizes(size))
                    for r in reps:
                        ends[r] = ends[r] + [x]
        # PP: send to the next (forward) or previous (backward) virtual stage
        last_vs = p.pp * p.virtual_stages - 1
        for r in range(n_rep):
            d, cp_i = divmod(r, p.cp)
            end = ends[r]
            last_op[(r, s)] = end[0] if len(end) == 1 else self.delay(0.0, end, "compute", "join", s, r, m, c)
            if groups:
                pieces[(s, c, r)][-1] = last_op[(r, s)]
            target = None
            if fwd and vs < last_vs:
                ns = s + 1 if s < p.pp - 1 else 0
                target = ns
            if not fwd and vs > 0:
                target = s - 1 if s > 0 else p.pp - 1
            if target is None:
                (out_f if fwd else out_b)[(r, s, m, c)] = [last_op[(r, s)]]
                continue
            pp = self._pp_arrays(s, target, d, cp_i)
            if pp is None:  # the same GPUs
                (out_f if fwd else out_b)[(r, s, m, c)] = [last_op[(r, s)]]
                continue
            # As Scenario.add_flows(src, dst, pp bytes, after=[last op], tag) adds them.
            dep = [last_op[(r, s)]]
            ids = self.flows(pp, dep, f"pp.{tag}")
            pp_cat = _CAT_INDEX["pp"]
            for x in ids:
                self._rec(x, pp_cat, dep, s, r, m, c)
            (out_f if fwd else out_b)[(r, s, m, c)] = ids

    def _pp_arrays(self, s: int, target: int, d: int, cp_i: int) -> tuple[np.ndarray, ...] | None:
        """A pipeline transfer's sources, destinations, bytes and start times as the core takes
        them (None where stage and target hold the same GPUs), made once per pair."""
        key = (s, target, d, cp_i)
        if key not in self._pp:
            G = self.st.gpus
            src, dst = G[s, d, cp_i, :], G[target, d, cp_i, :]
            n = len(src)
            self._pp[key] = None if src.tolist() == dst.tolist() else (
                np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
                np.full(n, float(self.st._pp_bytes())), np.zeros(n))
        return self._pp[key]

    def _inputs(self, r: int, s: int, kind: str, m: int, c: int, last_op: dict[tuple[int, int], int], out_f: _Outputs,
                out_b: _Outputs) -> list[int]:
        """What replica r's op waits for besides FSDP gathers: its stage's previous op and the
        pipeline transfer bringing its input."""
        p = self.st.par
        vs = c * p.pp + s
        after = [last_op[(r, s)]] if (r, s) in last_op else []
        if kind == "F" and vs > 0:
            ps, pc = (s - 1, c) if s > 0 else (p.pp - 1, c - 1)
            after += out_f[(r, ps, m, pc)]
        if kind == "B" and vs < p.pp * p.virtual_stages - 1:
            ns, nc = (s + 1, c) if s < p.pp - 1 else (0, c + 1)
            after += out_b[(r, ns, m, nc)]
        return after

    def _ensure_cp(self) -> dict[tuple[int, int, str, int, int], list[int]]:
        """The CP ring exchanges issued so far: (dp index, s, kind, m, c) -> their ids."""
        if not hasattr(self, "_cp_map"):
            self._cp_map: dict[tuple[int, int, str, int, int], list[int]] = {}
        return self._cp_map


# ------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------


def _breakdown_table(step_s: float, parts: Mapping[str, float]) -> pa.Table:
    names = ["compute", "tp", "cp", "ep", "pp", "dp", "optimizer", "bubble"]
    desc = {
        "compute": "busiest stage's forward and backward compute",
        "tp": "exposed tensor-parallel communication",
        "cp": "exposed context-parallel communication",
        "ep": "exposed expert-parallel all-to-all",
        "pp": "exposed pipeline send/recv",
        "dp": "exposed data-parallel gradient reduction and parameter gathers",
        "optimizer": "optimizer step",
        "bubble": "pipeline fill/drain and waits for other stages",
    }
    vals = [float(parts.get(n, 0.0)) for n in names]
    return pa.table({
        "component": pa.array(names, pa.string()),
        "time_s": pa.array(vals, pa.float64()),
        "fraction": pa.array([x / step_s if step_s > 0 else 0.0 for x in vals], pa.float64()),
        "description": pa.array([desc[n] for n in names], pa.string()),
    })


class _Summary:
    step: TrainingStep
    step_s: float
    parts: dict[str, float]

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of the whole job."""
        return self.step.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOPs per step / (step time x GPUs x peak)."""
        return self.step.model_flops_per_step / (self.step_s * self.step.par.n_gpus * self.step.peak_flop_per_s)

    @property
    def model_flop_per_s_per_gpu(self) -> float:
        """Model FLOP/s per GPU achieved: model FLOPs per step / (step time x GPUs)."""
        return self.step.model_flops_per_step / (self.step_s * self.step.par.n_gpus)

    @property
    def breakdown(self) -> pa.Table:
        """``component, time_s, fraction, description``: compute, exposed communication per
        dimension (tp, cp, ep, pp, dp), optimizer and bubble; the times add up to the step."""
        return _breakdown_table(self.step_s, self.parts)

    @property
    def memory(self) -> pa.Table:
        """Per stage, bytes per GPU: weights, grads, optimizer, activations, total, and the HBM."""
        return self.step.memory

    def __str__(self) -> str:
        lines = [f"{self.step.model.name} on {self.step.par.n_gpus} x {self.step.gpu.name}: step {self.step_s * 1e3:.1f} ms, "
                 f"{self.tokens_per_s:,.0f} tokens/s, MFU {self.mfu * 100:.1f}% "
                 f"({self.model_flop_per_s_per_gpu / 1e12:.0f} TFLOP/s per GPU)"]
        for name, t in self.parts.items():
            lines.append(f"  {name:<10} {t * 1e3:10.2f} ms  {t / self.step_s * 100:5.1f}%")
        return "\n".join(lines)


class StepEstimate(_Summary):
    """The analytical step (:meth:`TrainingStep.estimate`): ``step_s``, ``tokens_per_s``,
    ``mfu``, ``breakdown``, ``memory``; ``wall_s`` is how long the estimate took;
    ``comm_timing`` how its collectives were timed: "analytical" (closed forms, on a fabric
    without faults) or "simulated" (each communication alone at flow level, on a fabric with
    faults, which the closed forms cannot see).

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        e = fs.training.estimate_step("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
        e.step_s, e.tokens_per_s, e.mfu   # about 0.47 s, 35,000 tokens/s, 0.11
        e.breakdown.column("component")   # compute, tp, cp, ep, pp, dp, optimizer, bubble
    """

    def __init__(self, step: TrainingStep, step_s: float, parts: dict[str, float], wall_s: float, *,
                 comm_timing: str = "analytical") -> None:
        self.step, self.step_s, self.parts, self.wall_s = step, step_s, dict(parts), wall_s
        self.comm_timing = comm_timing

    def __repr__(self) -> str:
        return f"StepEstimate(step_s={self.step_s:.6g}, mfu={self.mfu:.4f}, comm_timing={self.comm_timing!r})"


class StepResult(_Summary):
    """A simulated step (:meth:`TrainingStep.run`): ``step_s``, ``tokens_per_s``, ``mfu``,
    ``breakdown``, ``critical_path`` and ``memory`` (Arrow tables), ``result`` (the
    scenario's :class:`~fabricsim.Result`: flows, delays, collectives), ``build_s`` and
    ``run_s`` (wall time).

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        r = fs.training.train_step("llama3-8b", fs.Parallelism(tp=8, pp=2, dp=1), fabric)
        r.critical_path.column("kind")   # compute, tp, tp, pp, compute, ... optimizer
        r.result.flows.num_rows          # the scenario's own results: its flows, delays, collectives
    """

    def __init__(self, step: TrainingStep, built: _Built, result: Any, *, build_s: float, run_s: float) -> None:
        self.step, self.built, self.result = step, built, result
        self.build_s, self.run_s = build_s, run_s
        n = built.n_activities
        fin = np.full(n, np.nan)
        for table, col in ((result.delays, "delay_id"), (result.flows, "flow_id"), (result.collectives, "collective_id")):
            if table is not None and table.num_rows:
                fin[table[col].to_numpy()] = table["finish_s"].to_numpy()
        self._finish = fin
        self.step_s = float(np.nanmax(fin[built.ids])) if built.ids.size else 0.0
        self._cp = self._critical_path()
        self.parts = self._parts()

    def _critical_path(self) -> list[tuple[int, float, float]]:
        b, fin = self.built, self._finish
        ids = b.ids
        cur = int(ids[int(np.nanargmax(fin[ids]))])
        path = []
        while True:
            deps = b.deps.get(cur, [])
            start = max((fin[x] for x in deps), default=0.0)
            path.append((cur, float(start), float(fin[cur])))
            if not deps:
                break
            cur = max(deps, key=lambda x: fin[x])
        path.reverse()
        return path

    def _parts(self) -> dict[str, float]:
        b = self.built
        index = {int(a): i for i, a in enumerate(b.ids)}
        exposed = {c: 0.0 for c in _CATS}
        for aid, start, end in self._cp:
            exposed[_CATS[b.cat[index[aid]]]] += end - start
        # compute: the busiest stage's compute on one replica
        p = self.step.par
        mb = p.n_micro_batches
        comp = max(sum(ch.fwd_s + ch.bwd_s for ch in self.step.chunks[s]) * mb for s in range(p.pp))
        parts = {"compute": min(comp, exposed["compute"]) if exposed["compute"] > 0 else comp}
        for c in ("tp", "cp", "ep", "pp", "dp", "optimizer"):
            parts[c] = exposed[c]
        parts["bubble"] = max(0.0, self.step_s - sum(parts.values()))
        return parts

    @property
    def critical_path(self) -> pa.Table:
        """The chain of activities that set the step time, in order: ``activity_id, kind``
        (compute, tp, cp, ep, pp, dp, optimizer), ``stage, replica, micro_batch, chunk``
        (-1 where not one), ``start_s`` (its last dependency's end), ``finish_s``, ``duration_s``."""
        b = self.built
        index = {int(a): i for i, a in enumerate(b.ids)}
        rows = [index[a] for a, _, _ in self._cp]
        return pa.table({
            "activity_id": pa.array([a for a, _, _ in self._cp], pa.int64()),
            "kind": pa.array([_CATS[b.cat[i]] for i in rows], pa.string()),
            "stage": pa.array([int(b.stage[i]) for i in rows], pa.int32()),
            "replica": pa.array([int(b.replica[i]) for i in rows], pa.int32()),
            "micro_batch": pa.array([int(b.micro_batch[i]) for i in rows], pa.int32()),
            "chunk": pa.array([int(b.chunk[i]) for i in rows], pa.int32()),
            "start_s": pa.array([s for _, s, _ in self._cp], pa.float64()),
            "finish_s": pa.array([f for _, _, f in self._cp], pa.float64()),
            "duration_s": pa.array([f - s for _, s, f in self._cp], pa.float64()),
        })

    def __repr__(self) -> str:
        return f"StepResult(step_s={self.step_s:.6g}, mfu={self.mfu:.4f}, n_activities={self.built.n_activities})"


# ------------------------------------------------------------------------------------------
# Conveniences and validation cases
# ------------------------------------------------------------------------------------------


def train_step(model: str | Model, parallelism: Parallelism, fabric: Any, **options: Any) -> StepResult:
    """``TrainingStep(model, parallelism, fabric, **options).run()``.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1, global_batch_size=8)   # 8 micro-batches
        print(fs.training.train_step("llama3-8b", par, fabric))   # bubble 9% of the step; 28% with 2
    """
    return TrainingStep(model, parallelism, fabric, **options).run()


def estimate_step(model: str | Model, parallelism: Parallelism, fabric: Any, **options: Any) -> StepEstimate:
    """``TrainingStep(model, parallelism, fabric, **options).estimate()``.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1)
        fs.training.estimate_step("llama3-8b", par, fabric).mfu   # about 0.11, in about a millisecond
    """
    return TrainingStep(model, parallelism, fabric, **options).estimate()


#: Public step figures the model is held to (tests/python/test_training.py, within 15%).
#: ``reported_flop_per_s_per_gpu`` is model FLOP/s per GPU (BF16); MFU = that / 989.5e12.
VALIDATION: dict[str, dict[str, Any]] = {
    "llama3-405b-16k": dict(
        source="https://arxiv.org/abs/2407.21783 (Llama 3, Table 4: 16,384 H100, TP 8, CP 1, PP 16, DP 128, "
               "seq 8,192, batch/DP 16, 16M tokens per batch, 400 TFLOP/s per GPU, BF16 MFU 41%)",
        model="llama3-405b", n_gpus=16384, reported_flop_per_s_per_gpu=400e12,
        parallelism=dict(tp=8, pp=16, dp=128, global_batch_size=2048, schedule="interleaved", virtual_stages=4,
                         dp_sharding="optim_grads", stage_layers=(7,) + (8,) * 14 + (7,)),
        assumptions="interleaved schedule with 4 virtual stages (the paper uses interleaving but gives no count) and "
                    "Megatron's micro-batch grouping (the paper's N = pp); first and last stage one layer fewer "
                    "(the paper's balancing); FSDP sharding optimizer state and fp32 gradients, weights kept whole "
                    "(section 3.3.2), so dp_sharding='optim_grads'; no activation recomputation (section 3.3.2); "
                    "micro-batch 1; TP communication exposed (no overlap stated). Memory: 78.1 GB on stage 1 "
                    "(weights 6.4, grads 3.3, optimizer 0.3, activations of 16 micro-batches 68.2)",
        check_memory=True),
    "llama3-405b-8k": dict(
        source="https://arxiv.org/abs/2407.21783 (Llama 3, Table 4: 8,192 H100, TP 8, CP 1, PP 16, DP 64, "
               "seq 8,192, batch/DP 32, 16M tokens per batch, 430 TFLOP/s per GPU, BF16 MFU 43%)",
        model="llama3-405b", n_gpus=8192, reported_flop_per_s_per_gpu=430e12,
        parallelism=dict(tp=8, pp=16, dp=64, global_batch_size=2048, schedule="interleaved", virtual_stages=4,
                         dp_sharding="optim_grads", stage_layers=(7,) + (8,) * 14 + (7,)),
        assumptions="as llama3-405b-16k; memory not checked: with 32 micro-batches Megatron's interleaved warm-up "
                    "keeps 79 chunk forwards (about 20 micro-batches of the stage) in flight on stage 0, 95.3 GB "
                    "(activations 84.2), and no schedule we model keeps fewer than pp = 16 micro-batches; the "
                    "paper's tunable-N schedule and allocator details are not modelled",
        check_memory=False),
    "megatron-gpt3-175b-96": dict(
        source="https://github.com/NVIDIA/Megatron-LM (README, 'Strong Scaling Results': GPT-3 175B with a "
               "131,072 vocabulary, seq 4,096, 1,152 sequences per batch, 96 H100: MFU 47%; benchmarks run "
               "with --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap)",
        model="gpt3-175b", n_gpus=96, reported_flop_per_s_per_gpu=0.47 * 989.5e12,
        model_changes=dict(name="gpt3-175b-megatron", vocab=131072, seq_len=4096),
        parallelism=dict(tp=8, pp=12, dp=1, global_batch_size=1152, schedule="interleaved", virtual_stages=4,
                         dp_sharding="zero1", tp_comm_overlap=True),
        assumptions="TP 8, PP 12, 4 virtual stages (the README shows the parallelism only in an image): it "
                    "divides both 96 and 4,608 GPUs and 96 layers and fits 80 GB; distributed optimizer",
        check_memory=True),
    "megatron-gpt3-175b-4608": dict(
        source="https://github.com/NVIDIA/Megatron-LM (README, 'Strong Scaling Results': the same GPT-3 175B "
               "on 4,608 H100, same batch: MFU 42%)",
        model="gpt3-175b", n_gpus=4608, reported_flop_per_s_per_gpu=0.42 * 989.5e12,
        model_changes=dict(name="gpt3-175b-megatron", vocab=131072, seq_len=4096),
        parallelism=dict(tp=8, pp=12, dp=48, global_batch_size=1152, schedule="interleaved", virtual_stages=4,
                         dp_sharding="zero1", tp_comm_overlap=True),
        assumptions="as megatron-gpt3-175b-96",
        check_memory=True),
}


def validation_step(name: str, **options: Any) -> TrainingStep:
    """The :class:`TrainingStep` of a :data:`VALIDATION` case on an HGX H100 cluster
    (Quantum-2 scale-out), with the default compute model unless ``compute=`` is given.

    Example::

        step = fs.training.validation_step("megatron-gpt3-175b-96")
        step.par.n_gpus, step.estimate().mfu   # (96, about 0.45); Megatron-LM reports 0.47
    """
    from ...fabrics import cluster

    case = VALIDATION[choice("validation case", name, VALIDATION)]
    m = model(case["model"]).replace(**case.get("model_changes", {}))
    par = Parallelism(**case["parallelism"])
    fabric = cluster(domain="hgx-h100", n_domains=case["n_gpus"] // 8, scale_out="quantum-2")
    options.setdefault("check_memory", case["check_memory"])
    return TrainingStep(m, par, fabric, **options)


def validate_training(**options: Any) -> pa.Table:
    """Every :data:`VALIDATION` case, analytically: ``case, n_gpus, reported_tflops,
    modelled_tflops, error, reported_mfu, modelled_mfu, efficiency, source, assumptions``.

    Example::

        table = fs.training.validate_training()   # closed forms: well under a second
        table.select(["case", "reported_tflops", "modelled_tflops", "error"])
    """
    rows = []
    for name, case in VALIDATION.items():
        st = validation_step(name, **options)
        e = st.estimate()
        rep = case["reported_flop_per_s_per_gpu"]
        rows.append((name, case["n_gpus"], rep / 1e12, e.model_flop_per_s_per_gpu / 1e12,
                     e.model_flop_per_s_per_gpu / rep - 1, rep / st.peak_flop_per_s, e.mfu,
                     st.compute.efficiency, case["source"], case["assumptions"]))
    cols = list(zip(*rows))
    names = ["case", "n_gpus", "reported_tflops", "modelled_tflops", "error", "reported_mfu", "modelled_mfu",
             "efficiency", "source", "assumptions"]
    return pa.table({n: list(c) for n, c in zip(names, cols)})
