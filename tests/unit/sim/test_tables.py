"""Table output must carry the columns and cells kube-apiserver sends, so kubectl prints alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodeops.sim.server.tables import (
    column_definitions,
    human_duration,
    to_table,
    translate_timestamp_since,
)

NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


def ago(**kw: float) -> str:
    return (NOW - timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


def names(table: dict[str, Any]) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"]]


def cells(kind: str, group: str, obj: dict[str, Any], **kw: Any) -> list[Any]:
    table = to_table(kind, group, [obj], printer_columns=kw.pop("printer_columns", None), now=NOW)
    assert len(table["rows"]) == 1
    row_cells: list[Any] = table["rows"][0]["cells"]
    assert len(row_cells) == len(table["columnDefinitions"])
    return row_cells


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(seconds=-3), "<invalid>"),
        (timedelta(seconds=-1.5), "0s"),
        (timedelta(0), "0s"),
        (timedelta(seconds=59), "59s"),
        (timedelta(seconds=119), "119s"),
        (timedelta(minutes=2), "2m"),
        (timedelta(minutes=5, seconds=10), "5m10s"),
        (timedelta(minutes=10, seconds=10), "10m"),
        (timedelta(minutes=179), "179m"),
        (timedelta(hours=3), "3h"),
        (timedelta(hours=3, minutes=20), "3h20m"),
        (timedelta(hours=8, minutes=20), "8h"),
        (timedelta(hours=47), "47h"),
        (timedelta(days=3, hours=4), "3d4h"),
        (timedelta(days=3), "3d"),
        (timedelta(days=8, hours=4), "8d"),
        (timedelta(days=729), "729d"),
        (timedelta(days=365 * 2 + 30), "2y30d"),
        (timedelta(days=365 * 3), "3y"),
        (timedelta(days=365 * 9 + 5), "9y"),
    ],
)
def test_human_duration(delta: timedelta, text: str) -> None:
    assert human_duration(delta) == text


def test_translate_timestamp_since() -> None:
    assert translate_timestamp_since(None, NOW) == "<unknown>"
    assert translate_timestamp_since("0001-01-01T00:00:00Z", NOW) == "<unknown>"
    assert translate_timestamp_since(ago(minutes=5, seconds=10), NOW) == "5m10s"
    assert translate_timestamp_since(ago(seconds=5), NOW.replace(tzinfo=None)) == "5s"


# --------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------


def pod(
    *,
    phase: str = "Running",
    containers: int = 1,
    statuses: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    deleted: bool = False,
    reason: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "creationTimestamp": ago(hours=4)}
    if deleted:
        meta["deletionTimestamp"] = ago(seconds=1)
    status: dict[str, Any] = {"phase": phase}
    if statuses is not None:
        status["containerStatuses"] = statuses
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if conditions is not None:
        status["conditions"] = conditions
    if reason is not None:
        status["reason"] = reason
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}"} for i in range(containers)]}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": meta, "spec": spec, "status": status}


def running(name: str = "c0", restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": ago(hours=1)}},
        **extra,
    }


def waiting(reason: str, name: str = "c0", restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason}},
    }


def terminated(name: str = "c0", **state: Any) -> dict[str, Any]:
    return {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": state}}


READY_TRUE = [{"type": "Ready", "status": "True"}]

# (case, pod, READY, STATUS, RESTARTS)
POD_CASES = [
    ("running", pod(statuses=[running()]), "1/1", "Running", "0"),
    (
        "restarted with last termination",
        pod(
            containers=2,
            statuses=[
                running(
                    restarts=2,
                    lastState={"terminated": {"exitCode": 1, "finishedAt": ago(minutes=3)}},
                ),
                running("c1"),
            ],
        ),
        "2/2",
        "Running",
        "2 (3m ago)",
    ),
    (
        "crash loop",
        pod(statuses=[waiting("CrashLoopBackOff", restarts=7)]),
        "0/1",
        "CrashLoopBackOff",
        "7",
    ),
    ("pending", pod(phase="Pending"), "0/1", "Pending", "0"),
    (
        "image pull",
        pod(phase="Pending", statuses=[waiting("ErrImagePull")]),
        "0/1",
        "ErrImagePull",
        "0",
    ),
    (
        "completed",
        pod(phase="Succeeded", statuses=[terminated(reason="Completed", exitCode=0)]),
        "0/1",
        "Completed",
        "0",
    ),
    (
        "failed",
        pod(phase="Failed", statuses=[terminated(reason="Error", exitCode=1)]),
        "0/1",
        "Error",
        "0",
    ),
    ("exit code", pod(statuses=[terminated(exitCode=137)]), "0/1", "ExitCode:137", "0"),
    ("signal", pod(statuses=[terminated(exitCode=0, signal=15)]), "0/1", "Signal:15", "0"),
    ("evicted", pod(phase="Failed", reason="Evicted"), "0/1", "Evicted", "0"),
    ("terminating", pod(statuses=[running()], deleted=True), "1/1", "Terminating", "0"),
    (
        "terminating but already succeeded",
        pod(phase="Succeeded", statuses=[terminated(reason="Completed")], deleted=True),
        "0/1",
        "Completed",
        "0",
    ),
    ("node lost", pod(deleted=True, reason="NodeLost"), "0/1", "Unknown", "0"),
    (
        "scheduling gated",
        pod(
            phase="Pending",
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        ),
        "0/1",
        "SchedulingGated",
        "0",
    ),
    (
        "completed container beside a running one, pod not ready",
        pod(containers=2, statuses=[running(), terminated("c1", reason="Completed")]),
        "1/2",
        "NotReady",
        "0",
    ),
    (
        "completed container beside a running one, pod ready",
        pod(
            containers=2,
            statuses=[running(), terminated("c1", reason="Completed")],
            conditions=READY_TRUE,
        ),
        "1/2",
        "Running",
        "0",
    ),
    (
        "init waiting to start",
        pod(
            phase="Pending",
            init=[{"name": "i0"}, {"name": "i1"}],
            init_statuses=[waiting("PodInitializing", "i0"), waiting("PodInitializing", "i1")],
            statuses=[waiting("PodInitializing")],
        ),
        "0/1",
        "Init:0/2",
        "0",
    ),
    (
        "second init container running",
        pod(
            phase="Pending",
            init=[{"name": "i0"}, {"name": "i1"}],
            init_statuses=[
                terminated("i0", reason="Completed", exitCode=0),
                {"name": "i1", "ready": False, "restartCount": 0, "state": {"running": {}}},
            ],
        ),
        "0/1",
        "Init:1/2",
        "0",
    ),
    (
        "init crash loop counts init restarts",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[waiting("CrashLoopBackOff", "i0", restarts=4)],
            statuses=[waiting("PodInitializing")],
        ),
        "0/1",
        "Init:CrashLoopBackOff",
        "4",
    ),
    (
        "init error",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[terminated("i0", reason="Error", exitCode=1)],
        ),
        "0/1",
        "Init:Error",
        "0",
    ),
    (
        "init exit code",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[terminated("i0", exitCode=2)],
        ),
        "0/1",
        "Init:ExitCode:2",
        "0",
    ),
    (
        "init signal",
        pod(
            phase="Pending",
            init=[{"name": "i0"}],
            init_statuses=[terminated("i0", exitCode=1, signal=9)],
        ),
        "0/1",
        "Init:Signal:9",
        "0",
    ),
    (
        "restarts of finished init containers are dropped once initialized",
        pod(
            init=[{"name": "i0"}],
            init_statuses=[
                {
                    "name": "i0",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
                }
            ],
            statuses=[running(restarts=1)],
            conditions=[{"type": "Initialized", "status": "True"}, *READY_TRUE],
        ),
        "1/1",
        "Running",
        "1",
    ),
    (
        "sidecar counts as a container and its restarts stay",
        pod(
            init=[{"name": "side", "restartPolicy": "Always"}],
            init_statuses=[running("side", restarts=1, started=True)],
            statuses=[running()],
            conditions=[{"type": "Initialized", "status": "True"}, *READY_TRUE],
        ),
        "2/2",
        "Running",
        "1",
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "ready", "status", "restarts"), POD_CASES, ids=[c[0] for c in POD_CASES]
)
def test_pod_status_columns(
    case: str, obj: dict[str, Any], ready: str, status: str, restarts: str
) -> None:
    row = cells("Pod", "", obj)
    assert row[:5] == ["p", ready, status, restarts, "4h"]


def test_pod_columns_and_wide_cells() -> None:
    obj = pod(statuses=[running()], conditions=[{"type": "gate-a", "status": "True"}])
    obj["spec"]["nodeName"] = "node-1"
    obj["spec"]["readinessGates"] = [{"conditionType": "gate-a"}, {"conditionType": "gate-b"}]
    obj["status"]["podIPs"] = [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]
    obj["status"]["podIP"] = "10.0.0.7"
    obj["status"]["nominatedNodeName"] = "node-2"
    table = to_table("Pod", "", [obj], printer_columns=None, now=NOW)
    assert names(table) == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert table["columnDefinitions"][0]["format"] == "name"
    assert table["columnDefinitions"][3]["type"] == "string"
    assert table["rows"][0]["cells"][5:] == ["10.0.0.7", "node-1", "node-2", "1/2"]
    bare = cells("Pod", "", pod())
    assert bare[5:] == ["<none>", "<none>", "<none>", "<none>"]


@pytest.mark.parametrize(
    ("phase", "conditions"),
    [
        (
            "Succeeded",
            [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "The pod has completed successfully.",
                }
            ],
        ),
        (
            "Failed",
            [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "Failed",
                    "message": "The pod failed.",
                }
            ],
        ),
        ("Running", None),
    ],
)
def test_pod_row_conditions(phase: str, conditions: list[dict[str, str]] | None) -> None:
    row = to_table("Pod", "", [pod(phase=phase)], printer_columns=None, now=NOW)["rows"][0]
    assert row.get("conditions") == conditions
    assert list(row) == (["cells", "conditions", "object"] if conditions else ["cells", "object"])


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


def node(
    labels: dict[str, str] | None = None,
    ready: str | None = "True",
    unschedulable: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"nodeInfo": {"kubeletVersion": "v1.30.2"}}
    if ready is not None:
        status["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    spec = {"unschedulable": True} if unschedulable else {}
    return {
        "metadata": {"name": "n1", "creationTimestamp": ago(days=10), "labels": labels or {}},
        "spec": spec,
        "status": status,
    }


NODE_CASES = [
    ("ready, no roles", node(), "Ready", "<none>"),
    (
        "control plane",
        node({"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/master": ""}),
        "Ready",
        "control-plane,master",
    ),
    (
        "legacy role label and empty prefix",
        node({"kubernetes.io/role": "worker", "node-role.kubernetes.io/": "x"}),
        "Ready",
        "worker",
    ),
    ("cordoned", node(unschedulable=True), "Ready,SchedulingDisabled", "<none>"),
    ("not ready", node(ready="False"), "NotReady", "<none>"),
    ("unknown ready", node(ready="Unknown"), "NotReady", "<none>"),
    ("no conditions", node(ready=None), "Unknown", "<none>"),
    (
        "no conditions and cordoned",
        node({"node-role.kubernetes.io/infra": ""}, ready=None, unschedulable=True),
        "Unknown,SchedulingDisabled",
        "infra",
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "status", "roles"), NODE_CASES, ids=[c[0] for c in NODE_CASES]
)
def test_node_status_and_roles(case: str, obj: dict[str, Any], status: str, roles: str) -> None:
    assert cells("Node", "", obj)[:5] == ["n1", status, roles, "10d", "v1.30.2"]


def test_node_wide_columns() -> None:
    obj = node()
    obj["status"]["addresses"] = [
        {"type": "Hostname", "address": "n1"},
        {"type": "InternalIP", "address": "192.0.2.1"},
        {"type": "ExternalIP", "address": "198.51.100.1"},
    ]
    obj["status"]["nodeInfo"].update(osImage="Debian", containerRuntimeVersion="containerd://2")
    table = to_table("Node", "", [obj], printer_columns=None, now=NOW)
    assert names(table)[5:] == [
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]
    assert table["rows"][0]["cells"][5:] == [
        "192.0.2.1",
        "198.51.100.1",
        "Debian",
        "<unknown>",
        "containerd://2",
    ]


# --------------------------------------------------------------------------------------------
# Custom resources
# --------------------------------------------------------------------------------------------

WIDGET_COLUMNS: list[dict[str, Any]] = [
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Phase."},
    {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio", "priority": 1},
    {"name": "Seen", "type": "date", "jsonPath": ".status.lastSeen", "format": "date-time"},
    {"name": "On", "type": "boolean", "jsonPath": ".spec.on", "priority": 2},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
]


def widget(spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "creationTimestamp": ago(hours=2)},
        "spec": spec,
        "status": status,
    }


def test_custom_resource_column_definitions() -> None:
    table = to_table("Widget", "example.com", [], printer_columns=WIDGET_COLUMNS, now=NOW)
    assert table["columnDefinitions"] == [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": table["columnDefinitions"][0]["description"],
            "priority": 0,
        },
        {
            "name": "Replicas",
            "type": "integer",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.replicas",
            "priority": 0,
        },
        {"name": "Phase", "type": "string", "format": "", "description": "Phase.", "priority": 0},
        {
            "name": "Ratio",
            "type": "number",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.ratio",
            "priority": 1,
        },
        {
            "name": "Seen",
            "type": "date",
            "format": "date-time",
            "description": "Custom resource definition column (in JSONPath format): "
            ".status.lastSeen",
            "priority": 0,
        },
        {
            "name": "On",
            "type": "boolean",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): .spec.on",
            "priority": 2,
        },
        {
            "name": "Ready",
            "type": "string",
            "format": "",
            "description": "Custom resource definition column (in JSONPath format): "
            '.status.conditions[?(@.type=="Ready")].status',
            "priority": 0,
        },
    ]
    assert table["columnDefinitions"][0]["description"].startswith("Name must be unique")
    assert table["rows"] == []


# (case, spec, status, cells after NAME)
WIDGET_CASES = [
    (
        "typed values",
        {"replicas": 3, "ratio": 2, "on": True},
        {
            "phase": "Ok",
            "lastSeen": ago(minutes=5, seconds=10),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
        [3, "Ok", 2.0, "5m10s", True, "True"],
    ),
    ("all missing", {}, {}, [None, None, None, None, None, None]),
    (
        "values of the wrong type",
        {"replicas": "3", "ratio": "x", "on": "true"},
        {"phase": 7, "lastSeen": 5},
        [None, "7", None, None, None, None],
    ),
    (
        "float to integer truncates",
        {"replicas": 2.9, "ratio": 0.25},
        {"phase": {"b": 1, "a": [True]}},
        [2, '{"a":[true],"b":1}', 0.25, None, None, None],
    ),
    ("null string", {}, {"phase": None}, [None, "<no value>", None, None, None, None]),
    ("bad date", {}, {"lastSeen": "yesterday"}, [None, None, None, "<invalid>", None, None]),
    ("empty date", {}, {"lastSeen": ""}, [None, None, None, "<unknown>", None, None]),
    (
        "date with offset and fraction",
        {},
        {"lastSeen": (NOW - timedelta(days=3, hours=4)).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")},
        [None, None, None, "3d4h", None, None],
    ),
]


@pytest.mark.parametrize(
    ("case", "spec", "status", "expected"), WIDGET_CASES, ids=[c[0] for c in WIDGET_CASES]
)
def test_custom_resource_cells(
    case: str, spec: dict[str, Any], status: dict[str, Any], expected: list[Any]
) -> None:
    row = cells("Widget", "example.com", widget(spec, status), printer_columns=WIDGET_COLUMNS)
    assert row == ["w", *expected]
    assert [type(v) for v in row[1:]] == [type(v) for v in expected]


@pytest.mark.parametrize("printer_columns", [None, []])
def test_custom_resource_default_columns(printer_columns: list[dict[str, Any]] | None) -> None:
    table = to_table(
        "Widget", "example.com", [widget({}, {})], printer_columns=printer_columns, now=NOW
    )
    assert names(table) == ["Name", "Age"]
    age = table["columnDefinitions"][1]
    assert (age["type"], age["format"], age["priority"]) == ("date", "", 0)
    assert age["description"].startswith("CreationTimestamp is a timestamp")
    assert table["rows"][0]["cells"] == ["w", "120m"]


def test_unknown_built_in_kind_falls_back_to_name_and_age() -> None:
    obj = {"metadata": {"name": "x", "creationTimestamp": ago(seconds=42)}}
    assert cells("ControllerRevision", "apps", obj) == ["x", "42s"]
    assert cells("Thing", "example.com", {"metadata": {"name": "y"}}) == ["y", None]


def test_printer_columns_override_built_in_printers() -> None:
    cols = [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]
    assert cells("Pod", "", pod(), printer_columns=cols) == ["p", "Running"]


def test_invalid_column_path_keeps_the_columns_before_it() -> None:
    cols = [
        {"name": "A", "type": "string", "jsonPath": ".spec.a"},
        {"name": "B", "type": "string", "jsonPath": ".spec[b"},
        {"name": "C", "type": "string", "jsonPath": ".spec.c"},
    ]
    table = to_table("W", "x.io", [widget({"a": "1"}, {})], printer_columns=cols, now=NOW)
    assert names(table) == ["Name", "A"]
    assert table["rows"][0]["cells"] == ["w", "1"]


def test_column_errors_become_null_cells() -> None:
    cols = [{"name": "First", "type": "string", "jsonPath": ".spec.items[0]"}]
    assert cells("W", "x.io", widget({"items": []}, {}), printer_columns=cols) == ["w", None]
    assert cells("W", "x.io", widget({"items": ["a"]}, {}), printer_columns=cols) == ["w", "a"]


# --------------------------------------------------------------------------------------------
# Table envelope
# --------------------------------------------------------------------------------------------


def test_table_envelope_and_list_metadata() -> None:
    table = to_table(
        "Pod",
        "",
        [pod()],
        printer_columns=None,
        now=NOW,
        list_metadata={"resourceVersion": "42", "continue": "tok", "remainingItemCount": 3},
    )
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {
        "resourceVersion": "42",
        "continue": "tok",
        "remainingItemCount": 3,
    }
    assert list(table) == ["kind", "apiVersion", "metadata", "columnDefinitions", "rows"]


def test_single_object_carries_its_resource_version() -> None:
    obj = pod()
    obj["metadata"]["resourceVersion"] = "7"
    table = to_table("Pod", "", [obj], printer_columns=None, now=NOW)
    assert table["metadata"] == {"resourceVersion": "7"}
    empty = to_table("Pod", "", [], printer_columns=None, now=NOW, list_metadata={})
    assert empty["metadata"] == {}
    assert empty["rows"] == []


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        (
            "Metadata",
            {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": ago(hours=4)},
            },
        ),
        (
            "",
            {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": ago(hours=4)},
            },
        ),
        ("None", None),
        ("Object", pod()),
    ],
)
def test_include_object(include: str, expected: Any) -> None:
    table = to_table("Pod", "", [pod()], printer_columns=None, include_object=include, now=NOW)
    assert table["rows"][0]["object"] == expected


def test_unknown_include_object_is_rejected_like_kube() -> None:
    with pytest.raises(ValueError, match=r'^unrecognized includeObject value: "All"$'):
        to_table("Pod", "", [pod()], printer_columns=None, include_object="All", now=NOW)
    empty = to_table("Pod", "", [], printer_columns=None, include_object="All", now=NOW)
    assert empty["rows"] == []


def test_no_headers_drops_column_definitions() -> None:
    table = to_table("Pod", "", [pod()], printer_columns=None, now=NOW, no_headers=True)
    assert table["columnDefinitions"] is None
    assert len(table["rows"][0]["cells"]) == 9


def test_column_definitions_are_copies() -> None:
    first = column_definitions("Node", "")
    first[0]["name"] = "changed"
    assert column_definitions("Node", "")[0]["name"] == "Name"
    assert [c["name"] for c in column_definitions("Widget", "x.io", WIDGET_COLUMNS[:1])] == [
        "Name",
        "Replicas",
    ]


# --------------------------------------------------------------------------------------------
# Other built-in kinds
# --------------------------------------------------------------------------------------------


def meta(name: str = "x", **extra: Any) -> dict[str, Any]:
    return {"name": name, "creationTimestamp": ago(minutes=5), **extra}


TEMPLATE = {
    "spec": {"containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}]}
}

# (kind, group, object, column names, cells)
BUILT_IN_CASES: list[tuple[str, str, dict[str, Any], list[str], list[Any]]] = [
    (
        "Namespace",
        "",
        {"metadata": meta("kube-system"), "status": {"phase": "Active"}},
        ["Name", "Status", "Age"],
        ["kube-system", "Active", "5m"],
    ),
    (
        "Deployment",
        "apps",
        {
            "metadata": meta("web"),
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": TEMPLATE,
            },
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        },
        ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"],
        ["web", "2/3", 3, 2, "5m", "a,b", "img:1,img:2", "app=web"],
    ),
    (
        "Deployment",
        "apps",
        {"metadata": meta("d"), "spec": {"template": {"spec": {"containers": []}}}},
        ["Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"],
        ["d", "0/1", 0, 0, "5m", "", "", ""],
    ),
    (
        "ReplicaSet",
        "apps",
        {
            "metadata": meta("web-1"),
            "spec": {
                "replicas": 2,
                "selector": {
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]
                },
                "template": TEMPLATE,
            },
            "status": {"replicas": 2, "readyReplicas": 1},
        },
        ["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"],
        ["web-1", 2, 2, 1, "5m", "a,b", "img:1,img:2", "tier in (a,b)"],
    ),
    (
        "ReplicaSet",
        "apps",
        {"metadata": meta("rs"), "spec": {"replicas": 0, "selector": {}}},
        ["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"],
        ["rs", 0, 0, 0, "5m", "", "", "<none>"],
    ),
    (
        "StatefulSet",
        "apps",
        {"metadata": meta("db"), "spec": {"replicas": 3, "template": TEMPLATE}, "status": {}},
        ["Name", "Ready", "Age", "Containers", "Images"],
        ["db", "0/3", "5m", "a,b", "img:1,img:2"],
    ),
    (
        "DaemonSet",
        "apps",
        {
            "metadata": meta("agent"),
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "spec": {
                        "containers": [{"name": "a", "image": "img"}],
                        "nodeSelector": {"os": "linux"},
                    }
                },
            },
            "status": {
                "desiredNumberScheduled": 5,
                "currentNumberScheduled": 5,
                "numberReady": 4,
                "updatedNumberScheduled": 5,
                "numberAvailable": 4,
            },
        },
        [
            "Name",
            "Desired",
            "Current",
            "Ready",
            "Up-to-date",
            "Available",
            "Node Selector",
            "Age",
            "Containers",
            "Images",
            "Selector",
        ],
        ["agent", 5, 5, 4, 5, 4, "os=linux", "5m", "a", "img", "app=agent"],
    ),
    (
        "Service",
        "",
        {
            "metadata": meta("svc"),
            "spec": {
                "type": "NodePort",
                "clusterIPs": ["10.96.0.10"],
                "ports": [
                    {"port": 80, "nodePort": 30080, "protocol": "TCP"},
                    {"port": 53, "protocol": "UDP"},
                ],
                "selector": {"app": "web"},
            },
        },
        ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"],
        ["svc", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP", "5m", "app=web"],
    ),
    (
        "Service",
        "",
        {
            "metadata": meta("lb"),
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.11", "ports": [{"port": 443}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "a.b"}]}},
        },
        ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"],
        ["lb", "LoadBalancer", "10.96.0.11", "203.0.113.9,a.b", "443/TCP", "5m", "<none>"],
    ),
    (
        "Service",
        "",
        {"metadata": meta("pending"), "spec": {"type": "LoadBalancer", "clusterIP": "None"}},
        ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"],
        ["pending", "LoadBalancer", "None", "<pending>", "<none>", "5m", "<none>"],
    ),
    (
        "PodDisruptionBudget",
        "policy",
        {"metadata": meta("pdb"), "spec": {"minAvailable": 2}, "status": {"disruptionsAllowed": 1}},
        ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"],
        ["pdb", "2", "N/A", 1, "5m"],
    ),
    (
        "PodDisruptionBudget",
        "policy",
        {"metadata": meta("pdb2"), "spec": {"maxUnavailable": "25%"}, "status": {}},
        ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"],
        ["pdb2", "N/A", "25%", 0, "5m"],
    ),
    (
        "ConfigMap",
        "",
        {"metadata": meta("cm"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}},
        ["Name", "Data", "Age"],
        ["cm", 3, "5m"],
    ),
    (
        "Secret",
        "",
        {"metadata": meta("s"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}},
        ["Name", "Type", "Data", "Age"],
        ["s", "kubernetes.io/tls", 2, "5m"],
    ),
    (
        "ServiceAccount",
        "",
        {"metadata": meta("default")},
        ["Name", "Secrets", "Age"],
        ["default", 0, "5m"],
    ),
    (
        "Lease",
        "coordination.k8s.io",
        {"metadata": meta("leader"), "spec": {"holderIdentity": "pod-a_1234"}},
        ["Name", "Holder", "Age"],
        ["leader", "pod-a_1234", "5m"],
    ),
    (
        "Endpoints",
        "",
        {
            "metadata": meta("ep"),
            "subsets": [
                {
                    "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}],
                    "ports": [{"port": 8080}, {"port": 9090}],
                }
            ],
        },
        ["Name", "Endpoints", "Age"],
        ["ep", "10.0.0.1:8080,10.0.0.2:8080,[fd00::3]:8080 + 3 more...", "5m"],
    ),
    ("Endpoints", "", {"metadata": meta("none")}, ["Name", "Endpoints", "Age"], ["none", "<none>", "5m"]),
    (
        "VolumeAttachment",
        "storage.k8s.io",
        {
            "metadata": meta("csi-123"),
            "spec": {
                "attacher": "ebs.csi.aws.com",
                "nodeName": "n1",
                "source": {"persistentVolumeName": "pv-1"},
            },
            "status": {"attached": True},
        },
        ["Name", "Attacher", "PV", "Node", "Attached", "Age"],
        ["csi-123", "ebs.csi.aws.com", "pv-1", "n1", True, "5m"],
    ),
    (
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        {
            "metadata": meta("widgets.example.com"),
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"kind": "Widget", "shortNames": ["wd", "wdg"]},
                "versions": [
                    {"name": "v1", "served": True, "storage": True},
                    {"name": "v1beta1", "served": True, "storage": False},
                    {"name": "v1alpha1", "served": False, "storage": False},
                ],
            },
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        },
        [
            "Name",
            "Scope",
            "Versions",
            "Created At",
            "Group",
            "Kind",
            "ShortNames",
            "Established",
        ],
        [
            "widgets.example.com",
            "Namespaced",
            "v1(storage),v1beta1",
            ago(minutes=5),
            "example.com",
            "Widget",
            "wd,wdg",
            True,
        ],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "group", "obj", "columns", "expected"),
    BUILT_IN_CASES,
    ids=[f"{c[0]}-{c[2]['metadata']['name']}" for c in BUILT_IN_CASES],
)
def test_built_in_printers(
    kind: str, group: str, obj: dict[str, Any], columns: list[str], expected: list[Any]
) -> None:
    table = to_table(kind, group, [obj], printer_columns=None, now=NOW)
    assert names(table) == columns
    assert table["rows"][0]["cells"] == expected


def test_crd_table_sends_null_rows_when_empty() -> None:
    table = to_table(
        "CustomResourceDefinition", "apiextensions.k8s.io", [], printer_columns=None, now=NOW
    )
    assert table["rows"] is None
    assert table["columnDefinitions"][3]["type"] == "date"


EVENT_COLUMNS = [
    "Last Seen",
    "Type",
    "Reason",
    "Object",
    "Subobject",
    "Source",
    "Message",
    "First Seen",
    "Count",
    "Name",
]

EVENT_CASES = [
    (
        "core event",
        "",
        {
            "metadata": meta("p.1"),
            "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
            "reason": "BackOff",
            "message": " Back-off restarting \n",
            "type": "Warning",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": ago(hours=2),
            "lastTimestamp": ago(minutes=3),
            "count": 12,
        },
        [
            "3m",
            "Warning",
            "BackOff",
            "pod/p",
            "spec.containers{a}",
            "kubelet, n1",
            "Back-off restarting",
            "120m",
            12,
            "p.1",
        ],
    ),
    (
        "singleton with event time only",
        "",
        {
            "metadata": meta("n.2"),
            "involvedObject": {"kind": "Node"},
            "reason": "Cordon",
            "type": "Normal",
            "eventTime": (NOW - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingComponent": "nodeops",
        },
        ["30s", "Normal", "Cordon", "node", "", "nodeops", "", "30s", 1, "n.2"],
    ),
    (
        "events.k8s.io series",
        "events.k8s.io",
        {
            "metadata": meta("d.3"),
            "regarding": {"kind": "Node", "name": "n1"},
            "note": "Draining",
            "reason": "Drain",
            "type": "Normal",
            "eventTime": (NOW - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "series": {
                "count": 4,
                "lastObservedTime": (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
            "reportingController": "nodeops.io/drain",
            "reportingInstance": "ctrl-0",
        },
        [
            "60s",
            "Normal",
            "Drain",
            "node/n1",
            "",
            "nodeops.io/drain, ctrl-0",
            "Draining",
            "10m",
            4,
            "d.3",
        ],
    ),
]


@pytest.mark.parametrize(
    ("case", "group", "obj", "expected"), EVENT_CASES, ids=[c[0] for c in EVENT_CASES]
)
def test_events(case: str, group: str, obj: dict[str, Any], expected: list[Any]) -> None:
    table = to_table("Event", group, [obj], printer_columns=None, now=NOW)
    assert names(table) == EVENT_COLUMNS
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 0, 1, 1, 0, 1, 1, 1]
    assert table["rows"][0]["cells"] == expected


def test_large_pod_list_is_rendered_in_one_pass() -> None:
    objs = [pod(statuses=[running()]) for _ in range(2000)]
    table = to_table("Pod", "", objs, printer_columns=None, now=NOW, list_metadata={})
    assert len(table["rows"]) == 2000
    assert {tuple(r["cells"][:3]) for r in table["rows"]} == {("p", "1/1", "Running")}
