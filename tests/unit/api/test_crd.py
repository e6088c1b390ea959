"""The generated CRDs: structural, faithful to the models, and identical to the committed YAML."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

import pytest
import yaml
from pydantic import BaseModel, Field

from nodeops.api import KINDS, NodeDrainRule, all_crds, crd_for, render_crds_yaml
from nodeops.api.crd import (
    UnsupportedSchema,
    check_crd,
    structural_schema,
)
from nodeops.api.drainrule import NodeDrainRuleSpec
from nodeops.api.meta import ApiModel
from nodeops.api.resource import KindInfo, Resource
from nodeops.sim.server.schema import prune, validate
from tests.unit.api.structural import structural_problems


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND_INFO.kind)
def test_every_crd_is_structural(kind: type[Resource]) -> None:
    assert structural_problems(_schema(crd_for(kind))) == []


def test_the_checker_catches_what_pydantic_emits() -> None:
    # Without conversion, pydantic's schema breaks the rules; the checker must say so.
    problems = structural_problems(NodeDrainRuleSpec.model_json_schema(by_alias=True))
    joined = "\n".join(problems)
    assert "$defs is not a JSONSchemaProps field" in joined
    assert "$ref is not a JSONSchemaProps field" in joined
    assert "anyOf may only add value validations" in joined
    assert "additionalProperties: false is forbidden" in joined
    assert "type is required" in joined


def test_node_drain_rule_crd() -> None:
    crd = crd_for(NodeDrainRule)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"] == {"name": "nodedrainrules.nodeops.dev"}
    spec = crd["spec"]
    assert spec["group"] == "nodeops.dev"
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": "NodeDrainRule",
        "listKind": "NodeDrainRuleList",
        "plural": "nodedrainrules",
        "singular": "nodedrainrule",
        "shortNames": ["ndr"],
        "categories": ["nodeops"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert "subresources" not in version  # a rule has no status
    assert version["additionalPrinterColumns"] == [
        {"name": "Behavior", "type": "string", "jsonPath": ".spec.drain.behavior"},
        {"name": "Order", "type": "integer", "jsonPath": ".spec.drain.order"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def test_node_drain_rule_schema() -> None:
    root = _schema(crd_for(NodeDrainRule))
    assert root["required"] == ["spec"]
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    spec = root["properties"]["spec"]
    assert spec["required"] == ["drain"]
    drain = spec["properties"]["drain"]
    assert drain["required"] == ["behavior"]
    assert drain["properties"]["behavior"]["enum"] == ["Drain", "Skip", "WaitCompleted"]
    order = drain["properties"]["order"]
    assert (order["type"], order["format"]) == ("integer", "int32")
    assert "default" not in order  # a stored default would invalidate Skip rules
    assert drain["x-kubernetes-validations"] == [
        {
            "rule": "self.behavior == 'Drain' || !has(self.order)",
            "message": "order may only be set when behavior is Drain",
        }
    ]
    for name in ("nodes", "pods"):
        entries = spec["properties"][name]
        assert (entries["minItems"], entries["maxItems"]) == (1, 32)
        assert entries["x-kubernetes-list-type"] == "atomic"
        assert entries["items"]["minProperties"] == 1
        assert entries["description"]
    assert spec["properties"]["nodes"]["items"]["required"] == ["selector"]
    pod_entry = spec["properties"]["pods"]["items"]
    assert "required" not in pod_entry
    selector = pod_entry["properties"]["namespaceSelector"]
    assert selector["x-kubernetes-map-type"] == "atomic"
    expr = selector["properties"]["matchExpressions"]["items"]
    assert expr["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
    assert expr["required"] == ["key", "operator"]
    assert selector["properties"]["matchLabels"]["additionalProperties"] == {"type": "string"}


def _descriptions(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            out.append(node["description"])
        for value in node.values():
            out.extend(_descriptions(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(_descriptions(value))
    return out


def test_descriptions_come_from_field_docs() -> None:
    root = _schema(crd_for(NodeDrainRule))
    behavior = root["properties"]["spec"]["properties"]["drain"]["properties"]["behavior"]
    assert behavior["description"].startswith("Drain evicts the pods")
    # Docstring line breaks are not kept: kubectl explain wraps text itself.
    assert all("\n" not in d for d in _descriptions(root))
    for name, prop in root["properties"]["spec"]["properties"].items():
        assert prop.get("description"), name


# --- the schema and the model agree ----------------------------------------------------------

EXAMPLES = [
    {"drain": {"behavior": "Skip"}},
    {
        "drain": {"behavior": "Drain", "order": -3},
        "nodes": [{"selector": {"matchLabels": {"pool": "a"}}}, {"selector": {}}],
        "pods": [
            {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]
                },
                "namespaceSelector": {
                    "matchExpressions": [{"key": "t", "operator": "Exists"}],
                    "matchLabels": {"env": "prod"},
                },
            },
            {"namespaceSelector": {"matchLabels": {"team": "infra"}}},
        ],
    },
]


@pytest.mark.parametrize("spec", EXAMPLES)
def test_the_server_keeps_every_field_the_model_knows(spec: dict[str, Any]) -> None:
    obj = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeDrainRule",
        "metadata": {"name": "r"},
        "spec": spec,
    }
    NodeDrainRule.parse(obj)
    schema = _schema(crd_for(NodeDrainRule))
    stored = prune(copy.deepcopy(obj), schema, top=True)
    assert stored == obj
    body = {"spec": stored["spec"]}
    assert validate(body, {**schema, "properties": {"spec": schema["properties"]["spec"]}}) == []


# --- the conversion --------------------------------------------------------------------------


class _Leaf(ApiModel):
    """A leaf."""

    size: int | str
    """An int-or-string, like a PDB's maxUnavailable."""
    free: dict[str, Any] | None = None
    """Anything at all."""
    mode: Literal["fast"] = "fast"
    ratio: float = Field(default=0.5, gt=0, lt=1)
    tags: set[str] = Field(default_factory=set)


