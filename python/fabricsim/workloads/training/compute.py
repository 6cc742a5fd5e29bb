"""How a model's work becomes seconds, operation by operation, and the work of each model
chunk of each stage: its layers, FLOPs, forward and backward time, the bytes of its TP, CP and
EP communication and its parameters on one GPU.

Each layer is a list of operations of three kinds, each timed by its own mechanism:

* **GEMMs** (:func:`gemm_s`): FLOPs at a fraction of the dense peak of the GEMM's format
  (:data:`MAMF_FRACTION`, the best a GPU's matmul reaches in published sweeps), times the
  wave quantization of the GEMM's output tiles over the GPU's SMs (:data:`GEMM_TILE`), and
  never faster than reading its inputs and writing its output at HBM bandwidth (a roofline).
  Grouped expert GEMMs pad each expert's tokens to whole tiles and reach
  :data:`GROUPED_GEMM_FRACTION` of the dense fraction.
* **Attention** (:func:`attention_s`): FlashAttention's FLOPs (causal masking counted: half
  the scores), the backward 2.5 x the forward, at :data:`ATTENTION_FRACTION` of the peak
  per GPU generation and direction.
* **Memory-bound operations** (norms, activations, rotary embedding, residual adds, the
  precision's casts, the loss, the optimizer): bytes at :data:`HBM_EFFICIENCY` of the HBM
  bandwidth, with the bytes per value of each operation as fused kernels move them
  (:data:`FUSED_BYTES`, Megatron-LM with Transformer Engine) or as eager PyTorch does
  (:data:`EAGER_BYTES`).

Calibrated on the Llama 3 layers measured for fabricsim on H100 and H200 (docs/sources.md 7.2,
eager PyTorch: every layer within 8%, tests/python/test_training.py) and on the published matmul
sweeps (docs/sources.md 7.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..._checks import COUNT, choice, flag, integer, known_fields, many, one_value, real_in, shown
from ...exceptions import InvalidArgumentError
from ...fabrics import catalog as _catalog
from .model import model as _model
from .precision import Precision
from .precision import precision as _as_precision

if TYPE_CHECKING:
    from .model import Model
    from .step import TrainingStep

__all__ = ["ComputeModel", "compute_beside_comm_s", "gpu_sms", "TP_OVERLAP_SMS", "DEFAULT_COMPUTE_EFFICIENCY", "adam_bytes_per_param", "RECOMPUTE_MODULES", "gemm_s", "attention_s", "memory_bound_s", "MAMF_FRACTION", "ATTENTION_FRACTION",
           "GROUPED_GEMM_FRACTION", "GEMM_TILE", "FUSED_BYTES", "EAGER_BYTES", "HBM_EFFICIENCY"]


#: Fraction of the dense peak of each GEMM format the GPU's matmul reaches at its best shape
#: ("maximum achievable matmul FLOPS", MAMF). Per GPU where measured; a GPU not listed takes
#: its architecture's row ("hopper", "blackwell").
#: * h100 bf16 0.803, fp8 0.709 (per-tensor scales): 794.5 and 1,402.6 TFLOP/s of 989.5 and
#:   1,979 (stas00/ml-engineering@744d01e1:compute/accelerator/README.md, "Maximum Achievable
#:   Matmul FLOPS comparison table", torch 2.7.0); H800 has H100's tensor cores.
#: * h200 bf16 0.83: fitted to the four GEMMs measured for fabricsim on H200 (docs/sources.md
#:   7.2: 786-814 TFLOP/s, wave quantization below included); fp8 0.734 (1,453.4, MAMF table above).
#: * fp8-blockwise on Hopper 0.783: DeepGEMM's 1,550 TFLOP/s on H800 of 1,979
#:   (deepseek-ai/DeepGEMM@0274ad7b:README.md, news 2025-04-18).
#: * b200 bf16 0.776, fp8 0.763 (1,745.0 and 3,432.5 of 2,250 and 4,500, MAMF table);
#:   nvfp4 0.61 (cuBLAS via torch._scaled_mm, 5.50 PFLOP/s of 9,000 at 6144^3, pytorch/ao#2427).
#: * b300 bf16 0.786, fp8 0.745 (1,769.0 and 3,353.3, MAMF table); nvfp4 [assumed] as b200.
#: * gb200 bf16 0.729, fp8 0.723 (1,822.0 and 3,615.6 of 2,500 and 5,000, MAMF table); nvfp4
#:   0.763 (cuBLASLt 16384^3, 7,627.6 of 10,000, Azure/AI-benchmarking-guide@2a370be6:
#:   Azure_Results/ND_GB200_v6_results.md). gb300 [assumed] as gb200 (no published sweep;
#:   same NVL72 rating of the same tensor cores).
#: * mxfp8 runs at the FP8 rate: [assumed] the fp8 fraction of the same GPU; fp8-blockwise on
#:   Blackwell [assumed] the fp8 fraction.
MAMF_FRACTION: dict[str, dict[str, float]] = {
    "hopper": {"bf16": 0.803, "fp8": 0.709, "fp8-blockwise": 0.783},
    "h200": {"bf16": 0.83, "fp8": 0.734, "fp8-blockwise": 0.783},
    "blackwell": {"bf16": 0.776, "fp8": 0.763, "fp8-blockwise": 0.763, "mxfp8": 0.763, "nvfp4": 0.61},
    "b300": {"bf16": 0.786, "fp8": 0.745, "fp8-blockwise": 0.745, "mxfp8": 0.745, "nvfp4": 0.61},
    "gb200": {"bf16": 0.729, "fp8": 0.723, "fp8-blockwise": 0.723, "mxfp8": 0.723, "nvfp4": 0.763},
    "gb300": {"bf16": 0.729, "fp8": 0.723, "fp8-blockwise": 0.723, "mxfp8": 0.723, "nvfp4": 0.763},
}


#: Output tile of one SM's GEMM work, rows x columns ([assumed] 128 x 256, the largest tile
#: cuBLAS and CUTLASS use for BF16/FP8 on Hopper and Blackwell). A GEMM's tiles run in waves
#: of one tile per SM; a last partial wave leaves SMs idle, so the GEMM reaches
#: tiles / (SMs x waves) of its best rate: NVIDIA's "wave quantization"
#: (https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#wave-quant).
GEMM_TILE = (128, 256)


#: A grouped expert GEMM's best rate over a dense GEMM's ([assumed] 0.9: a grouped kernel
#: walks one problem per expert and loads each expert's weights for few tokens; its padding
#: of each expert's tokens to whole tiles is counted apart, by wave quantization).
GROUPED_GEMM_FRACTION = 0.9


#: Fraction of the peak attention reaches, forward and backward, per architecture and
#: format of its GEMMs (FLOPs as FlashAttention counts them; the backward has 2.5 x the
#: forward's FLOPs: Dao 2023, FlashAttention-2, arXiv:2307.08691, section 4.1).
#: * hopper bf16 (0.45, 0.28): fitted to the layers measured for fabricsim on H100 and H200
#:   (docs/sources.md 7.2, PyTorch 2.11's scaled_dot_product_attention, causal, head dim 128),
#:   with the GEMMs and memory-bound operations above.
#: * hopper fp8 forward 0.61: FlashAttention-3's FP8 forward "close to 1.2 PFLOP/s" of 1,979
#:   (Shah et al. 2024, arXiv:2407.08608, abstract); backward [assumed] in the same ratio to
#:   the forward as BF16's.
#: * Blackwell (b200, gb200) bf16 forward 0.546: cuDNN's attention, which Transformer Engine
#:   runs, is 1.3x slower than FlashAttention-4's 1,613 TFLOP/s on B200 of 2,250 (Zadouri et al.,
#:   arXiv:2603.05451: "1.3x cuDNN 9.13"), 0.71 / 1.3; the softmax's exponentials bound it.
#:   Backward [assumed] in Hopper's ratio to the forward.
#: * Blackwell Ultra (b300, gb300) doubles the exponential throughput, "up to 2x faster
#:   attention layers" than Blackwell (https://developer.nvidia.com/blog/inside-nvidia-blackwell-
#:   ultra-the-chip-powering-the-ai-factory-era/): [assumed] FlashAttention-4's 0.71, the
#:   forward once exponentials no longer bound it; backward in Hopper's ratio. FP8 attention
#:   [assumed]: on Blackwell no faster than BF16 (the exponentials bound both: half the
#:   fraction of a peak twice as high), on Blackwell Ultra the BF16 fractions of the FP8 peak.
ATTENTION_FRACTION: dict[str, dict[str, tuple[float, float]]] = {
    "hopper": {"bf16": (0.45, 0.28), "fp8": (0.61, 0.61 * 0.28 / 0.45)},
    "blackwell": {"bf16": (0.71 / 1.3, 0.71 / 1.3 * 0.28 / 0.45), "fp8": (0.71 / 2.6, 0.71 / 2.6 * 0.28 / 0.45)},
    "b300": {"bf16": (0.71, 0.71 * 0.28 / 0.45), "fp8": (0.71, 0.71 * 0.28 / 0.45)},
    "gb300": {"bf16": (0.71, 0.71 * 0.28 / 0.45), "fp8": (0.71, 0.71 * 0.28 / 0.45)},
}


#: Achievable fraction of dense BF16 peak of a whole transformer layer, for models that time a
#: layer as one figure (serving's prefill): the H100 forward+backward Llama-3 layers measured
#: for fabricsim (docs/sources.md 7.2), 8B TP1 seq 8192 (0.527) and 405B TP8 (0.495).
DEFAULT_COMPUTE_EFFICIENCY = 0.50


#: Fraction of HBM bandwidth an elementwise kernel reaches ([assumed], as STREAM-like kernels
#: do on H100).
HBM_EFFICIENCY = 0.8


#: HBM bytes per value (forward, backward) of each memory-bound operation with fused kernels, as
#: Megatron-LM with Transformer Engine runs them: an RMSNorm or LayerNorm reads its input and
#: writes its output (2 + 2), its backward reads the input and the output's gradient and writes
#: the input's (2 + 2 + 2); a fused SwiGLU reads gate and up and writes their product, per
#: value of the product (4 + 2), its backward reads gate, up and the gradient and writes two
#: gradients (6 + 4); GeLU 2 + 2 and 2 + 2 + 2; a residual add reads two and writes one (6)
#: and its backward adds two gradients (6); rotary embedding reads and writes Q and K (2 + 2)
#: each way. Per logit, the fused vocabulary-parallel cross-entropy reads the BF16 logits and
#: writes the gradient, [assumed] 4 + 4 over both directions with two reductions (8, 6).
FUSED_BYTES: dict[str, tuple[float, float]] = {
    "norm": (4.0, 6.0), "swiglu": (6.0, 10.0), "gelu": (4.0, 6.0), "residual": (6.0, 6.0),
    "rotary": (4.0, 4.0), "loss": (8.0, 6.0),
}


#: The same with eager PyTorch, one kernel per operator, as the layers measured for fabricsim
#: ran (docs/sources.md 7.2): RMSNorm in FP32, x.float(), pow, mean, multiply, cast back,
#: multiply by the weight: 6 + 8 + 4 + 8 + 6 + 4 = 36 bytes per value; its backward 80 and
#: SwiGLU's 14 and 24 fitted to those layers. GeLU, the residual, rotary and the loss
#: [assumed] as fused (one kernel each; the measured layers have no rotary embedding).
EAGER_BYTES: dict[str, tuple[float, float]] = {**FUSED_BYTES, "norm": (36.0, 80.0), "swiglu": (14.0, 24.0)}


#: Bytes per value a GEMM reads in each format (values only; block scales are counted in the
#: precision's casts).
_FORMAT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8-blockwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}


#: SMs per GPU where the catalog gives none ([assumed] H100 SXM's 132 for Hopper, B200's 148
#: for Blackwell).
_DEFAULT_SMS = {"hopper": 132, "blackwell": 148}


@known_fields
@dataclass(frozen=True)
class ComputeModel:
    """How the step's operations become seconds (see the module docstring): ``kernels``
    "eager" (the default: one PyTorch kernel per operator, :data:`EAGER_BYTES`, as the layers
    the model is calibrated on ran; published Megatron-LM steps come out no slower than that
    calibration, see the validation table) or "fused" (the bytes Transformer Engine's fused
    norms, activations and casts move, :data:`FUSED_BYTES`; not validated end to end);
    ``gemm_efficiency`` replaces every GEMM's :data:`MAMF_FRACTION` (a fraction of its
    format's peak, wave quantization still applied) and ``attention_efficiency`` the
    attention's forward and backward :data:`ATTENTION_FRACTION`, where given;
    ``hbm_efficiency`` is the fraction of HBM bandwidth memory-bound kernels reach.

    Example::

        fabric = fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2")
        par = fs.Parallelism(tp=8, pp=2, dp=1)
        fused = fs.training.ComputeModel(kernels="fused")   # Transformer Engine's fused kernels
        fs.TrainingStep("llama3-8b", par, fabric, compute=fused).estimate().parts["compute"]   # about 104 ms
        fs.TrainingStep("llama3-8b", par, fabric).estimate().parts["compute"]                  # about 118 ms
    """

    kernels: str = "eager"
    gemm_efficiency: float | None = None
    attention_efficiency: float | None = None
    hbm_efficiency: float = HBM_EFFICIENCY

    def __post_init__(self) -> None:
        choice("ComputeModel: kernels", self.kernels, ("fused", "eager"))
        for f in ("gemm_efficiency", "attention_efficiency"):
            if getattr(self, f) is not None:
                object.__setattr__(self, f, real_in(f"ComputeModel: {f}", getattr(self, f), 0.0, 1.0, open_low=True))
        object.__setattr__(self, "hbm_efficiency", real_in("ComputeModel: hbm_efficiency", self.hbm_efficiency, 0.0, 1.0,
                                                           open_low=True))

    @property
    def bytes_per_value(self) -> Mapping[str, tuple[float, float]]:
        """HBM bytes per value (forward, backward) of each memory-bound operation."""
        return FUSED_BYTES if self.kernels == "fused" else EAGER_BYTES


_DEFAULT = ComputeModel()


def _gpu(gpu: Any) -> Any:
    """A catalog GPU part from its name or as is."""
    if isinstance(gpu, str):
        part = _catalog.part(gpu)
    else:
        part = gpu
    if getattr(part, "kind", None) != "gpu":
        raise InvalidArgumentError(f"gpu must be a catalog GPU's name or part (e.g. 'h100'), got {type(gpu).__name__} {gpu!r}")
    return part


def _fraction(table: Mapping[str, Any], gpu: Any, fmt: str) -> Any:
    row = table.get(gpu.name) or table[gpu.get("arch") or "hopper"]
    if fmt not in row:
        raise InvalidArgumentError(f"a {gpu.name} ({gpu.get('arch')}) cannot run {fmt} GEMMs (formats: {', '.join(row)})")
    return row[fmt]


def _peak(gpu: Any, fmt: str) -> float:
    """The GPU's dense peak FLOP/s for GEMMs in format ``fmt`` (FP8 and MXFP8 share the FP8 peak)."""
    key = {"bf16": "bf16", "nvfp4": "fp4"}.get(fmt, "fp8") + "_dense_flop_per_s"
    peak = gpu.get(key)
    if not peak:
        raise InvalidArgumentError(f"catalog GPU {gpu.name!r} has no {key}: it cannot run {fmt} GEMMs "
                                   f"(add the figure with fs.catalog.add_part, pass another gpu, or choose another precision)")
    return float(peak)


