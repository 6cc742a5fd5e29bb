"""The Chakra execution-trace file format, as fabricsim reads and writes it.

A Chakra ET file (MLCommons Chakra, ``schema/protobuf/et_def.proto``) is one
``GlobalMetadata`` message and then one ``Node`` message after another, each preceded by its
length as a base-128 varint (the framing of Chakra's ``protoio``), gzip-compressed where the
file is (its first bytes are gzip's magic). fabricsim declares the messages itself, here, in
code: their field numbers and types are the format, and nothing of Chakra's is copied or
needed. They are compiled with the ``protobuf`` package (an optional extra, ``pip install
'fabricsim[chakra]'``), whose parser runs in C: a trace of a real job has millions of nodes,
and decoding them field by field in Python would cost tens of seconds where protobuf takes
one. The framing, a varint per message, is read here.

Messages (field number, type):

* ``GlobalMetadata``: version (1, string), attr (2, repeated AttributeProto);
* ``Node``: id (1, uint64), name (2, string), type (3, NodeType), ctrl_deps (4, repeated
  uint64), data_deps (5, repeated uint64), start_time_micros (6, uint64), duration_micros (7,
  uint64), inputs (8, IOInfo), outputs (9, IOInfo), attr (10, repeated AttributeProto);
* ``IOInfo``: values, shapes, types (1 to 3, strings);
* ``AttributeProto``: name (1, string), doc_string (2, string) and one value: for each scalar
  type, in the order of :data:`_SCALARS`, the value at field 3 + 2k and a list of them (a
  message with ``repeated values = 1``) at 4 + 2k.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = ["NODE_TYPES", "COMM_TYPES", "COMM_GROUP_FILE", "Messages", "messages", "frames", "frame", "attribute_value"]

#: The file beside the traces that names each process group's ranks, as ASTRA-sim's
#: ``--comm-group-configuration`` takes it: ``{"<pg_name>": [rank, ...], ...}``.
COMM_GROUP_FILE = "comm_group.json"

#: Chakra's NodeType enum: number -> fabricsim's name for it.
NODE_TYPES: dict[int, str] = {
    0: "invalid", 1: "metadata", 2: "mem_load", 3: "mem_store", 4: "compute", 5: "send", 6: "recv",
    7: "collective",
}
NODE_TYPE_NUMBER: dict[str, int] = {v: k for k, v in NODE_TYPES.items()}

#: Chakra's CollectiveCommType enum: number -> name.
COMM_TYPES: dict[int, str] = {
    0: "all_reduce", 1: "reduce", 2: "all_gather", 3: "gather", 4: "scatter", 5: "broadcast",
    6: "all_to_all", 7: "reduce_scatter", 8: "reduce_scatter_block", 9: "barrier",
}
COMM_TYPE_NUMBER: dict[str, int] = {v: k for k, v in COMM_TYPES.items()}

# The scalar types an attribute can hold, in the order of their field numbers (3 + 2k for one
# value, 4 + 2k for a list), with their FieldDescriptorProto type names.
_SCALARS = (
    ("double", "TYPE_DOUBLE"), ("float", "TYPE_FLOAT"), ("int32", "TYPE_INT32"), ("int64", "TYPE_INT64"),
    ("uint32", "TYPE_UINT32"), ("uint64", "TYPE_UINT64"), ("sint32", "TYPE_SINT32"), ("sint64", "TYPE_SINT64"),
    ("fixed32", "TYPE_FIXED32"), ("fixed64", "TYPE_FIXED64"), ("sfixed32", "TYPE_SFIXED32"),
    ("sfixed64", "TYPE_SFIXED64"), ("bool", "TYPE_BOOL"), ("string", "TYPE_STRING"), ("bytes", "TYPE_BYTES"),
)

_PACKAGE = "ChakraProtoMsg"  # the messages' package in Chakra's schema: the full names match it


@dataclass(frozen=True)
class Messages:
    """The message classes, built once: ``GlobalMetadata``, ``Node``, ``AttributeProto``,
    ``IOInfo``."""
    GlobalMetadata: Any
    Node: Any
    AttributeProto: Any
    IOInfo: Any


_MESSAGES: Messages | None = None


def messages() -> Messages:
    """The Chakra messages as protobuf classes, built from the declaration above in a pool of
    their own (so that Chakra's own ``et_def_pb2``, loaded beside, does not clash with them).
    Raises ImportError naming the extra where protobuf is not installed."""
    global _MESSAGES
    if _MESSAGES is not None:
        return _MESSAGES
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise ImportError("fabricsim.chakra needs protobuf to read and write Chakra traces: "
                          "pip install 'fabricsim[chakra]'") from None
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="fabricsim_chakra_et.proto", package=_PACKAGE, syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, str, bool, str]], oneof: str | None = None,
                in_oneof: set[str] | None = None) -> None:
        m = fdp.message_type.add(name=name)
        if oneof is not None:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, repeated, type_name in fields:
            f = m.field.add(name=fname, number=number, type=getattr(F, ftype),
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
            if in_oneof is not None and fname in in_oneof:
                f.oneof_index = 0

    attr_fields: list[tuple[str, int, str, bool, str]] = [
        ("name", 1, "TYPE_STRING", False, ""), ("doc_string", 2, "TYPE_STRING", False, "")]
    values: set[str] = set()
    for k, (scalar, ftype) in enumerate(_SCALARS):
        list_name = scalar.capitalize() + "List"
        message(list_name, [("values", 1, ftype, True, "")])
        attr_fields.append((f"{scalar}_val", 3 + 2 * k, ftype, False, ""))
        attr_fields.append((f"{scalar}_list", 4 + 2 * k, "TYPE_MESSAGE", False, list_name))
        values |= {f"{scalar}_val", f"{scalar}_list"}
    message("AttributeProto", attr_fields, oneof="value", in_oneof=values)
    message("GlobalMetadata", [("version", 1, "TYPE_STRING", False, ""),
                               ("attr", 2, "TYPE_MESSAGE", True, "AttributeProto")])
    message("IOInfo", [("values", 1, "TYPE_STRING", False, ""), ("shapes", 2, "TYPE_STRING", False, ""),
                       ("types", 3, "TYPE_STRING", False, "")])
    # The node type is read as a plain int32 (an enum on the wire is a varint too): a type this
    # declaration does not know arrives as its number, for the reader to report.
    message("Node", [
        ("id", 1, "TYPE_UINT64", False, ""), ("name", 2, "TYPE_STRING", False, ""),
        ("type", 3, "TYPE_INT32", False, ""), ("ctrl_deps", 4, "TYPE_UINT64", True, ""),
        ("data_deps", 5, "TYPE_UINT64", True, ""), ("start_time_micros", 6, "TYPE_UINT64", False, ""),
        ("duration_micros", 7, "TYPE_UINT64", False, ""), ("inputs", 8, "TYPE_MESSAGE", False, "IOInfo"),
        ("outputs", 9, "TYPE_MESSAGE", False, "IOInfo"), ("attr", 10, "TYPE_MESSAGE", True, "AttributeProto"),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)

    def cls(name: str) -> Any:
        desc = pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        return get(desc) if get is not None else message_factory.MessageFactory(pool).GetPrototype(desc)

    _MESSAGES = Messages(cls("GlobalMetadata"), cls("Node"), cls("AttributeProto"), cls("IOInfo"))
    return _MESSAGES


class FrameError(ValueError):
    """Bytes that are not a sequence of length-delimited messages: ``offset`` is where the bad
    frame starts, ``index`` its position (0: the metadata)."""

    def __init__(self, message: str, offset: int, index: int) -> None:
        super().__init__(message)
        self.offset, self.index = offset, index


def unpacked(data: bytes) -> bytes:
    """The file's bytes, decompressed where they are gzip's (Chakra writes ``.gz`` files so)."""
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise FrameError(f"a gzip file that does not decompress ({err})", 0, 0) from None
    return data


def frames(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Each message of ``data`` as (its offset, its bytes): a varint length, then that many
    bytes. Raises :class:`FrameError` where a length runs past the end (a truncated file) or
    is not a varint of at most 10 bytes."""
    pos, n, index = 0, len(data), 0
    while pos < n:
        start, length, shift = pos, 0, 0
        while True:
            if pos >= n:
                raise FrameError(f"the file ends inside the length of message {index} (at byte {start})", start, index)
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 70:
                raise FrameError(f"message {index} at byte {start} has no valid length (a varint of over 10 bytes)",
                                 start, index)
        if pos + length > n:
            raise FrameError(f"the file ends inside message {index}: it starts at byte {start} and says it has "
                             f"{length} bytes, {n - pos} are left (a truncated file)", start, index)
        yield start, data[pos:pos + length]
        pos += length
        index += 1


def frame(payload: bytes) -> bytes:
    """``payload`` with its length in front, as :func:`frames` reads it."""
    n = len(payload)
    head = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            head.append(b | 0x80)
        else:
            head.append(b)
            return bytes(head) + payload


def attribute_value(attr: Any) -> Any:
    """An AttributeProto's value as a Python value (a list for a list), or None where it has
    none this declaration knows."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    return list(value.values) if which.endswith("_list") else value
