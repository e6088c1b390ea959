"""Conformance of the simulator's admission rules with kube-apiserver, over real HTTP.

Each expected body is what kube-apiserver answers for the same request: status code, reason,
message and causes, as its validation and decoding code writes them.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.kube.client import Client
from nodeops.kube.events import NORMAL, EventRecorder
from nodeops.kube.resources import EVENTS
from nodeops.sim.server.app import SimServer
from tests.waiting import until

from .conftest import Api, pod

NS = "/api/v1/namespaces/default"
EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
MICRO = "2026-01-01T00:00:00.000000Z"


def assert_invalid(
    body: dict[str, Any],
    kind: str,
    name: str,
    causes: list[tuple[str, str, str]],
    group: str = "",
) -> None:
    """A 422 body exactly as NewInvalid builds it; causes are (reason, field, message)."""
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["reason"] == "Invalid" and body["code"] == 422
    lines = [f"{field}: {message}" for _, field, message in causes]
    text = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    qualified = f"{kind}.{group}" if group else kind
    assert body["message"] == f'{qualified} "{name}" is invalid: {text}'
    assert body["details"]["name"] == name and body["details"]["kind"] == kind
    assert body["details"].get("group", "") == group
    assert body["details"]["causes"] == [
        {"reason": r, "message": m, "field": f} for r, f, m in causes
    ]


# ---------------------------------------------------------------------- finalizers


async def test_no_finalizer_may_be_added_to_an_object_being_deleted(api: Api) -> None:
    cm = {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}
    status, _ = await api.post(f"{NS}/configmaps", cm)
    assert status == 201
    status, deleting = await api.delete(f"{NS}/configmaps/held")
    assert status == 200 and deleting["metadata"]["deletionTimestamp"]

    added = {"metadata": {"finalizers": ["example.com/keep", "example.com/b", "example.com/a"]}}
    status, body = await api.patch(f"{NS}/configmaps/held", added)
    assert status == 422
    forbidden = (
        "Forbidden: no new finalizers can be added if the object is being deleted, found new "
        'finalizers []string{"example.com/a", "example.com/b"}'
    )
    assert_invalid(
        body, "ConfigMap", "held", [("FieldValueForbidden", "metadata.finalizers", forbidden)]
    )
    # A PUT is refused the same way.
    _, current = await api.get(f"{NS}/configmaps/held")
    current["metadata"]["finalizers"].append("example.com/a")
    status, body = await api.put(f"{NS}/configmaps/held", current)
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.finalizers"

    # Removing one is still allowed, and the last one going lets the object go.
    status, _ = await api.patch(f"{NS}/configmaps/held", {"metadata": {"finalizers": None}})
    assert status == 200
    status, _ = await api.get(f"{NS}/configmaps/held")
    assert status == 404


async def test_finalizers_may_be_added_while_not_being_deleted(api: Api) -> None:
    await api.post(f"{NS}/configmaps", {"metadata": {"name": "free"}})
    status, cm = await api.patch(
        f"{NS}/configmaps/free", {"metadata": {"finalizers": ["example.com/x"]}}
    )
    assert status == 200 and cm["metadata"]["finalizers"] == ["example.com/x"]


# ---------------------------------------------------------------------- events


def event_v1(name: str, **fields: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": MICRO,
        "reportingController": "nodeops.dev/drain",
        "reportingInstance": "replica-1",
        "action": "Drain",
        "reason": "Draining",
        "note": "draining node n1",
        "type": "Normal",
        "regarding": {"kind": "Node", "name": "n1"},
    }
    for key, value in fields.items():
        if value is None:
            ev.pop(key, None)
        else:
            ev[key] = value
    return ev


async def test_events_v1_requires_event_time(api: Api) -> None:
    status, body = await api.post(EVENTS_V1, event_v1("no-time", eventTime=None))
    assert status == 422
    assert_invalid(
        body, "Event", "no-time", [("FieldValueRequired", "eventTime", "Required value")]
    )
    # The core API keeps its legacy rules: the same event without eventTime is accepted there.
    core = {
        "metadata": {"name": "legacy"},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "Draining",
        "message": "draining node n1",
        "type": "Normal",
    }
    status, _ = await api.post(f"{NS}/events", core)
    assert status == 201


async def test_events_v1_strict_rules_use_internal_field_names(api: Api) -> None:
    ev = event_v1(
        "strict",
        type="Loud",
        reportingController=None,
        action=None,
        deprecatedCount=3,
        series={"count": 1},
    )
    status, body = await api.post(EVENTS_V1, ev)
    assert status == 422
    assert_invalid(
        body,
        "Event",
        "strict",
        [
            ("FieldValueRequired", "reportingController", "Required value"),
            (
                "FieldValueInvalid",
                "reportingController",
                'Invalid value: "": name part must be non-empty',
            ),
            (
                "FieldValueInvalid",
                "reportingController",
                "Invalid value: \"\": name part must consist of alphanumeric characters, '-', "
                "'_' or '.', and must start and end with an alphanumeric character (e.g. "
                "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
            ("FieldValueRequired", "action", "Required value"),
            ("FieldValueInvalid", "series.count", 'Invalid value: "": should be at least 2'),
            ("FieldValueRequired", "series.lastObservedTime", "Required value"),
            ("FieldValueInvalid", "type", 'Invalid value: "": has invalid value: Loud'),
            ("FieldValueInvalid", "count", 'Invalid value: "": needs to be unset'),
        ],
    )


async def test_legacy_event_about_an_object_lives_in_its_namespace(api: Api) -> None:
    """Without eventTime (the core API's old style) the involved object's namespace must match."""
    core = {
        "metadata": {"name": "elsewhere"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "kube-system"},
        "reason": "Killing",
        "message": "stopping container c",
        "type": "Normal",
    }
    status, body = await api.post(f"{NS}/events", core)
    assert status == 422
    assert_invalid(
        body,
        "Event",
        "elsewhere",
        [
            (
                "FieldValueInvalid",
                "involvedObject.namespace",
                'Invalid value: "kube-system": does not match event.namespace',
            )
        ],
    )


async def test_event_series_updates_are_checked(api: Api) -> None:
    status, _ = await api.post(EVENTS_V1, event_v1("repeat"))
    assert status == 201
    good = {"series": {"count": 2, "lastObservedTime": MICRO}}
    status, ev = await api.patch(f"{EVENTS_V1}/repeat", good)
    assert status == 200 and ev["series"]["count"] == 2
    status, body = await api.patch(f"{EVENTS_V1}/repeat", {"series": {"count": 1}})
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["series.count"]
    status, body = await api.patch(f"{EVENTS_V1}/repeat", {"note": "changed"})
    assert status == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "changed": field is immutable',
            "field": "message",
        }
    ]


async def test_the_operators_event_recorder_passes_the_strict_rules(server: SimServer) -> None:
    """What nodeops writes as Events (a first event, then a series) is accepted."""
    async with Client(server.url, token=server.admin_token) as client:
        recorder = EventRecorder(client, "nodeops-drain", "replica-1")
        recorder.start()
        try:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}
            target = pod("p1")
            target["metadata"].update({"namespace": "default", "uid": "u2"})
            for _ in range(3):
                recorder.event(node, NORMAL, "Cordoned", "Drain", "node cordoned")
                recorder.event(target, NORMAL, "Evicted", "Drain", "pod evicted")

            async def recorded() -> list[dict[str, Any]] | None:
                items, _ = await client.list(EVENTS, "default")
                counts = sorted(((e.get("series") or {}).get("count", 1)) for e in items)
                return items if len(items) == 2 and counts[-1] >= 2 else None

            await until(recorded, what="events and their series")
        finally:
            await recorder.stop()
        assert recorder.dropped == 0


# ---------------------------------------------------------------------- leases


def lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, **spec},
    }


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        (
            "renewTime",
            "2026-01-01T00:00:00Z",
            'parsing time "2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse "Z" as ".000000"',
        ),
        (
            "acquireTime",
            "yesterday",
            'parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse "yesterday" as "2006"',
        ),
        (
            "renewTime",
            "2026-02-30T00:00:00.000000Z",
            'parsing time "2026-02-30T00:00:00.000000Z": day out of range',
        ),
        ("renewTime", 12, "json: cannot unmarshal number into Go value of type string"),
    ],
)
async def test_lease_with_a_time_that_is_not_a_micro_time_is_a_bad_request(
    api: Api, field: str, value: Any, error: str
) -> None:
    status, body = await api.post(LEASES, lease("bad", **{field: value}))
    assert status == 400
    assert body["reason"] == "BadRequest" and body["code"] == 400
    assert body["message"] == f'Lease in version "v1" cannot be handled as a Lease: {error}'
    assert "details" not in body
    status, _ = await api.get(f"{LEASES}/bad")
    assert status == 404


async def test_lease_times_are_checked_on_update_and_patch(api: Api) -> None:
    status, created = await api.post(LEASES, lease("l1", renewTime=MICRO, acquireTime=MICRO))
    assert status == 201
    created["spec"]["renewTime"] = "now"
    status, body = await api.put(f"{LEASES}/l1", created)
    assert status == 400
    assert body["message"].startswith('Lease in version "v1" cannot be handled as a Lease: ')
    status, body = await api.patch(f"{LEASES}/l1", {"spec": {"renewTime": "now"}})
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(' "" is invalid: patch: Invalid value: "{')
    assert body["message"].endswith(
        ': parsing time "now" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "now" as "2006"'
    )
    assert [c["field"] for c in body["details"]["causes"]] == ["patch"]


async def test_lease_spec_rules(api: Api) -> None:
    status, body = await api.post(LEASES, lease("zero", leaseDurationSeconds=0))
    assert status == 422
    assert_invalid(
        body,
        "Lease",
        "zero",
        [
            (
                "FieldValueInvalid",
                "spec.leaseDurationSeconds",
                "Invalid value: 0: must be greater than 0",
            )
        ],
        group="coordination.k8s.io",
    )