def _hbm_Bps(gpu: Any, compute: ComputeModel) -> float:
    bw = gpu.get("hbm_Bps")
    if not bw:
        raise InvalidArgumentError(f"catalog GPU {gpu.name!r} has no hbm_Bps: memory-bound work cannot be timed")
    return float(bw) * compute.hbm_efficiency


def _format(precision: str | Precision) -> str:
    if isinstance(precision, Precision):
        return precision.gemm_format
    if isinstance(precision, str) and precision in _FORMAT_BYTES:
        return precision
    return Precision(precision).gemm_format


def _checked_compute(where: str, compute: Any) -> ComputeModel:
    """``compute`` if it is a :class:`ComputeModel`, the default for None, else an error."""
    if compute is None:
        return _DEFAULT
    if not isinstance(compute, ComputeModel):
        raise InvalidArgumentError(f"{where}: compute must be a fabricsim.training.ComputeModel or None, got "
                                   f"{type(compute).__name__} {shown(compute)}")
    return compute


def _per_group(name: str, value: Any) -> list[float]:
    """A grouped GEMM's dimension ``name``: one size (a list of one) or one per group."""
    if one_value(value):
        return [real_in(f"gemm_s: {name}", value, 0.0, math.inf, open_high=True)]
    expected = "a size or a non-empty sequence of sizes, one per group"
    out = [real_in(f"gemm_s: {name}[{i}]", x, 0.0, math.inf, open_high=True)
           for i, x in enumerate(many(f"gemm_s: {name}", value, expected))]
    if not out:
        raise InvalidArgumentError(f"gemm_s: {name} must be {expected}, got an empty {type(value).__name__}")
    return out


