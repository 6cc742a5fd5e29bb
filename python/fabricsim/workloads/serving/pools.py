"""Prefill and decode pools: the instances (TP groups) each pool's GPUs are cut into, checked
against the model and the fabric, and the KV cache each request hands from one to the other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._checks import COUNT, integer, integers, number, one_value, positive, quantities
from ...exceptions import InvalidArgumentError
from ...fabrics import Fabric
from ..training import Model
from ..training import model as _model

__all__ = ["Pool", "carve_pools", "kv_cache_bytes"]


@dataclass(frozen=True)
class Pool:
    """A pool of identical serving instances on ``gpus`` (GPU ids, in order): each instance
    has ``tp`` GPUs (tensor parallel), or, for a MoE model with ``ep > 1``, ``ep`` GPUs with
    the experts spread over all of them and the attention data parallel over ``ep / tp``
    groups of ``tp`` (``tp`` must divide ``ep``). Consecutive GPUs make an instance.

    Example::

        from fabricsim import serving
        serving.Pool(range(16), tp=8).instance_size   # 8: two instances of TP 8
    """

    gpus: Any
    tp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        # Checked where the pool is written (add_serving checks it again against the fabric
        # and the model); an iterator is read once, here.
        if isinstance(self.gpus, (set, frozenset)):
            raise InvalidArgumentError("Pool gpus must be GPU ids in order (a list or array), got a set")
        gpus = integers("Pool gpus", self.gpus)
        if isinstance(self.gpus, Iterator):
            object.__setattr__(self, "gpus", gpus)
        integer("Pool tp", self.tp, COUNT)
        integer("Pool ep", self.ep, COUNT)

    @property
    def instance_size(self) -> int:
        """GPUs per instance: ``max(tp, ep)``."""
        return max(int(self.tp), int(self.ep))


def carve_pools(
    fabric: Fabric,
    *,
    prefill_instances: int,
    decode_instances: int,
    tp: int = 8,
    ep: int = 1,
    decode_tp: int | None = None,
    decode_ep: int | None = None,
    gpus: Any = None,
) -> tuple[Pool, Pool]:
    """A prefill and a decode :class:`Pool` carved from ``gpus`` (default: every GPU of
    ``fabric``, in order): the first ``prefill_instances`` instances of ``max(tp, ep)`` GPUs
    for prefill, the next ``decode_instances`` instances for decode (``decode_tp``,
    ``decode_ep``: default as prefill).

    Example::

        from fabricsim import serving
        f = fs.cluster(domain="hgx-h100", n_domains=4, scale_out="quantum-2")
        prefill, decode = serving.carve_pools(f, prefill_instances=1, decode_instances=3)
        decode.gpus[:2].tolist()   # [8, 9]: decode starts after the prefill instance
    """
    if not isinstance(fabric, Fabric):
        raise InvalidArgumentError(f"fabric must be a fabricsim.Fabric (a generated fabric), got {type(fabric).__name__}")
    pool_gpus = fabric.gpus if gpus is None else integers("gpus", gpus)
    n_p = integer("prefill_instances", prefill_instances, COUNT)
    n_d = integer("decode_instances", decode_instances, COUNT)
    dtp = tp if decode_tp is None else decode_tp
    dep = ep if decode_ep is None else decode_ep
    size_p = max(integer("tp", tp, COUNT), integer("ep", ep, COUNT))
    size_d = max(integer("decode_tp", dtp, COUNT), integer("decode_ep", dep, COUNT))
    need = n_p * size_p + n_d * size_d
    if need > pool_gpus.shape[0]:
        raise InvalidArgumentError(
            f"{n_p} prefill instances of {size_p} GPUs and {n_d} decode instances of {size_d} need {need} GPUs, "
            f"but gpus has {pool_gpus.shape[0]}")
    cut = n_p * size_p
    return (Pool(pool_gpus[:cut].copy(), tp, ep), Pool(pool_gpus[cut:need].copy(), dtp, dep))


def kv_cache_bytes(model: str | Model, tokens: Any, *, kv_bytes_per_element: float = 2.0) -> Any:
    """Bytes of the KV cache of ``tokens`` tokens (a number or an array): ``layers x kv_heads
    x head_dim x 2 (K and V) x kv_bytes_per_element x tokens``; for multi-head latent
    attention (DeepSeek, ``kv_lora_rank`` set), the latent: ``layers x (kv_lora_rank +
    qk_rope_head_dim) x kv_bytes_per_element x tokens``.

    Example::

        from fabricsim import serving
        serving.kv_cache_bytes("llama3-70b", 1)   # 327680.0 = 80 layers x 8 KV heads x 128 x 2 x 2 bytes
    """
    per_token = _kv_bytes_per_token(_model(model), positive("kv_bytes_per_element", kv_bytes_per_element))
    if one_value(tokens):
        return per_token * positive("tokens", tokens, "a count", zero=True)
    counts = quantities("tokens", tokens, None, number)
    bad = np.flatnonzero(~np.isfinite(counts) | (counts < 0))
    if bad.size:
        raise InvalidArgumentError(f"tokens[{bad[0]}] must be a finite count >= 0, got {counts[bad[0]].item()!r}")
    return per_token * counts


def _kv_bytes_per_token(m: Model, bytes_per_element: float) -> float:
    if m.kv_lora_rank:
        return float(m.layers * (m.kv_lora_rank + m.qk_rope_head_dim)) * bytes_per_element
    assert m.head_dim is not None
    return float(m.layers * m.kv_heads * m.head_dim * 2) * bytes_per_element


def _kv_pairs(m: Model, tp_p: int, tp_d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prefill rank, decode rank, fraction of a token's KV bytes) for every pair of TP ranks
    that exchange KV heads: each KV head goes from a prefill rank holding it to every decode
    rank holding it (heads are replicated where TP exceeds the KV heads, as vLLM does)."""
    if m.kv_lora_rank:  # the latent has no heads: split it evenly over the rank pairs
        k = min(tp_p, tp_d)
        return np.arange(k), np.arange(k), np.full(k, 1.0 / k)
    h_n = m.kv_heads
    pairs: dict[tuple[int, int], float] = {}
    for h in range(h_n):
        src_holders = [h // (h_n // tp_p)] if tp_p <= h_n else list(range(h * tp_p // h_n, (h + 1) * tp_p // h_n))
        dst_holders = [h // (h_n // tp_d)] if tp_d <= h_n else list(range(h * tp_d // h_n, (h + 1) * tp_d // h_n))
        for i, d in enumerate(dst_holders):
            s = src_holders[i % len(src_holders)]
            pairs[(s, d)] = pairs.get((s, d), 0.0) + 1.0 / h_n
    keys = sorted(pairs)
    return (np.array([k[0] for k in keys]), np.array([k[1] for k in keys]), np.array([pairs[k] for k in keys]))


@dataclass
class _PoolPlan:
    name: str
    gpus: np.ndarray  # (n_instances, instance_size)
    tp: int
    ep: int
    ep_in_domain: bool

    @property
    def n_instances(self) -> int:
        return int(self.gpus.shape[0])

    @property
    def n_groups(self) -> int:
        return int(self.gpus.shape[1]) // self.tp


def _checked_pool(name: str, pool: Any, fabric: Fabric, m: Model) -> _PoolPlan:
    if not isinstance(pool, Pool):
        raise InvalidArgumentError(f"{name} must be a fabricsim.serving.Pool(gpus, tp, ep), got {type(pool).__name__}")
    if isinstance(pool.gpus, (set, frozenset)):
        raise InvalidArgumentError(f"{name}.gpus must be GPU ids in order (a list or array), got a set")
    gpus = integers(f"{name}.gpus", list(pool.gpus) if not isinstance(pool.gpus, np.ndarray) else pool.gpus)
    tp = integer(f"{name}.tp", pool.tp, COUNT)
    ep = integer(f"{name}.ep", pool.ep, COUNT)
    if gpus.shape[0] == 0:
        raise InvalidArgumentError(f"{name} pool is empty: give it at least one instance of {max(tp, ep)} GPUs")
    outside = np.flatnonzero((gpus < 0) | (gpus >= fabric.n_gpus))
    if outside.size:
        raise InvalidArgumentError(
            f"{name}.gpus[{outside[0]}] = {int(gpus[outside[0]])} is not a GPU of this fabric (GPUs 0 to {fabric.n_gpus - 1})")
    uniq, counts = np.unique(gpus, return_counts=True)
    if (counts > 1).any():
        raise InvalidArgumentError(f"{name}.gpus lists GPU {int(uniq[counts > 1][0])} more than once")
    if ep > 1:
        if not m.is_moe:
            raise InvalidArgumentError(f"{name}.ep = {ep} but model {m.name!r} has no experts: expert parallelism needs a MoE model")
        if ep % tp:
            raise InvalidArgumentError(f"{name}.tp = {tp} must divide {name}.ep = {ep} (attention groups of tp GPUs in an ep instance)")
        if m.n_experts % ep:
            raise InvalidArgumentError(f"{name}.ep = {ep} must divide the model's {m.n_experts} experts")
    if not m.kv_lora_rank and m.kv_heads % tp and tp % m.kv_heads:
        raise InvalidArgumentError(
            f"{name}.tp = {tp} must divide, or be a multiple of, the model's {m.kv_heads} KV heads (each TP rank holds whole heads)")
    size = max(tp, ep)
    if gpus.shape[0] % size:
        raise InvalidArgumentError(
            f"{name} pool of {gpus.shape[0]} GPUs is not a whole number of instances of {size} GPUs (tp={tp}, ep={ep}): "
            f"give a multiple of {size}")
    grid = gpus.reshape(-1, size)
    gpd = int(fabric.structure.get("domain", {}).get("n_endpoints", 0) or 0)
    domains = grid // gpd if gpd else np.zeros_like(grid)
    groups = domains.reshape(grid.shape[0], -1, tp)
    split = np.flatnonzero((groups != groups[:, :, :1]).any(axis=2).any(axis=1))
    if tp > 1 and (not gpd or split.size):
        i = int(split[0]) if split.size else 0
        raise InvalidArgumentError(
            f"{name} instance {i} has a TP group across NVLink domains (GPUs {grid[i].tolist()}); serving keeps TP inside "
            f"one domain: give each TP group GPUs of one domain (of {gpd} GPUs)")
    ep_in_domain = bool(gpd) and bool((domains == domains[:, :1]).all())
    return _PoolPlan(name, grid, tp, ep, ep_in_domain)
