"""Patch application against kube-apiserver's behaviour, case by case.

Expected values come from reading the Go code kube runs (the patch handler, evanphx/json-patch v4
and apimachinery's strategicpatch), not from this implementation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeops.sim.server.errors import ApiError
from nodeops.sim.server.patch import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    patch_type_for_content_type,
    strategic_merge_kinds,
)

GENERIC_422 = "the server rejected our request due to an error in our request"
PANIC = "This request caused apiserver to panic. Look in the logs for details."
BUILTIN_TYPES = (
    "application/json-patch+json, application/merge-patch+json, "
    "application/strategic-merge-patch+json, application/apply-patch+yaml"
)
CR_TYPES = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
UNKNOWN_FORMAT = "the body of the request was in an unknown format - accepted media types include: "


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def ctr(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def cond(kind: str, status: str) -> dict[str, Any]:
    return {"type": kind, "status": status}


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "resourceVersion": "7",
            "labels": {"app": "web"},
            "finalizers": ["a", "b"],
            "ownerReferences": [{"uid": "rs-1", "name": "web", "kind": "ReplicaSet"}],
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                ctr(
                    "app",
                    image="app:v1",
                    ports=[{"containerPort": 80, "protocol": "TCP"}],
                    env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    volumeMounts=[{"name": "data", "mountPath": "/data"}],
                    volumeDevices=[{"name": "raw", "devicePath": "/dev/xvda"}],
                ),
                ctr("side", image="side:v1"),
            ],
            "initContainers": [ctr("init", image="init:v1")],
            "ephemeralContainers": [ctr("debug", image="busybox")],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "regcred"}],
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "securityContext": {"runAsUser": 1000},
        },
        "status": {
            "phase": "Running",
            "conditions": [cond("Ready", "False")],
            "containerStatuses": [
                {"name": "app", "ready": False},
                {"name": "side", "ready": True},
            ],
        },
    }


def node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"]},
        "status": {
            "conditions": [cond("Ready", "True"), cond("MemoryPressure", "False")],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n1"},
            ],
            "volumesAttached": [{"name": "v1", "devicePath": "/dev/a"}],
            "images": [{"names": ["a"]}, {"names": ["b"]}],
        },
    }


def template_spec() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [ctr("app", image="app:v1"), ctr("side", image="side:v1")]},
    }


def workload(kind: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "template": template_spec()},
        "status": {"conditions": [cond("Available", "True")]},
    }


# --------------------------------------------------------------------------------------------
# Content types
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "custom", "expected"),
    [
        ("application/json-patch+json", False, "json"),
        ("application/merge-patch+json", False, "merge"),
        ("application/strategic-merge-patch+json", False, "strategic"),
        ("application/apply-patch+yaml", False, "apply"),
        ("application/merge-patch+json; charset=utf-8", False, "merge"),
        ("application/json-patch+json", True, "json"),
        ("application/merge-patch+json", True, "merge"),
        ("application/apply-patch+yaml", True, "apply"),
    ],
)
def test_patch_type_for_content_type(content_type: str, custom: bool, expected: str) -> None:
    assert patch_type_for_content_type(content_type, custom_resource=custom) == expected


@pytest.mark.parametrize(
    ("content_type", "custom", "message"),
    [
        # No go-restful route consumes these: its bare message, relayed as a generic 415.
        ("application/json", False, "415: Unsupported Media Type"),
        ("APPLICATION/MERGE-PATCH+JSON", False, "415: Unsupported Media Type"),
        ("application/apply-patch+cbor", False, "415: Unsupported Media Type"),
        ("", False, "415: Unsupported Media Type"),
        # go-restful trims and splits on commas; the patch handler does neither.
        (" application/merge-patch+json", False, UNKNOWN_FORMAT + BUILTIN_TYPES),
        ("application/merge-patch+json, text/plain", False, UNKNOWN_FORMAT + BUILTIN_TYPES),
        # Custom resources never take strategic merge patches.
        ("application/strategic-merge-patch+json", True, UNKNOWN_FORMAT + CR_TYPES),
        ("application/json", True, UNKNOWN_FORMAT + CR_TYPES),
    ],
)
def test_unsupported_content_types(content_type: str, custom: bool, message: str) -> None:
    with pytest.raises(PatchError) as caught:
        patch_type_for_content_type(content_type, custom_resource=custom)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        415,
        "UnsupportedMediaType",
        message,
    )


def test_patch_error_renders_as_a_status() -> None:
    with pytest.raises(ApiError) as caught:
        apply_merge_patch({}, None)
    assert caught.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Invalid JSON Patch",
        "reason": "BadRequest",
        "code": 400,
    }


# --------------------------------------------------------------------------------------------
# JSON merge patch
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        pytest.param(
            {"metadata": {"labels": {"a": "1", "b": "2"}}},
            {"metadata": {"labels": {"a": None, "c": "3"}}},
            {"metadata": {"labels": {"b": "2", "c": "3"}}},
            id="null-deletes-and-siblings-stay",
        ),
        pytest.param(
            {"spec": {"unschedulable": True, "podCIDR": "x"}},
            {"spec": {"unschedulable": None}},
            {"spec": {"podCIDR": "x"}},
            id="uncordon",
        ),
        pytest.param(
            {"a": 1},
            {"b": None},
            {"a": 1},
            id="null-for-absent-member",
        ),
        pytest.param(
            {"spec": {"containers": [ctr("a"), ctr("b")]}},
            {"spec": {"containers": [ctr("c")]}},
            {"spec": {"containers": [ctr("c")]}},
            id="lists-are-replaced",
        ),
        pytest.param(
            {"spec": {}},
            {"spec": {"nodeSelector": {"a": "1", "b": None, "c": {"d": None}}}},
            {"spec": {"nodeSelector": {"a": "1", "c": {}}}},
            id="nulls-pruned-from-new-subtree",
        ),
        pytest.param(
            {"x": 1},
            {"x": {"a": None, "b": 2}},
            {"x": {"b": 2}},
            id="scalar-replaced-by-pruned-object",
        ),
        pytest.param(
            {"x": None},
            {"x": {"a": None, "b": 2}},
            {"x": {"b": 2}},
            id="null-member-treated-as-absent",
        ),
        pytest.param(
            {"x": [1]},
            {"x": [None, {"a": None}]},
            {"x": [None, {}]},
            id="array-over-array-keeps-null-elements",
        ),
        pytest.param(
            {"x": {"a": 1}},
            {"x": [{"b": None}]},
            {"x": [{"b": None}]},
            id="array-over-object-is-not-pruned",
        ),
        pytest.param(
            {"a": {"b": {"c": 1, "d": 2}}},
            {"a": {"b": {"c": 3}}},
            {"a": {"b": {"c": 3, "d": 2}}},
            id="deep-merge",
        ),
    ],
)
def test_merge_patch(original: dict[str, Any], patch: Any, expected: dict[str, Any]) -> None:
    assert apply_merge_patch(original, patch) == expected


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (None, "Invalid JSON Patch"),
        (
            [],
            "error decoding patch: json: cannot unmarshal array into Go value of type "
            "map[string]interface {}",
        ),
        (
            "x",
            "error decoding patch: json: cannot unmarshal string into Go value of type "
            "map[string]interface {}",
        ),
        (
            5,
            "error decoding patch: json: cannot unmarshal number into Go value of type "
            "map[string]interface {}",
        ),
        (
            True,
            "error decoding patch: json: cannot unmarshal bool into Go value of type "
            "map[string]interface {}",
        ),
    ],
)
def test_merge_patch_rejects_non_objects(patch: Any, message: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_merge_patch({"a": 1}, patch)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        400,
        "BadRequest",
        message,
    )


# --------------------------------------------------------------------------------------------
# JSON patch
# --------------------------------------------------------------------------------------------


def _add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


@pytest.mark.parametrize(
    ("ops", "path", "expected"),
    [
        pytest.param(
            [_add("/metadata/labels/tier", "fe")],
            "metadata.labels",
            {"app": "web", "tier": "fe"},
            id="add-member",
        ),
        pytest.param(
            [_add("/metadata/labels/app", "api")],
            "metadata.labels",
            {"app": "api"},
            id="add-replaces-member",
        ),
        pytest.param(
            [_add("/metadata/labels/example.com~1owner", "me")],
            "metadata.labels",
            {"app": "web", "example.com/owner": "me"},
            id="escape-slash",
        ),
        pytest.param(
            [_add("/metadata/labels/a~0b~01", "x")],
            "metadata.labels",
            {"app": "web", "a~b~1": "x"},
            id="escape-tilde",
        ),
        pytest.param(
            [_add("/metadata/finalizers/-", "c")],
            "metadata.finalizers",
            ["a", "b", "c"],
            id="dash-appends",
        ),
        pytest.param(
            [_add("/metadata/finalizers/0", "c")],
            "metadata.finalizers",
            ["c", "a", "b"],
            id="insert-front",
        ),
        pytest.param(
            [_add("/metadata/finalizers/2", "c")],
            "metadata.finalizers",
            ["a", "b", "c"],
            id="insert-at-length",
        ),
        pytest.param(
            [_add("/metadata/finalizers/-1", "c")],
            "metadata.finalizers",
            ["a", "b", "c"],
            id="negative-index-counts-from-end",
        ),
        pytest.param(
            [_add("/metadata/finalizers/-3", "c")],
            "metadata.finalizers",
            ["c", "a", "b"],
            id="most-negative-index",
        ),
        pytest.param(
            [_add("/metadata/finalizers/01", "c")],
            "metadata.finalizers",
            ["a", "c", "b"],
            id="atoi-leading-zero",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            "metadata.finalizers",
            ["b"],
            id="remove-element",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/finalizers/-1"}],
            "metadata.finalizers",
            ["a"],
            id="remove-negative",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/labels/app"}],
            "metadata.labels",
            {},
            id="remove-member",
        ),
        pytest.param(
            [{"op": "replace", "path": "/spec/nodeName", "value": "n2"}],
            "spec.nodeName",
            "n2",
            id="replace-member",
        ),
        pytest.param(
            [{"op": "replace", "path": "/metadata/labels/new", "value": "x"}],
            "metadata.labels",
            {"app": "web", "new": "x"},
            id="replace-of-missing-member-adds",
        ),
        pytest.param(
            [{"op": "replace", "path": "/metadata/finalizers/1", "value": "z"}],
            "metadata.finalizers",
            ["a", "z"],
            id="replace-element",
        ),
        pytest.param(
            [{"op": "move", "from": "/metadata/labels/app", "path": "/metadata/labels/x"}],
            "metadata.labels",
            {"x": "web"},
            id="move",
        ),
        pytest.param(
            [{"op": "move", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/-"}],
            "metadata.finalizers",
            ["b", "a"],
            id="move-within-array",
        ),
        pytest.param(
            [{"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}],
            "metadata.annotations",
            {"app": "web"},
            id="copy",
        ),
        pytest.param(
            [{"op": "copy", "from": "/metadata/nope", "path": "/metadata/x"}],
            "metadata.x",
            None,
            id="copy-of-missing-member-writes-null",
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/x"}],
            "metadata.x",
            None,
            id="add-without-value-writes-null",
        ),
        pytest.param(
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "replace", "path": "/spec/nodeName", "value": "n9"},
            ],
            "spec.nodeName",
            "n9",
            id="test-then-replace",
        ),
        pytest.param(
            [{"op": "test", "path": "/metadata/missing", "value": None}],
            "spec.nodeName",
            "n1",
            id="test-null-against-missing",
        ),
        pytest.param(
            [{"op": "test", "path": "/metadata/missing"}],
            "spec.nodeName",
            "n1",
            id="test-without-value-against-missing",
        ),
        pytest.param(
            [{"op": "test", "path": "/metadata/labels", "value": {"app": "web"}}],
            "spec.nodeName",
            "n1",
            id="test-object",
        ),
        pytest.param(
            [{"op": "test", "path": "/spec/securityContext/runAsUser", "value": 1000.0}],
            "spec.nodeName",
            "n1",
            id="test-number-by-value",
        ),
        pytest.param(None, "metadata.finalizers", ["a", "b"], id="null-body-is-empty-patch"),
        pytest.param([], "metadata.finalizers", ["a", "b"], id="empty-patch"),
    ],
)
def test_json_patch(ops: Any, path: str, expected: Any) -> None:
    assert dig(apply_json_patch(pod(), ops), path) == expected


def test_json_patch_replaces_the_root() -> None:
    replacement = {"kind": "Pod", "metadata": {"name": "other"}}
    assert apply_json_patch(pod(), [{"op": "replace", "path": "", "value": replacement}]) == (
        replacement
    )


@pytest.mark.parametrize(
    ("ops", "cause"),
    [
        (
            [{"op": "test", "path": "/spec/nodeName", "value": "n2"}],
            "testing value /spec/nodeName failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/securityContext/runAsUser", "value": "1000"}],
            "testing value /spec/securityContext/runAsUser failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/nodeName"}],
            "testing value /spec/nodeName failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/nodeName", "value": None}],
            "testing value /spec/nodeName failed: test failed",
        ),
        (
            [{"op": "test", "path": "/metadata/labels", "value": {"app": "web", "x": "y"}}],
            "testing value /metadata/labels failed: test failed",
        ),
        ([{"op": "test", "path": "", "value": None}], "testing value  failed: test failed"),
        (
            [{"op": "test", "path": "/nope/x", "value": 1}],
            "test operation does not apply: is missing path: /nope/x: missing value",
        ),
        (
            [_add("/spec/nothere/x", 1)],
            'add operation does not apply: doc is missing path: "/spec/nothere/x": missing value',
        ),
        (
            [_add("/spec/nodeName/x", 1)],
            'add operation does not apply: doc is missing path: "/spec/nodeName/x": missing value',
        ),
        ([_add("", {})], 'add operation does not apply: doc is missing path: "": missing value'),
        (
            [_add("/metadata/finalizers/3", "c")],
            "error in add for path: '/metadata/finalizers/3': "
            "Unable to access invalid index: 3: invalid index referenced",
        ),
        (
            [_add("/metadata/finalizers/-4", "c")],
            "error in add for path: '/metadata/finalizers/-4': "
            "Unable to access invalid index: -4: invalid index referenced",
        ),
        (
            [_add("/metadata/finalizers/x", "c")],
            "error in add for path: '/metadata/finalizers/x': value was not a proper array index: "
            "'x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            [{"op": "remove", "path": "/metadata/labels/nope"}],
            "error in remove for path: '/metadata/labels/nope': "
            "Unable to remove nonexistent key: nope: missing value",
        ),
        (
            [{"op": "remove", "path": "/metadata/finalizers/2"}],
            "error in remove for path: '/metadata/finalizers/2': "
            "Unable to access invalid index: 2: invalid index referenced",
        ),
        (
            [{"op": "remove", "path": "/metadata/finalizers/ 1"}],
            "error in remove for path: '/metadata/finalizers/ 1': "
            'strconv.Atoi: parsing " 1": invalid syntax',
        ),
        (
            [{"op": "remove", "path": "/metadata/finalizers/-"}],
            "error in remove for path: '/metadata/finalizers/-': "
            'strconv.Atoi: parsing "-": invalid syntax',
        ),
        (
            [{"op": "replace", "path": "/metadata/finalizers/9", "value": "z"}],
            "replace operation does not apply: doc is missing key: /metadata/finalizers/9: "
            "missing value",
        ),
        (
            [{"op": "replace", "path": "", "value": "scalar"}],
            "replace operation value must be object or array: %!w(<nil>)",
        ),
        (
            [{"op": "move", "from": "/metadata/labels/nope", "path": "/metadata/x"}],
            "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            [{"op": "move", "path": "/metadata/x"}],
            "move operation failed to decode from: operation, missing from field: missing value",
        ),
        (
            [{"op": "copy", "from": "/metadata/finalizers/5", "path": "/metadata/x"}],
            "error in copy for from: '/metadata/finalizers/5': "
            "Unable to access invalid index: 5: invalid index referenced",
        ),
        ([{"op": "add", "value": 1}], "add operation failed to decode path: missing value"),
        ([{"op": "frob", "path": "/a"}], "Unexpected kind: frob"),
        ([{"path": "/a"}], "Unexpected kind: unknown"),
        ([None], "Unexpected kind: unknown"),
        ([{"op": "ADD", "path": "/a", "value": 1}], "Unexpected kind: ADD"),
    ],
)
def test_json_patch_failures_are_generic_422(ops: list[Any], cause: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), ops)
    error = caught.value
    assert (error.code, error.reason, error.message, error.details) == (
        422,
        "Invalid",
        GENERIC_422,
        {},
    )
    assert error.cause == cause


def test_json_patch_failure_is_all_or_nothing() -> None:
    original = pod()
    with pytest.raises(PatchError):
        apply_json_patch(
            original,
            [_add("/metadata/labels/x", "y"), {"op": "test", "path": "/spec/nodeName", "value": 0}],
        )
    assert original == pod()


def test_json_patch_copy_budget() -> None:
    big = "x" * (2 * 1024 * 1024)
    ops = [
        _add("/spec/big", big),
        {"op": "copy", "from": "/spec/big", "path": "/spec/c1"},
        {"op": "copy", "from": "/spec/big", "path": "/spec/c2"},
    ]
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), ops)
    assert caught.value.code == 422
    assert caught.value.cause == (
        "Unable to complete the copy, the accumulated size increase of copy is 4194308, "
        "exceeding the limit 3145728"
    )
    assert dig(apply_json_patch(pod(), ops[:2]), "spec.c1") == big


@pytest.mark.parametrize(
    ("ops", "detail"),
    [
        ({"op": "add"}, "object into Go value of type []handlers.jsonPatchOp"),
        (5, "number into Go value of type []handlers.jsonPatchOp"),
        ("[]", "string into Go value of type []handlers.jsonPatchOp"),
        (["add"], "string into Go value of type handlers.jsonPatchOp"),
        ([[]], "array into Go value of type handlers.jsonPatchOp"),
        ([{"op": 1, "path": "/a"}], "number into Go struct field jsonPatchOp.op of type string"),
        (
            [{"op": "add", "path": ["a"]}],
            "array into Go struct field jsonPatchOp.path of type string",
        ),
        (
            [{"op": "move", "path": "/a", "from": True}],
            "bool into Go struct field jsonPatchOp.from of type string",
        ),
        # The first bad field in document order is the one reported.
        (
            [{"op": "test", "path": "/a"}, {"path": 1, "op": {}}],
            "number into Go struct field jsonPatchOp.path of type string",
        ),
    ],
)
def test_json_patch_malformed_bodies_are_400(ops: Any, detail: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), ops)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        400,
        "BadRequest",
        f"error decoding patch: json: cannot unmarshal {detail}",
    )


def test_json_patch_operation_limit() -> None:
    ops = [{"op": "test", "path": "/kind", "value": "Pod"}] * 10000
    assert apply_json_patch(pod(), ops)["kind"] == "Pod"
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), [*ops, ops[0]])
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, "
        "got 10001",
    )


def test_json_patch_root_replaced_by_array_fails_decoding() -> None:
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), [{"op": "replace", "path": "", "value": [1]}])
    error = caught.value
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message.startswith(' "" is invalid: patch: Invalid value: "[1]": ')
    assert error.details is not None
    assert error.details["causes"][0]["field"] == "patch"


@pytest.mark.parametrize(
    "ops",
    [
        # json-patch dereferences a nil node comparing arrays with null elements, and a missing
        # value when testing or replacing the whole document; kube answers its panic handler's 500.
        [_add("/spec/x", [None]), {"op": "test", "path": "/spec/x", "value": [None]}],
        [_add("/spec/x", [1]), {"op": "test", "path": "/spec/x", "value": [None]}],
        [{"op": "test", "path": ""}],
        [{"op": "replace", "path": ""}],
    ],
)
def test_json_patch_panics_are_500(ops: list[Any]) -> None:
    with pytest.raises(PatchError) as caught:
        apply_json_patch(pod(), ops)
    assert (caught.value.code, caught.value.message) == (500, PANIC)


# --------------------------------------------------------------------------------------------
# Strategic merge patch: merge keys of the built-in kinds
# --------------------------------------------------------------------------------------------

SMP_KEY_CASES = [
    # Pod spec
    pytest.param(
        "Pod",
        pod,
        {"spec": {"containers": [ctr("app", image="app:v2")]}},
        "spec.containers",
        [
            ctr(
                "app",
                image="app:v2",
                ports=[{"containerPort": 80, "protocol": "TCP"}],
                env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                volumeMounts=[{"name": "data", "mountPath": "/data"}],
                volumeDevices=[{"name": "raw", "devicePath": "/dev/xvda"}],
            ),
            ctr("side", image="side:v1"),
        ],
        id="pod-containers-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"containers": [ctr("new", image="n")]}},
        "spec.containers",
        [ctr("new", image="n"), *pod()["spec"]["containers"]],
        id="pod-new-container-goes-first",
    ),
    pytest.param(
        "Pod",
        pod,
        {
            "spec": {
                "containers": [
                    ctr(
                        "app", ports=[{"containerPort": 80, "name": "http"}, {"containerPort": 443}]
                    )
                ]
            }
        },
        "spec.containers.0.ports",
        [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}],
        id="pod-ports-by-containerPort",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"containers": [ctr("app", env=[{"name": "B", "value": "3"}])]}},
        "spec.containers.0.env",
        [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}],
        id="pod-env-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"containers": [ctr("app", env=[{"name": "A", "$patch": "delete"}])]}},
        "spec.containers.0.env",
        [{"name": "B", "value": "2"}],
        id="pod-env-delete-item",
    ),
    pytest.param(
        "Pod",
        pod,
        {
            "spec": {
                "containers": [ctr("app", volumeMounts=[{"mountPath": "/data", "readOnly": True}])]
            }
        },
        "spec.containers.0.volumeMounts",
        [{"name": "data", "mountPath": "/data", "readOnly": True}],
        id="pod-volumeMounts-by-mountPath",
    ),
    pytest.param(
        "Pod",
        pod,
        {
            "spec": {
                "containers": [
                    ctr("app", volumeDevices=[{"devicePath": "/dev/xvda", "name": "raw2"}])
                ]
            }
        },
        "spec.containers.0.volumeDevices",
        [{"name": "raw2", "devicePath": "/dev/xvda"}],
        id="pod-volumeDevices-by-devicePath",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"initContainers": [ctr("init2", image="i2")]}},
        "spec.initContainers",
        [ctr("init2", image="i2"), ctr("init", image="init:v1")],
        id="pod-initContainers-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"ephemeralContainers": [ctr("debug", tty=True)]}},
        "spec.ephemeralContainers",
        [ctr("debug", image="busybox", tty=True)],
        id="pod-ephemeralContainers-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"volumes": [{"name": "cache", "emptyDir": {}}]}},
        "spec.volumes",
        [{"name": "cache", "emptyDir": {}}, {"name": "data", "emptyDir": {}}],
        id="pod-volumes-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"imagePullSecrets": [{"name": "other"}]}},
        "spec.imagePullSecrets",
        [{"name": "other"}, {"name": "regcred"}],
        id="pod-imagePullSecrets-by-name",
    ),
    pytest.param(
        "Pod",
        pod,
        {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}},
        "spec.tolerations",
        [{"key": "b", "operator": "Exists"}],
        id="pod-tolerations-replaced",
    ),
    pytest.param(
        "Pod",
        pod,
        {"status": {"conditions": [cond("PodScheduled", "True")]}},
        "status.conditions",
        [cond("PodScheduled", "True"), cond("Ready", "False")],
        id="pod-condition-added",
    ),
    pytest.param(
        "Pod",
        pod,
        {"status": {"conditions": [cond("Ready", "True")]}},
        "status.conditions",
        [cond("Ready", "True")],
        id="pod-condition-updated",
    ),
    pytest.param(
        "Pod",
        pod,
        {"status": {"containerStatuses": [{"name": "app", "ready": True}]}},
        "status.containerStatuses",
        [{"name": "app", "ready": True}],
        id="pod-containerStatuses-replaced",
    ),
    pytest.param(
        "Pod",
        pod,
        {"status": {"podIPs": [{"ip": "fd00::1"}]}},
        "status.podIPs",
        [{"ip": "fd00::1"}],
        id="pod-podIPs-new-list",
    ),
    pytest.param(
        "Pod",
        pod,
        {"metadata": {"finalizers": ["c"]}},
        "metadata.finalizers",
        ["c", "a", "b"],
        id="finalizer-added-first",
    ),
    pytest.param(
        "Pod",
        pod,
        {"metadata": {"finalizers": ["c", "a", "c"]}},
        "metadata.finalizers",
        ["c", "a", "b"],
        id="finalizers-are-a-set",
    ),
    pytest.param(
        "Pod",
        pod,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        "metadata.finalizers",
        ["b"],
        id="finalizer-removed",
    ),
    pytest.param(
        "Pod",
        pod,
        {"metadata": {"ownerReferences": [{"uid": "rs-1", "controller": True}]}},
        "metadata.ownerReferences",
        [{"uid": "rs-1", "name": "web", "kind": "ReplicaSet", "controller": True}],
        id="ownerReferences-by-uid",
    ),
    # Node
    pytest.param(
        "Node",
        node,
        {"spec": {"unschedulable": True}},
        "spec",
        {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"], "unschedulable": True},
        id="node-cordon",
    ),
    pytest.param(
        "Node",
        node,
        {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
        "spec.taints",
        [{"key": "k", "effect": "NoSchedule"}],
        id="node-taints-set",
    ),
    pytest.param(
        "Node",
        node,
        {"status": {"conditions": [cond("Ready", "False")]}},
        "status.conditions",
        [cond("Ready", "False"), cond("MemoryPressure", "False")],
        id="node-conditions-by-type",
    ),
    pytest.param(
        "Node",
        node,
        {"status": {"conditions": [cond("DiskPressure", "True")]}},
        "status.conditions",
        [cond("DiskPressure", "True"), cond("Ready", "True"), cond("MemoryPressure", "False")],
        id="node-condition-added",
    ),
    pytest.param(
        "Node",
        node,
        {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}},
        "status.addresses",
        [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}],
        id="node-addresses-by-type",
    ),
    pytest.param(
        "Node",
        node,
        {"spec": {"podCIDRs": ["fd00::/64"]}},
        "spec.podCIDRs",
        ["fd00::/64", "10.0.0.0/24"],
        id="node-podCIDRs-set",
    ),
    pytest.param(
        "Node",
        node,
        {"status": {"volumesAttached": [{"name": "v2"}]}},
        "status.volumesAttached",
        [{"name": "v2"}],
        id="node-volumesAttached-replaced",
    ),
    pytest.param(
        "Node",
        node,
        {"status": {"images": [{"names": ["c"]}]}},
        "status.images",
        [{"names": ["c"]}],
        id="node-images-replaced",
    ),
    # PodDisruptionBudget
    pytest.param(
        "PodDisruptionBudget",
        lambda: {
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "minAvailable": 1},
            "status": {"conditions": [cond("DisruptionAllowed", "True")]},
        },
        {"spec": {"selector": {"matchLabels": {"tier": "web"}}}},
        "spec",
        {"selector": {"matchLabels": {"tier": "web"}}, "minAvailable": 1},
        id="pdb-selector-replaced",
    ),
    pytest.param(
        "PodDisruptionBudget",
        lambda: {"status": {"conditions": [cond("DisruptionAllowed", "True")]}},
        {"status": {"conditions": [cond("Other", "True")]}},
        "status.conditions",
        [cond("Other", "True"), cond("DisruptionAllowed", "True")],
        id="pdb-conditions-by-type",
    ),
    # Service
    pytest.param(
        "Service",
        lambda: {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}},
        {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}},
        "spec.ports",
        [{"port": 80, "name": "http"}, {"port": 443, "name": "https", "targetPort": 8443}],
        id="service-ports-by-port",
    ),
    # Event, Lease, ConfigMap, Namespace
    pytest.param(
        "Event",
        lambda: {"count": 1, "involvedObject": {"kind": "Node", "name": "n1"}},
        {"count": 2, "lastTimestamp": "2024-05-01T12:00:00Z"},
        "",
        {
            "count": 2,
            "involvedObject": {"kind": "Node", "name": "n1"},
            "lastTimestamp": "2024-05-01T12:00:00Z",
        },
        id="event-merge",
    ),
    pytest.param(
        "Lease",
        lambda: {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}},
        {"spec": {"holderIdentity": "b", "renewTime": "2024-05-01T12:00:00.000000Z"}},
        "spec",
        {
            "holderIdentity": "b",
            "leaseDurationSeconds": 15,
            "renewTime": "2024-05-01T12:00:00.000000Z",
        },
        id="lease-renew",
    ),
    pytest.param(
        "ConfigMap",
        lambda: {"data": {"a": "1", "b": "2"}},
        {"data": {"a": None, "c": "3"}},
        "data",
        {"b": "2", "c": "3"},
        id="configmap-data",
    ),
    pytest.param(
        "Namespace",
        lambda: {
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"conditions": [cond("A", "True")]},
        },
        {"spec": {"finalizers": ["x"]}, "status": {"conditions": [cond("B", "True")]}},
        "",
        {
            "spec": {"finalizers": ["x"]},
            "status": {"conditions": [cond("B", "True"), cond("A", "True")]},
        },
        id="namespace-spec-finalizers-replaced-conditions-merged",
    ),
    pytest.param(
        "ServiceAccount",
        lambda: {"secrets": [{"name": "a"}]},
        {"secrets": [{"name": "b"}]},
        "secrets",
        [{"name": "b"}, {"name": "a"}],
        id="serviceaccount-secrets-by-name",
    ),
    pytest.param(
        "CSINode",
        lambda: {"spec": {"drivers": [{"name": "a", "nodeID": "1"}]}},
        {"spec": {"drivers": [{"name": "a", "nodeID": "2"}]}},
        "spec.drivers",
        [{"name": "a", "nodeID": "2"}],
        id="csinode-drivers-by-name",
    ),
    pytest.param(
        "MutatingWebhookConfiguration",
        lambda: {"webhooks": [{"name": "a", "matchConditions": [{"name": "x"}]}]},
        {"webhooks": [{"name": "a", "matchConditions": [{"name": "y"}]}]},
        "webhooks",
        [{"name": "a", "matchConditions": [{"name": "y"}, {"name": "x"}]}],
        id="webhooks-by-name",
    ),
]


@pytest.mark.parametrize(("kind", "make", "patch", "path", "expected"), SMP_KEY_CASES)
def test_strategic_merge_keys(
    kind: str, make: Any, patch: dict[str, Any], path: str, expected: Any
) -> None:
    result = apply_strategic_merge_patch(make(), patch, kind)
    assert (dig(result, path) if path else result) == expected


@pytest.mark.parametrize(
    "kind", ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"]
)
def test_strategic_merge_workload_templates(kind: str) -> None:
    patch = {
        "spec": {
            "template": {
                "metadata": {"finalizers": ["f"]},
                "spec": {"containers": [ctr("app", image="app:v2")]},
            }
        },
        "status": {"conditions": [cond("Progressing", "True")]},
    }
    result = apply_strategic_merge_patch(workload(kind), patch, kind)
    assert dig(result, "spec.template.spec.containers") == [
        ctr("app", image="app:v2"),
        ctr("side", image="side:v1"),
    ]
    assert dig(result, "spec.template.metadata") == {"labels": {"app": "web"}, "finalizers": ["f"]}
    assert dig(result, "status.conditions") == [
        cond("Progressing", "True"),
        cond("Available", "True"),
    ]
    assert dig(result, "spec.replicas") == 2


@pytest.mark.parametrize(
    ("kind", "template_path"),
    [("CronJob", "spec.jobTemplate.spec.template"), ("PodTemplate", "template")],
)
def test_strategic_merge_nested_templates(kind: str, template_path: str) -> None:
    original: dict[str, Any] = {"metadata": {"name": "x"}}
    patch: dict[str, Any] = {}
    into_original, into_patch = original, patch
    for part in template_path.split("."):
        into_original = into_original.setdefault(part, {})
        into_patch = into_patch.setdefault(part, {})
    into_original.update(template_spec())
    into_patch["spec"] = {"containers": [ctr("side", image="side:v2")]}
    result = apply_strategic_merge_patch(original, patch, kind)
    assert dig(result, template_path + ".spec.containers") == [
        ctr("app", image="app:v1"),
        ctr("side", image="side:v2"),
    ]


def test_two_taint_patches_replace_rather_than_accumulate() -> None:
    taint_a = {"key": "a", "effect": "NoSchedule"}
    taint_b = {"key": "b", "effect": "NoExecute"}
    once = apply_strategic_merge_patch(node(), {"spec": {"taints": [taint_a]}}, "Node")
    twice = apply_strategic_merge_patch(once, {"spec": {"taints": [taint_b]}}, "Node")
    assert twice["spec"]["taints"] == [taint_b]


def test_cordon_then_uncordon() -> None:
    cordoned = apply_strategic_merge_patch(node(), {"spec": {"unschedulable": True}}, "Node")
    assert cordoned["spec"]["unschedulable"] is True
    uncordoned = apply_strategic_merge_patch(cordoned, {"spec": {"unschedulable": None}}, "Node")
    assert uncordoned == node()


def test_finalizer_add_then_remove() -> None:
    added = apply_strategic_merge_patch(pod(), {"metadata": {"finalizers": ["x"]}}, "Pod")
    assert added["metadata"]["finalizers"] == ["x", "a", "b"]
    removed = apply_strategic_merge_patch(
        added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x", "a", "zz"]}}, "Pod"
    )
    assert removed["metadata"]["finalizers"] == ["b"]


# --------------------------------------------------------------------------------------------
# Strategic merge patch: directives
# --------------------------------------------------------------------------------------------

SMP_DIRECTIVE_CASES = [
    pytest.param(
        {"metadata": {"labels": {"$patch": "replace", "tier": "fe"}}},
        "metadata.labels",
        {"tier": "fe"},
        id="map-replace",
    ),
    pytest.param(
        {"spec": {"securityContext": {"$patch": "delete"}}},
        "spec.securityContext",
        {},
        id="map-delete-empties-existing",
    ),
    pytest.param(
        {"spec": {"affinity": {"$patch": "delete"}}},
        "spec",
        pod()["spec"],
        id="map-delete-of-absent-adds-nothing",
    ),
    pytest.param(
        {"metadata": {"annotations": {"$patch": "replace", "a": "b"}}},
        "metadata",
        pod()["metadata"],
        id="new-map-carrying-directive-dropped",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "replace"}, ctr("only", image="o")]}},
        "spec.containers",
        [ctr("only", image="o")],
        id="list-replace",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
        "spec.containers",
        pod()["spec"]["containers"][:1],
        id="list-item-delete",
    ),
    pytest.param(
        {"spec": {"containers": [{"name": "nope", "$patch": "delete"}]}},
        "spec.containers",
        pod()["spec"]["containers"],
        id="list-item-delete-missing",
    ),
    pytest.param(
        {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}]}},
        "spec.containers",
        [pod()["spec"]["containers"][1], pod()["spec"]["containers"][0]],
        id="set-element-order-reorders",
    ),
    pytest.param(
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "app"}, {"name": "new"}, {"name": "side"}],
                "containers": [ctr("new", image="n")],
            }
        },
        "spec.containers",
        [pod()["spec"]["containers"][0], ctr("new", image="n"), pod()["spec"]["containers"][1]],
        id="set-element-order-places-new-item",
    ),
    pytest.param(
        {"metadata": {"$setElementOrder/finalizers": ["b", "c", "a"], "finalizers": ["c"]}},
        "metadata.finalizers",
        ["b", "c", "a"],
        id="set-element-order-primitives",
    ),
    pytest.param(
        {
            "metadata": {
                "$setElementOrder/finalizers": ["b", "c"],
                "finalizers": ["c"],
                "$deleteFromPrimitiveList/finalizers": ["a"],
            }
        },
        "metadata.finalizers",
        ["b", "c"],
        id="set-element-order-with-deletion",
    ),
    pytest.param(
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "new"}],
                "containers": [ctr("new"), {"name": "app", "$patch": "delete"}],
            }
        },
        "spec.containers",
        [ctr("side", image="side:v1"), ctr("new")],
        id="set-element-order-with-delete-directive",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "a", "zz"]}},
        "metadata.finalizers",
        ["b"],
        id="delete-from-primitive-list",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/nothere": ["a"]}},
        "metadata",
        pod()["metadata"],
        id="delete-from-absent-list-adds-nothing",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveList/finalizers": None}},
        "metadata",
        {k: v for k, v in pod()["metadata"].items() if k != "finalizers"},
        id="null-delete-list-drops-the-list",
    ),
    pytest.param(
        {"spec": {"nodeName": None, "hostname": None}},
        "spec",
        {k: v for k, v in pod()["spec"].items() if k != "nodeName"},
        id="null-deletes-and-unmatched-null-ignored",
    ),
    pytest.param(
        {"spec": {"nodeSelector": {"a": "1", "b": None}}},
        "spec.nodeSelector",
        {"a": "1"},
        id="nulls-discarded-from-new-subtree",
    ),
    pytest.param(
        {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}}]}},
        "spec.volumes",
        [{"name": "v", "emptyDir": {}}, {"name": "data", "emptyDir": {}}],
        id="leftover-directive-keys-are-dropped",
    ),
    pytest.param(
        {
            "spec": {
                "volumes": [
                    {
                        "name": "data",
                        "$retainKeys": ["name", "hostPath"],
                        "hostPath": {"path": "/x"},
                    }
                ]
            }
        },
        "spec.volumes",
        [{"name": "data", "hostPath": {"path": "/x"}}],
        id="retain-keys-in-list-item",
    ),
    pytest.param(
        {"spec": {"securityContext": {"runAsUser": 5, "fsGroup": 2}}},
        "spec.securityContext",
        {"runAsUser": 5, "fsGroup": 2},
        id="plain-map-merge",
    ),
]


@pytest.mark.parametrize(("patch", "path", "expected"), SMP_DIRECTIVE_CASES)
def test_strategic_merge_directives(patch: dict[str, Any], path: str, expected: Any) -> None:
    assert dig(apply_strategic_merge_patch(pod(), patch, "Pod"), path) == expected


def test_retain_keys_switches_deployment_strategy() -> None:
    deployment = workload("Deployment")
    deployment["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    result = apply_strategic_merge_patch(deployment, patch, "Deployment")
    assert result["spec"]["strategy"] == {"type": "Recreate"}


def test_set_element_order_with_delete_and_add_keeps_server_item_before_new_one() -> None:
    """apimachinery's "add map and delete map from merging list" case: deleting ``a`` shifts the
    live list in place and ``c`` lands in the freed cell, so the server order it then consults
    reads [b, d, c] and ``d`` stays ahead of ``c``."""
    original = {"spec": {"containers": [ctr("a"), ctr("b", x=1), ctr("d", x=2)]}}
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
            "containers": [ctr("c"), {"name": "a", "$patch": "delete"}],
        }
    }
    result = apply_strategic_merge_patch(original, patch, "Pod")
    assert result["spec"]["containers"] == [ctr("b", x=1), ctr("d", x=2), ctr("c")]


def test_whole_object_replace_and_delete() -> None:
    replaced = apply_strategic_merge_patch(pod(), {"$patch": "replace", "kind": "Pod"}, "Pod")
    assert replaced == {"kind": "Pod"}
    assert apply_strategic_merge_patch(pod(), {"$patch": "delete"}, "Pod") == {}


def test_null_strategic_patch_changes_nothing() -> None:
    assert apply_strategic_merge_patch(pod(), None, "Pod") == pod()


def test_unknown_fields_merge_maps_and_replace_lists() -> None:
    original = {"spec": {"extra": {"a": 1, "list": [1, 2]}}}
    patch = {"spec": {"extra": {"b": 2, "list": [3]}}}
    assert apply_strategic_merge_patch(original, patch, "Pod") == {
        "spec": {"extra": {"a": 1, "b": 2, "list": [3]}}
    }


# --------------------------------------------------------------------------------------------
# Strategic merge patch: failures
# --------------------------------------------------------------------------------------------

SMP_ERROR_CASES = [
    pytest.param(
        {"metadata": {"labels": {"$patch": "merge", "a": "1"}}},
        500,
        "",
        "unknown patch type: merge in map: map[$patch:merge a:1]",
        id="map-merge-directive-refused",
    ),
    pytest.param(
        {"metadata": {"labels": {"$patch": 1}}},
        500,
        "",
        "unknown patch type: %!s(int64=1) in map: map[$patch:1]",
        id="map-directive-not-a-string",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "merge"}]}},
        500,
        "",
        "merging lists cannot yet be specified in the patch",
        id="list-merge-directive-refused",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "frob", "name": "app"}]}},
        500,
        "",
        "unknown patch type: frob in map: map[$patch:frob name:app]",
        id="list-unknown-directive",
    ),
    pytest.param(
        {"spec": {"containers": [{"image": "x"}]}},
        500,
        "",
        "map: map[image:x] does not contain declared merge key: name",
        id="missing-merge-key",
    ),
    pytest.param(
        {"spec": {"containers": [{"$patch": "delete", "image": "x"}]}},
        500,
        "",
        "map: map[$patch:delete image:x] does not contain declared merge key: name",
        id="delete-directive-without-merge-key",
    ),
    pytest.param(
        {"spec": {"initContainers": ["app"]}},
        500,
        "",
        "list element types are not identical: [[map[image:init:v1 name:init]] [app]]",
        id="mixed-element-types",
    ),
    pytest.param(
        {"metadata": {"finalizers": [1.5]}},
        500,
        "",
        "list element types are not identical: [[a b] [1.5]]",
        id="mixed-scalar-types",
    ),
    pytest.param(
        {"spec": {"$deleteFromPrimitiveList/tolerations": [{"key": "a"}]}},
        500,
        "",
        "cannot merge lists without merge key for struct",
        id="delete-list-of-structs-without-key",
    ),
    pytest.param(
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                "containers": [ctr("app"), ctr("side")],
            }
        },
        500,
        "",
        "The order in patch list:\n[map[name:app] map[name:side]]\n doesn't match "
        "$setElementOrder list:\n[map[name:side] map[name:app]]\n",
        id="set-element-order-mismatch",
    ),
    pytest.param(
        {"spec": {"$setElementOrder/containers": "app"}},
        500,
        "",
        "expected a []interface {}, but received a string",
        id="set-element-order-not-a-list",
    ),
    pytest.param(
        {"metadata": {"$setElementOrderX/finalizers": []}},
        400,
        "BadRequest",
        "invalid patch format of setElementOrder list",
        id="set-element-order-prefix",
    ),
    pytest.param(
        {"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}},
        400,
        "BadRequest",
        "invalid patch format of primitive list",
        id="delete-list-prefix",
    ),
    pytest.param(
        {"metadata": {"$retainKeys": "name"}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
        id="retain-keys-not-a-list",
    ),
    pytest.param(
        {"metadata": {"$retainKeys": ["name"], "labels": {"a": "b"}}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
        id="retain-keys-missing-patched-field",
    ),
    pytest.param(
        {"metadata": {"finalizers": [None]}},
        500,
        "",
        "list element types are not identical: [[a b] [<nil>]]",
        id="null-after-strings",
    ),
]


@pytest.mark.parametrize(("patch", "code", "reason", "message"), SMP_ERROR_CASES)
def test_strategic_merge_failures(
    patch: dict[str, Any], code: int, reason: str, message: str
) -> None:
    with pytest.raises(PatchError) as caught:
        apply_strategic_merge_patch(pod(), patch, "Pod")
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        code,
        reason,
        message,
    )


def test_strategic_merge_null_first_element_panics() -> None:
    """apimachinery asks a nil reflect.Type for its Kind; kube's panic handler answers 500."""
    original = {"metadata": {"finalizers": [None]}}
    with pytest.raises(PatchError) as caught:
        apply_strategic_merge_patch(original, {"metadata": {"finalizers": ["a"]}}, "Pod")
    assert (caught.value.code, caught.value.message) == (500, PANIC)