def gemm_s(m: Any, n: float, k: Any, *, gpu: Any = "h100", precision: str | Precision = "bf16",
           grouped: bool = False, n_groups: int = 1, compute: ComputeModel | None = None) -> float:
    """Seconds of the GEMM C[m, n] = A[m, k] B[k, n] on one GPU (catalog name or part) in
    ``precision`` (a GEMM format, "bf16", "fp8", "fp8-blockwise", "mxfp8", "nvfp4", or a
    recipe name or :class:`Precision`): its 2 m n k FLOPs at the format's dense peak times
    :data:`MAMF_FRACTION` times wave quantization over the SMs (:data:`GEMM_TILE`), and no
    less than moving A, B and C (BF16) at HBM bandwidth.

    ``grouped=True`` is a grouped expert GEMM, one problem per expert, all sharing ``n``:
    ``n_groups`` problems of ``m`` x ``k`` each, or one per entry of a sequence ``m`` or ``k``
    (a number in the other is every problem's). Each expert's tokens are ``m`` in its forward
    and data-gradient GEMMs and ``k`` in its weight-gradient GEMM (each expert's gradient
    [m, n] from its own tokens). Each problem's rows are padded to whole tiles, all tiles run
    in one kernel's waves, the best rate is :data:`GROUPED_GEMM_FRACTION` of the dense one,
    and every problem reads its own B and writes its own C.

    Example::

        gemm = fs.training.gemm_s
        gemm(8192, 8192, 8192)                      # 1.43e-03 s on an H100: 768 TFLOP/s
        gemm(8192, 8192, 8192, precision="fp8")     # 8.1e-04 s
        gemm(64, 4096, 7168, grouped=True, n_groups=32)   # 7.2e-04 s: bound by reading 32 experts' weights
        gemm(7168, 4096, [64] * 32, grouped=True)   # 7.2e-04 s: their 32 weight gradients, each written
    """
    g = _gpu(gpu)
    cm = _checked_compute("gemm_s", compute)
    fmt = _format(precision)
    n = real_in("gemm_s: n", n, 0.0, math.inf, open_high=True)
    if flag("gemm_s: grouped", grouped):
        ms, ks = _per_group("m", m), _per_group("k", k)
        if len(ms) > 1 and len(ks) > 1 and len(ms) != len(ks):
            raise InvalidArgumentError(f"gemm_s: m and k give {len(ms)} and {len(ks)} groups: give one size in either, "
                                       "or as many in both")
        count = max(len(ms), len(ks))
        # (m, k, how many problems of that shape): n_groups alike, or one per entry
        problems = ([(ms[0], ks[0], integer("gemm_s: n_groups", n_groups, COUNT))] if count == 1 else
                    [(ms[i if len(ms) > 1 else 0], ks[i if len(ks) > 1 else 0], 1) for i in range(count)])
    else:
        problems = [(real_in("gemm_s: m", m, 0.0, math.inf, open_high=True),
                     real_in("gemm_s: k", k, 0.0, math.inf, open_high=True), 1)]
    problems = [p for p in problems if p[0] > 0 and p[1] > 0]
    if not problems or n == 0:
        return 0.0
    tm, tn = GEMM_TILE
    tiles = sum(c * math.ceil(x / tm) for x, _, c in problems) * math.ceil(n / tn)
    waves = tiles / gpu_sms(g)
    frac = cm.gemm_efficiency if cm.gemm_efficiency is not None else _fraction(MAMF_FRACTION, g, fmt)
    if grouped:
        frac *= GROUPED_GEMM_FRACTION
    flops = sum(c * 2.0 * x * n * y for x, y, c in problems)
    flop_s = flops / (_peak(g, fmt) * frac * waves / math.ceil(waves))
    b = _FORMAT_BYTES[fmt]
    moved_s = sum(c * ((x * y + y * n) * b + x * n * 2.0) for x, y, c in problems) / _hbm_Bps(g, cm)
    return max(flop_s, moved_s)


