"""Memory per GPU, per stage, at its activation peak (``TrainingStep.memory``): model state in
Megatron's mixed-precision Adam bytes per parameter of the stage's shard, divided as
``dp_sharding`` says, and the activations each layer keeps for its backward (Korthikanti et al.
2022), summed over the forwards the stage's schedule holds before their backwards (the
training package's docstring, Memory, says what is and is not counted)."""

from __future__ import annotations

import dataclasses

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .schedule import _stage_ops

if TYPE_CHECKING:
    from .step import TrainingStep

# Memory accounting (TrainingStep.memory): bytes per parameter or per stored value. The model-state
# bytes are Megatron's mixed-precision Adam (https://docs.nvidia.com/megatron-core/developer-guide/
# latest/api-guide/dist_optimizer.html, "bytes per parameter": bf16 parameters with fp32 gradients
# 18 = 2 + 4 + 12, distributed 6 + 12/d; 16-bit parameters and gradients 20 = 2 + 2 + 4 + 12,
# distributed 4 + 16/d; "We always use fp32 main parameters for optimizer steps").
#: bf16 model weights: 2 bytes per parameter (the page above: bf16 parameters).
WEIGHT_BYTES = 2.0


#: Adam's optimizer state per parameter: fp32 main (master) weight, fp32 first and second
#: moments, 4 + 4 + 4 (the page above: 18 - 2 - 4 for bf16 parameters and fp32 gradients);
#: with ``adam_moment_bytes=2`` the moments take 2 bytes each, 4 + 2 + 2.
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


# ---- memory
def _layer_activation_bytes(step: TrainingStep, i: int) -> float:
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
    m, p = step.model, step.par
    tokens = p.micro_batch_size * m.seq_len / p.cp
    rep = p.tp if p.sequence_parallel else 1
    drop = set(p.recompute_modules) | ({"core_attn"} if p.selective_recompute else set())
    # a linear layer's input, kept for its weight gradient, is kept as the GEMM reads it: in
    # the precision's format with a low-precision recipe (Transformer Engine saves the
    # quantized input), else BF16
    lin = step.precision.saved_input_bytes / ACTIVATION_BYTES
    if m.kv_lora_rank:  # MLA: per-head keys and values after the up-projection, plus the latents
        q = m.heads * m._d_qk
        kv = m.heads * (m._d_qk + m._d_v)
        latent = m.q_lora_rank + m.kv_lora_rank
        if "mla_up_proj" in drop:  # the up-projections re-run from the kept latents
            q = kv = 0
    else:
        q = m.heads * m._head_dim
        kv = 2 * m.kv_heads * m._head_dim
        latent = 0
    o = m.heads * m._d_v * lin
    moe = m.is_moe_layer(i)
    up = 2 if m.gated_mlp else 1
    routed = 0 if not moe or "moe" in drop else m.experts_per_token * m.expert_ffn * (up + (0 if "moe_act" in drop else lin))
    shared = 0 if not moe or {"moe", "shared_experts"} & drop else m.n_shared_experts * m.expert_ffn * (up + lin)
    mlp = routed + shared if moe else (0 if "mlp" in drop else m.ffn * (up + lin))
    # the norms' inputs (2 h) and outputs, the QKV and first MLP inputs (2 h; re-run from the
    # inputs with "layernorm")
    norms = 2 * m.hidden + (0 if "layernorm" in drop else 2 * m.hidden * lin)
    per_token = (norms + latent) / rep + (q + kv + o + mlp) / p.tp
    if not p.flash_attention and "core_attn" not in drop:
        per_token += m.heads * m.seq_len / p.tp  # softmax probabilities: a x s per token
    return ACTIVATION_BYTES * tokens * per_token


def _chunk_activations(step: TrainingStep, s: int) -> tuple[list[float], list[float]]:
    """Per chunk of stage ``s``: the bytes one micro-batch's forward leaves held until its
    backward, and the extra bytes its backward holds (full recomputation: the layer being
    re-run). The last virtual stage adds the final norm's and the output projection's inputs
    and the fp32 logits."""
    m, p = step.model, step.par
    tokens = p.micro_batch_size * m.seq_len / p.cp
    rep = p.tp if p.sequence_parallel else 1
    last_vs = p.pp * p.virtual_stages - 1
    kept, extra = [], []
    for ch in step.chunks[s]:
        full = [_layer_activation_bytes(step, i) for i in ch.layers]
        # Megatron's full recomputation: each recomputed layer keeps its input only, and its
        # backward holds the layer being re-run
        n = ch.recomputed
        k = n * ACTIVATION_BYTES * tokens * m.hidden / rep + sum(full[n:])
        x = max(full[:n], default=0.0)
        if ch.chunk * p.pp + ch.stage == last_vs:
            k += ACTIVATION_BYTES * tokens * 2 * m.hidden / rep + LOGIT_BYTES * tokens * m.vocab / p.tp
        kept.append(k)
        extra.append(x)
    return kept, extra


