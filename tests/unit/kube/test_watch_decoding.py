"""Decoding watch streams and list pages as the informer does: exact, or not taken at all.

The informer takes shortcuts on the bytes (lines as views into the chunk, an event's object
decoded on its own, a page's continue token read from its head); each must give what decoding
the whole thing would, on any input, and fall back to that where it cannot be sure.
"""

from __future__ import annotations

import copy
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from nodeops.common import jsonbytes, watchlines
from nodeops.common.apierrors import Gone
from nodeops.kube.client import Client
from nodeops.kube.informer import LAST_APPLIED, Informer, _list_head, default_transform
from nodeops.kube.resources import PODS
from nodeops.sim import objects


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


# ---------------------------------------------------------------------- the transform on bytes


def _variants() -> list[bytes]:
    rng = random.Random(3)
    owner = objects.make_replicaset("app", "ns", replicas=1, rng=rng, with_server_fields=True)
    pod = objects.make_pod("p", "ns", node_name="n1", owner=owner, rng=rng, with_server_fields=True)
    out = [orjson.dumps(pod)]
    listed = {k: v for k, v in pod.items() if k not in ("kind", "apiVersion")}  # as in a list
    out.append(orjson.dumps(listed))
    applied = copy.deepcopy(pod)
    applied["metadata"].setdefault("annotations", {})[LAST_APPLIED] = '{"x":1}'
    out.append(orjson.dumps(applied))
    for notes in (None, {}, [], "", "x", [LAST_APPLIED], {LAST_APPLIED: "1"}):
        changed = copy.deepcopy(pod)
        changed["metadata"]["annotations"] = notes
        out.append(orjson.dumps(changed))
    for metadata in (None, {}, [], "x", 0, {"managedFields": None}, {"name": "only"}):
        out.append(orjson.dumps({"kind": "Pod", "metadata": metadata, "spec": {}}))
    # Written other than orjson would: escapes, spaces, repeated names, odd numbers.
    out += [
        b'{"m\\u0065tadata": {"name": "a", "managedFields": [{"a": 1}]}, "kind": "Pod"}',
        b'{"kind":"Pod","metadata":{"managedFields":[1],"name":"a","managedFields":[2]}}',
        b'{"kind":"Pod","metadata":{"name":"a"},"metadata":{"name":"b","managedFields":[]}}',
        b'{"kind":"Pod","metadata":{"name":"\\u00e9\\"<&>","managedFields":[]},"n":1.5e-7}',
        b'{"kind":"Pod","metadata":{"managedFields":[{"big":1e999}],"name":"a"}}',
    ]
    return out


def _expected(raw: bytes) -> dict[str, Any]:
    obj = orjson.loads(raw)
    if "kind" not in obj:
        obj["kind"], obj["apiVersion"] = "Pod", "v1"
    result: dict[str, Any] = default_transform(obj)
    return result


@pytest.mark.parametrize("raw", _variants())
def test_the_default_transform_on_bytes_is_the_transform(raw: bytes) -> None:
    inf = Informer(Client("http://127.0.0.1:1"), PODS)
    compact = inf._compact(memoryview(raw))
    if compact is None:
        # Left to the dict path: metadata that is no object, or odd annotations.
        meta = orjson.loads(raw).get("metadata")
        if isinstance(meta, dict):
            notes = meta.get("annotations")
            assert notes and not isinstance(notes, dict)
        return
    assert b"managedFields" not in compact and LAST_APPLIED.encode() not in compact
    try:
        expected = _expected(raw)
    except ValueError:  # orjson refuses 1e999; the member that had it is dropped unread
        assert b"1e999" in raw
        return
    assert orjson.loads(compact) == expected
    assert list(orjson.loads(compact)) == list(expected)  # the members in the same order


def test_members_are_the_objects_own_and_join_back() -> None:
    raw = b'{"a":{"b":[1,2]},"s":"\\u00e9","a":3,"n":null}'
    members = jsonbytes.members(raw)
    assert members is not None
    assert {k: bytes(v) for k, v in members.items()} == {"a": b"3", "s": b'"\\u00e9"', "n": b"null"}
    assert orjson.loads(jsonbytes.joined(members)) == orjson.loads(raw)
    for not_one_object in (b"[1]", b"null", b'{"a":1} {"b":2}', b'{"a":[1,,2]}', b""):
        assert jsonbytes.members(not_one_object) is None


def test_a_list_page_splits_into_its_items() -> None:
    items = [{"metadata": {"name": f"o{i}"}, "data": {"k": "v" * i}} for i in range(5)]
    page = orjson.dumps({"kind": "List", "metadata": {"continue": "t"}, "items": items})
    split = jsonbytes.list_items(page)
    assert split is not None
    top, raws = split
    assert [orjson.loads(memoryview(r)) for r in raws] == items
    assert orjson.loads(memoryview(top["metadata"])) == {"continue": "t"}
    # Not a list as kube writes one: the caller decodes it whole.
    assert jsonbytes.list_items(b'{"kind":"List","items":null}') is None
    assert jsonbytes.list_items(b'{"kind":"List"}') is None
