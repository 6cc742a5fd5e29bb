"""Plots of results, drawn with matplotlib (an optional extra: ``pip install 'fabricsim[plot]'``).

Each function returns a :class:`matplotlib.figure.Figure` (or draws into ``ax=`` when given
one) and never touches pyplot's global state, so it is safe in scripts, notebooks and worker
threads; :func:`save` writes a figure as a PNG (or any format matplotlib knows by the
extension), whole or not at all.

* :func:`link_utilization`: the busiest links' utilisation over time, as a heatmap.
* :func:`fct_cdf`: the distribution of flow completion times, one curve per tag.
* :func:`timeline`: collectives per rank and delays per lane over time (:mod:`fabricsim.trace`).
* :func:`busbw`: bus bandwidth against size, from :func:`fabricsim.nccl_tests` or a sweep.

From the shell: ``fabricsim run FILE --plot utilization --plot fct --plot timeline`` and
``fabricsim nccl-tests ... --plot busbw.png``.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._files import path_argument, write_file
from ..exceptions import InvalidArgumentError
from ..fabrics.describe import label as fabric_label
from ..units import format_bytes

__all__ = ["link_utilization", "link_load", "fct_cdf", "timeline", "busbw", "save", "image", "by_name"]


def _figure(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - the plot extra not installed
        raise ImportError("fabricsim.plot needs matplotlib: pip install 'fabricsim[plot]'") from None
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def save(fig: Any, path: str | os.PathLike[str], *, dpi: int = 120) -> str:
    """Writes ``fig`` to ``path`` (PNG unless the extension names another format matplotlib
    writes: svg, pdf, ...); returns the path. Whole or not at all: a write that fails leaves
    the file that was there as it was and raises :class:`WriteError` naming the path.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_gather", None, "64MiB")
        fs.plot.save(fs.plot.fct_cdf(sc.run()), "fct.png")   # 'fct.png'
    """
    path = path_argument("path", path)
    return write_file("path", path, image(fig, os.path.splitext(path)[1][1:] or "png", dpi=dpi))


def image(fig: Any, format: str = "png", *, dpi: int = 120) -> bytes:
    """``fig`` drawn as the bytes of an image file (``format``: png, svg, pdf, ...; what
    :func:`save` writes).

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_gather", None, "64MiB")
        fs.plot.image(fs.plot.fct_cdf(sc.run()))[:4]   # b'\\x89PNG'
    """
    import io

    formats = fig.canvas.get_supported_filetypes()
    if format.lower() not in formats:
        raise InvalidArgumentError(
            f"cannot draw a figure as {format!r}: the formats are {', '.join(sorted(formats))}")
    out = io.BytesIO()
    fig.savefig(out, format=format.lower(), dpi=dpi)
    return out.getvalue()


# ---- link loads over time ------------------------------------------------------------------


def _bundle_members(topology: Any) -> list[np.ndarray] | None:
    """Member link ids of each pooled bundle of a generated fabric, in bundle id order (the
    layout of src/topology/clos.rs: domains' bundles, then the scale-out's), or None when
    the fabric has none or its layout is not the one expected."""
    structure = getattr(topology, "structure", None)
    if not isinstance(structure, dict) or not structure.get("n_bundles"):
        return None
    out: list[np.ndarray] = []
    links_end = 0

    def shape_bundles(s: dict[str, Any], link_base: int) -> tuple[list[np.ndarray], int]:
        planes, n_e, m = int(s["planes"]), int(s["n_endpoints"]), [int(x) for x in s["endpoint_links"]]
        n_leaves, leaf_up, n_pods = int(s["n_leaves"]), int(s["leaf_up"]), int(s["n_pods"])
        n_spines, spine_up, tiers = int(s["n_spines"]), int(s["spine_up"]), int(s["tiers"])
        if len(m) != planes:
            raise ValueError("endpoint_links per plane")
        plane_base, base = [], link_base
        leaf_base, spine_base = [], []
        for p in range(planes):
            plane_base.append(base)
            leaf_base.append(base + 2 * n_e * m[p])
            spine_base.append(leaf_base[p] + (2 * n_leaves * leaf_up if tiers >= 2 else 0))
            base = spine_base[p] + (2 * n_spines * spine_up if tiers == 3 else 0)
        bundles: list[np.ndarray] = []
        if sum(m) > 1:
            for down in (0, 1):
                for e in range(n_e):
                    bundles.append(np.array([plane_base[p] + (e * m[p] + k) * 2 + down
                                             for p in range(planes) for k in range(m[p])], dtype=np.int64))
        for p in range(planes):
            if tiers < 2:
                continue
            for down in (0, 1):
                for leaf in range(n_leaves):
                    bundles.append(leaf_base[p] + (leaf * leaf_up + np.arange(leaf_up)) * 2 + down)
            if tiers == 3:
                for down in (0, 1):
                    for pod in range(n_pods):
                        spines = np.arange(pod * leaf_up, (pod + 1) * leaf_up)
                        bundles.append((spine_base[p] + ((spines[:, None] * spine_up + np.arange(spine_up)) * 2
                                                         + down)).ravel())
        return bundles, base

    try:
        dom, so = structure.get("domain"), structure.get("scale_out")
        if dom is not None:
            for _ in range(int(dom.get("n_domains", 1))):
                b, links_end = shape_bundles(dom, links_end)
                out += b
        if so is not None:
            if dom is not None:
                links_end += 2 * int(structure["n_gpus"])  # each GPU's link to its NIC and back
            b, links_end = shape_bundles(so, links_end)
            out += b
    except (KeyError, TypeError, ValueError):
        return None
    if len(out) != structure["n_bundles"] or links_end != structure["n_links"]:
        return None
    return out


def link_load(result: Any, scenario: Any, *, bins: int = 200, links: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(edges_s, link_ids, load_Bps)``: each link's mean load (bytes/s) in ``bins`` equal
    time bins from 0 to the makespan (``load_Bps[i, j]``: link ``link_ids[i]`` in bin j).

    Needs the run's rates (``run(record_rates=True)``) and the scenario that ran (its usage
    lists). A flow loads every link of its usage list by its coefficient times its rate; a
    flow sprayed over a pooled bundle loads each member link by the member's share of the
    bundle's capacity (the even spreading the bundle stands for). ``links`` picks the links
    (default every link the run reports).

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_flow(0, 1, "1GiB")
        sc.add_flow(0, 2, "256MiB")
        edges_s, link_ids, load_Bps = fs.plot.link_load(sc.run(record_rates=True), sc, bins=4)
        load_Bps.shape   # (54, 4): each link's mean load in each quarter of the run
    """
    try:
        changes = result.rate_changes
    except AttributeError:
        raise InvalidArgumentError(
            "link loads over time need the rates: run the scenario with run(record_rates=True)") from None
    if scenario is None:
        raise InvalidArgumentError("link loads need the scenario that ran (its flows' usage lists)")
    bins = int(bins)
    if bins < 1:
        raise InvalidArgumentError(f"bins must be at least 1, got {bins}")
    topo = scenario.topology
    n_links = topo.n_links
    caps = dict(topo._core.link_columns())["capacity_Bps"]
    makespan = float(result.makespan_s) or 1e-12
    edges = np.linspace(0.0, makespan, bins + 1)
    link_ids = (result.links["link_id"].to_numpy() if links is None
                else np.asarray(list(links), dtype=np.int64))
    row_of = {int(l): i for i, l in enumerate(link_ids)}
    load = np.zeros((link_ids.size, bins))

    # Each flow's rate segments: from a change to its next change or its end.
    flows = result.flows
    fid_all = flows["flow_id"].to_numpy()
    finish = flows["finish_s"].to_numpy(zero_copy_only=False)
    failed = flows["failed_s"].to_numpy(zero_copy_only=False)
    end_of = np.where(np.isnan(finish), failed, finish)
    t = changes["time_s"].to_numpy()
    f = changes["flow_id"].to_numpy()
    r = changes["rate_Bps"].to_numpy()
    order = np.lexsort((t, f))
    t, f, r = t[order], f[order], r[order]
    nxt = np.empty_like(t)
    same = f[1:] == f[:-1]
    nxt[:-1] = np.where(same, t[1:], np.nan)
    nxt[-1:] = np.nan
    last = np.isnan(nxt)
    nxt[last] = end_of[np.searchsorted(fid_all, f[last])]
    nxt = np.where(np.isnan(nxt), makespan, nxt)

    members = _bundle_members(topo)
    shares: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def spread(c: int) -> tuple[np.ndarray, np.ndarray]:
        # A bundle's members and each one's share of its load, by capacity in force.
        if c not in shares:
            m = members[c - n_links] if members is not None and c - n_links < len(members) else np.zeros(0, np.int64)
            w = caps[m]
            shares[c] = (m, w / w.sum() if w.sum() > 0 else w)
        return shares[c]

    usage: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for flow in np.unique(f):
        cons, coef = scenario.usage_of(int(flow))
        ls: list[np.ndarray] = []
        ws: list[np.ndarray] = []
        for c, k in zip(cons, coef):
            if c < n_links:
                ls.append(np.array([c]))
                ws.append(np.array([k]))
            else:
                m, w = spread(c)
                ls.append(m)
                ws.append(k * w)
        if ls:
            usage[int(flow)] = (np.concatenate(ls), np.concatenate(ws))

    # Bytes each segment puts in each bin, summed per link: the overlap of [t0, t1) with a bin.
    width = edges[1] - edges[0]
    for flow, t0, t1, rate in zip(f, t, nxt, r):
        if rate <= 0 or t1 <= t0 or int(flow) not in usage:
            continue
        lo, hi = np.searchsorted(edges, t0, side="right") - 1, np.searchsorted(edges, t1, side="left")
        lo, hi = max(lo, 0), min(max(hi, lo + 1), bins)
        b = np.arange(lo, hi)
        overlap = np.clip(np.minimum(edges[b + 1], t1) - np.maximum(edges[b], t0), 0.0, None) / width
        on_links, weights = usage[int(flow)]
        for l, w in zip(on_links, weights):
            i = row_of.get(int(l))
            if i is not None:
                load[i, lo:hi] += rate * w * overlap
    # What the engine reports each link carried is the check: a bundle whose members are not
    # known, or a fault during the run that changed the members' shares, shows here.
    carried = dict(zip(result.links["link_id"].to_pylist(), result.links["bytes_carried"].to_pylist()))
    want = np.array([carried.get(int(l), 0.0) for l in link_ids])
    got = load.sum(axis=1) * width
    off = np.abs(got - want) > 1e-6 * np.maximum(want, 1.0)
    if off.any():
        warnings.warn(
            f"the loads over time of {int(off.sum())} link(s) (link {int(link_ids[off][0])} first) do not add up to "
            "what the run reports they carried: traffic spread over pooled links during a fault is drawn by "
            "the capacities before it", stacklevel=2)
    return edges, link_ids, load