def attention_s(flops: float, *, gpu: Any = "h100", backward: bool = False, fp8: bool = False,
                compute: ComputeModel | None = None) -> float:
    """Seconds of fused attention whose forward is ``flops`` (FlashAttention's count, causal
    masking counted): the forward at :data:`ATTENTION_FRACTION` of the peak, or the backward
    (``backward=True``, 2.5 x the FLOPs) at its own fraction; BF16, or FP8 with ``fp8``.

    Example::

        m = fs.training.model("llama3-8b")
        fs.training.attention_s(m.attention_core_flops())   # 1.2e-03 s: 32 heads, 8,192 tokens, on an H100
    """
    g = _gpu(gpu)
    cm = _checked_compute("attention_s", compute)
    fmt = "fp8" if fp8 else "bf16"
    flops = real_in("attention_s: flops", flops, 0.0, math.inf, open_high=True)
    if cm.attention_efficiency is not None:
        frac = cm.attention_efficiency
    else:
        frac = _fraction(ATTENTION_FRACTION, g, fmt)[1 if backward else 0]
    return (2.5 if backward else 1.0) * flops / (_peak(g, fmt) * frac)


def gpu_sms(gpu: Any = "h100") -> int:
    """Streaming multiprocessors of a GPU (catalog name or part): its catalog ``sms``, else its
    architecture's default (H100 SXM's 132 for Hopper, B200's 148 for Blackwell, [assumed]).

    Example::

        fs.training.compute.gpu_sms("h100"), fs.training.compute.gpu_sms("gb200")   # (132, 148)
    """
    g = _gpu(gpu)
    return int(g.get("sms") or _DEFAULT_SMS[g.get("arch") or "hopper"])