def test_strategic_merge_list_of_lists_is_422() -> None:
    original: dict[str, Any] = {"metadata": {"finalizers": []}}
    with pytest.raises(PatchError) as caught:
        apply_strategic_merge_patch(original, {"metadata": {"finalizers": [["a"]]}}, "Pod")
    error = caught.value
    assert (error.code, error.reason, error.message, error.details) == (
        422,
        "Invalid",
        GENERIC_422,
        {},
    )
    assert error.cause == "lists of lists are not supported"


@pytest.mark.parametrize(
    ("patch", "detail"), [([], "array"), ("x", "string"), (1, "number"), (False, "bool")]
)
def test_strategic_merge_rejects_non_objects(patch: Any, detail: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_strategic_merge_patch(pod(), patch, "Pod")
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        400,
        "BadRequest",
        f"json: cannot unmarshal {detail} into Go value of type map[string]interface {{}}",
    )


@pytest.mark.parametrize("kind", ["NodeMaintenance", "Widget", "pod"])
def test_strategic_merge_of_custom_resources_is_415(kind: str) -> None:
    with pytest.raises(PatchError) as caught:
        apply_strategic_merge_patch({"metadata": {}}, {"spec": {}}, kind)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (
        415,
        "UnsupportedMediaType",
        UNKNOWN_FORMAT + CR_TYPES,
    )


