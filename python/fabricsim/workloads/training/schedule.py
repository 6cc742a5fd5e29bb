"""Megatron's pipeline schedules: the order of forwards and backwards on each stage (1F1B,
and the interleaved schedule of several model chunks per stage), and that order walked across
stages as the step's builder and its estimate take it."""

from __future__ import annotations

import functools

from ..._checks import COUNT, integer
from ...exceptions import InvalidArgumentError

__all__ = ["schedule_order"]


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
    integer("stage", stage, (0, p))
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
