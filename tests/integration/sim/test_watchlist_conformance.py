"""Conformance of the simulator's watch-list (streaming the initial state) with kube-apiserver.

kube-apiserver v1.34+ (WatchList on): `sendInitialEvents=true` with
`resourceVersionMatch=NotOlderThan` sends the current state as ADDED events, then, with
bookmarks allowed, a BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the snapshot's
resourceVersion, then continues as a watch. Unsupported combinations are a 422 naming
`ListOptions.meta.k8s.io`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.sim.server.app import SimServer
from tests.waiting import until

from .conftest import Api

NS = "/api/v1/namespaces/default"
CMS = f"{NS}/configmaps"
WATCH_LIST = {
    "sendInitialEvents": "true",
    "resourceVersionMatch": "NotOlderThan",
    "allowWatchBookmarks": "true",
}
END = {"k8s.io/initial-events-end": "true"}


def rv_of(event: dict[str, Any]) -> int:
    return int(event["object"]["metadata"]["resourceVersion"])


async def make(api: Api, *names: str, labels: dict[str, str] | None = None) -> None:
    for name in names:
        status, _ = await api.post(CMS, {"metadata": {"name": name, "labels": labels or {}}})
        assert status == 201


async def test_watch_list_sends_state_then_bookmark_then_continues(
    api: Api, server: SimServer
) -> None:
    await make(api, "a", "b", labels={"app": "x"})
    await make(api, "c", labels={"app": "y"})
    snapshot_rv = server.store.rv
    stream = api.session.get(
        api.base + CMS,
        params={"watch": "true", "labelSelector": "app=x", **WATCH_LIST},
        headers=api.headers,
        timeout=aiohttp.ClientTimeout(total=10),
    )
    events: list[dict[str, Any]] = []
    async with stream as resp:
        assert resp.status == 200
        async for line in resp.content:
            if not line.strip():
                continue
            events.append(orjson.loads(line))
            if events[-1]["type"] == "BOOKMARK" and events[-1]["object"]["metadata"].get(
                "annotations"
            ):
                # The initial state is complete: a write now arrives as a watch event.
                await make(api, "d", labels={"app": "x"})
            if events[-1]["object"].get("metadata", {}).get("name") == "d":
                break
    types = [e["type"] for e in events]
    assert types[:3] == ["ADDED", "ADDED", "BOOKMARK"]
    assert sorted(e["object"]["metadata"]["name"] for e in events[:2]) == ["a", "b"]
    end = events[2]["object"]
    assert end["metadata"]["annotations"] == END
    assert end["metadata"]["resourceVersion"] == str(snapshot_rv)
    assert set(end) == {"kind", "apiVersion", "metadata"} and end["kind"] == "ConfigMap"
    assert all(rv_of(e) <= snapshot_rv for e in events[:2])
    added = [e for e in events[3:] if e["type"] == "ADDED"]
    assert [e["object"]["metadata"]["name"] for e in added] == ["d"]
    assert rv_of(added[0]) > snapshot_rv


async def test_plain_watch_without_resource_version_is_defaulted_to_watch_list(
    api: Api, server: SimServer
) -> None:
    await make(api, "a")
    events = await api.watch(CMS, {"allowWatchBookmarks": "true"}, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == END
    # resourceVersion "0" too; without bookmarks there is no end marker, only the state.
    events = await api.watch(CMS, {"resourceVersion": "0", "timeoutSeconds": "1"}, 5)
    assert [e["type"] for e in events] == ["ADDED"]


async def test_watch_from_a_resource_version_has_no_initial_events(api: Api) -> None:
    await make(api, "a")
    _, lst = await api.get(CMS)
    rv = lst["metadata"]["resourceVersion"]
    events = await api.watch(
        CMS, {"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "1"}, 5
    )
    assert all(
        e["type"] == "BOOKMARK" and not e["object"]["metadata"].get("annotations") for e in events
    )


async def test_send_initial_events_false_starts_from_now(api: Api) -> None:
    await make(api, "old")
    params = {
        "sendInitialEvents": "false",
        "resourceVersionMatch": "NotOlderThan",
        "timeoutSeconds": "1",
    }
    assert await api.watch(CMS, params, 5) == []


async def test_watch_list_waits_for_a_resource_version_not_yet_reached(
    api: Api, server: SimServer
) -> None:
    ahead = server.store.rv + 1
    params = {"resourceVersion": str(ahead), **WATCH_LIST}
    hooks = len(server.store.write_hooks)
    watching = asyncio.create_task(api.watch(CMS, params, 2, timeout=10))

    async def held() -> bool:
        # The server holds the request, listening for writes, until its store reaches `ahead`.
        return len(server.store.write_hooks) > hooks

    await until(held, what="watch-list waiting for its resourceVersion")
    await make(api, "late")
    first, second = await watching
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "late"
    assert second["type"] == "BOOKMARK" and rv_of(second) >= ahead


async def test_watch_list_from_a_resource_version_too_far_ahead_times_out(
    api: Api, server: SimServer
) -> None:
    current = server.store.rv
    params = {"resourceVersion": str(current + 1000), **WATCH_LIST}
    events = await api.watch(CMS, params, 2, timeout=15)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {current + 1000}, current: {current}",
        "reason": "Timeout",
        "details": {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


async def test_watch_list_is_written_in_pieces(api: Api) -> None:
    data = {"blob": "x" * 2000}
    for i in range(400):
        status, _ = await api.post(CMS, {"metadata": {"name": f"big-{i:03d}"}, "data": data})
        assert status == 201
    chunks = 0
    largest = 0
    received = b""
    async with api.session.get(
        api.base + CMS,
        params={"watch": "true", **WATCH_LIST},
        headers=api.headers,
        timeout=aiohttp.ClientTimeout(total=20),
    ) as resp:
        async for chunk, end_of_chunk in resp.content.iter_chunks():
            received += chunk
            if end_of_chunk:
                chunks += 1
                largest = max(largest, len(chunk))
            if b"initial-events-end" in received:
                break
    lines = [line for line in received.split(b"\n") if line]
    assert len(lines) == 401
    # About 850 KB of events, sent as several HTTP chunks, none much above 128 KB.
    assert chunks >= 5


async def test_watch_cut_counts_initial_events(api: Api) -> None:
    await make(api, "a", "b", "c")
    await api.put("/sim/faults", "watch-cut=events:2@configmaps")
    events = await api.watch(CMS, WATCH_LIST, 10)
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]


FORBIDDEN_INITIAL = (
    "FieldValueForbidden",
    "resourceVersionMatch",
    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
)
FORBIDDEN_MATCH = (
    "FieldValueForbidden",
    "resourceVersionMatch",
    "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
)


@pytest.mark.parametrize(
    ("params", "causes"),
    [
        ({"watch": "true", "sendInitialEvents": "true"}, [FORBIDDEN_INITIAL]),
        (
            {"watch": "true", "sendInitialEvents": "false", "resourceVersion": "5"},
            [FORBIDDEN_INITIAL],
        ),
        ({"watch": "true", "resourceVersionMatch": "NotOlderThan"}, [FORBIDDEN_MATCH]),
        (
            {"watch": "true", "resourceVersionMatch": "NotOlderThan", "resourceVersion": "5"},
            [FORBIDDEN_MATCH],
        ),
        (
            {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "Exact"},
            [
                FORBIDDEN_INITIAL,
                (
                    "FieldValueNotSupported",
                    "resourceVersionMatch",
                    'Unsupported value: "Exact": supported values: "NotOlderThan"',
                ),
            ],
        ),
        (
            {
                "watch": "true",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "continue": "abc",
            },
            [
                (
                    "FieldValueForbidden",
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            ],
        ),
        (
            {"sendInitialEvents": "true"},
            [
                (
                    "FieldValueForbidden",
                    "sendInitialEvents",
                    "Forbidden: sendInitialEvents is forbidden for list",
                )
            ],
        ),
        (
            {"resourceVersionMatch": "NotOlderThan"},
            [
                (
                    "FieldValueForbidden",
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                    "provided",
                )
            ],
        ),
        (
            {"resourceVersionMatch": "Exact", "resourceVersion": "0"},
            [
                (
                    "FieldValueForbidden",
                    "resourceVersionMatch",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
            ],
        ),
    ],
    ids=[
        "initial-without-match",
        "initial-false-without-match",
        "match-without-initial",
        "match-without-initial-at-rv",
        "exact-match",
        "match-with-continue",
        "list-initial",
        "list-match-without-rv",
        "list-exact-at-zero",
    ],
)
async def test_unsupported_combinations_are_invalid_list_options(
    api: Api, params: dict[str, str], causes: list[tuple[str, str, str]]
) -> None:
    status, body = await api.get(CMS, params=params)
    assert status == 422
    assert body["reason"] == "Invalid" and body["code"] == 422
    lines = [f"{f}: {m}" for _, f, m in causes]
    text = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    assert body["message"] == f'ListOptions.meta.k8s.io "" is invalid: {text}'
    assert body["details"] == {
        "kind": "ListOptions",
        "group": "meta.k8s.io",
        "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
    }


async def test_bookmarks_come_each_interval_and_once_just_before_the_timeout(
    api: Api, server: SimServer
) -> None:
    """kube-apiserver's watch cache: a bookmark every `bookmark_interval` (a minute there), one
    2 s before the watch's timeout, and none after it."""
    server.http.bookmark_interval = 0.4
    _, lst = await api.get(CMS)
    params = {
        "resourceVersion": lst["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "3",
    }
    loop = asyncio.get_running_loop()
    started = loop.time()
    arrivals: list[float] = []
    async with api.session.get(
        api.base + CMS, params={"watch": "true", **params}, headers=api.headers
    ) as resp:
        async for line in resp.content:
            if line.strip():
                assert orjson.loads(line)["type"] == "BOOKMARK"
                arrivals.append(loop.time() - started)
    ended = loop.time() - started
    # At 0.4 and 0.8, then 1.0 (3 s less 2 s) instead of 1.2, then nothing until the end.
    assert len(arrivals) == 3, arrivals
    assert 0.9 <= arrivals[-1] < 1.6, arrivals
    assert ended >= 2.9
