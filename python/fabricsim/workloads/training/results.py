"""What a step comes to, closed form (:class:`StepEstimate`) or simulated
(:class:`StepResult`): step time, tokens per second, MFU, the breakdown into compute, exposed
communication per dimension, optimizer and bubble (their times add up to the step time), and,
simulated, the critical path: from the last activity back, each step to the dependency that
finished last."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from .construction import _Built
    from .step import TrainingStep

__all__ = ["StepEstimate", "StepResult"]

#: What each activity of a step is, as the breakdown and the critical path name it.
_CATS = ("compute", "tp", "cp", "ep", "pp", "dp", "optimizer")
_CAT_INDEX = {c: i for i, c in enumerate(_CATS)}


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
    def straddling(self) -> dict[str, int]:
        """TP and EP groups of the step that straddle NVLink domains (``{"tp": n, "ep": n}``;
        :func:`fabricsim.training.straddling`)."""
        return dict(self.step.straddling)

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
        spans = [f"{n} {k.upper()} groups" for k, n in self.step.straddling.items() if n]
        if spans:
            lines.append(f"  warning: {', '.join(spans)} straddle NVLink domains (fs.training.domain_aware, or "
                         "the CLI's --placement domain, keeps them together)")
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
        e.step_s, e.tokens_per_s, e.mfu   # about 0.24 s, 68,000 tokens/s, 0.22
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
            deps = b.deps_of(cur).tolist()
            start = max((fin[x] for x in deps), default=0.0)
            path.append((cur, float(start), float(fin[cur])))
            if not deps:
                break
            cur = max(deps, key=lambda x: fin[x])
        path.reverse()
        return path

    def _parts(self) -> dict[str, float]:
        b = self.built
        exposed = {c: 0.0 for c in _CATS}
        cats = b.cat[b.rows_of([a for a, _, _ in self._cp])].tolist()
        for cat, (_, start, end) in zip(cats, self._cp):
            exposed[_CATS[cat]] += end - start
        # compute: the busiest stage's compute on one replica
        p = self.step.par
        mb = p.n_micro_batches
        comp = max(sum(ch.fwd_s + ch.bwd_s for ch in self.step.chunks[s]) * mb for s in range(p.pp))
        # (at most what the critical path spends computing: under overlapped TP traffic that
        # outlasts it, compute is off the path and the TP collectives take the whole span)
        parts = {"compute": min(comp, exposed["compute"])}
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
        rows = b.rows_of([a for a, _, _ in self._cp]).tolist()
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
