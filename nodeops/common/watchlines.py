"""Splitting a watch stream into events: newline-delimited JSON, `ERROR` events as exceptions.

Plain parsing shared by the runtime's informer and the simulator's own watch; what to do with
the events (caching, bookmarks, resuming) stays with each of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

from nodeops.common.apierrors import error_for


async def lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The complete, non-empty lines of a chunked stream, however the chunks cut them.

    A last line without its newline is an event cut off by a broken stream: it is dropped, and
    the watch resumes from the last resourceVersion it did see.
    """
    buf = b""
    async for chunk in chunks:
        buf += chunk
        if b"\n" not in chunk:
            continue
        *complete, buf = buf.split(b"\n")
        for line in complete:
            if line.strip():
                yield line


async def events(chunks: AsyncIterable[bytes], url: str = "") -> AsyncIterator[tuple[str, Any]]:
    """`(type, object)` for each watch event; an `ERROR` event raises the `ApiError` it carries.

    A line that is not JSON raises `orjson.JSONDecodeError` (a ValueError).
    """
    async for line in lines(chunks):
        event = orjson.loads(line)
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            raise error_for(int(status.get("code") or 500), status, "WATCH", url)
        yield etype, obj