def _peak_activations(step: TrainingStep, s: int) -> float:
    """Stage ``s``'s activation peak under its schedule: Megatron's order of forwards and
    backwards (:func:`~.schedule.schedule_order`; 1F1B keeps at most pp - s micro-batches in flight, the
    interleaved schedule 2 (pp - s - 1) + (v - 1) pp + 1 chunk forwards), adding each forward's
    kept bytes and releasing them after its backward. The schedule repeats every pp
    micro-batches after its warm-up, so a few groups past the warm-up give the peak."""
    p = step.par
    v = p.virtual_stages
    mb = p.n_micro_batches
    if p.schedule == "1f1b":
        m_sim = min(mb, p.pp + 1)
    else:
        warm = 2 * (p.pp - 1) + (v - 1) * p.pp
        m_sim = min(mb, p.pp * (-(-warm // (p.pp * v)) + 2))
    kept, extra = _chunk_activations(step, s)
    back, chunk = _stage_ops(p.pp, s, m_sim, v)
    kept_op = np.asarray(kept)[chunk]
    held = np.cumsum(np.where(back, -kept_op, kept_op))  # after each op, summed in order
    before = np.concatenate(([0.0], held[:-1]))
    # a forward's bytes are held once it ends; a backward's extra while it runs
    return float(max(0.0, held[~back].max(initial=0.0), (before + np.asarray(extra)[chunk])[back].max(initial=0.0)))


def memory_table(step: TrainingStep) -> pa.Table:
    """Per stage, bytes per GPU at the activation peak (see the module docstring, Memory)."""
    p = step.par
    dpcp = p.dp * p.cp
    edp = step.expert_dp
    sh = p.dp_sharding
    g = float(p.grad_reduce_bytes)
    opt_per_param = (OPTIMIZER_STATE_BYTES - 2 * (4 - p.adam_moment_bytes)
                     + (MAIN_GRAD_COPY_BYTES if p.grad_reduce_bytes == 2 else 0.0))
    # the stored weights: BF16, or the quantized copy where the parameters are gathered
    # quantized (Megatron's --fp8-param-gather), plus a quantized cache beside BF16 weights.
    # Without a sharded optimizer there is no parameter gather (Megatron-LM arguments.py
    # refuses --fp8-param-gather without a distributed optimizer or FSDP): BF16 and the cache.
    prec = step.precision if sh != "none" else dataclasses.replace(step.precision, param_gather=False)
    wb = prec.stored_weight_bytes
    rows = []
    for s in range(p.pp):
        dense = sum(ch.params for ch in step.chunks[s])
        expert = sum(ch.expert_params for ch in step.chunks[s])
        whole = dense + expert
        shard = dense / dpcp + expert / edp
        # the one chunk whose parameters (fsdp) or gradients (optim_grads, fsdp) are whole
        # between its all-gather / first backward and its reduce-scatter
        chunk = max(ch.params + ch.expert_params for ch in step.chunks[s]) if dpcp > 1 else 0.0
        w = wb * (shard + chunk if sh == "fsdp" else whole)
        gr = g * (shard + chunk if sh in ("optim_grads", "fsdp") else whole)
        opt = opt_per_param * (whole if sh == "none" else shard)
        act = _peak_activations(step, s)
        rows.append((s, w, gr, opt, act, w + gr + opt + act))
    cols = list(zip(*rows))
    return pa.table({
        "stage": pa.array(cols[0], pa.int32()),
        "weights_bytes": pa.array(cols[1], pa.float64()),
        "grads_bytes": pa.array(cols[2], pa.float64()),
        "optimizer_bytes": pa.array(cols[3], pa.float64()),
        "activations_bytes": pa.array(cols[4], pa.float64()),
        "total_bytes": pa.array(cols[5], pa.float64()),
        "hbm_bytes": pa.array([step.gpu.get("hbm_bytes")] * len(rows), pa.float64()),
    })