def compute_beside_comm_s(compute_s: float, overlaps: Any = (), *, gpu: Any = "h100") -> float:
    """Seconds of ``compute_s`` of compute while communication kernels run beside it and hold
    SMs: ``overlaps`` is a sequence of (seconds the communication runs on an idle fabric, SMs
    its kernels hold). Each one's part of the compute (its seconds, at most the compute's) runs
    on the SMs it leaves, a fraction 1 - f of the GPU's (:func:`gpu_sms`), f = SMs held / SMs,
    so it takes 1 / (1 - f) as long: compute_s + sum of min(compute_s, overlap_s) f / (1 - f).
    Communications held at once add their shares (each counted as if alone).

    Example::

        # a 10 ms backward beside a 4 ms reduce-scatter on 16 channels (16 SMs of an H100's 132)
        fs.training.compute.compute_beside_comm_s(10e-3, [(4e-3, 16)])   # 0.01055 s
    """
    at = "compute_beside_comm_s:"
    compute_s = real_in(f"{at} compute_s", compute_s, 0.0, math.inf, open_high=True)
    sms = gpu_sms(gpu)
    extra = 0.0
    pairs = many(f"{at} overlaps", overlaps, "a sequence of (seconds, SMs held) pairs")
    for i, pair in enumerate(pairs):
        if one_value(pair) or isinstance(pair, Mapping) or len(pair := tuple(pair)) != 2:
            raise InvalidArgumentError(f"{at} overlaps[{i}] must be a pair (seconds the communication runs, SMs its "
                                       f"kernels hold), got {type(pair).__name__} {shown(pair)}")
        overlap_s = real_in(f"{at} overlaps[{i}] seconds", pair[0], 0.0, math.inf, open_high=True)
        held = real_in(f"{at} overlaps[{i}] SMs held", pair[1], 0.0, math.inf, open_high=True)
        f = min(held, sms - 1.0) / sms
        if overlap_s > 0 and f > 0:
            extra += min(compute_s, overlap_s) * f / (1.0 - f)
    return compute_s + extra


def memory_bound_s(n_bytes: float, *, gpu: Any = "h100", compute: ComputeModel | None = None) -> float:
    """Seconds of memory-bound work that moves ``n_bytes`` through HBM: at the GPU's HBM
    bandwidth times ``hbm_efficiency``.

    Example::

        fs.training.memory_bound_s(2.68e9)   # 1.0e-03 s on an H100 (3.35 TB/s x 0.8)
    """
    n_bytes = real_in("memory_bound_s: n_bytes", n_bytes, 0.0, math.inf, open_high=True)
    return n_bytes / _hbm_Bps(_gpu(gpu), _checked_compute("memory_bound_s", compute))


#: How many GEMMs of m / n rows each the row-split GEMMs beside TP communication run as, with
#: ``tp_comm_overlap`` (Transformer Engine's userbuffers overlap, transformer_engine/pytorch/
#: module/base.py, ``initialize_ub``): "ring_exchange" for the GEMMs after an all-gather (QKV
#: and FC1 forward, projection and FC2 data gradient) runs one GEMM per TP rank's chunk, tp
#: GEMMs; "pipeline" for those before a reduce-scatter (projection and FC2 forward) splits the
#: GEMM in ``num_splits`` = 4; "bulk" (the rest) does not split it.
TP_OVERLAP_PIPELINE_SPLITS = 4


