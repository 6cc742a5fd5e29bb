"""Calibration from a cluster's own nccl-tests logs: fit the cost-model parameters those runs
determine, on a given fabric, and show measured vs fitted per row with the error on sizes
held out of the fit.

What can be fitted (:data:`PARAMETERS`), each a field of :class:`~fabricsim.CostModel`:

* ``nvlink_efficiency``: the NVLink payload rate as a fraction of line rate (ring and tree
  traffic inside a domain, all-gather, reduce-scatter, point-to-point over NVLink);
* ``network_efficiency``: the same for the scale-out NICs and links (runs across domains);
* ``nvls_efficiency``: NVLS's share of a GPU's NVLink rate (runs that take NVLS or NVLSTree),
  for the fabric's GPU architecture;
* ``latency_scale``: a factor on NCCL's software latencies (small and medium sizes).

A parameter is fitted only where the runs determine it: where changing it by 10% moves some
fitted row's time by at least 1% (:data:`SENSITIVITY`), and in a way the parameters taken
before it do not (at least :data:`UNIQUE` of its effect is its own; they are taken in the
order of :data:`PARAMETERS`, the most specific first: NVLS rows tell NVLS efficiency apart
from NVLink efficiency only where other rows pin the NVLink rate). The others keep their
values and are listed as not determined. The fit minimises the squared log-ratio of
modelled to measured time over the rows not held out (Levenberg-Marquardt in log space,
efficiencies kept at or below 1). The model time is fabricsim's analytical one for the construction
``algorithm`` (default ``auto``) would run, which the flow simulation equals on an idle
fabric, as nccl-tests runs: each row costs tens of microseconds, so a fit takes well under a
second for ordinary logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .._checks import integers, many
from ..exceptions import InvalidArgumentError
from ..fabrics import Fabric
from .communicator import applied_fabric, fabric_view
from .conventions import busbw_factor
from .cost.choice import estimate
from .cost.model import ARCHS, CostModel, checked_cost_model
from .nccl_logs import NcclTestsLog, read_nccl_tests

__all__ = ["Calibration", "PARAMETERS", "SENSITIVITY", "calibrate"]

PARAMETERS = ("nvls_efficiency", "network_efficiency", "nvlink_efficiency", "latency_scale")
SENSITIVITY = 0.01  # a 10% change must move some row's time by this much for a parameter to be fitted
UNIQUE = 0.1  # the share of a parameter's effect on the rows that the earlier ones cannot mimic
_STEP = math.log(1.1)
# Fitted values stay in [1e-300, 1e300] (in log space, where the fit moves them): a log whose
# times are absurd (1e300 s) cannot drive exp() past the float range nor a parameter to 0.
_LOG_LOWEST, _LOG_HIGHEST = math.log(1e-300), math.log(1e300)
_MAX_ITERATIONS = 50
# A log row to fit: (log index, op, size, measured time, held out, algorithm, protocol).
_FitRow = tuple[int, str, int, float, bool, str, str]


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` found: the fitted ``cost_model``, the values of the parameters it
    fitted (``fitted``), those the runs did not determine (``not_determined``), and ``table``,
    one row per log row: measured, default-model and fitted times and busbw, the fitted
    error (fitted / measured time - 1) and whether the row was ``held_out`` of the fit.

    Example::

        log = '''
        #     size     count  type  redop  root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           1048576    262144 float    sum    -1    30.00   34.95   61.17       0    30.00   34.95   61.17       0
          16777216   4194304 float    sum    -1   100.00  167.77  293.60       0   100.00  167.77  293.60       0
         268435456  67108864 float    sum    -1  1100.00  244.03  427.05       0  1100.00  244.03  427.05       0
        1073741824 268435456 float    sum    -1  4000.00  268.44  469.77       0  4000.00  268.44  469.77       0
        '''
        cal = fs.calibrate(fs.hgx_h100(), fs.read_nccl_tests(log, op="all_reduce", n_ranks=8))
        cal.not_determined   # ('network_efficiency', 'nvlink_efficiency'): one board, NVLS only
        cal.table.num_rows   # 4: a row per size measured
    """

    cost_model: CostModel
    fitted: dict[str, float]
    not_determined: tuple[str, ...]
    table: pa.Table

    def error_summary(self) -> dict[str, float]:
        """Root-mean-square and largest |error| of the fitted time, on the rows fitted and on
        those held out (nan where there are none).

        Example::

            log = '''
            #     size     count  type  redop  root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
               1048576    262144 float    sum    -1    30.00   34.95   61.17       0    30.00   34.95   61.17       0
              16777216   4194304 float    sum    -1   100.00  167.77  293.60       0   100.00  167.77  293.60       0
             268435456  67108864 float    sum    -1  1100.00  244.03  427.05       0  1100.00  244.03  427.05       0
            1073741824 268435456 float    sum    -1  4000.00  268.44  469.77       0  4000.00  268.44  469.77       0
            '''
            cal = fs.calibrate(fs.hgx_h100(), fs.read_nccl_tests(log, op="all_reduce", n_ranks=8))
            cal.error_summary()   # {'fit_rms': 0.057..., 'fit_max': 0.077..., 'held_out_rms': 0.022..., ...}
        """
        err = self.table["fitted_error"].to_numpy()
        held = self.table["held_out"].to_numpy(zero_copy_only=False)
        out = {}
        for name, mask in (("fit", ~held), ("held_out", held)):
            e = err[mask]
            with np.errstate(over="ignore"):  # an error beyond 1e154 squares to inf, and is reported so
                out[f"{name}_rms"] = float(np.sqrt(np.mean(e ** 2))) if e.size else math.nan
            out[f"{name}_max"] = float(np.max(np.abs(e))) if e.size else math.nan
        return out


