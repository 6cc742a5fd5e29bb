"""Catalog parts as the Rust generators' parameters: an NVLink domain (by preset name or
by its parts), a scale-out Clos (switch, NIC, tiers, planes, oversubscription), a cluster of
both, each argument checked and each part looked up in the catalog. Nothing is built here:
:mod:`fabricsim.fabrics.generators` builds, :func:`fabricsim.power.plan_cluster` counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .. import _core
from .._checks import COUNT, did_you_mean, integer, integers, real, room_for, shown
from ..exceptions import InvalidArgumentError, UnknownPartError
from . import catalog
from .catalog import Part

if TYPE_CHECKING:
    from .._core import NvlinkParams, ScaleOutParams


_DOMAINS: dict[str, dict[str, Any]] = {
    # name: gpu, switch chip, NVLinks from each GPU to each chip, GPUs per domain, tiers
    "hgx-h100": dict(gpu="h100", switch="nvswitch3", chip_links=(5, 4, 4, 5), n_gpus=8, tiers=1),
    # H800: the H100 baseboard with 8 NVLinks per GPU ([assumed] 2 to each of the 4 NVSwitch chips)
    "hgx-h800": dict(gpu="h800", switch="nvswitch3", chip_links=(2, 2, 2, 2), n_gpus=8, tiers=1),
    "hgx-h200": dict(gpu="h200", switch="nvswitch3", chip_links=(5, 4, 4, 5), n_gpus=8, tiers=1),
    "hgx-b200": dict(gpu="b200", switch="nvlink5-switch", chip_links=(9, 9), n_gpus=8, tiers=1),
    "hgx-b300": dict(gpu="b300", switch="nvlink5-switch", chip_links=(9, 9), n_gpus=8, tiers=1),
    "nvl72": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "gb200-nvl72": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "gb300-nvl72": dict(gpu="gb300", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=1),
    "nvl36x2": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=72, tiers=2),
    "nvl576": dict(gpu="gb200", switch="nvlink5-switch", chip_links=(1,) * 18, n_gpus=576, tiers=2),
}


# What a domain dict may hold: the per-domain arguments of nvlink_domain.
_DOMAIN_KEYS = ("gpu", "n_gpus", "switch", "chip_links", "tiers")


# Bytes per entry of chip_links while it is checked and handed over: the tuple, its NumPy
# and list copies, the tuple kept and the core's own vector (8 + 8 + 8 + 8 + 8 + 4, rounded up).
_CHIP_LINK_BYTES = 48.0


def _part(name: Any, kind: str, what: str) -> Part:
    try:
        p: Part = catalog.part(name)
    except UnknownPartError as e:  # the message names the part, not the argument that gave it
        raise UnknownPartError(f"{what}: {e}") from None
    if p.kind != kind:
        raise InvalidArgumentError(f"{what} must be a {kind} from the catalog, got {name!r}, a {p.kind}")
    return p


def _efficiency(value: Any, default_name: str, what: str) -> float:
    """A payload efficiency: a number in (0, 1], or an efficiency part for the same side as
    the default part ``default_name`` (NVLink, of any generation, or a scale-out network)."""
    default = catalog.part(default_name)
    if value is None:
        return float(default["value"])
    if isinstance(value, str):
        p = _part(value, "efficiency", what)
        side = default["applies_to"].startswith("nvlink")
        if p["applies_to"].startswith("nvlink") != side:
            raise InvalidArgumentError(
                f"{what} {value!r} applies to {p['applies_to']}, not to "
                f"{'NVLink' if side else 'a scale-out network'}; give a number in (0, 1] or an "
                f"efficiency part such as {default.name!r}"
            )
        return float(p["value"])
    eff = real(value)  # None for a bool or anything but a real number
    if eff is None or not 0.0 < eff <= 1.0:
        raise InvalidArgumentError(
            f"{what} must be a number in (0, 1] or the name of an efficiency part, got {value!r}"
        )
    return eff


def _nvlink_spec(domain: Any, nvlink_efficiency: Any) -> tuple[NvlinkParams, dict[str, Any]]:
    """(parameters for Rust, parts for describe) of a domain given by name or dict."""
    if isinstance(domain, str):
        key = domain.lower()
        if key not in _DOMAINS:
            raise InvalidArgumentError(
                f"unknown domain {domain!r}{did_you_mean(key, _DOMAINS)}; known: {', '.join(sorted(_DOMAINS))}"
            )
        d = dict(_DOMAINS[key])
    elif isinstance(domain, dict):
        d = dict(domain)
        unknown = sorted(map(str, set(d) - set(_DOMAIN_KEYS)))
        if unknown:
            hints = "".join(did_you_mean(k, _DOMAIN_KEYS) for k in unknown)
            raise InvalidArgumentError(
                f"unknown domain key(s) {', '.join(map(repr, unknown))}{hints}; "
                f"a domain dict takes {', '.join(_DOMAIN_KEYS)}"
            )
    else:
        raise InvalidArgumentError(f"domain must be a preset name or a dict of nvlink_domain arguments, got {domain!r}")
    gpu = _part(d.get("gpu", "gb200"), "gpu", "gpu")
    chip = _part(d.get("switch", "nvlink5-switch"), "nvswitch", "switch")
    chip_links = d.get("chip_links")
    if chip_links is None:
        # One chip per NVLink, checked before the list is made: a user part of 2**31 NVLinks
        # was killed by the operating system while its Python copies were built.
        n_links = int(gpu["nvlink_links"])
        room_for(f"the default chip_links of a {gpu.name}, one NVSwitch chip for each of its {n_links} NVLinks",
                 n_links, _CHIP_LINK_BYTES)
        chip_links = (1,) * n_links
    chip_links = tuple(integers("chip_links", chip_links, COUNT).tolist())
    if sum(chip_links) != gpu["nvlink_links"]:
        raise InvalidArgumentError(
            f"chip_links {chip_links} wire {sum(chip_links)} NVLinks per GPU, "
            f"but a {gpu.name} has {gpu['nvlink_links']}"
        )
    if gpu["nvlink_generation"] != chip["nvlink_generation"]:
        raise InvalidArgumentError(
            f"a {gpu.name} (NVLink {gpu['nvlink_generation']}) cannot use {chip.name} "
            f"(NVLink {chip['nvlink_generation']})"
        )
    eff = _efficiency(nvlink_efficiency, gpu["nvlink_efficiency"], "nvlink_efficiency")
    n_gpus = integer("n_gpus", d.get("n_gpus", 72), COUNT)
    tiers = d.get("tiers")
    if tiers is None:
        tiers = 1 if n_gpus * max(chip_links) <= chip["ports"] else 2
    params: NvlinkParams = {
        "gpus_per_domain": n_gpus,
        "chip_links": list(chip_links),
        "tiers": integer("tiers", tiers, COUNT),
        "chip_ports": int(chip["ports"]),
        "link_Bps": float(gpu["nvlink_link_Bps"]) * eff,
        "chip_latency_s": float(chip["latency_s"]),
    }
    parts = dict(gpu=gpu, nvswitch=chip, nvlink_efficiency=eff)
    return params, parts


def _scale_out_spec(
    n_endpoints: int, rails: int, switch: Any, nic: Any, tiers: Any, planes: Any,
    oversubscription: Any, routing: Any, efficiency: Any, switch_arg: str = "switch",
) -> tuple[ScaleOutParams, dict[str, Any]]:
    """The scale-out Clos's parameters and parts; ``switch_arg`` names the caller's argument
    that gave ``switch``."""
    sw = _part(switch, "switch", switch_arg)
    nic_p = _part(nic, "nic", "nic")
    if sw["protocol"] not in nic_p["protocols"]:
        raise InvalidArgumentError(f"{nic_p.name} does not speak {sw['protocol']}, which {sw.name} runs")
    if routing is None:
        routing = "adaptive" if sw["protocol"] == "infiniband" else "ecmp"
    if not isinstance(routing, str) or routing not in ("ecmp", "adaptive"):
        raise InvalidArgumentError(f"routing must be 'ecmp' or 'adaptive', got {routing!r}")
    mode: Literal["ecmp", "adaptive"] = "adaptive" if routing == "adaptive" else "ecmp"  # routing, as the core types it
    if routing == "adaptive" and not sw["adaptive_routing"]:
        raise InvalidArgumentError(f"{sw.name} has no adaptive routing; use routing='ecmp'")
    over = _oversubscription(oversubscription)
    eff = _efficiency(efficiency, sw["protocol"], "efficiency")
    capacity_Bps = float(sw["ports"]) * float(sw["port_Bps"])
    plane_options = [planes] if planes is not None else [p for p in (1, 2, 4, 8) if p <= max(1, nic_p["max_planes"])]
    # One tier is one switch per plane: nothing above it to oversubscribe.
    tier_options = [tiers] if tiers is not None else [1, 2, 3] if over == (1.0, 1.0) else [2, 3]
    errors = []
    for p in plane_options:
        p = integer("planes", p, COUNT)
        if p > max(1, nic_p["max_planes"]) and planes is not None:
            raise InvalidArgumentError(f"{nic_p.name} splits over at most {nic_p['max_planes']} plane(s), got planes={p}")
        plane_Bps = float(nic_p["rate_Bps"]) / p
        nic_port_Bps = nic_p["ethernet_port_Bps"] if sw["protocol"] == "ethernet" else None
        if nic_port_Bps is not None and plane_Bps > nic_port_Bps * (1 + 1e-9):
            why = (f"{nic_p.name} runs Ethernet at most {nic_port_Bps * 8 / 1e9:g} Gb/s per port, so "
                   f"planes={p} ({plane_Bps * 8 / 1e9:g} Gb/s per plane) cannot run on {sw.name}")
            if planes is not None:
                raise InvalidArgumentError(why)
            errors.append(why)
            continue
        if plane_Bps > sw["port_Bps"] * (1 + 1e-9) or plane_Bps < sw["lane_Bps"] * (1 - 1e-9):
            errors.append(f"planes={p}: {plane_Bps * 8 / 1e9:g} Gb/s per plane is not a port speed of {sw.name}")
            continue
        radix = int(capacity_Bps / plane_Bps + 1e-9)
        if radix >= COUNT[1]:
            # The core numbers ports in 32 bits: a user part of 2**31 ports at 800 Gb/s broke
            # out to 400 Gb/s failed with "parameter radix: OverflowError ...".
            errors.append(
                f"planes={p}: {sw.name} has {radix} ports of {plane_Bps * 8 / 1e9:g} Gb/s, "
                f"more than the 2**32 - 1 a switch can have"
            )
            continue
        for t in tier_options:
            params: ScaleOutParams = {
                "tiers": integer("tiers", t, COUNT), "planes": p, "radix": radix, "oversubscription": over,
                "link_Bps": plane_Bps * eff, "switch_latency_s": float(sw["latency_s"]),
                "nic_latency_s": float(nic_p["latency_s"]), "routing": mode,
            }
            if params["tiers"] == 1 and over != (1.0, 1.0):
                raise InvalidArgumentError(
                    f"oversubscription {oversubscription!r} needs uplinks, but a Clos of 1 tier is one "
                    "switch per plane with none; give tiers=2 or more"
                )
            fits = _clos_fits(n_endpoints, rails, params)
            if fits is None:
                if params["tiers"] == 2 and over[1] != 1.0:
                    raise InvalidArgumentError(
                        f"oversubscription {oversubscription!r} gives the spine tier a ratio of "
                        f"{over[1]:g}, but this Clos has 2 tiers and no tier above its spines; "
                        "give one ratio (the leaf tier's) or tiers=3"
                    )
                parts = dict(switch=sw, nic=nic_p, efficiency=eff, plane_Bps=plane_Bps)
                return params, parts
            errors.append(f"planes={p}, tiers={t}: {fits}")
    raise InvalidArgumentError(f"no {sw.name} Clos holds {n_endpoints} endpoints: " + "; ".join(errors))


def _oversubscription(value: Any) -> tuple[float, float]:
    """(leaf, spine) down:up ratios from a number, a string "a:b" (the leaf tier's) or a tuple
    (leaf,) or (leaf, spine)."""
    def ratio(x: Any) -> float:
        out = real(x)
        if out is None:
            raise InvalidArgumentError(
                f"oversubscription must be a number, a string 'a:b' or a tuple (leaf, spine) of "
                f"numbers, got {shown(value)}"
            )
        return out

    if isinstance(value, str):
        down, colon, up = value.partition(":")
        try:
            leaf = float(down) / float(up) if colon else None
        except (ValueError, ZeroDivisionError):
            leaf = None
        if leaf is None:
            raise InvalidArgumentError(f"oversubscription as a string is 'down:up', e.g. '3:1', got {value!r}")
        return leaf, 1.0
    if isinstance(value, (tuple, list)) and len(value) in (1, 2):
        return ratio(value[0]), ratio(value[1]) if len(value) == 2 else 1.0
    return ratio(value), 1.0


def _clos_fits(n_endpoints: int, rails: int, params: ScaleOutParams) -> str | None:
    """None when the Clos can be built, else why not (checked on a shape, no allocation)."""
    try:
        _core.clos_shape(n_endpoints, rails, [1] * params["planes"], params["tiers"], params["radix"],
                         params["oversubscription"])
    except InvalidArgumentError as e:
        return str(e)
    return None


def _sharp_flag(value: Any) -> bool:
    """``sharp`` checked to be a bool (1 or "yes" would pass a truth test and hide a typo)."""
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"sharp must be True or False, got {type(value).__name__} {shown(value)}")
    return bool(value)


def _sharp_switch(sharp: bool, sw: Any, switch_arg: str) -> bool:
    """``sharp`` if the scale-out switch part can run it; refused otherwise."""
    if sharp and (sw["protocol"] != "infiniband" or not sw["sharp"]):
        why = (f"{sw.name} is {sw['protocol']}" if sw["protocol"] != "infiniband"
               else f"{sw.name} is InfiniBand without SHARP (its catalog part has sharp=False)")
        raise InvalidArgumentError(
            f"sharp=True needs InfiniBand switches with SHARP (in-network reduction); "
            f"{switch_arg}={sw.name!r}: {why}"
        )
    return sharp


def _cluster_parts(
    domain: Any, n_domains: Any, scale_out: Any, nic: Any, tiers: Any, planes: Any, oversubscription: Any,
    routing: Any, nvlink_efficiency: Any, efficiency: Any, sharp: Any,
) -> dict[str, Any]:
    """:func:`cluster`'s arguments checked and its parts chosen, nothing built (also what
    ``fabricsim.power.plan_cluster`` counts from)."""
    sharp = _sharp_flag(sharp)
    params, parts = _nvlink_spec(domain, nvlink_efficiency)
    gpd = params["gpus_per_domain"]
    # Every GPU is a node and node ids are 32-bit: fewer than 2**32 GPUs in all.
    nd = integer(f"n_domains (of {gpd} GPUs)", n_domains, (1, (COUNT[1] - 1) // gpd + 1))
    nic_name = nic if nic is not None else parts["gpu"]["nic"]
    nic_part = _part(nic_name, "nic", "nic")  # named before a bad scale_out is
    if scale_out is None:  # the switch of the NIC's generation (SCALE_OUT_BY_GENERATION)
        scale_out = nic_part.get("switch")
        if scale_out is None:
            raise InvalidArgumentError(
                f"scale_out=None takes the switch of the NIC's generation, but nic {nic_part.name!r} names none "
                "(its catalog part has no switch): give scale_out, e.g. 'quantum-2'")
    n = gpd * nd
    so, so_parts = _scale_out_spec(
        n, params["gpus_per_domain"], scale_out, nic_name, tiers, planes, oversubscription, routing, efficiency,
        switch_arg="scale_out",
    )
    return dict(parts, **so_parts, domain=params, n_domains=nd, scale_out=so, faults=(),
                sharp_enabled=_sharp_switch(sharp, so_parts["switch"], "scale_out"))
