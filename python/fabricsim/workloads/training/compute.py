"""How FLOPs become seconds (:class:`ComputeModel`, calibrated as the training package's
docstring says) and the work of each model chunk of each stage: its layers, FLOPs, forward
and backward time, the bytes of its TP, CP and EP communication and its parameters on one GPU."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._checks import choice, real_in

if TYPE_CHECKING:
    from .step import TrainingStep

__all__ = ["ComputeModel", "DEFAULT_COMPUTE_EFFICIENCY", "DEFAULT_FULL_WIDTH"]

#: Achievable fraction of dense peak for transformer layers: the H100 forward+backward Llama-3
#: layers measured for fabricsim (docs/sources.md 7.2), 8B TP1 seq 8192 (0.527) and 405B TP8 (0.495).
DEFAULT_COMPUTE_EFFICIENCY = 0.50


#: Per-GPU FFN width (ffn / tp) below which efficiency falls in proportion (docs/sources.md 7.2:
#: Llama 3 70B at TP8, 3,584 wide, reaches 0.388 of peak where wider shards reach ~0.5).
DEFAULT_FULL_WIDTH = 4608


#: Bytes Adam moves per parameter it updates (read fp32 grad, master, m, v; write master, m,
#: v; write the bf16 weight): 4 x 4 + 3 x 4 + 2.
ADAM_BYTES_PER_PARAM = 30.0


#: Fraction of HBM bandwidth an elementwise optimizer kernel reaches ([assumed], as STREAM-like
#: kernels do on H100).
HBM_EFFICIENCY = 0.8


@dataclass(frozen=True)
class ComputeModel:
    """How FLOPs become seconds: ``efficiency`` of the GPU's dense peak at ``precision``
    ("bf16" or "fp8"), derated by ``ffn_shard / full_width`` where TP leaves the FFN shard
    narrower than ``full_width`` (see the module docstring for the calibration).

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1)
        fused = fs.training.ComputeModel(efficiency=0.6)   # faster kernels than the default 0.5
        fs.TrainingStep("llama3-8b", par, fabric, compute=fused).estimate().parts["compute"]   # about 225 ms
        fs.TrainingStep("llama3-8b", par, fabric).estimate().parts["compute"]                  # about 270 ms
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


@dataclass
class _Chunk:
    """One model chunk of one stage (virtual stage ``c * pp + s``)."""

    stage: int
    chunk: int
    layers: list[int]
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    tp_bytes: float = 0.0  # nccl-tests size of the chunk's TP collective, one direction, per micro-batch
    cp_bytes: float = 0.0  # per send/recv step total over the ring, per direction
    params: float = 0.0  # parameters on one GPU (dense part)
    expert_params: float = 0.0  # on one GPU
    flops_fwd: float = 0.0  # per GPU per micro-batch
    moe: Any = None  # the routed experts' work (moe.MoeWork), added after


# ---- work per chunk
def _split_layers(step: TrainingStep) -> list[list[list[int]]]:
    """Layer indices of chunk c of stage s: ``out[s][c]``; virtual stages in Megatron order."""
    m, p = step.model, step.par
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


def chunks(step: TrainingStep) -> list[list[_Chunk]]:
    m, p, cm = step.model, step.par, step.compute
    tokens = p.micro_batch_size * m.seq_len / p.cp  # per GPU (one CP rank)
    seq = m.seq_len
    rec = 1.0 if p.recompute else 0.0
    act_bytes = 2.0
    out = []
    split = _split_layers(step)
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
                    # attention, router and shared experts; the routed experts are moe.py's
                    dense = (m.attention_params() + m.hidden * m.n_experts + m.n_shared_experts * m.expert_params()) / p.tp
                    lf = 2 * tokens * dense
                    ch.params += dense
                    eff = cm.efficiency
                else:
                    lf = 2 * tokens * m.layer_active_params(i) / p.tp
                    width = m.ffn / p.tp
                    ch.params += m.layer_params(i) / p.tp
                    eff = cm.layer_efficiency(width)
                lf += p.micro_batch_size * m.attention_core_flops(seq) / p.tp / p.cp
                flops += lf
                secs += lf / (step.peak_flop_per_s * eff)
                # Megatron: 2 TP collectives per layer per direction of micro_batch x seq x hidden
                ch.tp_bytes += 2 * tokens * m.hidden * act_bytes
                if p.cp > 1:  # K and V of the local tokens, per ring step
                    kv = 2 * tokens * (m.kv_lora_rank + m.qk_rope_head_dim if m.kv_lora_rank else m.kv_heads * m._head_dim) / p.tp * act_bytes
                    ch.cp_bytes += kv * (p.cp - 1)
            vs = c * p.pp + s
            if vs == p.pp * p.virtual_stages - 1:  # logits + loss
                lf = 2 * tokens * m.vocab * m.hidden / p.tp
                flops += lf
                secs += lf / (step.peak_flop_per_s * cm.efficiency)
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