#: SMs Transformer Engine's userbuffers kernels hold while each of a layer's four TP
#: communications of one direction overlaps its GEMM (``tp_comm_overlap``), per architecture,
#: as NeMo configures them for Llama 3.1 405B (the largest dense model it ships configs for):
#: NVIDIA/NeMo@0594a700:nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py,
#: ``userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192`` (Hopper) and
#: ``userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192`` (Blackwell). Forward: the
#: all-gathers before QKV and FC1 are ring exchanges (``RingExchangeOverlapCfg``), peer-to-peer
#: copies on the copy engines (0 SMs: Transformer Engine's ``initialize_ub`` adds each buffer with
#: ``use_ce=True`` by default, transformer_engine/pytorch/module/base.py); the reduce-scatters after the projection and FC2 are
#: "pipeline" overlaps on ``num_sm`` 24 and 8 (Hopper), 32 and 8 (Blackwell). Backward: the
#: all-gathers before the projection's and FC2's data gradients are ring exchanges (0); the
#: reduce-scatters of QKV's and FC1's data gradients are "bulk" overlaps beside their weight
#: gradients, ``qkv_wgrad`` and ``fc1_wgrad`` 24 and 2 (both architectures). "gather_again":
#: the backward's all-gathers of QKV's and FC1's inputs again for their weight gradients
#: (sequence parallelism keeps only the local shard), "bulk" overlaps beside the data
#: gradients, ``qkv_dgrad`` and ``fc1_dgrad``, 2 SMs each (both architectures).
TP_OVERLAP_SMS: dict[str, dict[str, tuple[int, ...]]] = {
    "hopper": {"forward": (0, 24, 0, 8), "backward": (0, 0, 24, 2), "gather_again": (2, 2)},
    "blackwell": {"forward": (0, 32, 0, 8), "backward": (0, 0, 24, 2), "gather_again": (2, 2)},
}


#: Megatron-LM's ``--recompute-modules`` names (megatron/core/transformer/transformer_config.py,
#: ``recompute_modules``), each a part of a layer whose forward is re-run before its backward
#: instead of keeping its activations: the attention kernel, the norms, latent attention's up
#: projections, the dense MLP, the experts' activation, the whole MoE and the shared experts.
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe", "shared_experts")


class _Work:
    """Seconds (forward, backward) of a layer's operations, by module, and its forward FLOPs."""

    __slots__ = ("gpu", "prec", "cm", "by_module", "flops")

    def __init__(self, gpu: Any, prec: Precision, cm: ComputeModel) -> None:
        self.gpu, self.prec, self.cm = gpu, prec, cm
        self.by_module: dict[str, list[float]] = {}
        self.flops = 0.0

    def _add(self, module: str, f: float, b: float) -> None:
        t = self.by_module.setdefault(module, [0.0, 0.0])
        t[0] += f
        t[1] += b

    def linear(self, module: str, m: float, n: float, k: float, *, quantized: bool = True,
               splits: tuple[int, int] = (1, 1), cast_rows: float | None = None) -> None:
        """A linear layer y[m, n] = x[m, k] w[k, n]: the forward GEMM, the backward's data- and
        weight-gradient GEMMs, and with a low-precision recipe the casts of x (forward) and of
        y's gradient (backward). ``splits``: the forward and data-gradient GEMMs run as that
        many GEMMs of m / split rows each (TP communication overlapped chunk by chunk).
        ``cast_rows``: the rows of x that are quantized (with sequence parallelism the local
        shard, before its all-gather)."""
        fmt = self.prec.gemm_format if quantized else "bf16"
        g = dict(gpu=self.gpu, precision=fmt, compute=self.cm)
        sf, sd = splits
        f = sf * gemm_s(m / sf, n, k, **g)
        b = sd * gemm_s(m / sd, k, n, **g) + gemm_s(k, n, m, **g)
        if quantized and self.prec.cast_bytes_per_value:
            c = self.prec.cast_bytes_per_value
            f += memory_bound_s(c * (m if cast_rows is None else cast_rows) * k, gpu=self.gpu, compute=self.cm)
            b += memory_bound_s(c * m * n, gpu=self.gpu, compute=self.cm)
        self.flops += 2.0 * m * n * k
        self._add(module, f, b)

    def attention(self, flops: float) -> None:
        fp8 = self.prec.fp8_attention
        self.flops += flops
        self._add("core_attn", attention_s(flops, gpu=self.gpu, fp8=fp8, compute=self.cm),
                  attention_s(flops, gpu=self.gpu, fp8=fp8, backward=True, compute=self.cm))

    def elementwise(self, module: str, op: str, values: float) -> None:
        f, b = self.cm.bytes_per_value[op]
        self._add(module, memory_bound_s(f * values, gpu=self.gpu, compute=self.cm),
                  memory_bound_s(b * values, gpu=self.gpu, compute=self.cm))


