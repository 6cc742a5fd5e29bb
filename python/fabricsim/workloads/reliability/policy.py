"""What a failure does to a job (:class:`Policy`), by part or ``part.location``: restart from
the last checkpoint, reroute, fall back to the remaining rails, or nothing (the reliability
package's docstring, Consequences, says what each costs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..._checks import finite, positive, shown
from ...exceptions import InvalidArgumentError
from .rates import PARTS, _part_name

__all__ = ["CONSEQUENCES", "Policy"]

#: What a failure can do to the job.
CONSEQUENCES = ("restart", "reroute", "fallback", "ignore")


_FABRIC_LOCATIONS = ("leaf-spine", "spine-core", "spine", "core")


_ENDPOINT_PARTS = ("gpu", "host", "host_maintenance", "software", "unknown")


# Which consequences each kind of location allows.
_ALLOWED = {
    "endpoint": ("restart", "ignore"),
    "host": ("restart", "fallback", "ignore"),
    "fabric": ("restart", "reroute", "ignore"),
}


_DEFAULT_CONSEQUENCES: dict[str, str] = {
    "gpu": "restart", "host": "restart", "host_maintenance": "restart", "software": "restart", "unknown": "restart",
    "nic": "restart", "switch.leaf": "restart", "switch.spine": "reroute", "switch.core": "reroute",
    "optics.host": "restart", "optics.fabric": "reroute", "cpo_port.host": "restart", "cpo_port.fabric": "reroute",
    "link.host": "restart", "link.fabric": "reroute",
}


def _kind(part: str, location: str) -> str:
    if part in _ENDPOINT_PARTS:
        return "endpoint"
    if part == "nic" or location in ("nic", "host", "leaf"):
        return "host"
    return "fabric"


@dataclass(frozen=True)
class Policy:
    """What each failure does to the job, and the checkpoint/restart costs.

    ``consequences`` overrides the defaults by part (``"switch"``) or part and location
    (``"switch.spine"``, ``"optics.host"`` for both ends of the NIC-to-leaf links or
    ``"optics.nic"`` for the NIC's end, ``"optics.fabric"`` for both switch-to-switch tiers): one of ``restart``, ``reroute`` (switch-to-switch parts only), ``fallback``
    (NIC-side parts only: NCCL on fewer rails) or ``ignore``. ``slowdown`` gives, by the same
    keys, the factor on the exposed scale-out communication while degraded, in place of the
    closed form 1 / (1 - f).

    Defaults [assumed]: a checkpoint every 30 min (``checkpoint_interval_s=1800``) and a
    4-minute restart (``restart_s=240``), chosen so that Table 5's 419 restarts in 1,296 h
    lose (900 + 240) s each, 10% of the time: the paper's "higher than 90% effective training
    time". Checkpoint writes are asynchronous (``checkpoint_write_s=0``).

    Example::

        from fabricsim import reliability
        p = reliability.Policy(checkpoint_interval_s=3600, consequences={"nic": "fallback"})
        p.consequence("nic", "host")   # 'fallback'
    """

    checkpoint_interval_s: float = 1800.0
    restart_s: float = 240.0
    checkpoint_write_s: float = 0.0
    consequences: Mapping[str, str] = field(default_factory=dict)
    slowdown: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint_interval_s",
                           positive("checkpoint_interval_s", self.checkpoint_interval_s, "seconds"))
        object.__setattr__(self, "restart_s", positive("restart_s", self.restart_s, "seconds", zero=True))
        object.__setattr__(self, "checkpoint_write_s",
                           positive("checkpoint_write_s", self.checkpoint_write_s, "seconds", zero=True))
        cons = {}
        for key, value in dict(self.consequences).items():
            part, _, loc = str(key).partition(".")
            _part_name(f"consequences[{key!r}]", part, PARTS)
            if not isinstance(value, str) or value not in CONSEQUENCES:
                raise InvalidArgumentError(
                    f"consequences[{key!r}] must be one of {', '.join(CONSEQUENCES)}, got {shown(value)}")
            locs = [loc] if loc else _locations_of(part)
            for lo in locs:
                allowed = _ALLOWED[_kind(part, lo)]
                if value not in allowed:
                    raise InvalidArgumentError(
                        f"consequences[{key!r}] = {value!r} is not possible for {part} at {lo!r}: "
                        f"there it can be {', '.join(allowed)} (reroute needs a redundant switch-to-switch path; "
                        f"fallback to fewer rails applies to NIC-side parts)")
            cons[str(key)] = value
        slow = {}
        for skey, factor in dict(self.slowdown).items():
            _part_name(f"slowdown[{skey!r}]", str(skey).partition(".")[0], PARTS)
            v = finite(factor)
            if v is None or v < 1:
                raise InvalidArgumentError(
                    f"slowdown[{skey!r}] must be a finite factor >= 1 on the exposed scale-out time, got {shown(factor)}")
            slow[str(skey)] = v
        object.__setattr__(self, "consequences", cons)
        object.__setattr__(self, "slowdown", slow)

    def _lookup(self, table: Mapping[str, Any], part: str, location: str) -> Any:
        keys = [f"{part}.{location}"]
        if location == "nic":  # the NIC's end of a NIC-to-leaf link
            keys.append(f"{part}.host")
        if location in _FABRIC_LOCATIONS and location not in ("spine", "core"):
            keys.append(f"{part}.fabric")
        keys.append(part)
        for k in keys:
            if k in table:
                return table[k]
        return None

    def consequence(self, part: str, location: str = "") -> str:
        """What a failure of ``part`` at ``location`` does: the policy's, else the default.

        Example::

            fs.reliability.Policy().consequence("switch", "spine")   # 'reroute'
        """
        got = self._lookup(self.consequences, part, location)
        if got is None:
            got = self._lookup(_DEFAULT_CONSEQUENCES, part, location)
        return str(got) if got is not None else "restart"

    def slowdown_factor(self, part: str, location: str = "") -> float | None:
        """The given factor on the exposed scale-out time while degraded, or None (closed form).

        Example::

            fs.reliability.Policy(slowdown={"switch": 1.5}).slowdown_factor("switch", "core")   # 1.5
        """
        got = self._lookup(self.slowdown, part, location)
        return None if got is None else float(got)


def _locations_of(part: str) -> list[str]:
    if part in _ENDPOINT_PARTS:
        return [""]
    if part == "nic":
        return ["host"]
    if part == "switch":
        return ["leaf", "spine", "core"]
    if part == "link":
        return ["host", "leaf-spine", "spine-core"]
    return ["nic", "host", "leaf-spine", "spine-core"]
