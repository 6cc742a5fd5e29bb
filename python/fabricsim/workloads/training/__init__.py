"""Training steps: a model and its parallelism, as one scenario DAG on any fabric.

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

**FLOPs** (as the measured layers of docs/sources.md 7.2 count them): a layer's forward is 2 x tokens x (its matmul
weights: attention projections, MLP or the routed and shared experts a token visits) plus
causal attention, 2 x seq^2 x heads x (d_qk + d_v) / 2 per sequence; the vocabulary projection
adds 2 x tokens x vocab x hidden. Backward is twice the forward; full recomputation adds one
forward. Model FLOPs (for MFU) are 3 x forward, without recomputation.

**Compute time** is each layer's operations timed by their own mechanism (``compute``): the
linear layers' GEMMs from their FLOPs at the published best fraction of the peak of the
precision's GEMM format (:data:`MAMF_FRACTION`) with wave quantization of their tiles over
the SMs and an HBM roofline (:func:`gemm_s`), grouped expert GEMMs lower; attention from
FlashAttention's FLOPs at :data:`ATTENTION_FRACTION`; norms, activations, rotary embedding,
residual adds, the precision's casts, the loss and the optimizer from their bytes at HBM
bandwidth (:data:`FUSED_BYTES`, or :data:`EAGER_BYTES` for unfused PyTorch). ``precision``
(:class:`Precision`) decides the GEMMs' format and peak, the casts, and the bytes of the
parameter all-gathers. Calibrated on the Llama 3 layers measured for fabricsim on H100 and
H200 (docs/sources.md 7.2, every one within 8% with ``kernels="eager"``).

**Granularity** (so that a 16,384-GPU step stays a few hundred thousand activities): per
pipeline replica (one (dp, cp) index), per stage, per micro-batch and per model chunk
(interleaved schedules have ``virtual_stages`` chunks per stage), one compute delay for the
chunk's layers, followed by one TP collective carrying all of the chunk's TP traffic
(all-reduce, or with sequence parallelism reduce-scatter then all-gather) on the TP group's
GPUs: exposed, or beside the compute with ``tp_comm_overlap`` (two collectives per dense
layer and direction; a MoE layer's attention and, where the model has them, its shared experts
use the TP group, its routed experts do not). With sequence parallelism a backward also
gathers its column-parallel layers' inputs again for their weight gradients (as many bytes
as the forward's gathers), issued at its start beside its compute (first in the TP chain with
``tp_comm_overlap``), joined before it ends. With expert tensor parallelism (``etp`` > 1) a
MoE chunk adds, per expert-TP group, the all-gather of the tokens its experts receive and the
reduce-scatter of their outputs. A MoE chunk adds, per
expert-parallel group, the dispatch and then the combine of all its MoE layers (``moe``:
routing, experts, dispatchers, overlap; ``placement``: groups against NVLink domains); context
parallelism adds a ring exchange (send/recv over the CP group) of the chunk's K and V beside
the compute. Per-collective latencies of the layers grouped in a chunk are paid once.
Pipeline transfers are point-to-point flows, one per TP rank carrying its 1/tp slice of
micro_batch x seq x hidden x 2 bytes (Megatron's scatter/gather of the activation). The data
parallel gradient reduction (fp32 by default, Megatron's main grads) runs per stage and chunk,
the dense parameters' per TP rank over the (dp x cp) ranks, the experts' over each
expert-data-parallel group (the ranks holding the same experts), each kind in buckets of its own
of ``bucket_size_bytes`` (at most 8 groups each), one after the other on each GPU; with
``overlap_grad_reduce`` the chunk's last backward is cut into pieces and each bucket group
starts as the piece its gradients need ends, as the layers' gradients become final, the last
groups as the whole backward ends (its TP, CP and EP traffic too: the chunk's first layer's
gradients are final only then); without it, every bucket after the stage's last backward.
Then each GPU's optimizer step (a delay: Adam's memory traffic over the HBM bandwidth) and,
for a sharded optimizer without ``overlap_param_gather``, the parameter all-gathers (the
experts' over their expert-data-parallel group).

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

**Modules**, each importing only the ones before it: ``model`` (:class:`Model`, the presets in
``data/models.json``), ``schedule`` (Megatron's pipeline schedules), ``compute``
(:class:`ComputeModel`, each chunk's work), ``memory`` (bytes per GPU), ``moe`` (the routed
experts and their dispatch), ``placement`` (groups against NVLink domains), ``results``
(:class:`StepEstimate`, :class:`StepResult`), ``estimate`` (the closed form),
``construction`` (the step's DAG on a scenario), ``step`` (:class:`Parallelism`,
:class:`TrainingStep`) and ``validation`` (the published steps it is held to).
"""
# (X as X: the constants of each part, with their sources where they are defined, also read here.)
from .compute import ADAM_BYTES_PER_PARAM as ADAM_BYTES_PER_PARAM
from .compute import ATTENTION_FRACTION as ATTENTION_FRACTION
from .compute import EAGER_BYTES as EAGER_BYTES
from .compute import FUSED_BYTES as FUSED_BYTES
from .compute import GEMM_TILE as GEMM_TILE
from .compute import GROUPED_GEMM_FRACTION as GROUPED_GEMM_FRACTION
from .compute import MAMF_FRACTION as MAMF_FRACTION
from .compute import RECOMPUTE_MODULES as RECOMPUTE_MODULES
from .compute import DEFAULT_COMPUTE_EFFICIENCY as DEFAULT_COMPUTE_EFFICIENCY
from .compute import ComputeModel, attention_s, gemm_s, layer_work, logits_work, memory_bound_s
from .compute import HBM_EFFICIENCY as HBM_EFFICIENCY
from .construction import STEP_BYTES_PER_OP as STEP_BYTES_PER_OP
from .memory import ACTIVATION_BYTES as ACTIVATION_BYTES
from .memory import LOGIT_BYTES as LOGIT_BYTES
from .memory import MAIN_GRAD_COPY_BYTES as MAIN_GRAD_COPY_BYTES
from .memory import OPTIMIZER_STATE_BYTES as OPTIMIZER_STATE_BYTES
from .memory import WEIGHT_BYTES as WEIGHT_BYTES
from .model import Model, model, models
from .precision import RECIPES as RECIPES
from .precision import Precision, precision
from .results import StepEstimate, StepResult
from .schedule import schedule_order
from .moe import COMM_SM_FRACTION as COMM_SM_FRACTION
from .moe import DEFAULT_CONCENTRATION as DEFAULT_CONCENTRATION
from .moe import FP8_DISPATCH_BLOCK as FP8_DISPATCH_BLOCK
from .moe import MoeOptions
from .placement import domain_aware, straddling
from .step import Parallelism, PlacementWarning, TrainingConfigError, TrainingStep, estimate_step, train_step
from .validation import KNOWN_MISSES, MOE_VALIDATION, VALIDATION, validate_training, validation_step

__all__ = [
    "Model",
    "Parallelism",
    "ComputeModel",
    "TrainingStep",
    "StepResult",
    "StepEstimate",
    "TrainingConfigError",
    "PlacementWarning",
    "MoeOptions",
    "domain_aware",
    "straddling",
    "model",
    "models",
    "train_step",
    "estimate_step",
    "Precision",
    "precision",
    "gemm_s",
    "attention_s",
    "memory_bound_s",
    "layer_work",
    "logits_work",
    "VALIDATION",
    "MOE_VALIDATION",
    "KNOWN_MISSES",
    "validation_step",
    "validate_training",
    "schedule_order",
]