def layer_work(model: Model | str, i: int, *, tokens: float, tp: int = 1, cp: int = 1, sequence_parallel: bool = False,
               micro_batch_size: int = 1, gpu: Any = "h100", precision: Precision | None = None,
               compute: ComputeModel | None = None, tp_comm_overlap: bool = False,
               rotary: bool = True) -> tuple[dict[str, tuple[float, float]], float]:
    """Layer ``i``'s forward and backward seconds on one GPU, by module (the
    :data:`RECOMPUTE_MODULES` names, plus "qkv", "proj", "residual" and "rotary"), and its
    forward FLOPs: ``tokens`` on the GPU (micro-batch x sequence / cp), its 1/``tp`` shard of
    the weights and heads (at least one KV head), norms and residuals on tokens / tp with
    ``sequence_parallel``. A MoE layer's work here is its attention, router and shared
    experts: its routed experts depend on the routing of the step's tokens and are timed by
    the step (``moe.expert_work``). ``tp_comm_overlap``: the GEMMs beside TP communication
    run in chunks (:data:`TP_OVERLAP_PIPELINE_SPLITS`). ``rotary``: rotary position embedding
    on Q and K.

    Example::

        m = fs.training.model("llama3-8b")
        work, flops = fs.training.layer_work(m, 0, tokens=8192, rotary=False)
        sum(f + b for f, b in work.values())   # 0.0249 s forward + backward on an H100 (measured: 0.0238)
    """
    m = _model(model)
    at = "layer_work:"
    i = integer(f"{at} i (the layer)", i, (0, m.layers))
    tokens = real_in(f"{at} tokens", tokens, 0.0, math.inf, open_high=True)
    tp, cp, micro_batch_size = (integer(f"{at} {k}", v, COUNT) for k, v in (("tp", tp), ("cp", cp),
                                                                            ("micro_batch_size", micro_batch_size)))
    for k, v in (("sequence_parallel", sequence_parallel), ("tp_comm_overlap", tp_comm_overlap), ("rotary", rotary)):
        flag(f"{at} {k}", v)
    w = _Work(_gpu(gpu), _as_precision(precision), _checked_compute("layer_work", compute))
    h, hd = m.hidden, m._head_dim
    T = tokens
    Tn = tokens / (tp if sequence_parallel else 1)
    ring, pipe = (tp, TP_OVERLAP_PIPELINE_SPLITS) if tp_comm_overlap and tp > 1 else (1, 1)
    heads = m.heads / tp
    # norms and residual adds (sequence parallelism shards them over TP)
    w.elementwise("layernorm", "norm", 2 * Tn * h)
    w.elementwise("residual", "residual", 2 * Tn * h)
    if m.kv_lora_rank:  # latent attention: down projections, then per-head up projections
        dqk, dv = m._d_qk, m._d_v
        down_q = m.q_lora_rank
        w.linear("qkv", T, (down_q + m.kv_lora_rank + m.qk_rope_head_dim), h, cast_rows=Tn)
        if down_q:
            w.elementwise("layernorm", "norm", Tn * down_q)
            w.linear("mla_up_proj", T, heads * dqk, down_q)
        else:
            w.linear("qkv", T, heads * dqk, h)
        w.elementwise("layernorm", "norm", Tn * m.kv_lora_rank)
        w.linear("mla_up_proj", T, heads * (hd + dv), m.kv_lora_rank)
        q_k = heads * 2 * m.qk_rope_head_dim
    else:
        dv = hd
        kvh = max(1.0, m.kv_heads / tp)
        w.linear("qkv", T, (heads + 2 * kvh) * hd, h, splits=(ring, 1), cast_rows=Tn)
        q_k = (heads + kvh) * hd
    if rotary:
        w.elementwise("rotary", "rotary", T * q_k)
    w.attention(micro_batch_size * m.attention_core_flops() / tp / cp)
    w.linear("proj", T, h, heads * dv, splits=(pipe, ring))
    act = "swiglu" if m.gated_mlp else "gelu"
    up = 2 if m.gated_mlp else 1
    if not m.is_moe_layer(i):
        f = m.ffn / tp
        w.linear("mlp", T, up * f, h, splits=(ring, 1), cast_rows=Tn)
        w.elementwise("mlp", act, T * f)
        w.linear("mlp", T, h, f, splits=(pipe, ring))
    else:
        # the router, in BF16, on the layer's input as it holds it: with sequence parallelism
        # its 1/tp of the tokens (Megatron's MoELayer routes the sequence-parallel hidden
        # states before the dispatch: megatron/core/transformer/moe/moe_layer.py, route;
        # router.py, TopKRouter.forward)
        w.linear("moe", Tn, m.n_experts, h, quantized=False)
        if m.n_shared_experts:
            fs_ = m.n_shared_experts * m.expert_ffn / tp
            w.linear("shared_experts", T, up * fs_, h)
            w.elementwise("shared_experts", act, T * fs_)
            w.linear("shared_experts", T, h, fs_)
    return {k: (v[0], v[1]) for k, v in w.by_module.items()}, w.flops


def logits_work(model: Model, *, tokens: float, tp: int = 1, gpu: Any = "h100",
                compute: ComputeModel | None = None) -> tuple[float, float, float]:
    """The output layer and loss on one GPU: (forward s, backward s, forward FLOPs) of the
    vocabulary projection (BF16, as Megatron-LM keeps the output layer out of FP8) of
    ``tokens`` over its 1/``tp`` vocabulary shard and the cross-entropy over its logits.

    Example::

        fwd_s, bwd_s, flops = fs.training.logits_work(fs.training.model("llama3-8b"), tokens=8192)
        flops   # 8.6e12 = 2 x 8,192 x 128,256 x 4,096
    """
    w = _Work(_gpu(gpu), Precision(), _checked_compute("logits_work", compute))
    w.linear("logits", tokens, model.vocab / tp, model.hidden)
    w.elementwise("logits", "loss", tokens * model.vocab / tp)
    f, b = w.by_module["logits"]
    return f, b, w.flops


#: Bytes Adam moves per parameter it updates with FP32 moments (read fp32 grad, master, m, v;
#: write master, m, v; write the bf16 weight): 4 x 4 + 3 x 4 + 2.
ADAM_BYTES_PER_PARAM = 30.0


