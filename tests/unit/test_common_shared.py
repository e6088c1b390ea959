"""Plain data and parsing shared by the runtime and the simulator (nodeops.common)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator

import pytest

from nodeops.common import watchlines
from nodeops.common.apierrors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    ServerTimeout,
    TooManyRequests,
    error_for,
    retry_after_header,
    status_of,
)
from nodeops.common.gcpause import paused_gc
from nodeops.common.resources import NODES, PODS, Resource


def test_resource_paths_and_names() -> None:
    assert PODS.path("ns a", "p/1", "eviction") == "/api/v1/namespaces/ns%20a/pods/p%2F1/eviction"
    assert NODES.path("ignored", "n1") == "/api/v1/nodes/n1"
    widgets = Resource("example.com", "v1", "widgets", "Widget", True)
    assert widgets.path() == "/apis/example.com/v1/widgets"
    assert (widgets.api_version, widgets.key, PODS.key) == (
        "example.com/v1",
        "widgets.example.com",
        "pods",
    )


def test_error_classes_follow_code_and_reason() -> None:
    assert isinstance(error_for(404, {"reason": "NotFound"}, "GET", "/x"), NotFound)
    exists = error_for(409, {"reason": "AlreadyExists"}, "POST", "/x")
    assert isinstance(exists, AlreadyExists) and isinstance(exists, Conflict)
    assert type(error_for(409, {"reason": "Conflict"}, "PUT", "/x")) is Conflict
    assert isinstance(error_for(410, {"reason": "Expired"}, "GET", "/x"), Gone)
    assert isinstance(error_for(422, None), Invalid)
    assert type(error_for(503, None)) is ServerError and isinstance(
        error_for(504, None), ServerTimeout
    )
    assert type(error_for(418, None)) is ApiError


def test_retry_after_prefers_the_header_and_reads_the_status() -> None:
    status = {"reason": "TooManyRequests", "details": {"retryAfterSeconds": 2}}
    assert isinstance(error_for(429, status), TooManyRequests)
    assert error_for(429, status).retry_after == 2.0
    assert error_for(429, status, retry_after_header=0.5).retry_after == 0.5
    assert error_for(429, None).retry_after is None
    assert retry_after_header("3") == 3.0
    assert retry_after_header("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_header(None) is None


def test_status_decoding() -> None:
    assert status_of(b'{"kind":"Status","reason":"NotFound"}') == {
        "kind": "Status",
        "reason": "NotFound",
    }
    assert status_of(b"<html>bad gateway</html>") == {"message": "<html>bad gateway</html>"}
    assert status_of(b"[1]") is None and status_of(b"") is None
    err = error_for(404, status_of(b'{"message":"pods \\"x\\" not found","reason":"NotFound"}'))
    assert err.message == 'pods "x" not found' and str(err) == 'pods "x" not found (404 NotFound)'


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_watch_lines_survive_any_chunking() -> None:
    stream = b'{"type":"ADDED","object":{"a":1}}\n\n{"type":"BOOKMARK","object":{}}\n{"type":"DEL'
    pieces = [stream[i : i + 5] for i in range(0, len(stream), 5)]
    got = [line async for line in watchlines.lines(_chunks(*pieces))]
    # The cut-off last event is dropped: the watch resumes from the last version it saw.
    assert got == [b'{"type":"ADDED","object":{"a":1}}', b'{"type":"BOOKMARK","object":{}}']
    events = [e async for e in watchlines.events(_chunks(stream))]
    assert events == [("ADDED", {"a": 1}), ("BOOKMARK", {})]


async def test_watch_error_events_raise_their_status() -> None:
    expired = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}\n'
    with pytest.raises(Gone):
        [e async for e in watchlines.events(_chunks(b'{"type":"ADDED","object":{}}\n', expired))]


def test_gc_pause_nests_and_restores() -> None:
    assert gc.isenabled()
    with paused_gc:
        assert not gc.isenabled()
        with paused_gc:
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_json_copy_is_deep_and_keeps_what_json_cannot_hold() -> None:
    from nodeops.common.jsonbytes import json_copy

    obj = {"spec": {"containers": [{"name": "c", "ports": [80]}]}, "n": 1.5, "none": None}
    copied = json_copy(obj)
    assert copied == obj
    copied["spec"]["containers"][0]["ports"].append(81)
    assert obj["spec"]["containers"][0]["ports"] == [80]
    huge = {"count": 2**70}  # past 64 bits: orjson refuses it, the slow path copies it
    assert json_copy(huge) == huge
