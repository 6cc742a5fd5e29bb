"""Training precision recipes (:class:`Precision`), as Transformer Engine and Megatron-LM name
them: which format the linear layers' GEMMs run in, what quantizing their inputs costs in
memory traffic, and how many bytes weights take where they are stored or gathered.

The recipes (Transformer Engine's ``common/recipe`` module, https://github.com/NVIDIA/
TransformerEngine/blob/main/transformer_engine/common/recipe/__init__.py; Megatron-LM's
``--fp8-recipe`` choices ``delayed``, ``tensorwise``, ``blockwise``, ``mxfp8`` and
``--fp4-recipe nvfp4``, https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/arguments.py):

* ``bf16``: every GEMM in BF16 with FP32 main weights.
* ``fp8-delayed``: FP8 (E4M3 forward, E5M2 gradients: the "hybrid" format) with one scale per
  tensor from an amax history; the cast, its transpose and the amax are one fused kernel.
* ``fp8-current``: FP8 with one scale per tensor from the tensor's own amax, which needs a pass
  over the tensor before the cast.
* ``fp8-blockwise``: FP8 with one FP32 scale per 1 x 128 activation tile and 128 x 128 weight
  block (DeepSeek-V3, arXiv:2412.19437, section 3.3.2).
* ``mxfp8``: E4M3 with one E8M0 scale per 32 values (OCP Microscaling Formats v1.0,
  https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf);
  Blackwell only.
* ``nvfp4``: E2M1 with one E4M3 scale per 16 values and one FP32 scale per tensor (NVIDIA,
  https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/);
  Blackwell only.

Attention runs in BF16 unless ``fp8_attention`` is set; norms, activations, the router, the
loss and the optimizer stay in BF16/FP32 whatever the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import choice, flag, known_fields
from ...exceptions import InvalidArgumentError

__all__ = ["Precision", "precision", "RECIPES"]


@dataclass(frozen=True)
class _Recipe:
    gemm_format: str  # the GEMM's input format, the key of the GPU's peak and of its MAMF fraction
    cast_bytes_per_value: float  # HBM bytes to quantize one BF16 value a GEMM reads (see Precision)
    weight_bytes: float  # bytes per parameter of a quantized weight copy (values and scales)
    blackwell_only: bool
    activation_bytes: float  # bytes per value of a quantized activation, row-wise (values and scales)
    block_scaled: bool  # scales per block of values: row-wise and column-wise copies differ


#: Bytes moved to quantize one BF16 value for a GEMM, and to store one quantized weight value.
#: A fused cast reads the BF16 value (2 bytes) and writes it twice in the low format, row-wise
#: for the forward GEMM and column-wise (transposed) for the weight-gradient GEMM, as
#: Transformer Engine's cast-transpose kernels do (transformer_engine/common/transpose/
#: cast_transpose.cu): 2 + 1 + 1 for FP8. Current scaling first reads the tensor for its amax
#: (+2). Block and micro-block scales add their scale bytes per value: FP32 per 128 values
#: (blockwise), one byte E8M0 per 32 (MXFP8), one byte E4M3 per 16 (NVFP4, whose per-tensor
#: scale also needs the amax pass, +2). Weight copies: the values plus their scales; a quantized
#: activation, row-wise: its values plus the scales of its rows' blocks (1 x 128 for blockwise).
RECIPES: dict[str, _Recipe] = {
    "bf16": _Recipe("bf16", 0.0, 2.0, False, 2.0, False),
    "fp8-delayed": _Recipe("fp8", 2.0 + 1.0 + 1.0, 1.0, False, 1.0, False),
    "fp8-current": _Recipe("fp8", 2.0 + 2.0 + 1.0 + 1.0, 1.0, False, 1.0, False),
    "fp8-blockwise": _Recipe("fp8-blockwise", 2.0 + 2 * (1.0 + 4.0 / 128), 1.0 + 4.0 / 128 ** 2, False, 1.0 + 4.0 / 128,
                             True),
    "mxfp8": _Recipe("mxfp8", 2.0 + 2 * (1.0 + 1.0 / 32), 1.0 + 1.0 / 32, True, 1.0 + 1.0 / 32, True),
    "nvfp4": _Recipe("nvfp4", 2.0 + 2.0 + 2 * (0.5 + 1.0 / 16), 0.5 + 1.0 / 16, True, 0.5 + 1.0 / 16, True),
}


#: Other spellings -> the recipe: Transformer Engine's and Megatron-LM's names, NeMo's
#: ``--fp8_recipe`` short names (ds, cs, mxfp8) and the bare "fp8" (TE's default recipe, delayed scaling).
_ALIASES = {
    "fp8": "fp8-delayed", "fp8-ds": "fp8-delayed", "delayed": "fp8-delayed", "ds": "fp8-delayed",
    "fp8-cs": "fp8-current", "tensorwise": "fp8-current", "current": "fp8-current", "cs": "fp8-current",
    "fp8-tensorwise": "fp8-current",
    "blockwise": "fp8-blockwise", "fp8-block": "fp8-blockwise", "subchannel": "fp8-blockwise",
    "fp4": "nvfp4",
}


@known_fields
@dataclass(frozen=True)
class Precision:
    """A training precision: ``recipe`` (see the module docstring: "bf16", "fp8-delayed",
    "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4", or the aliases "fp8", "fp8-ds", "fp8-cs",
    "tensorwise", "blockwise", "fp4"), ``fp8_attention`` (attention's GEMMs in FP8, as
    Transformer Engine's FP8 dot-product attention), ``param_gather`` (the data-parallel
    parameter all-gather and FSDP's gathers carry the quantized weights, Megatron's
    ``--fp8-param-gather``; default: on for every recipe but bf16, as Megatron-Bridge's FP8,
    MXFP8 and NVFP4 performance recipes set it).

    Example::

        p = fs.training.Precision("fp8-cs")
        p.recipe, p.gemm_format, p.param_gather   # ('fp8-current', 'fp8', True)
        p.param_gather_bytes                       # 1.0 byte per parameter
        fs.training.Precision("bf16").param_gather_bytes   # 2.0
    """

    recipe: str = "bf16"
    fp8_attention: bool = False
    param_gather: bool | None = None

    def __post_init__(self) -> None:
        key = self.recipe.strip().lower() if isinstance(self.recipe, str) else self.recipe
        key = _ALIASES.get(key, key) if isinstance(key, str) else key
        object.__setattr__(self, "recipe", choice("precision", key, tuple(RECIPES) + tuple(_ALIASES)))
        object.__setattr__(self, "recipe", _ALIASES.get(self.recipe, self.recipe))
        flag("Precision: fp8_attention", self.fp8_attention)
        if self.param_gather is None:
            object.__setattr__(self, "param_gather", self.recipe != "bf16")
        flag("Precision: param_gather", self.param_gather)

    @property
    def _r(self) -> _Recipe:
        return RECIPES[self.recipe]

    @property
    def gemm_format(self) -> str:
        """The linear layers' GEMM format: "bf16", "fp8", "fp8-blockwise", "mxfp8" or "nvfp4"."""
        return self._r.gemm_format

    @property
    def cast_bytes_per_value(self) -> float:
        """HBM bytes moved to quantize one BF16 value a linear layer's GEMM reads (0 for bf16)."""
        return self._r.cast_bytes_per_value

    @property
    def param_gather_bytes(self) -> float:
        """Bytes per parameter the parameter all-gathers carry: the quantized weight with
        ``param_gather``, else BF16's 2."""
        return self._r.weight_bytes if self.param_gather else 2.0

    @property
    def quantized_weight_bytes(self) -> float:
        """Bytes per parameter of the quantized weight copy the GEMMs read (0 for bf16): with
        ``param_gather`` the copy is the stored weight, else a cache beside the BF16 weight,
        kept row-wise and column-wise (Transformer Engine keeps both for the forward and
        the backward GEMMs)."""
        if self.recipe == "bf16":
            return 0.0
        return self._r.weight_bytes * (1.0 if self.param_gather else 2.0)

    @property
    def stored_weight_bytes(self) -> float:
        """Bytes per parameter of the weights a GPU keeps for its forward and backward: BF16's
        2 plus the quantized cache, or, with ``param_gather``, the quantized weight alone
        (its FP32 main copy is the optimizer's)."""
        return self.param_gather_bytes if self.param_gather else 2.0 + self.quantized_weight_bytes

    @property
    def saved_input_bytes(self) -> float:
        """Bytes per value of a linear layer's input kept for its weight gradient: the GEMM's
        format (with its block scales), BF16's 2 without a low-precision recipe."""
        return self._r.weight_bytes

    def sequence_parallel_gather_bytes(self, *, backward: bool = False, userbuffers: bool = False) -> float:
        """Bytes per value a sequence-parallel all-gather carries to a linear layer's GEMM:
        BF16's 2, or with a low-precision recipe the quantized tensor, as Transformer Engine
        quantizes the local shard and gathers that (``gather_along_first_dim`` with the
        quantizer, transformer_engine/pytorch/distributed.py, called by ``_linear_forward_impl``
        in module/linear.py and the layer-norm linear's forward in module/layernorm_linear.py
        for the input, ``grad_output_preprocess`` in module/base.py for the output's gradient;
        NVIDIA/TransformerEngine@d0067d0d). The forward gathers the input row-wise, values and
        their scales. The backward (``backward=True``) gathers the output's gradient for the
        data gradient (row-wise) and the weight gradient (column-wise): per-tensor FP8
        gathers one copy and transposes it after, block-scaled formats gather both copies,
        except through Transformer Engine's userbuffers (``userbuffers=True``, the TP overlap),
        which carry one usage at a time.

        Example::

            fs.training.Precision("fp8").sequence_parallel_gather_bytes()                # 1.0
            fs.training.Precision("mxfp8").sequence_parallel_gather_bytes(backward=True)  # 2.0625
        """
        r = self._r
        copies = 2 if backward and r.block_scaled and not userbuffers else 1
        return copies * r.activation_bytes

    def check_gpu(self, gpu: object) -> None:
        """Refuse a recipe the GPU cannot run (MXFP8 and NVFP4 need Blackwell), naming both.

        Example::

            fs.training.Precision("nvfp4").check_gpu(fs.catalog.part("gb300"))   # fine: Blackwell
            try:
                fs.training.Precision("nvfp4").check_gpu(fs.catalog.part("h100"))
            except fs.InvalidArgumentError as e:
                print(e)   # precision 'nvfp4' needs a Blackwell GPU (block-scaled tensor cores), but 'h100' is hopper
        """
        arch = getattr(gpu, "get", lambda k, d=None: d)("arch")
        if self._r.blackwell_only and arch != "blackwell":
            raise InvalidArgumentError(
                f"precision {self.recipe!r} needs a Blackwell GPU (block-scaled tensor cores), but "
                f"{getattr(gpu, 'name', gpu)!r} is {arch or 'of unknown architecture'}")


def precision(value: str | Precision | None) -> Precision:
    """A :class:`Precision` from a recipe name, a Precision as is, or None (BF16).

    Example::

        fs.training.precision("FP8").recipe   # 'fp8-delayed'
    """
    if value is None:
        return Precision()
    if isinstance(value, Precision):
        return value
    if not isinstance(value, str):
        raise InvalidArgumentError(f"precision must be a recipe name ({', '.join(RECIPES)}) or a "
                                   f"fabricsim.training.Precision, got {type(value).__name__} {value!r}")
    return Precision(value)