def test_strategic_merge_kinds_cover_the_simulated_api() -> None:
    assert {
        "Pod",
        "Node",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "CronJob",
        "PodDisruptionBudget",
        "Service",
        "Event",
        "Lease",
        "ConfigMap",
        "Namespace",
        "Secret",
        "Eviction",
    } <= strategic_merge_kinds()


# --------------------------------------------------------------------------------------------
# Inputs are never mutated
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("apply", "patch"),
    [
        (apply_merge_patch, {"metadata": {"labels": {"app": None, "x": {"y": None}}}}),
        (
            apply_json_patch,
            [
                _add("/metadata/labels/x", {"y": [1]}),
                {"op": "copy", "from": "/spec/containers/0", "path": "/spec/c"},
                {"op": "move", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/-"},
            ],
        ),
        (
            lambda original, patch: apply_strategic_merge_patch(original, patch, "Pod"),
            {
                "metadata": {"finalizers": ["z"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                "spec": {
                    "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                    "containers": [ctr("app", env=[{"name": "A", "$patch": "delete"}])],
                    "volumes": [{"name": "v", "$retainKeys": ["name"]}],
                },
            },
        ),
    ],
)
def test_inputs_are_not_mutated(apply: Any, patch: Any) -> None:
    original = pod()
    patch_before = copy.deepcopy(patch)
    result = apply(original, patch)
    assert original == pod()
    assert patch == patch_before
    result["metadata"]["labels"]["mutated"] = "yes"
    assert "mutated" not in original["metadata"]["labels"]