def link_utilization(result: Any, scenario: Any, *, bins: int = 200, top: int = 30, ax: Any = None) -> Any:
    """A heatmap of link utilisation (load / capacity) over time for the ``top`` links with
    the highest mean utilisation, busiest at the top; needs ``run(record_rates=True)`` and
    the scenario that ran (see :func:`link_load`).

    Example::

        sc = fs.Scenario(fs.cluster(domain="hgx-h100", n_domains=2, scale_out="quantum-2"))
        sc.add_collective("all_to_all", None, "64MiB")
        fig = fs.plot.link_utilization(sc.run(record_rates=True), sc, top=10)
        fs.plot.save(fig, "utilization.png")
    """
    links = result.links
    if links.num_rows == 0:
        raise InvalidArgumentError("no link carried anything in this run: nothing to plot")
    k = min(int(top), links.num_rows)
    idx = pc.select_k_unstable(links, k=k, sort_keys=[("mean_utilization", "descending"), ("link_id", "ascending")])
    chosen = links.take(idx)
    ids = chosen["link_id"].to_numpy()
    edges, ids, load = link_load(result, scenario, bins=bins, links=ids)
    caps = chosen["capacity_Bps"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(caps[:, None] > 0, load / caps[:, None], 0.0)
    src, dst = chosen["src"].to_numpy(), chosen["dst"].to_numpy()
    from .trace import _node_label

    label = _node_label(scenario, result)
    fig, ax = _figure(ax, (10, max(3.0, 0.25 * k + 1.5)))
    scale, unit = _time_unit(edges[-1])
    image = ax.imshow(util, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0, vmax=1.0,
                      extent=(edges[0] * scale, edges[-1] * scale, k, 0))
    ax.set_yticks(np.arange(k) + 0.5)
    ax.set_yticklabels([f"{l}: {label(a)}\u2192{label(b)}" for l, a, b in zip(ids, src, dst)], fontsize=7)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("link")
    ax.set_title(f"Link utilisation over time (top {k} of {links.num_rows} links by mean utilisation)")
    fig.colorbar(image, ax=ax, label="utilisation")
    fig.fabricsim_data = {"edges_s": edges, "link_ids": ids, "utilization": util}
    return fig


# ---- flow completion times -----------------------------------------------------------------


def fct_cdf(result: Any, scenario: Any = None, *, by: str | None = "tag", log: bool = True, ax: Any = None) -> Any:
    """The cumulative distribution of completion times: flows' (``finish_s - ready_s``: latency
    and transfer, from the moment a flow could go), one curve per ``by`` value (a column of the
    flows table, default the tag; None: one curve), and collectives' (``finish_s - start_s``),
    one curve per op. With ``scenario`` (the one that ran) a collective's own flows are left
    out: they finish together (one pipelined transfer), so the collective stands for them, and
    its idle-fabric time (``analytical_s``) is drawn beside it as a hollow marker, so that what
    contention added shows. A group whose members all take one time is drawn as a marker at
    that time, not as a vertical step. The time axis is logarithmic (``log=True``) where the
    times span more than a decade and a half.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_flows([0, 0, 1], [1, 2, 3], ["1GiB", "64MiB", "1MiB"], tag="p2p")
        sc.add_collective("all_reduce", None, "256MiB")
        fig = fs.plot.fct_cdf(sc.run(), sc)   # a curve for the tag "p2p", a point for the all-reduce
    """
    from .trace import _collective_parts, _inside

    flows = result.flows
    flows = flows.filter(pc.equal(flows["status"].cast(pa.string()), "done"))
    if by is not None and by not in flows.column_names:
        raise InvalidArgumentError(f"by must be a column of the flows table ({', '.join(flows.column_names)}), got {by!r}")
    first, last, _ = _collective_parts(scenario)
    flows = flows.filter(pa.array(~_inside(flows["flow_id"].to_numpy(), first, last)))
    fct = flows["finish_s"].to_numpy(zero_copy_only=False) - flows["ready_s"].to_numpy(zero_copy_only=False)
    groups: dict[str, np.ndarray] = {}
    if by is None:
        if fct.size:
            groups["all flows"] = fct
    else:
        keys = flows[by].cast(pa.string()).to_pylist() if pa.types.is_dictionary(flows[by].type) else flows[by].to_pylist()
        for key in sorted(set(keys), key=lambda x: (x is None, str(x))):
            groups["(untagged)" if key is None else str(key)] = fct[np.array([k == key for k in keys], dtype=bool)]
    colls = result.collectives
    analytical: dict[str, np.ndarray] = {}
    if colls.num_rows:
        done = colls.filter(pc.is_valid(colls["finish_s"]))
        ops = done["op"].cast(pa.string()).to_pylist()
        took = done["finish_s"].to_numpy(zero_copy_only=False) - done["start_s"].to_numpy(zero_copy_only=False)
        idle = done["analytical_s"].to_numpy(zero_copy_only=False)
        for op in sorted(set(ops)):
            mask = np.array([o == op for o in ops], dtype=bool)
            groups[f"{op} (collectives)"] = took[mask]
            analytical[f"{op} (collectives)"] = idle[mask]
    if not groups:
        raise InvalidArgumentError("no flow or collective finished in this run: nothing to plot")
    every = np.concatenate([*groups.values(), *analytical.values()])
    positive = every[every > 0]
    fig, ax = _figure(ax, (7, 4.5))
    scale, unit = _time_unit(float(np.max(every)) if every.size else 1.0)
    colours = _colours(len(groups))
    for (name, values), colour in zip(groups.items(), colours):
        x = np.sort(values) * scale
        n = x.size
        label = name if name in analytical else f"{name} ({n})"
        if np.ptp(x) == 0:  # one time for all: a point, not a vertical step
            ax.plot(x[:1], [1.0], linestyle="none", marker="o", color=colour,
                    label=f"{label}: {'all ' if n > 1 else ''}{x[0]:.4g} {unit}")
        else:
            # From 0 at the shortest: a step up by 1/n at each completion time.
            ax.step(np.r_[x[:1], x], np.arange(n + 1) / n, where="post", color=colour, label=label)
        if name in analytical:
            idle = np.sort(analytical[name]) * scale
            ax.plot(idle, np.arange(1, n + 1) / n, linestyle="none", marker="o", markerfacecolor="none",
                    color=colour, label=f"{name.split(' ')[0]} on an idle fabric")
    if log and positive.size and positive.max() > 30 * positive.min():
        ax.set_xscale("log")
    ax.set_xlabel(f"completion time ({unit})")
    ax.set_ylabel("fraction completed")
    ax.set_ylim(0, 1.05)
    where = "" if scenario is None else f" on {fabric_label(scenario.topology)}"
    ax.set_title(f"Completion times{where}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig


# ---- timeline ------------------------------------------------------------------------------


def timeline(result: Any, scenario: Any = None, *, lanes: Any = None, flows: bool = True, max_lanes: int = 64,
             ax: Any = None) -> Any:
    """Collectives per rank, delays per lane and flows per source over time
    (:func:`fabricsim.trace.timeline`, whose options ``lanes`` and ``flows`` it takes), one
    colour per name; activities that overlap on a lane are drawn on lanes of their own
    beside it (``gpu0 #2``); at most ``max_lanes`` lanes, the first in natural order. The
    title names the fabric and the collectives' ops.

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        compute = sc.add_delay("1ms")
        sc.add_collective("all_reduce", None, "256MiB", after=compute)
        fig = fs.plot.timeline(sc.run(), sc)   # a lane per rank and one for the delays
    """
    from .trace import timeline as layout

    t = layout(result, scenario, lanes=lanes, flows=flows)
    if t.num_rows == 0:
        raise InvalidArgumentError("nothing finished in this run: no timeline to plot")
    lane_list = list(dict.fromkeys(t["lane"].to_pylist()))[:max_lanes]
    row = {lane: i for i, lane in enumerate(lane_list)}
    names = sorted(set(t["name"].to_pylist()))
    fig, ax = _figure(ax, (10, max(2.5, 0.3 * len(lane_list) + 1.5)))
    colours = _colours(len(names))
    scale, unit = _time_unit(max(result.makespan_s, 1e-12))
    lanes_col, names_col = t["lane"].to_pylist(), t["name"].to_pylist()
    start, finish = t["start_s"].to_numpy(), t["finish_s"].to_numpy()
    for ni, name in enumerate(names):
        spans: dict[int, list[tuple[float, float]]] = {}
        for lane, n, s, f in zip(lanes_col, names_col, start, finish):
            if n == name and lane in row:
                spans.setdefault(row[lane], []).append((s * scale, max(f - s, 0.0) * scale))
        first = True
        for y, xs in spans.items():
            ax.broken_barh(xs, (y + 0.1, 0.8), facecolors=colours[ni], label=name if first else None)
            first = False
    ax.set_ylim(len(lane_list), 0)
    ax.set_yticks(np.arange(len(lane_list)) + 0.5)
    ax.set_yticklabels(lane_list, fontsize=7)
    ax.set_xlim(0, result.makespan_s * scale)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("rank / lane")
    ops = list(dict.fromkeys(result.collectives["op"].cast(pa.string()).to_pylist())) if result.collectives.num_rows else []
    what = f": {', '.join(ops)}" if ops else ""
    where = "" if scenario is None else f" on {fabric_label(scenario.topology)}"
    n_lanes = len(set(lanes_col))
    shown = "" if len(lane_list) == n_lanes else f" (first {len(lane_list)} of {n_lanes} lanes)"
    ax.set_title(f"Timeline{where}{what}{shown}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return fig


# ---- busbw against size --------------------------------------------------------------------


def busbw(table: Any, *, by: str | None = None, measured: Any = None, title: str | None = None, ax: Any = None) -> Any:
    """Bus bandwidth (GB/s, 1e9 bytes/s) against size (a log 2 axis labelled in bytes: 1 MiB,
    1 GiB) from a table with ``size_bytes`` and ``busbw_Bps`` columns
    (:func:`fabricsim.nccl_tests`, or a :func:`fabricsim.sweep` of it), one line per value of
    column ``by`` (e.g. a sweep parameter or "algorithm"); a line has points only at the sizes
    its value has rows for, with a gap where it has none (where NCCL chose another algorithm),
    never a line across them. ``measured`` (a table of the same columns, such as
    ``read_nccl_tests(...).rows``) is drawn as points beside it. The title is ``title``, else
    the op and fabric :func:`fabricsim.nccl_tests` records in the table's metadata.

    Example::

        table = fs.nccl_tests(fs.hgx_h100(), "all_reduce", "1M", "64M", 4)
        fig = fs.plot.busbw(table, by="algorithm")   # GB/s against size, a line per algorithm
    """
    table = table if isinstance(table, pa.Table) else pa.table(table)
    for col in ("size_bytes", "busbw_Bps"):
        if col not in table.column_names:
            raise InvalidArgumentError(f"the table needs a {col!r} column, has {', '.join(table.column_names)}")
    if by is not None and by not in table.column_names:
        raise InvalidArgumentError(f"by must be a column of the table ({', '.join(table.column_names)}), got {by!r}")
    fig, ax = _figure(ax, (7, 4.5))
    sizes = np.unique(table["size_bytes"].to_numpy(zero_copy_only=False).astype(float))
    keys = [None] if by is None else list(dict.fromkeys(table[by].to_pylist()))
    for key in keys:
        sub = table if by is None else table.filter(pc.equal(table[by], key) if key is not None else pc.is_null(table[by]))
        x = sub["size_bytes"].to_numpy(zero_copy_only=False).astype(float)
        y = np.full(sizes.size, np.nan)  # NaN where this value has no row: matplotlib leaves a gap
        y[np.searchsorted(sizes, x)] = sub["busbw_Bps"].to_numpy(zero_copy_only=False).astype(float) / 1e9
        ax.plot(sizes, y, marker="o", markersize=3, label="simulated" if by is None else f"{by}={key}")
    if measured is not None:
        m = measured if isinstance(measured, pa.Table) else pa.table(measured)
        ax.plot(m["size_bytes"].to_numpy(zero_copy_only=False), m["busbw_Bps"].to_numpy(zero_copy_only=False) / 1e9,
                linestyle="none", marker="x", color="black", label="measured")
    _bytes_axis(ax)
    ax.set_xlabel("size")
    ax.set_ylabel("busbw (GB/s)")
    if title is None:
        meta = table.schema.metadata or {}
        op, fabric = meta.get(b"fabricsim.op"), meta.get(b"fabricsim.fabric")
        title = " ".join(filter(None, [
            f"{op.decode()} bus bandwidth" if op else "Bus bandwidth", f"on {fabric.decode()}" if fabric else None]))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _bytes_axis(ax: Any) -> None:
    """A log 2 size axis with ticks at powers of two, labelled as sizes are written (1 MiB)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2.0, numticks=12))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v) if v > 0 else ""))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


# ---- helpers -------------------------------------------------------------------------------


def by_name(kind: str, result: Any, scenario: Any = None) -> Any:
    """The plot of a run named as ``[output] plots`` and ``fabricsim run --plot`` name it:
    "utilization", "fct" or "timeline".

    Example::

        sc = fs.Scenario(fs.hgx_h100())
        sc.add_collective("all_reduce", None, "64MiB")
        fig = fs.plot.by_name("timeline", sc.run(), sc)   # as ``fabricsim run --plot timeline``
    """
    if kind == "utilization":
        return link_utilization(result, scenario)
    if kind == "fct":
        return fct_cdf(result, scenario)
    if kind == "timeline":
        return timeline(result, scenario)
    raise InvalidArgumentError(f"unknown plot {kind!r}: utilization, fct or timeline")


def _time_unit(span_s: float) -> tuple[float, str]:
    """A scale and unit that show a span of ``span_s`` seconds in readable numbers."""
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "\u00b5s"), (1e9, "ns")):
        if span_s * scale >= 1.0:
            return scale, unit
    return 1e9, "ns"


def _colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
