"""The `fieldValidation` query parameter, answered as kube-apiserver v1.36 answers it.

Every write path (create, update, merge / strategic merge / JSON patch, server-side apply) under
Strict, Warn and Ignore, for custom resources (a small CRD and nodeops's own NodeGroup) and
built-in kinds: status codes, Status messages and `Warning` headers. The expected texts are kube's
(handlers/create.go, update.go, patch.go; sigs.k8s.io/json strict errors; the CRD pruning paths;
the field manager's "field not declared in schema").
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from nodeops.api.crd import all_crds
from nodeops.sim.server.app import SimServer
from tests.integration.sim.conftest import Api
from tests.kubectl import kubectl

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
NODEGROUPS = "/apis/nodeops.dev/v1alpha1/nodegroups"
PODS = "/api/v1/namespaces/default/pods"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
NODES = "/api/v1/nodes"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "ports": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {"port": {"type": "integer"}},
                                        },
                                    },
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


class Reply:
    """Status, decoded body and the Warning headers of one answer."""

    def __init__(self, status: int, body: Any, warnings: list[str]) -> None:
        self.status = status
        self.body = body
        self.warnings = warnings

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""


async def send(
    api: Api,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | list[Any],
    *,
    content_type: str = "application/json",
    validation: str | None = None,
    params: dict[str, str] | None = None,
) -> Reply:
    query = dict(params or {})
    if validation is not None:
        query["fieldValidation"] = validation
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {**api.headers, "Content-Type": content_type}
    async with api.session.request(
        method, api.base + path, data=data, params=query, headers=headers
    ) as resp:
        raw = await resp.read()
        return Reply(
            resp.status, orjson.loads(raw) if raw else None, resp.headers.getall("Warning", [])
        )


def header(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


async def install_crds(api: Api) -> None:
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    nodegroup = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "NodeGroup")
    for crd in (WIDGET_CRD, nodegroup):
        status, body = await api.post(crd_path, crd)
        assert status == 201, body


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


def nodegroup(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {
            "nodeGroupName": "ng",
            "nodeSelector": {"matchLabels": {"pool": "a"}},
            "cycleSettings": {"method": "Drain"},
            **extra,
        },
    }


def configmap(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


# A Widget body with two unknown fields (one nested in a list item), an unknown metadata field and
# a duplicated known field, written by hand so the duplicate survives to the server.
WIDGET_BAD = (
    b'{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"NAME","bogus":1},'
    b'"spec":{"size":1,"size":2,"zeta":true,"ports":[{"port":80,"nope":1}],'
    b'"extra":{"anything":1}}}'
)
WIDGET_PROBLEMS = [
    'duplicate field "spec.size"',
    'unknown field "metadata.bogus"',
    'unknown field "spec.ports[0].nope"',
    'unknown field "spec.zeta"',
]


# ----------------------------------------------------------------- the parameter itself


@pytest.mark.parametrize(
    ("method", "path", "ctype", "kind"),
    [
        ("POST", CONFIGMAPS, "application/json", "CreateOptions"),
        ("PUT", CONFIGMAPS + "/cm", "application/json", "UpdateOptions"),
        ("PATCH", CONFIGMAPS + "/cm", MERGE, "PatchOptions"),
    ],
)
async def test_unknown_directive_is_refused(
    api: Api, method: str, path: str, ctype: str, kind: str
) -> None:
    r = await send(api, method, path, configmap("cm"), content_type=ctype, validation="Loud")
    assert r.status == 422
    assert r.message == (
        f'{kind}.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": '
        'supported values: "", "Ignore", "Strict", "Warn"'
    )
    assert r.body["details"] == {
        "group": "meta.k8s.io",
        "kind": kind,
        "causes": [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"',
                "field": "fieldValidation",
            }
        ],
    }


# ----------------------------------------------------------------- custom resources


@pytest.mark.parametrize("validation", [None, "Strict", "Warn", "Ignore"])
async def test_custom_resource_create(api: Api, validation: str | None) -> None:
    await install_crds(api)
    r = await send(api, "POST", WIDGETS, WIDGET_BAD.replace(b"NAME", b"w1"), validation=validation)
    if validation == "Strict":
        assert r.status == 400
        assert r.body["reason"] == "BadRequest"
        assert r.message == (
            'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
            + ", ".join(WIDGET_PROBLEMS)
        )
        assert r.warnings == []
        return
    assert r.status == 201, r.body
    expected = [] if validation == "Ignore" else [header(p) for p in WIDGET_PROBLEMS]
    assert r.warnings == expected
    assert r.body["spec"] == {"size": 2, "ports": [{"port": 80}], "extra": {"anything": 1}}
    assert "bogus" not in r.body["metadata"]


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_custom_resource_update(api: Api, validation: str) -> None:
    await install_crds(api)
    created = await send(api, "POST", WIDGETS, widget("w1", size=1))
    assert created.status == 201
    r = await send(
        api, "PUT", WIDGETS + "/w1", WIDGET_BAD.replace(b"NAME", b"w1"), validation=validation
    )
    if validation == "Strict":
        assert r.status == 400
        assert r.message.endswith("strict decoding error: " + ", ".join(WIDGET_PROBLEMS))
        return
    assert r.status == 200, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(p) for p in WIDGET_PROBLEMS])
    assert r.body["spec"]["size"] == 2 and "zeta" not in r.body["spec"]


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_custom_resource_merge_patch(api: Api, validation: str) -> None:
    await install_crds(api)
    assert (await send(api, "POST", WIDGETS, widget("w1", size=1))).status == 201
    patch = b'{"spec":{"size":3,"size":4,"zeta":1}}'
    r = await send(api, "PATCH", WIDGETS + "/w1", patch, content_type=MERGE, validation=validation)
    problems = ['duplicate field "spec.size"', 'unknown field "spec.zeta"']
    if validation == "Strict":
        assert r.status == 422
        assert r.body["reason"] == "Invalid"
        assert r.message.startswith(' "" is invalid: patch: Invalid value: "{')
        assert r.message.endswith('": strict decoding error: ' + ", ".join(problems))
        cause = r.body["details"]["causes"][0]
        assert cause["field"] == "patch" and cause["reason"] == "FieldValueInvalid"
        assert '\\"zeta\\":1' in cause["message"]
        return
    assert r.status == 200, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(p) for p in problems])
    assert r.body["spec"] == {"size": 4}


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_custom_resource_json_patch(api: Api, validation: str) -> None:
    await install_crds(api)
    assert (await send(api, "POST", WIDGETS, widget("w1", size=1))).status == 201
    ops = (
        b'[{"op":"add","path":"/spec/zeta","value":1,"foo":"bar"},'
        b'{"op":"add","path":"/spec/x","path":"/spec/alpha","value":2}]'
    )
    r = await send(
        api, "PATCH", WIDGETS + "/w1", ops, content_type=JSON_PATCH, validation=validation
    )
    problems = [
        'json patch unknown field "[0].foo"',
        'json patch duplicate field "[1].path"',
        'unknown field "spec.alpha"',
        'unknown field "spec.zeta"',
    ]
    if validation == "Strict":
        assert r.status == 422
        assert r.message.endswith("strict decoding error: " + ", ".join(problems))
        return
    assert r.status == 200, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(p) for p in problems])
    assert r.body["spec"] == {"size": 1}


async def test_custom_resource_strategic_merge_patch_is_unsupported(api: Api) -> None:
    """Custom resources take no strategic merge patch; the directive does not change that."""
    await install_crds(api)
    assert (await send(api, "POST", WIDGETS, widget("w1", size=1))).status == 201
    r = await send(
        api,
        "PATCH",
        WIDGETS + "/w1",
        {"spec": {"zeta": 1}},
        content_type=STRATEGIC,
        validation="Strict",
    )
    assert r.status == 415


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_custom_resource_apply_refuses_undeclared_fields(api: Api, validation: str) -> None:
    """The field manager refuses undeclared fields whatever the directive (a reasonless 500)."""
    await install_crds(api)
    body = orjson.dumps(widget("w1", size=1, zeta=True))
    r = await send(
        api,
        "PATCH",
        WIDGETS + "/w1",
        body,
        content_type=APPLY,
        validation=validation,
        params={"fieldManager": "test"},
    )
    assert r.status == 500
    assert "reason" not in r.body
    assert r.message == (
        "failed to create typed patch object (/w1; example.com/v1, Kind=Widget): "
        ".spec.zeta: field not declared in schema"
    )


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_custom_resource_apply_duplicate_keys(api: Api, validation: str) -> None:
    await install_crds(api)
    body = b"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 1\n  size: 2\n"
    r = await send(
        api,
        "PATCH",
        WIDGETS + "/w1",
        body,
        content_type=APPLY,
        validation=validation,
        params={"fieldManager": "test"},
    )
    if validation == "Strict":
        assert r.status == 400
        assert r.message == (
            "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n"
            '  line 7: key "size" already set in map'
        )
        return
    assert r.status in (200, 201), r.body
    expected = [] if validation == "Ignore" else [header('line 7: key "size" already set in map')]
    assert r.warnings == expected


@pytest.mark.parametrize("validation", [None, "Strict", "Warn", "Ignore"])
async def test_nodegroup_with_a_misspelt_field(api: Api, validation: str | None) -> None:
    await install_crds(api)
    body = nodegroup("ng1", maxFailedCycleNodeRequets=1)
    r = await send(api, "POST", NODEGROUPS, body, validation=validation)
    problem = 'unknown field "spec.maxFailedCycleNodeRequets"'
    if validation == "Strict":
        assert r.status == 400
        assert r.message == (
            'NodeGroup in version "v1alpha1" cannot be handled as a NodeGroup: strict decoding '
            f"error: {problem}"
        )
        return
    assert r.status == 201, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(problem)])
    assert "maxFailedCycleNodeRequets" not in r.body["spec"]
    # Update and patch judge the same field the same way.
    body["metadata"]["resourceVersion"] = r.body["metadata"]["resourceVersion"]
    put = await send(api, "PUT", NODEGROUPS + "/ng1", body, validation="Strict")
    assert put.status == 400 and put.message.endswith(problem)
    patched = await send(
        api,
        "PATCH",
        NODEGROUPS + "/ng1",
        {"spec": {"maxFailedCycleNodeRequets": 2}},
        content_type=MERGE,
        validation="Warn",
    )
    assert patched.status == 200 and patched.warnings == [header(problem)]


# ----------------------------------------------------------------- built-in kinds

POD_BAD = (
    b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","labels":{"a":"1","a":"2"}},'
    b'"spec":{"bogus":1,"bogus":2,"restartPolicy":"Always","restartPolicy":"Never",'
    b'"containers":[{"name":"c","image":"nginx","imagePolicy":"x"}]}}'
)
POD_PROBLEMS = [
    'duplicate field "metadata.labels.a"',
    'unknown field "spec.bogus"',
    'duplicate field "spec.restartPolicy"',
    'unknown field "spec.containers[0].imagePolicy"',
]


@pytest.mark.parametrize("validation", [None, "Strict", "Warn", "Ignore"])
async def test_pod_create(api: Api, validation: str | None) -> None:
    r = await send(api, "POST", PODS, POD_BAD, validation=validation)
    if validation == "Strict":
        assert r.status == 400
        assert r.message == (
            'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
            + ", ".join(POD_PROBLEMS)
        )
        return
    assert r.status == 201, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(p) for p in POD_PROBLEMS])
    assert "bogus" not in r.body["spec"]
    assert "imagePolicy" not in r.body["spec"]["containers"][0]
    assert r.body["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_configmap_update(api: Api, validation: str) -> None:
    assert (await send(api, "POST", CONFIGMAPS, configmap("cm", data={"a": "1"}))).status == 201
    body = configmap("cm", data={"a": "2"}, extra={"x": 1})
    r = await send(api, "PUT", CONFIGMAPS + "/cm", body, validation=validation)
    if validation == "Strict":
        assert r.status == 400
        assert r.message == (
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
            'unknown field "extra"'
        )
        return
    assert r.status == 200
    assert r.warnings == ([] if validation == "Ignore" else [header('unknown field "extra"')])
    assert "extra" not in r.body and r.body["data"] == {"a": "2"}


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_node_merge_patch(api: Api, validation: str) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert (await send(api, "POST", NODES, node)).status == 201
    patch = b'{"spec":{"unschedulable":true,"unschedulable":false,"zzz":1,"taints":[{"key":"k","effect":"NoSchedule","oops":1}]}}'
    r = await send(api, "PATCH", NODES + "/n1", patch, content_type=MERGE, validation=validation)
    problems = [
        'duplicate field "spec.unschedulable"',
        'unknown field "spec.taints[0].oops"',
        'unknown field "spec.zzz"',
    ]
    if validation == "Strict":
        assert r.status == 422
        assert r.message.startswith(' "" is invalid: patch: Invalid value: "{\\"apiVersion\\"')
        assert r.message.endswith("strict decoding error: " + ", ".join(problems))
        return
    assert r.status == 200, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(p) for p in problems])
    assert r.body["spec"] == {
        "unschedulable": False,
        "taints": [{"key": "k", "effect": "NoSchedule"}],
    }


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_status_subresource_writes(api: Api, validation: str) -> None:
    """A write to /status is decoded as strictly as one to the object: kubelets and
    controllers that misspell a status field hear of it."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert (await send(api, "POST", NODES, node)).status == 201
    patch = b'{"status":{"phase":"Running","capacityy":{"cpu":"2"}}}'
    r = await send(
        api, "PATCH", NODES + "/n1/status", patch, content_type=MERGE, validation=validation
    )
    if validation == "Strict":
        assert r.status == 422
        assert r.message.endswith('strict decoding error: unknown field "status.capacityy"')
    else:
        assert r.status == 200, r.body
        expected = [] if validation == "Ignore" else [header('unknown field "status.capacityy"')]
        assert r.warnings == expected
        assert "capacityy" not in r.body["status"]
    current = (await send(api, "GET", NODES + "/n1", b"", content_type="")).body
    current.setdefault("status", {})["bogus"] = 1
    r = await send(api, "PUT", NODES + "/n1/status", current, validation=validation)
    if validation == "Strict":
        assert r.status == 400
        assert r.message == (
            'Node in version "v1" cannot be handled as a Node: '
            'strict decoding error: unknown field "status.bogus"'
        )
    else:
        assert r.status == 200, r.body
        expected = [] if validation == "Ignore" else [header('unknown field "status.bogus"')]
        assert r.warnings == expected


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_pod_strategic_merge_patch(api: Api, validation: str) -> None:
    created = await send(
        api,
        "POST",
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p1"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
    )
    assert created.status == 201
    patch = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "imag": "x"}]},
    }
    r = await send(api, "PATCH", PODS + "/p1", patch, content_type=STRATEGIC, validation=validation)
    problem = 'unknown field "spec.containers[0].imag"'
    if validation == "Strict":
        assert r.status == 422
        assert r.message == (
            ' "" is invalid: patch: Invalid value: "map[metadata:map[labels:map[a:b]] '
            'spec:map[containers:[map[imag:x name:c]]]]": strict decoding error: ' + problem
        )
        return
    assert r.status == 200, r.body
    assert r.warnings == ([] if validation == "Ignore" else [header(problem)])
    assert r.body["metadata"]["labels"] == {"a": "b"}
    assert "imag" not in r.body["spec"]["containers"][0]


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_configmap_json_patch(api: Api, validation: str) -> None:
    assert (await send(api, "POST", CONFIGMAPS, configmap("cm"))).status == 201
    ops = [{"op": "add", "path": "/dataa", "value": {"a": "1"}}]
    r = await send(
        api, "PATCH", CONFIGMAPS + "/cm", ops, content_type=JSON_PATCH, validation=validation
    )
    if validation == "Strict":
        assert r.status == 422
        assert r.message.endswith('strict decoding error: unknown field "dataa"')
        return
    assert r.status == 200
    assert r.warnings == ([] if validation == "Ignore" else [header('unknown field "dataa"')])
    assert "dataa" not in r.body


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
async def test_configmap_apply(api: Api, validation: str) -> None:
    body = orjson.dumps(
        {**configmap("cm"), "metadata": {"name": "cm", "namespace": "default"}, "dataa": {"a": "1"}}
    )
    r = await send(
        api,
        "PATCH",
        CONFIGMAPS + "/cm",
        body,
        content_type=APPLY,
        validation=validation,
        params={"fieldManager": "test"},
    )
    assert r.status == 500
    assert r.message == (
        "failed to create typed patch object (default/cm; /v1, Kind=ConfigMap): "
        ".dataa: field not declared in schema"
    )
    good = orjson.dumps(configmap("cm", data={"a": "1"}))
    ok = await send(
        api,
        "PATCH",
        CONFIGMAPS + "/cm",
        good,
        content_type=APPLY,
        validation=validation,
        params={"fieldManager": "test"},
    )
    assert ok.status in (200, 201) and ok.warnings == []


