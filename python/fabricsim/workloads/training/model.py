"""Decoder-only transformers (:class:`Model`: sizes, parameters, FLOPs) and the preset models
(``data/models.json``, each figure with its source)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any, Mapping, cast

import numpy as np

from ..._checks import COUNT, U32, did_you_mean, flag, integer, real_in, shown
from ...exceptions import InvalidArgumentError

__all__ = ["Model", "model", "models"]


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. Sizes are counts (not bytes).

    ``ffn`` is the dense MLP width (SwiGLU: ``gated_mlp=True``, three matrices; else two).
    Mixture of experts: ``n_experts`` routed experts of width ``expert_ffn``, of which
    ``experts_per_token`` are visited, plus ``n_shared_experts`` always visited; layers
    ``first_dense_layers`` onward are MoE every ``moe_layer_frequency``-th layer. Multi-head
    latent attention (DeepSeek) when ``kv_lora_rank`` is set. ``mtp_layers`` multi-token
    prediction modules (DeepSeek-V3, arXiv:2412.19437 section 2.2: each a projection of 2 x hidden
    to hidden and one transformer layer like the last, sharing the embedding and output head)
    run after the last layer in training.

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
    mtp_layers: int = 0
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

            m = fs.training.model("llama3-8b")   # hidden 4096: 32 heads of 128, 8 KV heads
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

            m = fs.training.model("mixtral-8x7b")   # each token goes to 2 of 8 experts
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

    def mtp_params(self) -> int:
        """Weights of the multi-token prediction modules: each the 2 x hidden to hidden
        projection and a layer like the last (its norms not counted, as nowhere here).

        Example::

            ds = fs.training.model("deepseek-v3")   # one MTP module
            ds.mtp_params() / 1e9                    # about 11.6: a MoE layer and the 2h x h projection
        """
        return self.mtp_layers * (2 * self.hidden * self.hidden + self.layer_params(self.layers - 1))

    @property
    def n_params(self) -> int:
        """Total weights: every layer (all experts), the MTP modules and the embeddings."""
        return sum(self.layer_params(i) for i in range(self.layers)) + self.mtp_params() + self.embedding_params()

    @property
    def n_active_params(self) -> int:
        """Weights a token uses: every layer with only its routed and shared experts, plus the embeddings."""
        return sum(self.layer_active_params(i) for i in range(self.layers)) + self.embedding_params()

    def mtp_forward_flops(self, seq_len: float | None = None) -> float:
        """Forward FLOPs of the multi-token prediction modules for one sequence: per module its
        projection, a layer like the last, and the shared output head's logits.

        Example::

            ds = fs.training.model("deepseek-v3")
            ds.mtp_forward_flops() / ds.forward_flops()   # about 0.039: one more layer and logits
        """
        s = self._seq(seq_len)
        last = self.layer_forward_flops(self.layers - 1, s)
        return self.mtp_layers * (2.0 * s * 2 * self.hidden * self.hidden + last + self.logits_forward_flops(s))

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
        """Forward FLOPs of the whole model for one sequence (every layer, the logits and the
        multi-token prediction modules).

        Example::

            fs.training.model("llama3-8b").forward_flops()   # 1.4e14 for 8192 tokens
        """
        return (sum(self.layer_forward_flops(i, seq_len) for i in range(self.layers)) + self.logits_forward_flops(seq_len)
                + (self.mtp_forward_flops(seq_len) if self.mtp_layers else 0.0))

    def model_flops_per_sequence(self) -> float:
        """Forward + backward (3 x forward), the FLOPs MFU counts.

        Example::

            m = fs.training.model("llama3-8b")
            m.model_flops_per_sequence() == 3 * m.forward_flops()   # True: both 4.2e14
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
                        "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "mtp_layers")},
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