class _Tree(BaseModel):
    children: list[_Tree] = []


def test_conversion_of_special_types() -> None:
    schema = structural_schema(_Leaf.model_json_schema(by_alias=True))
    assert structural_problems(schema) == []
    props = schema["properties"]
    assert props["size"] == {
        "description": "An int-or-string, like a PDB's maxUnavailable.",
        "x-kubernetes-int-or-string": True,
    }
    assert props["free"] == {
        "description": "Anything at all.",
        "type": "object",
        "nullable": True,
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert props["mode"] == {"type": "string", "enum": ["fast"], "default": "fast"}
    assert props["ratio"] == {
        "type": "number",
        "default": 0.5,
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 1,
        "exclusiveMaximum": True,
    }
    assert props["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "x-kubernetes-list-type": "set",
    }
    assert schema["required"] == ["size"]


def test_a_recursive_type_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="recursive type _Tree"):
        structural_schema(_Tree.model_json_schema())


class _GadgetSpec(ApiModel):
    size: int


class _Gadget(Resource):
    KIND_INFO = KindInfo(kind="Gadget", plural="gadgets", scope="Namespaced", has_status=True)

    kind: Literal["Gadget"] = "Gadget"
    spec: _GadgetSpec


def test_an_unmodelled_status_is_preserved_and_served_as_a_subresource() -> None:
    crd = crd_for(_Gadget)
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    assert "additionalPrinterColumns" not in version
    status = _schema(crd)["properties"]["status"]
    assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert crd["spec"]["names"]["categories"] == ["nodeops"]
    assert "shortNames" not in crd["spec"]["names"]
    assert structural_problems(_schema(crd)) == []


def test_rendering_is_stable_and_parses_back() -> None:
    text = render_crds_yaml()
    assert text == render_crds_yaml()
    assert list(yaml.safe_load_all(text)) == all_crds()
    assert "&id" not in text and "*id" not in text  # no YAML anchors
    names = [crd["metadata"]["name"] for crd in all_crds()]
    assert names == sorted(names)


def test_generated_crds_share_no_mutable_parts() -> None:
    root = _schema(crd_for(NodeDrainRule))
    pods = root["properties"]["spec"]["properties"]["pods"]["items"]["properties"]
    one = pods["selector"]["properties"]["matchExpressions"]["items"]
    two = pods["namespaceSelector"]["properties"]["matchExpressions"]["items"]
    assert one == two
    assert one["required"] is not two["required"]
    assert one["properties"]["operator"]["enum"] is not two["properties"]["operator"]["enum"]


class _BoundedSpec(ApiModel):
    any_int64: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] = 0
    count: Annotated[int, Field(ge=0, le=2**63 - 1, json_schema_extra={"format": "int64"})] = 0
    port: Annotated[int, Field(ge=1, le=65535, json_schema_extra={"format": "int32"})] = 80


class _Bounded(Resource):
    KIND_INFO = KindInfo(kind="Bounded", plural="boundeds", scope="Namespaced")

    kind: Literal["Bounded"] = "Bounded"
    spec: _BoundedSpec


def test_int64_range_bounds_are_left_to_the_type() -> None:
    """kube-apiserver reads a boundary as a float64, so 2**63 - 1 becomes 2**63 and the CRD is
    refused ("Maximum boundary value must be of type integer with format int64")."""
    props = _schema(crd_for(_Bounded))["properties"]["spec"]["properties"]
    assert props["anyInt64"] == {"type": "integer", "default": 0}
    assert props["count"] == {"type": "integer", "format": "int64", "default": 0, "minimum": 0}
    assert props["port"]["minimum"] == 1 and props["port"]["maximum"] == 65535


def test_every_generated_bound_and_default_is_one_kube_apiserver_accepts() -> None:
    for crd in all_crds():
        check_crd(crd)
        text = yaml.safe_dump(crd)
        assert "9223372036854775807" not in text and "-9223372036854775808" not in text


class _UnholdableSpec(ApiModel):
    near_max: Annotated[int, Field(le=2**63 - 2)] = 0


class _Unholdable(Resource):
    KIND_INFO = KindInfo(kind="Unholdable", plural="unholdables", scope="Namespaced")

    kind: Literal["Unholdable"] = "Unholdable"
    spec: _UnholdableSpec


def test_a_bound_the_format_cannot_hold_fails_generation() -> None:
    with pytest.raises(UnsupportedSchema, match=r"properties\[nearMax\]\.maximum"):
        crd_for(_Unholdable)


@pytest.mark.parametrize(
    ("node", "default", "problem"),
    [
        ({"type": "integer", "minimum": 1}, 0, "below the minimum 1"),
        ({"type": "string", "enum": ["a"]}, "b", "not one of"),
        ({"type": "integer"}, "1", "not of type integer"),
        ({"type": "string", "pattern": "^x"}, "y", "does not match"),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, {"b": "1"}, "pruned"),
        (
            {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
            {},
            "a is required",
        ),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 1}, [1, 2], "items"),
    ],
)
def test_a_default_its_schema_refuses_fails_generation(
    node: dict[str, Any], default: Any, problem: str
) -> None:
    crd = crd_for(_Gadget)
    spec = _schema(crd)["properties"]["spec"]
    spec["properties"]["size"] = {**node, "default": default}
    with pytest.raises(UnsupportedSchema, match=r"properties\[size\]\.default: .*" + problem):
        check_crd(crd)