async def test_clean_writes_carry_no_warnings(api: Api) -> None:
    """What the operator and the simulator's loops send (no parameter: Warn) passes silently."""
    r = await send(
        api,
        "POST",
        PODS,
        POD_BAD.replace(b',"imagePolicy":"x"', b"")
        .replace(b'"bogus":1,"bogus":2,', b"")
        .replace(b'"a":"1",', b"")
        .replace(b'"restartPolicy":"Always",', b""),
    )
    assert r.status == 201 and r.warnings == []


# ----------------------------------------------------------------- kubectl


NODEGROUP_YAML = """\
apiVersion: nodeops.dev/v1alpha1
kind: NodeGroup
metadata:
  name: ng1
spec:
  nodeGroupName: ng
  nodeSelector:
    matchLabels:
      pool: a
  cycleSettings:
    method: Drain
  maxFailedCycleNodeRequets: 1
"""


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_refuses_and_warns(api: Api, server: SimServer, tmp_path: Path) -> None:
    """kubectl sends fieldValidation itself: Strict by default, Warn with --validate=warn."""
    await install_crds(api)
    config = server.write_kubeconfig(tmp_path / "kubeconfig")
    code, _, err = await kubectl(config, "apply", "-f", "-", stdin=NODEGROUP_YAML)
    assert code != 0
    assert (
        'Error from server (BadRequest): error when creating "STDIN": NodeGroup in version '
        '"v1alpha1" cannot be handled as a NodeGroup: strict decoding error: unknown field '
        '"spec.maxFailedCycleNodeRequets"'
    ) in err
    code, out, err = await kubectl(
        config, "create", "--validate=warn", "-f", "-", stdin=NODEGROUP_YAML
    )
    assert code == 0, err
    assert 'Warning: unknown field "spec.maxFailedCycleNodeRequets"' in err
    assert "nodegroup.nodeops.dev/ng1 created" in out
