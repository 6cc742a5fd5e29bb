"""Megatron's pipeline schedules: the order of forwards and backwards on each stage (1F1B,
and the interleaved schedule of several model chunks per stage), and those orders laid out
across stages, in levels of ops that wait only for earlier levels, as the step's estimate
walks them (:func:`_plan`)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from ..._checks import COUNT, integer
from ...exceptions import InvalidArgumentError

__all__ = ["schedule_order"]


def _warm_up(pp: int, stage: int, n_micro_batches: int, virtual_stages: int = 1) -> int:
    """How many forwards ``stage`` runs before its first backward under Megatron's schedule
    (:func:`schedule_order`): pp - stage - 1 micro-batches (1F1B), 2 (pp - stage - 1) +
    (v - 1) pp chunk forwards (interleaved), at most all of them."""
    if virtual_stages == 1:
        return min(pp - stage - 1, n_micro_batches)
    return min((pp - stage - 1) * 2 + (virtual_stages - 1) * pp, n_micro_batches * virtual_stages)


def _chunk_of(k: np.ndarray, pp: int, v: int) -> np.ndarray:
    """The chunk of the k-th forward (Megatron's ``get_model_chunk_id``: pp micro-batches of
    chunk 0, then of chunk 1, ...); the k-th backward's is v - 1 minus it."""
    return (k // pp) % v


def _micro_batch_of(k: np.ndarray, pp: int, v: int) -> np.ndarray:
    """The micro-batch of the k-th forward and of the k-th backward: groups of pp micro-batches,
    each run through every chunk before the next group."""
    m: np.ndarray = (k // (pp * v)) * pp + k % pp
    return m


@functools.lru_cache(maxsize=16)
def _ops(pp: int, n_micro_batches: int, v: int) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """Every stage's forwards and backwards, each in the order the stage runs them: ("F" or
    "B", micro-batch, chunk); a stage's schedule only interleaves the two (:func:`schedule_order`)."""
    k = np.arange(n_micro_batches * v)
    m, c = _micro_batch_of(k, pp, v).tolist(), _chunk_of(k, pp, v).tolist()
    return [("F", a, b) for a, b in zip(m, c)], [("B", a, v - 1 - b) for a, b in zip(m, c)]


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
    warm = _warm_up(p, s, m, v)
    fwd, bwd = _ops(p, m, v)
    total = m * v
    steady = [op for pair in zip(fwd[warm:], bwd[:total - warm]) for op in pair]
    return fwd[:warm] + steady + bwd[total - warm:]


def _positions(warm: Any, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a stage's k-th forward and k-th backward (of ``total`` each) come in its order
    (:func:`schedule_order`), for a stage that runs ``warm`` forwards first (an array: per
    stage), then one forward one backward, then the rest of the backwards."""
    k = np.arange(total)
    return np.where(k < warm, k, 2 * k - warm), np.where(k < total - warm, warm + 2 * k + 1, total + k)


def _stage_ops(pp: int, stage: int, n_micro_batches: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`schedule_order` of ``stage`` as arrays: whether each op is a backward, its chunk."""
    total = n_micro_batches * v
    pos_f, pos_b = _positions(_warm_up(pp, stage, n_micro_batches, v), total)
    back = np.zeros(2 * total, dtype=bool)
    back[pos_b] = True
    chunk = np.empty(2 * total, dtype=np.int64)
    chunk[pos_f] = _chunk_of(np.arange(total), pp, v)
    chunk[pos_b] = v - 1 - chunk[pos_f]
    return back, chunk


class _Plan(NamedTuple):
    """Every stage's schedule as one array of ops, grouped by level: an op's level is one more
    than the latest of its stage's previous op's and the op's that sends its input, so that
    the ops of a level wait only for earlier levels. Per op: its ``stage``, ``chunk``,
    ``back`` (1 a backward), ``which`` (0 a forward, 1 a backward, 2 its chunk's first
    forward, micro-batch 0, 3 its chunk's last backward, the last micro-batch) and
    ``src_stage`` (the stage that sends its input, pp where none does). ``steps``: per level,
    the indices of its ops' previous ops and of the ops that send their inputs (the number of
    ops where there is none), and the slice of the ops it holds. ``at[s, i]``: the index of
    stage s's i-th op (:func:`schedule_order`); ``last_b[s, c]``: where chunk c's last
    backward comes in stage s's order; ``first_b``: the chunks in the order their first
    backwards run (the same on every stage)."""

    stage: np.ndarray
    chunk: np.ndarray
    back: np.ndarray
    which: np.ndarray
    src_stage: np.ndarray
    steps: list[tuple[np.ndarray, np.ndarray, slice]]
    at: np.ndarray
    last_b: np.ndarray
    first_b: list[int]


@functools.lru_cache(maxsize=16)
def _plan(pp: int, mb: int, v: int) -> _Plan:
    """The ops of every stage's schedule (:func:`schedule_order`) and what each waits for,
    levelled (:class:`_Plan`). Made once per (pp, micro-batches, virtual stages): a sweep walks
    the same schedules.

    The forwards (and the backwards) run in the same order on every stage, the k-th being the
    same (micro-batch, chunk) everywhere, so that an op's input comes from the k-th forward
    of the stage before (a backward: the stage after), or, between the last stage's chunk
    c and the first stage's chunk c + 1, from the (k - pp)-th."""
    total = mb * v
    n_ops = 2 * total
    k = np.arange(total)
    pos_f, pos_b = _positions(np.array([_warm_up(pp, s, mb, v) for s in range(pp)])[:, None], total)
    stages = np.arange(pp)[:, None]
    gid_f, gid_b = stages * n_ops + pos_f, stages * n_ops + pos_b  # (pp, total): stage-major op ids
    c_f = _chunk_of(k, pp, v)
    c_b = v - 1 - c_f
    m = _micro_batch_of(k, pp, v)
    none = pp * n_ops
    src_f = np.full((pp, total), none)
    src_f[1:] = gid_f[:-1]
    src_f[0, c_f > 0] = gid_f[-1, k[c_f > 0] - pp]
    src_b = np.full((pp, total), none)
    src_b[:-1] = gid_b[1:]
    src_b[-1, c_b < v - 1] = gid_b[0, k[c_b < v - 1] - pp]
    # per op, stage-major
    shape = (pp, n_ops)
    chunk, back, which, sender = (np.empty(shape, np.int64) for _ in range(4))
    for gid, c, b, w, sr in ((gid_f, c_f, 0, np.where(m == 0, 2, 0), src_f),
                             (gid_b, c_b, 1, np.where(m == mb - 1, 3, 1), src_b)):
        flat = gid.ravel()
        chunk.flat[flat] = np.broadcast_to(c, (pp, total)).ravel()
        back.flat[flat] = b
        which.flat[flat] = np.broadcast_to(w, (pp, total)).ravel()
        sender.flat[flat] = sr.ravel()
    src = sender.ravel()
    src_stage = np.where(src < none, src // n_ops, pp)
    level = _levels(pp, n_ops, src.tolist(), none)
    order = np.argsort(level, kind="stable")
    index = np.empty(none + 1, np.int64)  # stage-major id -> position in level order; none -> none
    index[order] = np.arange(none)
    index[none] = none
    prev = np.arange(none) - 1
    prev[::n_ops] = none
    ends = np.cumsum(np.bincount(level)).tolist()
    prev, src = index[prev[order]], index[src[order]]
    last = np.array([[total - 1 - np.argmax(c_b[::-1] == c) for c in range(v)]])  # the last k of each chunk
    return _Plan(
        stage=np.repeat(np.arange(pp), n_ops)[order], chunk=chunk.ravel()[order], back=back.ravel()[order],
        which=which.ravel()[order], src_stage=src_stage[order],
        steps=[(prev[a:b], src[a:b], slice(a, b)) for a, b in zip([0] + ends[:-1], ends)],
        at=index[:none].reshape(shape),
        last_b=np.take_along_axis(pos_b, np.broadcast_to(last, (pp, v)), axis=1),
        first_b=sorted(range(v), key=lambda c: int(np.argmax(c_b == c))))


def _levels(pp: int, n_ops: int, src: list[int], none: int) -> np.ndarray:
    """Each op's level (:class:`_Plan`), ops numbered stage-major: each stage advanced while its
    next op's input exists."""
    level = [-1] * (pp * n_ops)
    pos = [s * n_ops for s in range(pp)]
    left = pp
    while left:
        for s in range(pp):
            i, end = pos[s], (s + 1) * n_ops
            if i == end:
                continue
            at = level[i - 1] if i > s * n_ops else -1
            while i < end:
                j = src[i]
                if j != none:
                    lj = level[j]
                    if lj < 0:
                        break
                    if lj > at:
                        at = lj
                at += 1
                level[i] = at
                i += 1
            pos[s] = i
            left -= i == end
    return np.array(level)
