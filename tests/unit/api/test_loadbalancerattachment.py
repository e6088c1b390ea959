"""LoadBalancerAttachment: what is refused and how, and what the generated CRD says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeops.api import InvalidResource, LoadBalancerAttachment, crd_for
from nodeops.api.loadbalancerattachment import parse
from nodeops.sim.server.schema import prune, validate
from tests.unit.api.structural import structural_problems

ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/0123456789abcdef"


def record(spec: Any, name: str = "ip-10-0-0-1.ec2.internal", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "LoadBalancerAttachment",
        "metadata": {"name": name, "namespace": "nodeops-system"},
        "spec": spec,
        **extra,
    }


NODE = "ip-10-0-0-1.ec2.internal"


def test_a_full_record_parses_and_round_trips() -> None:
    obj = record(
        {
            "nodeName": NODE,
            "targets": [
                {"type": "classic", "name": "web-clb", "source": "Discovered"},
                {"type": "target-group", "name": ARN, "port": 30080, "source": "Discovered"},
                {"type": "target-group", "name": ARN, "port": 30443},
            ],
        }
    )
    parsed = parse(obj)
    assert [t.key for t in parsed.spec.targets] == [
        ("classic", "web-clb", None),
        ("target-group", ARN, 30080),
        ("target-group", ARN, 30443),
    ]
    # A hand-written target is static unless it says otherwise.
    assert parsed.spec.targets[2].source == "Static"
    assert parsed.to_dict()["spec"]["targets"][0] == {
        "type": "classic",
        "name": "web-clb",
        "source": "Discovered",
    }


def test_the_status_never_makes_the_object_invalid() -> None:
    # The status is the operator's own, written as a dict; a field a newer version adds must
    # not make an older one refuse the object.
    obj = record({"nodeName": NODE}, status={"phase": "Detached", "somethingNew": 1})
    assert parse(obj).status is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "spec.nodeName: Required value"),
        (
            {"nodeName": "another-node"},
            "spec.nodeName: must equal metadata.name",
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "Classic", "name": "x"}]},
            "spec.targets[0].type: Invalid value: \"Classic\": must match '^[a-z][a-z0-9-]*$'",
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "classic", "name": ""}]},
            'spec.targets[0].name: Invalid value: "": must be at least 1 characters long',
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "target-group", "name": ARN, "port": 0}]},
            "spec.targets[0].port: Invalid value: 0: must be greater than or equal to 1",
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "target-group", "name": ARN, "port": "80"}]},
            'spec.targets[0].port: Invalid value: "string": must be of type integer',
        ),
        (
            {
                "nodeName": NODE,
                "targets": [
                    {"type": "classic", "name": "a"},
                    {"type": "classic", "name": "b"},
                    {"type": "classic", "name": "a", "source": "Discovered"},
                ],
            },
            "spec.targets[2]: Duplicate value: same as spec.targets[0]",
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "classic", "name": "a", "source": "Found"}]},
            'spec.targets[0].source: Unsupported value: "Found": supported values: '
            '"Static", "Discovered"',
        ),
        (
            {"nodeName": NODE, "targets": [{"type": "classic", "name": "a", "zone": "b"}]},
            "spec.targets[0].zone: unknown field",
        ),
    ],
)
def test_invalid_records_name_the_field(spec: Any, message: str) -> None:
    with pytest.raises(InvalidResource) as caught:
        parse(record(spec))
    assert str(caught.value) == message


def _schema() -> dict[str, Any]:
    crd = crd_for(LoadBalancerAttachment)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd() -> None:
    crd = crd_for(LoadBalancerAttachment)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "loadbalancerattachments.nodeops.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["lba"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Node",
        "Phase",
        "Reason",
        "Detached",
        "Age",
    ]
    root = _schema()
    assert structural_problems(root) == []
    targets = root["properties"]["spec"]["properties"]["targets"]
    assert targets["x-kubernetes-list-type"] == "atomic"
    assert targets["items"]["required"] == ["type", "name"]
    status = root["properties"]["status"]["properties"]
    assert status["targets"]["items"]["properties"]["state"]["enum"] == [
        "Registered",
        "Deregistering",
        "Draining",
        "Deregistered",
        "Registering",
        "NotRegistered",
    ]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_the_server_keeps_what_the_model_and_the_detacher_write() -> None:
    obj = record(
        {
            "nodeName": NODE,
            "targets": [{"type": "target-group", "name": ARN, "port": 30080, "source": "Static"}],
        },
        status={
            "phase": "Detached",
            "reason": "Unschedulable",
            "instanceId": "i-0123456789abcdef0",
            "detachedAt": "2024-05-01T10:00:00Z",
            "observedGeneration": 1,
            "targets": [
                {
                    "type": "target-group",
                    "name": ARN,
                    "port": 30080,
                    "state": "Deregistered",
                    "deregisteredAt": "2024-05-01T09:59:00Z",
                }
            ],
        },
    )
    parse(obj)
    schema = _schema()
    stored = prune(copy.deepcopy(obj), schema, top=True)
    assert stored == obj
    assert validate(stored, schema) == []
