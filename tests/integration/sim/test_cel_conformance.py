"""CRD validation rules (x-kubernetes-validations) over HTTP, answered as kube-apiserver does."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.api.crd import all_crds
from nodeops.sim.serve import SimCluster, SimOptions
from tests.integration.sim.conftest import Api
from tests.kubectl import kubectl

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# Every rule of nodeops's own CRDs, with the part of a valid spec that passes it, one that breaks
# it, and the path of the node it sits on in that object. A new rule fails
# test_every_rule_is_covered until it is added here.
RULE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "has(self.schedule) == has(self.duration)": (
        {"budgets": [{"nodes": 1, "schedule": "0 9 * * 1-5", "duration": "8h"}]},
        {"budgets": [{"nodes": 1}, {"nodes": 2, "schedule": "0 9 * * 1-5"}]},
        "spec.budgets[1]",
    ),
    "self.behavior == 'Drain' || !has(self.order)": (
        {"drain": {"behavior": "Drain", "order": 3}},
        {"drain": {"behavior": "Skip", "order": 3}},
        "spec.drain",
    ),
    "!has(self.cyclingTimeout) || self.cyclingTimeout >= duration('0s')": (
        {"cycleSettings": {"method": "Drain", "cyclingTimeout": "5m"}},
        {"cycleSettings": {"method": "Drain", "cyclingTimeout": "-5m"}},
        "spec.cycleSettings.cyclingTimeout",
    ),
    "(has(self.nodeGroupName) && self.nodeGroupName != '') || "
    "(has(self.nodeGroupsList) && size(self.nodeGroupsList) > 0)": (
        {"nodeGroupName": "", "nodeGroupsList": ["workers-a"]},
        {"nodeGroupName": "", "nodeGroupsList": []},
        "spec.nodeGroupName",
    ),
}

BASE_SPECS: dict[str, dict[str, Any]] = {
    "CycleNodeRequest": {
        "nodeGroupName": "workers-a",
        "selector": {},
        "cycleSettings": {"method": "Drain"},
    },
    "CycleNodeStatus": {"nodeName": "n1", "cycleSettings": {"method": "Drain"}},
    "NodeGroup": {
        "nodeGroupName": "workers-a",
        "nodeSelector": {},
        "cycleSettings": {"method": "Drain"},
    },
    "NodeDrainRule": {"drain": {"behavior": "Drain"}},
}

# How kube words a rule's failure, by the rule's `reason` (field.Invalid when none is set).
REASON_TEXTS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
}


def _rules(
    node: Any, found: list[tuple[str, str, str]], where: str = ""
) -> list[tuple[str, str, str]]:
    if isinstance(node, dict):
        for rule in node.get("x-kubernetes-validations") or []:
            found.append(
                (rule["rule"], rule.get("message", ""), rule.get("reason", "FieldValueInvalid"))
            )
        for key, value in node.items():
            _rules(value, found, f"{where}/{key}")
    elif isinstance(node, list):
        for value in node:
            _rules(value, found, where)
    return found


def _own_rules() -> list[tuple[dict[str, Any], str, str, str]]:
    out = []
    for crd in all_crds():
        for rule, message, reason in _rules(crd["spec"]["versions"][0]["schema"], []):
            out.append((crd, rule, message, reason))
    return out


def _path(crd: dict[str, Any], ns: str = "default") -> str:
    spec = crd["spec"]
    version = spec["versions"][0]["name"]
    scope = f"/namespaces/{ns}" if spec["scope"] == "Namespaced" else ""
    return f"/apis/{spec['group']}/{version}{scope}/{spec['names']['plural']}"


def _object(crd: dict[str, Any], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    kind = crd["spec"]["names"]["kind"]
    body = copy.deepcopy(BASE_SPECS[kind])
    body.update(copy.deepcopy(spec))
    return {
        "apiVersion": f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": body,
    }


def test_every_rule_is_covered() -> None:
    rules = {rule for _, rule, _, _ in _own_rules()}
    assert rules, "nodeops's CRDs carry no rules any more"
    assert rules <= set(RULE_CASES), rules - set(RULE_CASES)


async def test_nodeops_rules_pass_and_fail_with_their_messages(api: Api) -> None:
    created: set[str] = set()
    for i, (crd, rule, message, reason) in enumerate(_own_rules()):
        if crd["metadata"]["name"] not in created:
            status, body = await api.post(CRDS, crd)
            assert status == 201, body
            created.add(crd["metadata"]["name"])
        good, bad, field = RULE_CASES[rule]
        kind = crd["spec"]["names"]["kind"]
        status, body = await api.post(_path(crd), _object(crd, f"good-{i}", good))
        assert status == 201, (rule, body)
        status, body = await api.post(_path(crd), _object(crd, f"bad-{i}", bad))
        assert status == 422, (rule, body)
        assert body["reason"] == "Invalid"
        text = f"{REASON_TEXTS[reason]}: {message}"
        assert body["message"] == (
            f'{kind}.{crd["spec"]["group"]} "bad-{i}" is invalid: {field}: {text}'
        )
        assert body["details"]["causes"] == [{"reason": reason, "message": text, "field": field}]
        # The same rule holds on update, patch and server-side apply.
        path = f"{_path(crd)}/good-{i}"
        status, current = await api.get(path)
        broken = copy.deepcopy(current)
        broken["spec"].update(copy.deepcopy(bad))
        status, body = await api.put(path, broken)
        assert status == 422, (rule, body)
        assert body["details"]["causes"][0]["field"] == field
        status, body = await api.patch(path, {"spec": bad})
        assert status == 422, (rule, body)
        status, body = await api.call(
            "PATCH",
            path,
            _object(crd, f"good-{i}", bad),
            content_type="application/apply-patch+yaml",
            params={"fieldManager": "test"},
        )
        assert status == 422, (rule, body)
        assert body["details"]["causes"][0]["message"] == text


TEST_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "gadgets",
            "singular": "gadget",
            "kind": "Gadget",
            "listKind": "GadgetList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.replicas <= self.maxReplicas",
                                        "messageExpression": "'replicas ' + string(self.replicas) + ' above ' + string(self.maxReplicas)",
                                    },
                                    {
                                        "rule": "self.name.startsWith('g-')",
                                        "fieldPath": ".name",
                                        "reason": "FieldValueForbidden",
                                        "message": "must start with g-",
                                    },
                                    {"rule": "size(self.tags) <= 2"},
                                    {
                                        "rule": "self.tags.all(t, t.lowerAscii() == t)",
                                        "reason": "FieldValueRequired",
                                        "message": "tags are lower case",
                                    },
                                ],
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "maxReplicas": {"type": "integer"},
                                    "name": {"type": "string"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                    "class": {
                                        "type": "string",
                                        "x-kubernetes-validations": [
                                            {"rule": "self == oldSelf", "message": "is immutable"}
                                        ],
                                    },
                                    "size": {
                                        "type": "integer",
                                        "x-kubernetes-validations": [
                                            {"rule": "self % 2 == 0", "message": "must be even"}
                                        ],
                                    },
                                    "grow": {
                                        "type": "integer",
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "!oldSelf.hasValue() || self >= oldSelf.value()",
                                                "optionalOldSelf": True,
                                                "message": "may only grow",
                                            }
                                        ],
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {
                                        "type": "string",
                                        "x-kubernetes-validations": [
                                            {"rule": "self in ['Pending', 'Ready']"}
                                        ],
                                    }
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}
GADGETS = "/apis/example.com/v1/namespaces/default/gadgets"


def gadget(obj_name: str, **spec: Any) -> dict[str, Any]:
    base = {
        "replicas": 1,
        "maxReplicas": 3,
        "name": "g-one",
        "tags": ["a"],
        "class": "x",
        "size": 2,
    }
    base.update(spec)
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": obj_name},
        "spec": base,
    }


async def test_message_expression_field_path_and_reason(api: Api) -> None:
    status, body = await api.post(CRDS, TEST_CRD)
    assert status == 201, body
    status, body = await api.post(
        GADGETS, gadget("g1", replicas=5, name="bad", tags=["a", "B", "c"], size=3)
    )
    assert status == 422, body
    causes = body["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: replicas 5 above 3",
            "field": "spec",
        },
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: must start with g-",
            "field": "spec.name",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: failed rule: size(self.tags) <= 2",
            "field": "spec",
        },
        {
            "reason": "FieldValueRequired",
            "message": "Required value: tags are lower case",
            "field": "spec",
        },
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 3: must be even",
            "field": "spec.size",
        },
    ]
    assert body["message"] == (
        'Gadget.example.com "g1" is invalid: [spec: Invalid value: replicas 5 above 3, '
        "spec.name: Forbidden: must start with g-, spec: Invalid value: failed rule: "
        "size(self.tags) <= 2, spec: Required value: tags are lower case, "
        "spec.size: Invalid value: 3: must be even]"
    )


async def test_transition_rules_run_on_update_only(api: Api) -> None:
    await api.post(CRDS, TEST_CRD)
    # No old object on create: `self == oldSelf` does not run; optionalOldSelf runs with none.
    status, body = await api.post(GADGETS, gadget("g2", grow=5))
    assert status == 201, body
    status, body = await api.patch(f"{GADGETS}/g2", {"spec": {"class": "y"}})
    assert status == 422, body
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "y": is immutable',
            "field": "spec.class",
        }
    ]
    status, body = await api.patch(f"{GADGETS}/g2", {"spec": {"grow": 4}})
    assert status == 422, body
    assert (
        body["message"]
        == 'Gadget.example.com "g2" is invalid: spec.grow: Invalid value: 4: may only grow'
    )
    status, body = await api.patch(f"{GADGETS}/g2", {"spec": {"grow": 6}})
    assert status == 200, body
    # A field that was absent before has no oldSelf: the transition rule does not run.
    status, body = await api.post(GADGETS, gadget("g3"))
    assert status == 201, body
    fresh = {k: v for k, v in gadget("g3")["spec"].items() if k != "class"}
    status, current = await api.get(f"{GADGETS}/g3")
    current["spec"] = fresh
    status, body = await api.put(f"{GADGETS}/g3", current)
    assert status == 200, body
    status, body = await api.patch(f"{GADGETS}/g3", {"spec": {"class": "z"}})
    assert status == 200, body


async def test_ratcheting_lets_unchanged_invalid_values_through(api: Api) -> None:
    crd = copy.deepcopy(TEST_CRD)
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    rules = props["size"]["x-kubernetes-validations"]
    rules.clear()
    await api.post(CRDS, crd)
    status, body = await api.post(GADGETS, gadget("g4", size=3))
    assert status == 201, body
    # The CRD tightens: odd sizes are refused from now on.
    status, current = await api.get(f"{CRDS}/gadgets.example.com")
    schema = current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["size"]["x-kubernetes-validations"] = [
        {"rule": "self % 2 == 0", "message": "must be even"}
    ]
    status, body = await api.put(f"{CRDS}/gadgets.example.com", current)
    assert status == 200, body
    # Unchanged odd size: the update of another field is accepted (ratcheting).
    status, body = await api.patch(f"{GADGETS}/g4", {"spec": {"replicas": 2}})
    assert status == 200, body
    # Changed to another odd size: refused.
    status, body = await api.patch(f"{GADGETS}/g4", {"spec": {"size": 5}})
    assert status == 422, body
    assert body["details"]["causes"][0]["message"] == "Invalid value: 5: must be even"
    # A create has nothing to ratchet against.
    status, body = await api.post(GADGETS, gadget("g5", size=3))
    assert status == 422, body


async def test_status_subresource_rules(api: Api) -> None:
    await api.post(CRDS, TEST_CRD)
    status, obj = await api.post(GADGETS, gadget("g6"))
    assert status == 201, obj
    obj["status"] = {"phase": "Broken"}
    status, body = await api.put(f"{GADGETS}/g6/status", obj)
    assert status == 422, body
    assert body["message"] == (
        'Gadget.example.com "g6" is invalid: status.phase: Invalid value: "Broken": '
        "failed rule: self in ['Pending', 'Ready']"
    )
    status, body = await api.patch(f"{GADGETS}/g6/status", {"status": {"phase": "Ready"}})
    assert status == 200, body
    assert body["status"]["phase"] == "Ready"


async def test_schema_errors_block_rules(api: Api) -> None:
    await api.post(CRDS, TEST_CRD)
    status, body = await api.post(GADGETS, gadget("g7", replicas="many", size=3))
    assert status == 422, body
    fields = [c["field"] for c in body["details"]["causes"]]
    assert fields == ["spec.replicas", ""]
    assert body["details"]["causes"][1]["message"] == (
        'Invalid value: "null": some validation rules were not checked because the object was '
        "invalid; correct the existing errors to complete validation"
    )


async def test_crd_with_a_rule_that_does_not_compile_is_refused(api: Api) -> None:
    crd = copy.deepcopy(TEST_CRD)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["x-kubernetes-validations"] = [
        {"rule": "self.replicas <= self.maximum"},
        {"rule": "self.replicas =="},
        {"rule": "frobnicate(self.name)"},
        {"rule": "self.replicas"},
    ]
    status, body = await api.post(CRDS, crd)
    assert status == 422, body
    base = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations"
    causes = body["details"]["causes"]
    assert [c["field"] for c in causes] == [f"{base}[{i}].rule" for i in range(4)]
    value = (
        'Invalid value: apiextensions.ValidationRule{Rule:"self.replicas <= self.maximum", '
        'Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), '
        'FieldPath:"", OptionalOldSelf:(*bool)(nil)}: '
    )
    assert causes[0]["message"] == value + (
        "compilation failed: ERROR: <input>:1:22: undefined field 'maximum'\n"
        " | self.replicas <= self.maximum\n"
        " | " + "." * 21 + "^"
    )
    assert (
        "compilation failed: ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>'"
        in causes[1]["message"]
    )
    assert (
        "compilation failed: ERROR: <input>:1:11: undeclared reference to 'frobnicate' (in container '')"
        in causes[2]["message"]
    )
    assert causes[3]["message"].endswith(": cel expression must evaluate to a bool")
    assert body["message"].startswith(
        'CustomResourceDefinition.apiextensions.k8s.io "gadgets.example.com" is invalid: ['
        f"{base}[0].rule: {value}compilation failed: ERROR: <input>:1:22: undefined field 'maximum'"
    )


def _machine_crd(spec_properties: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(TEST_CRD)
    crd["metadata"]["name"] = "machines.example.com"
    crd["spec"]["names"] = {
        "plural": "machines",
        "singular": "machine",
        "kind": "Machine",
        "listKind": "MachineList",
    }
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = {
        "spec": {"type": "object", "properties": spec_properties}
    }
    return crd


def _string_with(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", "x-kubernetes-validations": list(rules)}


MACHINE_PROPERTIES: dict[str, Any] = {
    "memory": _string_with(
        {"rule": "quantity(self).isLessThan(quantity('1Gi'))", "message": "must be below 1Gi"}
    ),
    "podCIDR": _string_with(
        {"rule": "cidr('10.0.0.0/8').containsCIDR(self)", "message": "must be inside 10.0.0.0/8"}
    ),
    "address": _string_with({"rule": "ip(self).family() == 4"}),
    "version": _string_with({"rule": "isSemver(self) && semver(self).minor() >= 30"}),
    "hostname": _string_with(
        {
            "rule": "!format.dns1123Label().validate(self).hasValue()",
            "messageExpression": "format.dns1123Label().validate(self).value().join(', ')",
        }
    ),
}
MACHINES = "/apis/example.com/v1/namespaces/default/machines"


def _machine(name: str, **spec: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Machine",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_quantity_cidr_ip_semver_and_format_libraries(api: Api) -> None:
    # A call no overload of the libraries takes refuses the CRD, as kube's checker does.
    rule = "quantity(self).sign() >= 0"
    status, body = await api.post(CRDS, _machine_crd({"memory": _string_with({"rule": rule})}))
    assert status == 422, body
    (cause,) = body["details"]["causes"]
    assert cause["field"] == (
        "spec.validation.openAPIV3Schema.properties[spec].properties[memory]"
        ".x-kubernetes-validations[0].rule"
    )
    assert cause["message"].endswith(
        "compilation failed: ERROR: <input>:1:20: found no matching overload for 'sign' "
        "applied to 'kubernetes.Quantity.()'\n | " + rule + "\n | " + "." * 19 + "^"
    )

    status, body = await api.post(CRDS, _machine_crd(MACHINE_PROPERTIES))
    assert status == 201, body
    good = {
        "memory": "512Mi",
        "podCIDR": "10.244.0.0/16",
        "address": "10.244.1.7",
        "version": "1.31.2",
        "hostname": "node-1",
    }
    status, body = await api.post(MACHINES, _machine("m1", **good))
    assert status == 201, body

    bad = {
        "memory": "2Gi",
        "podCIDR": "192.168.0.0/16",
        "address": "10.244.1.07",
        "version": "v1.31.2",
        "hostname": "Node_1",
    }
    status, body = await api.post(MACHINES, _machine("m2", **bad))
    assert status == 422, body
    causes = {c["field"]: c["message"] for c in body["details"]["causes"]}
    assert causes == {
        "spec.memory": 'Invalid value: "2Gi": must be below 1Gi',
        "spec.podCIDR": 'Invalid value: "192.168.0.0/16": must be inside 10.0.0.0/8',
        "spec.address": 'Invalid value: "string": IP Address "10.244.1.07" parse error during '
        'conversion from string: ParseAddr("10.244.1.07"): IPv4 field has octet with leading '
        "zero evaluating rule: ip(self).family() == 4",
        "spec.version": 'Invalid value: "v1.31.2": failed rule: isSemver(self) && '
        "semver(self).minor() >= 30",
        "spec.hostname": 'Invalid value: "Node_1": a lowercase RFC 1123 label must consist of '
        "lower case alphanumeric characters or '-', and must start and end with an "
        "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    }


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_apply_breaking_a_rule(tmp_path: Path) -> None:
    sim = SimCluster(SimOptions(nodes=1, pods_per_node=0, instant=True, time_scale=1.0))
    await sim.start()
    try:
        kc = sim.server.write_kubeconfig(tmp_path / "kubeconfig")
        crd = next(c for c in all_crds() if c["metadata"]["name"].startswith("cyclenoderequests."))
        code, _, err = await kubectl(kc, "apply", "-f", "-", stdin=yaml.safe_dump(crd))
        assert code == 0, err
        manifest = """
apiVersion: nodeops.dev/v1alpha1
kind: CycleNodeRequest
metadata:
  name: roll
  namespace: default
spec:
  nodeGroupName: workers-a
  selector: {}
  cycleSettings: {method: Drain}
  budgets:
  - nodes: 1
    schedule: "0 9 * * 1-5"
"""
        code, _, err = await kubectl(kc, "apply", "-f", "-", stdin=manifest)
        assert code != 0
        assert (
            'The CycleNodeRequest "roll" is invalid: spec.budgets[0]: Invalid value: '
            "schedule and duration go together"
        ) in err, err
    finally:
        await sim.stop()
