"""An InfiniBand fabric's real cabling, read from ``ibnetdiscover``'s topology output
(infiniband-diags, in linux-rdma/rdma-core; the format is its man page's "TOPOLOGY FILE
FORMAT" and ``ibnetdiscover.c``'s ``out_switch``, ``out_ca``, ``out_switch_port`` and
``out_ca_port``).

Each node is a block: ``vendid=``, ``devid=``, ``sysimgguid=``, ``switchguid=`` or
``caguid=`` lines, then its line, ``Switch <ports> "S-<guid>" # "<description>" base port 0
lid <n> lmc <n>`` (``Ca`` with ``"H-<guid>"``, ``Rt`` with ``"R-<guid>"`` for CAs and
routers), then one line per cabled port::

    [<port>]          "<S|H|R>-<peer guid>"[<peer port>](<peer port guid>)  # "<peer description>" lid <n> <width><speed>
    [<port>](<guid>)  "<S|H|R>-<peer guid>"[<peer port>]  # lid <n> lmc <n> "<peer description>" lid <n> <width><speed>

(a switch's port and a CA's or router's; the peer's port GUID only where the peer is not a
switch), with ``[ext <n>]`` after a port number under ``-g`` and `` s=<n> w=<n> v=<n>``
after the speed under ``-f``. Every cable is listed from both of its ends.

:func:`read` parses and checks it into a :class:`Cabling`; :func:`fabric_arrays` makes the
links a :class:`~fabricsim.Topology` is built from (``Topology.from_ibnetdiscover``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._checks import did_you_mean, parsed, real_in, shown
from ..exceptions import CablingError, InvalidArgumentError
from ..units import bandwidth_Bps, duration_s
from . import catalog
from .specs import _efficiency, _nvlink_spec

__all__ = ["read", "Cabling", "LANE_DATA_Gbps", "WIDTH_LANES"]

#: Data rate of one lane (Gb/s, after line coding) of each InfiniBand speed: SDR, DDR and QDR
#: signal at 2.5, 5 and 10 Gbaud with 8b/10b coding; FDR10 at 10.3125 and FDR at 14.0625 with
#: 64b/66b; EDR at 25.78125 with 64b/66b; HDR, NDR and XDR at 50, 100 and 200 Gb/s of data
#: per lane (InfiniBand Architecture Specification Vol. 2, Release 1.5, physical layer; the
#: IBTA roadmap, https://www.infinibandta.org/infiniband-roadmap/: 4x = 200, 400, 800 Gb/s).
#: A 4x NDR port is 400 Gb/s of data, the catalog's Quantum-2 port rate.
LANE_DATA_Gbps: dict[str, float] = {
    "SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0, "FDR": 14.0625 * 64 / 66, "EDR": 25.0,
    "HDR": 50.0, "NDR": 100.0, "XDR": 200.0,
}

#: Lanes of each active link width ibnetdiscover prints (``dump_linkwidth_compat``).
WIDTH_LANES: dict[str, int] = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}

_KINDS = {"Switch": ("S", "switch"), "Ca": ("H", "ca"), "Rt": ("R", "router")}
_LETTER_KIND = {"S": "switch", "H": "ca", "R": "router"}

_HEADER = re.compile(
    r'^(?P<kind>Switch|Ca|Rt)\s+(?P<nports>\d+)\s+"(?P<letter>[A-Z?])-(?P<guid>[0-9a-fA-F]+)"\s*#\s*"(?P<desc>.*)"'
    r'(?P<rest>.*)$')
_PORT = re.compile(
    r'^\[(?P<port>\d+)\](?:\[ext \d+\])?(?:\((?P<pguid>[0-9a-fA-F]+)\))?\s*'
    r'"(?P<letter>[A-Z?])-(?P<rguid>[0-9a-fA-F]+)"\[(?P<rport>\d+)\](?:\[ext \d+\])?\s*(?:\([0-9a-fA-F]+\))?\s*#\s*'
    r'(?:lid \d+ lmc \d+\s+)?"(?P<rdesc>.*)"\s+lid\s+\d+\s+(?P<width>\d+x|\?\?)(?P<speed>[A-Z]+\d*|\?\?\?)'
    r'(?P<rest>.*)$')
# Lines of a node's block or of the file that carry nothing a fabric is built from.
_SKIPPED = re.compile(r'^(#|vendid=|devid=|sysimgguid=|switchguid=|caguid=|rtguid=|Chassis\b|Non-Chassis Nodes|'
                      r'Hostname:)')


@dataclass(frozen=True)
class IbNode:
    """A switch, CA (an HCA) or router as ibnetdiscover lists it."""
    guid: int
    kind: str  # "switch", "ca" or "router"
    n_ports: int
    description: str
    line: int


@dataclass(frozen=True)
class Cable:
    """A cable, as both of its ends list it: node GUIDs, port numbers, the active width and
    speed, and the lines of its two ends."""
    a: int
    a_port: int
    b: int
    b_port: int
    width: str
    speed: str
    lines: tuple[int, int]

    @property
    def data_Bps(self) -> float:
        """Its data rate per direction, bytes/s: lanes x the lane's data rate."""
        return WIDTH_LANES[self.width] * LANE_DATA_Gbps[self.speed] * 1e9 / 8


