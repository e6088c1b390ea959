"""Splitting a watch stream into events: newline-delimited JSON, `ERROR` events as exceptions.

Plain parsing shared by the runtime's informer and the simulator's own watch; what to do with
the events (caching, bookmarks, resuming) stays with each of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

from nodeops.common.apierrors import ApiError, error_for

#: What `bytes.isspace` counts as whitespace, as byte values.
_SPACE = frozenset(b" \t\n\r\x0b\x0c")

Line = bytes | memoryview


async def batches(chunks: AsyncIterable[bytes]) -> AsyncIterator[list[Line]]:
    """The complete, non-empty lines of a chunked stream, one list per chunk that ends a line.

    Lines come as soon as their bytes have arrived, in the groups the network delivered them,
    so a consumer can decode them while the server is still sending the rest and never holds
    more than a few chunks of the stream. Lines are views into the chunk, not copies (a line
    that began in an earlier chunk is joined once), and a view keeps its whole chunk alive:
    copy a line to keep it. A last line without its newline is an event cut off by a broken
    stream: it is dropped, and the watch resumes from the last resourceVersion it did see.
    """
    pending: list[bytes] = []
    async for chunk in chunks:
        end = chunk.find(b"\n")
        if end < 0:
            if chunk:
                pending.append(chunk)
            continue
        batch: list[Line] = []
        if pending:
            pending.append(chunk[:end])
            first = b"".join(pending)
            pending = []
            if first and not first.isspace():
                batch.append(first)
            start = end + 1
        else:
            start = 0
        view = memoryview(chunk)
        find = chunk.find
        while (end := find(b"\n", start)) >= 0:
            if end > start and (chunk[start] not in _SPACE or not chunk[start:end].isspace()):
                batch.append(view[start:end])
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
        if batch:
            yield batch


async def lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The complete, non-empty lines of a chunked stream, however the chunks cut them."""
    async for batch in batches(chunks):
        for line in batch:
            yield bytes(line)


def decode(line: Line, url: str = "") -> tuple[str, Any]:
    """`(type, object)` of one watch event line; an `ERROR` event raises the `ApiError` it
    carries. A line that is not JSON raises `orjson.JSONDecodeError` (a ValueError)."""
    event = orjson.loads(line)
    if not isinstance(event, dict):
        raise orjson.JSONDecodeError(
            f"a watch event is an object, not {type(event).__name__}", "", 0
        )
    etype = event.get("type")
    obj = event.get("object") or {}
    if etype == "ERROR":
        raise error_of(obj, url)
    return str(etype), obj


_CLOSE = ord("}")
# The exact heads kube-apiserver writes for the events that carry objects, in its field order.
_OBJECT_EVENTS = (
    (b'{"type":"ADDED","object":', "ADDED"),
    (b'{"type":"MODIFIED","object":', "MODIFIED"),
)


def object_event(line: Line) -> tuple[str, memoryview] | None:
    """`(type, the bytes after the head)` of a line that is `{"type":"ADDED","object":...}` (or
    MODIFIED) as kube-apiserver writes it, else None.

    The bytes are the event's object only if they are one JSON value: a caller that cannot
    decode them as one decodes the whole line instead (see `split`).
    """
    if line[-1] == _CLOSE:
        for head, etype in _OBJECT_EVENTS:
            if line[: len(head)] == head:
                return etype, memoryview(line)[len(head) : -1]
    return None


def split(line: Line, url: str = "") -> tuple[str, Any, memoryview | None]:
    """`(type, object, the object's own bytes or None)` of one watch event line.

    A line that is exactly `{"type":"ADDED","object":OBJ}` (or MODIFIED) is decoded as OBJ
    alone, and OBJ's bytes are returned too, so a cache may keep them instead of encoding the
    decoded object again. That is exact, not a guess: the head is fixed bytes, the line ends
    with the object's closing brace, and OBJ must decode as one JSON value on its own, so the
    line is that two-member object and OBJ is its `object`. Any other line (another field
    order, more members, a DELETED, BOOKMARK or ERROR event) is decoded whole, as `decode`
    does, with None for the bytes.
    """
    found = object_event(line)
    if found is not None:
        etype, view = found
        try:
            return etype, orjson.loads(view), view
        except orjson.JSONDecodeError:
            pass
    etype, obj = decode(line, url)
    return etype, obj, None


def error_of(obj: Any, url: str = "") -> ApiError:
    """The `ApiError` an `ERROR` event's `Status` stands for (500 when it names no code)."""
    status = obj if isinstance(obj, dict) else {}
    return error_for(int(status.get("code") or 500), status, "WATCH", url)


async def events(chunks: AsyncIterable[bytes], url: str = "") -> AsyncIterator[tuple[str, Any]]:
    """`(type, object)` for each watch event; an `ERROR` event raises the `ApiError` it carries.

    A line that is not JSON raises `orjson.JSONDecodeError` (a ValueError).
    """
    async for line in lines(chunks):
        yield decode(line, url)