def _logs(logs: Any) -> list[NcclTestsLog]:
    if isinstance(logs, str) or hasattr(logs, "__fspath__") or isinstance(logs, NcclTestsLog):
        logs = [logs]
    try:
        items = list(logs)
    except TypeError:
        raise InvalidArgumentError(
            f"logs must be nccl-tests output (a path, its text, a read_nccl_tests result) or a list of them, "
            f"got {type(logs).__name__}") from None
    if not items:
        raise InvalidArgumentError("calibrate needs at least one nccl-tests log, got none")
    return [x if isinstance(x, NcclTestsLog) else read_nccl_tests(x) for x in items]


def _parameter_value(cost: CostModel, name: str, arch: int, fabric: Fabric) -> float:
    if name == "nvls_efficiency":
        return cost.nvls_efficiency[arch]
    v = getattr(cost, name)
    if v is None:  # the fabric's own payload efficiency
        v = fabric.payload_efficiency["nvlink" if name == "nvlink_efficiency" else "network"]
    return float(v)


def _with(cost: CostModel, name: str, value: float, arch: int) -> CostModel:
    if name == "nvls_efficiency":
        return cost.replace(nvls_efficiency={ARCHS[arch]: value})
    return cost.replace(**{name: value})


def calibrate(fabric: Fabric, logs: Any, *, ranks: Any = None, algorithm: Any = "auto", holdout_every: int = 3,
              cost_model: CostModel | None = None, parameters: Sequence[str] = PARAMETERS) -> Calibration:
    """Fit ``cost_model`` (default the defaults) to real nccl-tests ``logs`` run on ``fabric``.

    ``logs``: a path, the text of a log, a :func:`~fabricsim.read_nccl_tests` result, or a list
    of them, of any op and size range. Every log's rank count must match the communicator:
    ``ranks`` (GPU ids) where given, else every GPU (or host) of ``fabric``. ``algorithm``: the
    algorithm the runs used (one name, or one per log), default "auto": each row keeps the
    (algorithm, protocol) that ``auto`` takes for it under the starting model through the
    whole fit, so that moving a parameter cannot move a row onto another algorithm (NCCL
    chose once, on the real cluster). The ``holdout_every``-th, 2 x ``holdout_every``-th, ...
    size of each log (by size) is held out of the fit and reported (0: fit every row).
    ``parameters`` limits what may be fitted (module docs). Returns a :class:`Calibration`.

    Example::

        log = '''
        #     size     count  type  redop  root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           1048576    262144 float    sum    -1    30.00   34.95   61.17       0    30.00   34.95   61.17       0
          16777216   4194304 float    sum    -1   100.00  167.77  293.60       0   100.00  167.77  293.60       0
         268435456  67108864 float    sum    -1  1100.00  244.03  427.05       0  1100.00  244.03  427.05       0
        1073741824 268435456 float    sum    -1  4000.00  268.44  469.77       0  4000.00  268.44  469.77       0
        '''
        cal = fs.calibrate(fs.hgx_h100(), fs.read_nccl_tests(log, op="all_reduce", n_ranks=8))
        cal.fitted   # {'nvls_efficiency': 0.776..., 'latency_scale': 1.04...}
        fs.estimate(fs.hgx_h100(), "all_reduce", "1GiB", cost_model=cal.cost_model).time_s
    """
    cost = checked_cost_model(cost_model)
    if not isinstance(fabric, Fabric):
        raise InvalidArgumentError(
            f"calibrate needs a generated fabric (fs.hgx_h100(), fs.cluster(...)), whose payload efficiencies "
            f"it can fit, got {type(fabric).__name__}")
    if isinstance(holdout_every, bool) or not isinstance(holdout_every, int) or holdout_every < 0 \
            or holdout_every == 1:
        raise InvalidArgumentError(
            f"holdout_every must be 0 (hold nothing out) or a whole number >= 2, got {holdout_every!r}")
    names = tuple(many("parameters", parameters, f"a list of some of {', '.join(PARAMETERS)}", ordered=False))
    unknown = [p for p in names if p not in PARAMETERS]
    if unknown or not names:
        raise InvalidArgumentError(
            f"parameters must be some of {', '.join(PARAMETERS)}, got {unknown[0] if unknown else 'none'!r}")
    parsed = _logs(logs)
    if ranks is not None:
        ranks = integers("ranks", ranks)
    view = fabric_view(fabric)
    n_comm = (view.n_rank_nodes or fabric.n_nodes) if ranks is None else len(ranks)
    per_log = [algorithm] * len(parsed) if isinstance(algorithm, str) else \
        list(many("algorithm", algorithm, f"one name or a list of one per log ({len(parsed)})"))
    if len(per_log) != len(parsed) or not all(isinstance(a, str) for a in per_log):
        raise InvalidArgumentError(
            f"algorithm must be one name or one per log ({len(parsed)}), got {algorithm!r}")
    start_fabric = applied_fabric(fabric, cost)
    rows: list[_FitRow] = []
    for i, log in enumerate(parsed):
        if log.n_ranks != n_comm:
            what = "GPUs" if view.n_rank_nodes == fabric.n_gpus else "ranks"
            where = f"{len(ranks)} ranks given" if ranks is not None else f"the fabric has {n_comm} {what}"
            raise InvalidArgumentError(
                f"{log.source}: the log ran {log.op} on {log.n_ranks} ranks, but {where}: calibrate against the "
                "fabric the log ran on (or pass ranks=)")
        sizes = log.rows["size_bytes"].to_numpy()
        times = log.rows["time_s"].to_numpy(zero_copy_only=False)
        order = np.argsort(sizes, kind="stable")
        for k, j in enumerate(order):
            if not (times[j] > 0 and sizes[j] > 0):
                continue  # nccl-tests' 0-byte rows carry no information about bandwidth
            held = holdout_every > 0 and k % holdout_every == holdout_every - 1
            try:
                e = estimate(start_fabric, log.op, int(sizes[j]), ranks, algorithm=per_log[i], cost_model=cost)
            except InvalidArgumentError as err:
                raise InvalidArgumentError(f"{log.source}: {err}") from None
            rows.append((i, log.op, int(sizes[j]), float(times[j]), held, e.algorithm, e.protocol))
    if not rows:
        raise InvalidArgumentError("the logs hold no row of a positive size and time to fit")
    arch = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}[view.arch]
    has = fabric.payload_efficiency

    def model(c: CostModel, which: list[_FitRow]) -> npt.NDArray[np.float64]:
        f = applied_fabric(fabric, c)
        return np.array([estimate(f, op, size, ranks, algorithm=algo, protocol=proto, cost_model=c).time_s
                         for _, op, size, _, _, algo, proto in which])

    candidates = [p for p in names if not (p == "nvlink_efficiency" and has["nvlink"] is None)
                  and not (p == "network_efficiency" and has["network"] is None)
                  and not (p == "nvls_efficiency" and cost.nvls_efficiency[arch] == 0)]
    values = {p: _parameter_value(cost, p, arch, fabric) for p in candidates}
    # The rows' algorithms are fixed for a fit; where auto chose them, they are chosen again
    # under the fitted model and refitted until they agree (NCCL chose on the real cluster,
    # and a model that fits the times chooses as it did).
    for _ in range(4):
        fitted_cost, determined = _fit(model, rows, cost, candidates, values, arch)
        f_fit = applied_fabric(fabric, fitted_cost)
        again = []
        for r in rows:
            if per_log[r[0]] == "auto":
                e = estimate(f_fit, r[1], r[2], ranks, cost_model=fitted_cost)
                r = r[:5] + (e.algorithm, e.protocol)
            again.append(r)
        if again == rows:
            break
        rows = again
    not_determined = tuple(p for p in names if p not in determined)
    fitted = {p: _parameter_value(fitted_cost, p, arch, fabric) for p in determined}
    all_measured = np.array([r[3] for r in rows])
    default_t, fitted_t = model(cost, rows), model(fitted_cost, rows)
    factor = np.array([busbw_factor(r[1], n_comm) for r in rows])
    size = np.array([r[2] for r in rows], dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore"):  # a busbw or error beyond the doubles is inf, and prints so
        table = pa.table({
            "log": pa.array([parsed[r[0]].source for r in rows]),
            "op": pa.array([r[1] for r in rows]),
            "n_ranks": pa.array([n_comm] * len(rows), pa.int64()),
            "size_bytes": pa.array([r[2] for r in rows], pa.int64()),
            "algorithm": pa.array([r[5] for r in rows]),
            "protocol": pa.array([r[6] for r in rows]),
            "measured_time_s": pa.array(all_measured),
            "default_time_s": pa.array(default_t),
            "fitted_time_s": pa.array(fitted_t),
            "measured_busbw_Bps": pa.array(size / all_measured * factor),
            "default_busbw_Bps": pa.array(size / default_t * factor),
            "fitted_busbw_Bps": pa.array(size / fitted_t * factor),
            "default_error": pa.array(default_t / all_measured - 1),
            "fitted_error": pa.array(fitted_t / all_measured - 1),
            "held_out": pa.array([r[4] for r in rows]),
        })
    return Calibration(fitted_cost, fitted, not_determined, table)


def _fit(model: Callable[[CostModel, list[_FitRow]], npt.NDArray[np.float64]], rows: list[_FitRow], cost: CostModel,
         candidates: list[str], values: dict[str, float], arch: int) -> tuple[CostModel, list[str]]:
    """One fit on rows of fixed algorithms: the parameters they determine (module docs) and the
    cost model minimising the squared log-ratio of modelled to measured time over the rows
    not held out (Levenberg-Marquardt in log space, efficiencies at or below 1)."""
    fit_rows = [r for r in rows if not r[4]] or rows
    measured: npt.NDArray[np.float64] = np.array([r[3] for r in fit_rows])

    def residual(c: CostModel) -> npt.NDArray[np.float64]:
        # Logs apart, not the log of the ratio: a ratio of 1e-300 s to 1e300 s leaves the doubles.
        return np.log(model(c, fit_rows)) - np.log(measured)

    base = residual(cost)
    determined: list[str] = []
    basis: list[np.ndarray] = []
    for p in sorted(candidates, key=PARAMETERS.index):
        if values[p] <= 0:
            continue
        moved = residual(_with(cost, p, values[p] / 1.1, arch)) - base
        if np.max(np.abs(moved)) < SENSITIVITY:
            continue
        own = moved - sum((q @ moved) * q for q in basis)  # what the parameters before it cannot do
        if np.linalg.norm(own) < UNIQUE * np.linalg.norm(moved):
            continue
        determined.append(p)
        basis.append(own / np.linalg.norm(own))
    if not determined:
        return cost, []
    x = np.log([values[p] for p in determined])
    upper = np.array([0.0 if p != "latency_scale" else _LOG_HIGHEST for p in determined])  # efficiencies <= 1

    def at(xv: np.ndarray) -> CostModel:
        c = cost
        for p, v in zip(determined, np.clip(xv, _LOG_LOWEST, upper)):
            c = _with(c, p, float(math.exp(v)), arch)
        return c

    r, damping = base, 1e-3
    for _ in range(_MAX_ITERATIONS):
        J = np.column_stack([_jacobian(residual, at, x, k, r) for k in range(len(x))])
        A, g = J.T @ J, J.T @ r
        improved = False
        while damping < 1e8:
            step = np.linalg.solve(A + damping * np.diag(np.diag(A) + 1e-12), -g)
            trial = np.clip(x + step, _LOG_LOWEST, upper)
            rt = residual(at(trial))
            if rt @ rt < r @ r:
                x, r, improved = trial, rt, True
                damping = max(damping / 10, 1e-9)
                break
            damping *= 10
        if not improved or np.max(np.abs(step)) < 1e-9:
            break
    return at(x), determined


def _jacobian(residual: Callable[[CostModel], npt.NDArray[np.float64]], at: Callable[[np.ndarray], CostModel],
              x: np.ndarray, k: int, r: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Column k of d residual / d x by a one-sided difference (toward the feasible side)."""
    h = 1e-4
    xk = x.copy()
    xk[k] -= h  # efficiencies sit at or below 0 in log space: step down, always feasible
    return (r - residual(at(xk))) / h


def format_calibration(cal: Calibration) -> str:
    """The calibration as ``fabricsim calibrate`` prints it."""
    lines = [f"{'op':<14} {'size':>12} {'algorithm':<10} {'measured':>9} {'default':>9} {'fitted':>9} "
             f"{'error':>7}  (busbw GB/s)"]
    for r in cal.table.to_pylist():
        lines.append(
            f"{r['op']:<14} {r['size_bytes']:>12} {r['algorithm']:<10} {_fixed(r['measured_busbw_Bps'] / 1e9, 9, 2)} "
            f"{_fixed(r['default_busbw_Bps'] / 1e9, 9, 2)} {_fixed(r['fitted_busbw_Bps'] / 1e9, 9, 2)} "
            f"{_fixed(r['fitted_error'] * 100, 6, 1, '+')}%" + ("  held out" if r["held_out"] else ""))
    s = {k: _fixed(v * 100, 0, 1) for k, v in cal.error_summary().items()}
    lines.append(f"\ntime error, rms (max): fitted rows {s['fit_rms']}% ({s['fit_max']}%), "
                 f"held-out rows {s['held_out_rms']}% ({s['held_out_max']}%)")
    for p, v in cal.fitted.items():
        lines.append(f"fitted {p} = {v:.4g}")
    if cal.not_determined:
        lines.append(f"not determined by these runs (kept): {', '.join(cal.not_determined)}")
    return "\n".join(lines)


def _fixed(value: float, width: int, decimals: int, sign: str = "") -> str:
    """``value`` with ``decimals`` within ``width``, or in powers of ten where it would not fit
    (a log of absurd times gives errors of 1e300%)."""
    text = f"{value:>{sign}{width}.{decimals}f}"
    return text if len(text) <= max(width, 9) else f"{value:>{sign}{width}.3g}"