def adam_bytes_per_param(moment_bytes: int = 4) -> float:
    """Bytes Adam moves per parameter with moments of ``moment_bytes`` each (4: FP32, 2: BF16):
    the FP32 gradient and main weight read, the main weight written, both moments read and
    written, and the BF16 weight written.

    Example::

        fs.training.compute.adam_bytes_per_param(4), fs.training.compute.adam_bytes_per_param(2)   # (30.0, 22.0)
    """
    return ADAM_BYTES_PER_PARAM - 4.0 * (4 - moment_bytes)


def tp_collectives(model: Model, i: int) -> int:
    """TP collectives (reduce-scatter and all-gather pairs with sequence parallelism, else
    all-reduces) of layer ``i`` per direction over the dense TP group, each of micro-batch x
    sequence x hidden values (Megatron-LM with sequence parallelism): a dense layer's attention
    and MLP, 2; a MoE layer's attention, and its shared experts where it has them (a TP-sharded
    MLP: megatron/core/transformer/moe/shared_experts.py, ``SharedExpertMLP``); the routed
    experts use none of the dense TP group (their tokens go over the expert-TP group:
    :func:`~.moe.etp_bytes`).

    Example::

        n = fs.training.compute.tp_collectives
        n(fs.training.model("deepseek-v3"), 0), n(fs.training.model("deepseek-v3"), 3)   # (2, 2): dense; attention and shared experts
        n(fs.training.model("mixtral-8x7b"), 0)   # 1: attention alone
    """
    if not model.is_moe_layer(i):
        return 2
    return 1 + (1 if model.n_shared_experts else 0)


@dataclass
class _Chunk:
    """One model chunk of one stage (virtual stage ``c * pp + s``)."""

    stage: int
    chunk: int
    layers: list[int]
    recomputed: int = 0  # layers fully recomputed before their backward
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
    m, p = step.model, step.par
    tokens = p.micro_batch_size * m.seq_len / p.cp  # per GPU (one CP rank)
    act_bytes = 2.0
    out = []
    split = _split_layers(step)
    kinds: dict[tuple[bool, bool], tuple[float, float, float]] = {}  # per (MoE, recomputed): fwd s, bwd s, FLOPs

    def layer(i: int, full: bool) -> tuple[float, float, float]:
        key = (m.is_moe_layer(i), full)
        if key not in kinds:
            work, flops = layer_work(m, i, tokens=tokens, tp=p.tp, cp=p.cp, sequence_parallel=bool(p.sequence_parallel),
                                     micro_batch_size=p.micro_batch_size, tp_comm_overlap=p.tp_comm_overlap,
                                     gpu=step.gpu, precision=step.precision, compute=step.compute)
            f = sum(t[0] for t in work.values())
            b = sum(t[1] for t in work.values())
            if full:  # full recomputation: the whole forward again before the backward
                b += f
            else:  # the modules recomputed before their backward: their forward again
                b += sum(work[name][0] for name in modules if name in work)
            kinds[key] = (f, b, flops)
        return kinds[key]

    modules = p.recompute_modules + (("core_attn",) if p.selective_recompute else ())
    for s in range(p.pp):
        row = []
        for c in range(p.virtual_stages):
            ch = _Chunk(s, c, split[s][c])
            ch.recomputed = (len(ch.layers) if p.recompute_layers is None else min(p.recompute_layers, len(ch.layers))
                             ) if p.recompute else 0
            for k_, i in enumerate(ch.layers):
                f, b, flops = layer(i, k_ < ch.recomputed)
                ch.fwd_s += f
                ch.bwd_s += b
                ch.flops_fwd += flops
                if m.is_moe_layer(i):  # attention, router and shared experts; the routed experts are moe.py's
                    ch.params += (m.attention_params() + m.hidden * m.n_experts + m.n_shared_experts * m.expert_params()) / p.tp
                else:
                    ch.params += m.layer_params(i) / p.tp
                ch.tp_bytes += tp_collectives(m, i) * tokens * m.hidden * act_bytes
                if p.cp > 1:  # K and V of the local tokens, per ring step
                    kv = 2 * tokens * (m.kv_lora_rank + m.qk_rope_head_dim if m.kv_lora_rank else m.kv_heads * m._head_dim) / p.tp * act_bytes
                    ch.cp_bytes += kv * (p.cp - 1)
            vs = c * p.pp + s
            if vs == p.pp * p.virtual_stages - 1:  # logits + loss
                # never recomputed: Megatron's full recomputation checkpoints the transformer
                # block's layers (TransformerBlock.forward, megatron/core/transformer/
                # transformer_block.py, through megatron/core/recompute.py's checkpointed_forward);
                # the output layer and the loss run after the block, their activations kept
                f, b, flops = logits_work(m, tokens=tokens, tp=p.tp, gpu=step.gpu, compute=step.compute)
                ch.fwd_s += f
                ch.bwd_s += b
                ch.flops_fwd += flops
                ch.params += m.vocab * m.hidden / p.tp
            if vs == 0:
                ch.params += m.vocab * m.hidden / p.tp if not (m.tied_embeddings and p.pp * p.virtual_stages == 1) else 0.0
            if p.tp == 1:
                ch.tp_bytes = 0.0
            row.append(ch)
        out.append(row)
    return out
