"""A minimal encoder and decoder of Chakra execution traces, written from the protobuf wire
format alone (varints, length-delimited fields, fixed 64-bit doubles), independent of
fabricsim's reader and writer and of the protobuf package: the tests write traces with it
for fabricsim to read, and read fabricsim's traces with it.

Field numbers are those of Chakra's schema (et_def.proto): Node id 1, name 2, type 3,
ctrl_deps 4, data_deps 5, duration_micros 7, inputs 8, attr 10; AttributeProto name 1,
double_val 3, int32_val 7, int64_val 9, uint64_val 13, bool_val 27, string_val 29;
GlobalMetadata version 1.
"""

from __future__ import annotations

import struct
from typing import Any

# Chakra's NodeType and CollectiveCommType numbers.
METADATA, MEM_LOAD, MEM_STORE, COMP, SEND, RECV, COLL = 1, 2, 3, 4, 5, 6, 7
ALL_REDUCE, REDUCE, ALL_GATHER, GATHER, SCATTER, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER = 0, 1, 2, 3, 4, 5, 6, 7
BARRIER = 9

# Attribute value kinds -> (field number, wire type).
_ATTR_FIELDS = {"double": (3, 1), "int32": (7, 0), "int64": (9, 0), "uint64": (13, 0), "bool": (27, 0),
                "string": (29, 2)}
_ATTR_KINDS = {v[0]: k for k, v in _ATTR_FIELDS.items()}


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negatives as two's complement in 64 bits, as int32/int64 are encoded
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def length_delimited(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


def attr(name: str, kind: str, value: Any) -> bytes:
    field, wire = _ATTR_FIELDS[kind]
    body = length_delimited(1, name.encode())
    if wire == 0:
        body += key(field, 0) + varint(int(value))
    elif wire == 1:
        body += key(field, 1) + struct.pack("<d", value)
    else:
        body += length_delimited(field, value.encode())
    return body


def node(node_id: int, name: str, node_type: int, *, data_deps: tuple[int, ...] = (), ctrl_deps: tuple[int, ...] = (),
         duration_micros: int = 0, attrs: tuple[bytes, ...] = (), inputs_values: str | None = None) -> bytes:
    body = key(1, 0) + varint(node_id) + length_delimited(2, name.encode()) + key(3, 0) + varint(node_type)
    if ctrl_deps:
        body += length_delimited(4, b"".join(varint(d) for d in ctrl_deps))  # packed
    for d in data_deps:  # unpacked, one field each: a reader must take both forms
        body += key(5, 0) + varint(d)
    if duration_micros:
        body += key(7, 0) + varint(duration_micros)
    if inputs_values is not None:
        body += length_delimited(8, length_delimited(1, inputs_values.encode()))
    for a in attrs:
        body += length_delimited(10, a)
    return body


def trace(nodes: list[bytes], version: str = "0.0.4") -> bytes:
    """A whole file: the GlobalMetadata, then each node, each preceded by its length."""
    out = bytearray()
    for message in [length_delimited(1, version.encode())] + nodes:
        out += varint(len(message)) + message
    return bytes(out)


def compute(node_id: int, micros: int, deps: tuple[int, ...] = (), name: str = "comp") -> bytes:
    return node(node_id, name, COMP, data_deps=deps, duration_micros=micros)


def collective(node_id: int, comm_type: int, size: int, pg: str | None = None, deps: tuple[int, ...] = (),
               name: str = "coll") -> bytes:
    attrs = (attr("comm_type", "int64", comm_type), attr("comm_size", "int64", size))
    if pg is not None:
        attrs += (attr("pg_name", "string", pg),)
    return node(node_id, name, COLL, data_deps=deps, attrs=attrs)


def p2p(node_id: int, kind: int, src: int, dst: int, size: int, tag: int = 0, deps: tuple[int, ...] = (),
        name: str = "p2p") -> bytes:
    return node(node_id, name, kind, data_deps=deps, attrs=(
        attr("comm_src", "int32", src), attr("comm_dst", "int32", dst), attr("comm_size", "int64", size),
        attr("comm_tag", "int32", tag)))


# ---- decoding ---------------------------------------------------------------------------------


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(message: bytes) -> list[tuple[int, Any]]:
    """(field number, value) of each field: an int, 8 raw bytes, or a payload's bytes."""
    out, pos = [], 0
    while pos < len(message):
        k, pos = _read_varint(message, pos)
        field, wire = k >> 3, k & 7
        if wire == 0:
            v, pos = _read_varint(message, pos)
        elif wire == 1:
            v, pos = message[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _read_varint(message, pos)
            v, pos = message[pos:pos + n], pos + n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, v))
    return out


def messages(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        n, pos = _read_varint(data, pos)
        out.append(data[pos:pos + n])
        pos += n
    return out


def decode_node(message: bytes) -> dict[str, Any]:
    """A node as {"id", "name", "type", "data_deps", "ctrl_deps", "duration_micros", "attrs":
    {name: (kind, value)}}."""
    out: dict[str, Any] = {"id": 0, "name": "", "type": 0, "data_deps": [], "ctrl_deps": [], "duration_micros": 0,
                           "attrs": {}}
    for field, v in fields(message):
        if field == 1:
            out["id"] = v
        elif field == 2:
            out["name"] = v.decode()
        elif field == 3:
            out["type"] = v
        elif field in (4, 5):
            target = out["ctrl_deps" if field == 4 else "data_deps"]
            if isinstance(v, bytes):  # packed
                pos = 0
                while pos < len(v):
                    d, pos = _read_varint(v, pos)
                    target.append(d)
            else:
                target.append(v)
        elif field == 7:
            out["duration_micros"] = v
        elif field == 10:
            name, value = "", None
            for f, x in fields(v):
                if f == 1:
                    name = x.decode()
                elif f in _ATTR_KINDS:
                    kind = _ATTR_KINDS[f]
                    value = (kind, struct.unpack("<d", x)[0] if kind == "double" else
                             x.decode() if kind == "string" else bool(x) if kind == "bool" else x)
                else:
                    value = (f"field {f}", x)
            out["attrs"][name] = value
    return out


def decode_trace(data: bytes) -> tuple[str, list[dict[str, Any]]]:
    """(version, nodes) of a whole file."""
    msgs = messages(data)
    version = next((v.decode() for f, v in fields(msgs[0]) if f == 1), "")
    return version, [decode_node(m) for m in msgs[1:]]
