"""Compact JSON bytes for objects that are kept a long time (caches, the simulator's store), and
JSON split into members without decoding them, to decode only what is needed."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import msgspec
import orjson

#: An object's members, each value its own undecoded JSON (views into the bytes it came from).
Members = dict[str, msgspec.Raw]

_MEMBERS = msgspec.json.Decoder(Members)
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_ENCODER = msgspec.json.Encoder()

T = TypeVar("T")


def json_copy(obj: T) -> T:
    """A deep copy of decoded JSON, through JSON: 10x faster than `copy.deepcopy` on a pod (a
    9 KB pod: 0.1 ms against 1.4 ms). Values JSON encoders refuse (integers past 64 bits) take
    the slow path."""
    try:
        out: T = orjson.loads(orjson.dumps(obj))
    except TypeError:
        return copy.deepcopy(obj)
    return out


def dumps_exact(obj: Any) -> bytes:
    """`orjson.dumps(obj)` in an exactly-sized allocation.

    orjson grows its output buffer by doubling and returns it without giving the slack back to
    the allocator in a usable way: a 9.5 KB pod can sit in a 16 KB block. Kept by the hundred
    thousand, that costs about half again the JSON's size; one extra copy into a fresh
    allocation (about a microsecond) lets the next encode reuse the big buffer instead.
    """
    return bytes(memoryview(orjson.dumps(obj)))


def members(raw: bytes | memoryview | msgspec.Raw) -> Members | None:
    """The members of `raw` if it is exactly one JSON object, else None.

    Values are not decoded, only checked to be JSON and skipped, several times faster than
    decoding them; a repeated name keeps its last value, as any decoder of a dict does.
    """
    try:
        return _MEMBERS.decode(raw)
    except msgspec.DecodeError:
        return None


def joined(obj: Members) -> bytes:
    """The compact JSON object of these members, in their order, exactly sized."""
    return bytes(memoryview(_ENCODER.encode(obj)))


def raw(value: Any) -> msgspec.Raw:
    """A value as a member's undecoded JSON."""
    return msgspec.Raw(orjson.dumps(value))


def list_items(payload: bytes) -> tuple[Members, list[msgspec.Raw]] | None:
    """A list's members and its `items`, each item undecoded; None unless `payload` is one
    JSON object whose `items` is an array."""
    top = members(payload)
    if top is None or "items" not in top:
        return None
    try:
        return top, _ITEMS.decode(top["items"])
    except msgspec.DecodeError:
        return None