@dataclass(frozen=True)
class LooseEnd:
    """A port line whose other end the file does not confirm: the peer's block does not list
    that port, or the peer is not in the file. The fabric is built without it."""
    guid: int
    port: int
    peer: int
    peer_port: int
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: port {self.port} of {self.guid:#018x} to port {self.peer_port} of {self.peer:#018x}: {self.reason}"


@dataclass
class Cabling:
    """An ibnetdiscover topology, read and checked: ``nodes`` in the file's order
    (:class:`IbNode`), ``cables`` (:class:`Cable`, each once, where both ends list it),
    ``loose`` (:class:`LooseEnd`, port lines the other end does not confirm, left out).

    Example::

        from fabricsim.fabrics import ibnetdiscover
        text = '''
        Switch 2 "S-0000000000000001" # "leaf" base port 0 lid 1 lmc 0
        [1] "H-0000000000000002"[1](3) # "host1 mlx5_0" lid 2 4xHDR
        [2] "H-0000000000000004"[1](5) # "host2 mlx5_0" lid 4 4xHDR
        Ca 1 "H-0000000000000002" # "host1 mlx5_0"
        [1](3) "S-0000000000000001"[1] # lid 2 lmc 0 "leaf" lid 1 4xHDR
        '''
        c = ibnetdiscover.read(text)   # host2's HCA has no block: its cable is a loose end
        len(c.cables), str(c.loose[0])   # (1, 'line 4: port 2 of 0x0000000000000001 to port 1 of ...')
    """
    nodes: list[IbNode]
    cables: list[Cable]
    loose: list[LooseEnd] = field(default_factory=list)


def read(text: str) -> Cabling:
    """Parses ``ibnetdiscover`` output (the text), checking that the two ends of each cable
    name each other with the same width and speed. Raises :class:`~fabricsim.CablingError`
    naming the line of what it cannot read or what disagrees; a port line whose other end is
    not listed is a :class:`LooseEnd` of the result.

    Example::

        text = '''
        Switch 2 "S-0000000000000001" # "leaf" base port 0 lid 1 lmc 0
        [1] "H-0000000000000002"[1](3) # "host1 mlx5_0" lid 2 4xNDR
        Ca 1 "H-0000000000000002" # "host1 mlx5_0"
        [1](3) "S-0000000000000001"[1] # lid 2 lmc 0 "leaf" lid 1 4xNDR
        '''
        from fabricsim.fabrics import ibnetdiscover
        c = ibnetdiscover.read(text)
        len(c.nodes), c.cables[0].data_Bps   # (2, 5e10): one cable, 400 Gb/s
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"ibnetdiscover output must be text (a str), got {type(text).__name__}")
    nodes: list[IbNode] = []
    by_guid: dict[int, IbNode] = {}
    # (guid, port) -> (peer guid, peer port, peer letter, width, speed, line)
    ports: dict[tuple[int, int], tuple[int, int, str, str, str, int]] = {}
    order: list[tuple[int, int]] = []
    current: IbNode | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or _SKIPPED.match(line):
            continue
        m = _HEADER.match(line)
        if m is not None:
            letter, kind = _KINDS[m["kind"]]
            if m["letter"] != letter:
                raise CablingError(f"{number}: a {m['kind']} line names its node {m['letter']}-{m['guid']}; "
                                   f"a {m['kind']}'s name starts with {letter}-", number)
            guid = int(m["guid"], 16)
            if guid in by_guid:
                raise CablingError(f"{number}: node {guid:#018x} is listed again (first at line {by_guid[guid].line})",
                                   number)
            current = IbNode(guid, kind, int(m["nports"]), m["desc"], number)
            nodes.append(current)
            by_guid[guid] = current
            continue
        m = _PORT.match(line)
        if m is None:
            raise CablingError(f"{number}: not a line of ibnetdiscover's topology output: {line[:120]!r}", number)
        if current is None:
            raise CablingError(f"{number}: a port line before any Switch or Ca line", number)
        port = int(m["port"])
        if not 1 <= port <= current.n_ports:
            raise CablingError(f"{number}: port {port} of {current.description!r}, which has ports 1 to "
                               f"{current.n_ports}", number)
        key = (current.guid, port)
        if key in ports:
            raise CablingError(f"{number}: port {port} of {current.description!r} is listed twice (also at line "
                               f"{ports[key][5]})", number)
        width, speed = m["width"], m["speed"]
        if width not in WIDTH_LANES:
            raise CablingError(f"{number}: link width {width!r} (ibnetdiscover prints '??' for a width it does not "
                               f"know): expected one of {', '.join(WIDTH_LANES)}", number)
        if speed not in LANE_DATA_Gbps:
            raise CablingError(f"{number}: link speed {speed!r}{did_you_mean(speed, LANE_DATA_Gbps)}: expected one of "
                               f"{', '.join(LANE_DATA_Gbps)}", number)
        peer = (int(m["rguid"], 16), int(m["rport"]))
        if peer == key:
            raise CablingError(f"{number}: port {port} of {current.description!r} is cabled to itself", number)
        ports[key] = (peer[0], peer[1], m["letter"], width, speed, number)
        order.append(key)
    if not nodes:
        raise CablingError("no Switch, Ca or Rt line: this is not ibnetdiscover's topology output (run ibnetdiscover "
                           "without -l, -H, -S, -R or -p)", None)
    cables: list[Cable] = []
    loose: list[LooseEnd] = []
    for key in order:
        rguid, rport, letter, width, speed, number = ports[key]
        peer_node = by_guid.get(rguid)
        if peer_node is None:
            loose.append(LooseEnd(key[0], key[1], rguid, rport, number, "the peer has no block in the file"))
            continue
        if _LETTER_KIND.get(letter) != peer_node.kind:
            raise CablingError(f"{number}: names its peer {letter}-{rguid:016x}, but that node is a {peer_node.kind} "
                               f"(line {peer_node.line})", number)
        back = ports.get((rguid, rport))
        if back is None:
            loose.append(LooseEnd(key[0], key[1], rguid, rport, number,
                                  f"port {rport} of {peer_node.description!r} (line {peer_node.line}) lists no cable"))
            continue
        if (back[0], back[1]) != key:
            other = by_guid.get(back[0])
            raise CablingError(
                f"{number}: port {key[1]} of {by_guid[key[0]].description!r} is cabled to port {rport} of "
                f"{peer_node.description!r}, but line {back[5]} has that port cabled to port {back[1]} of "
                f"{other.description if other is not None else f'{back[0]:#018x}'!r}", number)
        if (back[3], back[4]) != (width, speed):
            raise CablingError(f"{number}: the two ends of a cable disagree: {width}{speed} here, {back[3]}{back[4]} at "
                               f"line {back[5]}", number)
        if number < back[5]:  # each cable once, where it is first listed
            cables.append(Cable(key[0], key[1], rguid, rport, width, speed, (number, back[5])))
    return Cabling(nodes, cables, loose)


@dataclass
class FabricArrays:
    """The links of a fabric from cabling (:func:`fabric_arrays`): node names, the directed
    links' ends, capacities (bytes/s) and latencies (s), the GPUs (nodes 0 to n_gpus - 1)
    and the port lines left out."""
    names: list[str]
    src: np.ndarray
    dst: np.ndarray
    capacity_Bps: np.ndarray
    latency_s: np.ndarray
    n_gpus: int | None
    loose: list[LooseEnd]


def _natural(text: str) -> tuple[Any, ...]:
    """A sort key reading digit runs as numbers: mlx5_2 before mlx5_10, node9 before node10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def _host_and_device(description: str) -> tuple[str, str]:
    """(host, device) of an HCA's node description, which rdma-ndd sets to "%h %d", the host
    name and the device (rdma-core rdma-ndd/rdma-ndd.8.in.rst; "dgx01 mlx5_0")."""
    host, _, device = description.strip().partition(" ")
    return host, device


def fabric_arrays(text: str, *, gpus: Any = "per_hca", nvlink: Any = None, domain_of: Any = None,
                  efficiency: Any = None, gpu_link_Bps: Any = None, switch_latency_s: Any = None) -> FabricArrays:
    """The links of ``Topology.from_ibnetdiscover`` (whose docstring gives the arguments)."""
    cabling = read(text)
    eff = _efficiency(efficiency, "infiniband", "efficiency")
    host_Bps = (float(catalog.part("pcie-gen5-x16")["rate_Bps"]) if gpu_link_Bps is None
                else real_in("gpu_link_Bps", parsed("gpu_link_Bps", bandwidth_Bps, gpu_link_Bps), 0.0, float("inf"),
                             open_low=True, open_high=True))
    sw_lat = (float(catalog.part("quantum-2")["latency_s"]) if switch_latency_s is None
              else real_in("switch_latency_s", parsed("switch_latency_s", duration_s, switch_latency_s), 0.0, 1.0))
    cas = [n for n in cabling.nodes if n.kind == "ca"]
    attach = _gpus_of(gpus, cas)  # [(gpu label, hca guid)], GPUs in order
    labels: list[str] = []
    gpu_index: dict[str, int] = {}
    for label, _ in attach:
        if label not in gpu_index:
            gpu_index[label] = len(labels)
            labels.append(label)
    n_gpus = len(labels)
    # Names: the node descriptions, with the GUID where a description repeats (or is a GPU's).
    counts: dict[str, int] = {}
    for n in cabling.nodes:
        counts[n.description] = counts.get(n.description, 0) + 1
    taken = set(labels)
    names = list(labels)
    index: dict[int, int] = {}
    for n in cabling.nodes:
        name = n.description if counts[n.description] == 1 and n.description and n.description not in taken \
            else f"{n.description} [{n.guid:#018x}]"
        index[n.guid] = len(names)
        names.append(name)
    kind = {n.guid: n.kind for n in cabling.nodes}
    src: list[int] = []
    dst: list[int] = []
    cap: list[float] = []
    lat: list[float] = []

    def link(a: int, b: int, c: float, into_switch_s: float, b_is_switch: bool) -> None:
        src.append(a)
        dst.append(b)
        cap.append(c)
        lat.append(into_switch_s if b_is_switch else 0.0)

    for c in cabling.cables:
        a, b = index[c.a], index[c.b]
        rate = c.data_Bps * eff
        link(a, b, rate, sw_lat, kind[c.b] != "ca")
        link(b, a, rate, sw_lat, kind[c.a] != "ca")
    for label, hca in attach:
        g, h = gpu_index[label], index[hca]
        link(g, h, host_Bps, 0.0, False)
        link(h, g, host_Bps, 0.0, False)
    if nvlink is not None:
        params, _ = _nvlink_spec(nvlink, None)
        per_gpu = float(params["link_Bps"]) * sum(params["chip_links"])
        hosts: dict[str, list[int]] = {}
        by_guid = {n.guid: n for n in cabling.nodes}
        for label, hca in attach:
            host = _host_and_device(by_guid[hca].description)[0]
            domain = host if domain_of is None else domain_of(host)
            members = hosts.setdefault(str(domain), [])
            if gpu_index[label] not in members:
                members.append(gpu_index[label])
        for domain, members in hosts.items():
            if len(members) > params["gpus_per_domain"]:
                raise InvalidArgumentError(f"NVLink domain {domain!r} has {len(members)} GPUs, but a {nvlink!r} domain "
                                           f"holds {params['gpus_per_domain']}")
            if len(members) < 2:
                continue
            s = len(names)
            names.append(f"{domain} nvswitch")
            for g in members:
                link(g, s, per_gpu, float(params["chip_latency_s"]), True)
                link(s, g, per_gpu, 0.0, False)
    return FabricArrays(names, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                        np.array(cap, dtype=np.float64), np.array(lat, dtype=np.float64),
                        n_gpus if gpus is not None else None, cabling.loose)


def _gpus_of(gpus: Any, cas: list[IbNode]) -> list[tuple[str, int]]:
    """(GPU label, HCA guid) of each GPU's link to an HCA, GPUs in their order (a GPU on
    several HCAs has several)."""
    if gpus is None:
        return []
    ordered = sorted(cas, key=lambda n: (_natural(_host_and_device(n.description)[0]),
                                         _natural(_host_and_device(n.description)[1]), n.guid))
    if isinstance(gpus, str):
        if gpus != "per_hca":
            raise InvalidArgumentError(f"gpus must be 'per_hca', a mapping of HCAs to GPU names, a function or None, "
                                       f"got {gpus!r}")
        out: list[tuple[str, int]] = []
        seen: dict[str, int] = {}
        for n in ordered:
            host = _host_and_device(n.description)[0]
            i = seen.get(host, 0)
            seen[host] = i + 1
            out.append((f"{host} gpu{i}", n.guid))
        return out
    if isinstance(gpus, Mapping):
        by_desc: dict[str, list[IbNode]] = {}
        for n in cas:
            by_desc.setdefault(n.description, []).append(n)
        by_guid = {n.guid: n for n in cas}
        out = []
        for key, label in gpus.items():
            if not isinstance(label, str) or not label:
                raise InvalidArgumentError(f"gpus[{key!r}] must be a GPU's name (a non-empty str), got {shown(label)}")
            guid = _guid_key(key)
            if guid is not None and guid in by_guid:
                out.append((label, guid))
                continue
            found = by_desc.get(key) if isinstance(key, str) else None
            if not found:
                raise InvalidArgumentError(f"gpus: no HCA {key!r} in the cabling (an HCA is named by its node "
                                           f"description or its GUID){did_you_mean(str(key), list(by_desc))}")
            if len(found) > 1:
                raise InvalidArgumentError(f"gpus: {len(found)} HCAs are described {key!r}: name each by its GUID "
                                           f"({', '.join(f'{n.guid:#018x}' for n in found[:3])}, ...)")
            out.append((label, found[0].guid))
        return out
    if callable(gpus):
        out = []
        for n in ordered:
            label = gpus(n.description, n.guid)
            if label is None:
                continue
            if not isinstance(label, str) or not label:
                raise InvalidArgumentError(f"gpus({n.description!r}, {n.guid:#x}) must return a GPU's name (a "
                                           f"non-empty str) or None, got {shown(label)}")
            out.append((label, n.guid))
        return out
    raise InvalidArgumentError(f"gpus must be 'per_hca', a mapping of HCAs to GPU names, a function or None, got "
                               f"{type(gpus).__name__} {shown(gpus)}")


def _guid_key(key: Any) -> int | None:
    """A GUID given as an int or as hex text ("0x0c42a1...", "H-0c42a1..."), else None."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key)
    if isinstance(key, str):
        m = re.fullmatch(r"(?:H-|0x)?([0-9a-fA-F]{4,16})", key.strip())
        if m is not None and (key.startswith(("0x", "H-")) or len(m[1]) == 16):
            return int(m[1], 16)
    return None

