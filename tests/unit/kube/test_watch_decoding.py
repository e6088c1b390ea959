"""Decoding watch streams and list pages as the informer does: exact, or not taken at all.

The informer takes shortcuts on the bytes (lines as views into the chunk, an event's object
decoded on its own, a page's continue token read from its head); each must give what decoding
the whole thing would, on any input, and fall back to that where it cannot be sure.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import orjson
import pytest

from nodeops.common import watchlines
from nodeops.common.apierrors import Gone
from nodeops.kube.informer import _list_head


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _lines(parts: list[bytes]) -> list[bytes]:
    return [bytes(line) async for batch in watchlines.batches(_chunks(parts)) for line in batch]


async def test_lines_are_the_same_however_the_stream_is_cut() -> None:
    events = [
        orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": f"o{i}"}, "x": "y" * i}})
        for i in range(60)
    ]
    stream = b"\n".join(events) + b"\n \n\t\n\n" + events[0] + b"\n" + b'{"type":"DEL'
    rng = random.Random(5)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 40)))
        parts = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        # Whitespace-only lines are skipped; the cut-off last event is dropped.
        assert await _lines(parts) == [*events, events[0]]
    # One event in many chunks, and chunks holding no line end at all.
    assert await _lines([events[5][:3], events[5][3:9], b"", events[5][9:], b"\n"]) == [events[5]]


async def test_a_batch_is_what_one_chunk_completed() -> None:
    batches = [
        [bytes(line) for line in batch]
        async for batch in watchlines.batches(_chunks([b"a\nb", b"c\nd\ne", b"f", b"\n"]))
    ]
    assert batches == [[b"a"], [b"bc", b"d"], [b"ef"]]


@pytest.mark.parametrize(
    ("line", "cut"),
    [
        (b'{"type":"ADDED","object":{"metadata":{"name":"a"},"n":1.5e300,"s":"\\u00e9\\""}}', True),
        (b'{"type":"MODIFIED","object":{"metadata":{"name":"a"}}}', True),
        (b'{"type":"ADDED","object":{"a":1} }', True),
        (b'{"type":"ADDED","object":[1,2]}', True),
        (b'{"object":{"a":1},"type":"ADDED"}', False),  # another field order
        (b'{"type":"ADDED","object":{"a":1},"type":"DELETED"}', False),  # the last one wins
        (b'{"type":"ADDED","object":{"a":1},"x":{"b":2}}', False),  # more members
        (b'{"type":"DELETED","object":{"metadata":{"name":"a"}}}', False),
        (b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}', False),
    ],
)
def test_an_event_split_is_the_event_decoded(line: bytes, cut: bool) -> None:
    whole = orjson.loads(line)
    for form in (line, memoryview(b"  " + line + b"  ")[2:-2]):
        etype, obj, raw = watchlines.split(form)
        assert (etype, obj) == (whole["type"], whole["object"])
        # The object's own bytes, to keep instead of encoding it again, only where exact.
        assert (raw is not None) == cut
        if raw is not None:
            assert orjson.loads(raw) == whole["object"]


def test_split_raises_error_events_and_bad_json() -> None:
    with pytest.raises(Gone):
        watchlines.split(b'{"type":"ERROR","object":{"kind":"Status","code":410}}')
    with pytest.raises(orjson.JSONDecodeError):
        watchlines.split(b'{"type":"ADDED","object":{"a":')
    with pytest.raises(orjson.JSONDecodeError):
        watchlines.split(b"[1]")


def _page(meta: bytes, items: bytes = b"[]") -> bytes:
    return b'{"kind":"PodList","apiVersion":"v1","metadata":' + meta + b',"items":' + items + b"}"


def test_a_pages_head_is_its_own_or_nothing() -> None:
    assert _list_head(_page(b'{"resourceVersion":"5","continue":"abc"}')) == {
        "resourceVersion": "5",
        "continue": "abc",
    }
    # `,"items":` nested in the head (or no head at all): not trusted, the page is decoded.
    assert _list_head(b'{"metadata":{"x":{"a":1,"items":[]}},"items":[]}') is None
    assert _list_head(b'{"items":[],"metadata":{"continue":"abc"}}') is None
    assert _list_head(b'{"metadata":{"s":"a,\\"items\\":"},"items":[]}') == {"s": 'a,"items":'}
    assert _list_head(b'not json,"items":') is None
