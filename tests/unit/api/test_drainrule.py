"""NodeDrainRule: which manifests are refused and how, and which nodes and pods a rule selects."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from nodeops.api import InvalidResource, NodeDrainRule
from nodeops.api.drainrule import NodeDrainRuleSpec, parse


def rule(spec: Any, name: str = "r", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeDrainRule",
        "metadata": {"name": name},
        "spec": spec,
        **extra,
    }


DRAIN = {"behavior": "Drain"}
KEY_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

VALID = [
    pytest.param({"drain": {"behavior": "Skip"}}, id="skip-everything"),
    pytest.param({"drain": {"behavior": "WaitCompleted"}}, id="wait-completed"),
    pytest.param({"drain": {"behavior": "Drain", "order": -5}}, id="negative-order"),
    pytest.param({"drain": {"behavior": "Drain", "order": 2**31 - 1}}, id="max-int32"),
    pytest.param({"drain": {"behavior": "Drain", "order": None}}, id="null-order"),
    pytest.param({"drain": DRAIN, "nodes": [{"selector": {}}]}, id="empty-node-selector"),
    pytest.param(
        {
            "drain": {"behavior": "Drain", "order": 100},
            "nodes": [
                {"selector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}},
                {
                    "selector": {
                        "matchExpressions": [
                            {"key": "pool", "operator": "In", "values": ["a", "b"]},
                            {"key": "spot", "operator": "DoesNotExist"},
                        ]
                    }
                },
            ],
            "pods": [
                {"selector": {"matchLabels": {"app": "db"}}},
                {"namespaceSelector": {"matchLabels": {"team": "infra"}}},
                {
                    "selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": "env", "operator": "NotIn", "values": ["dev"]},
                        ]
                    },
                },
            ],
        },
        id="full",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchLabels": {"a": str(i)}}} for i in range(32)]},
        id="32-pod-entries",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "Exists", "values": []}
        ]}}]},
        id="exists-with-empty-values",
    ),
]  # fmt: skip


@pytest.mark.parametrize("spec", VALID)
def test_valid_rules_parse(spec: dict[str, Any]) -> None:
    parsed = parse(rule(spec))
    assert isinstance(parsed, NodeDrainRule)
    assert parsed.name == "r"


INVALID = [
    pytest.param(
        {"drain": {"behavior": "Skip", "order": 1}},
        "spec.drain.order",
        "may only be set when spec.drain.behavior is Drain",
        id="order-with-skip",
    ),
    pytest.param(
        {"drain": {"behavior": "WaitCompleted", "order": 0}},
        "spec.drain.order",
        "may only be set when spec.drain.behavior is Drain",
        id="order-zero-with-wait-completed",
    ),
    pytest.param({"drain": {}}, "spec.drain.behavior", "Required value", id="no-behavior"),
    pytest.param({}, "spec.drain", "Required value", id="no-drain"),
    pytest.param(
        {"drain": {"behavior": "drain"}},
        "spec.drain.behavior",
        'Unsupported value: "drain": supported values: "Drain", "Skip", "WaitCompleted"',
        id="behavior-case",
    ),
    pytest.param(
        {"drain": {"behavior": "Drain", "order": "5"}},
        "spec.drain.order",
        'Invalid value: "string": must be of type integer',
        id="order-string",
    ),
    pytest.param(
        {"drain": {"behavior": "Drain", "order": 1.5}},
        "spec.drain.order",
        'Invalid value: "number": must be of type integer',
        id="order-float",
    ),
    pytest.param(
        {"drain": {"behavior": "Drain", "order": 2**31}},
        "spec.drain.order",
        "Invalid value: 2147483648: must be less than or equal to 2147483647",
        id="order-overflows-int32",
    ),
    pytest.param(
        {"drain": {"behavior": "Drain", "order": -(2**31) - 1}},
        "spec.drain.order",
        "Invalid value: -2147483649: must be greater than or equal to -2147483648",
        id="order-underflows-int32",
    ),
    pytest.param(
        {"drain": {"behavior": "Drain", "priority": 1}},
        "spec.drain.priority",
        "unknown field",
        id="unknown-drain-field",
    ),
    pytest.param(
        {"drain": DRAIN, "nodes": []}, "spec.nodes", "must have at least 1 item", id="nodes-empty"
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchLabels": {"a": str(i)}}} for i in range(33)]},
        "spec.pods",
        "must have at most 32 items",
        id="pods-33",
    ),
    pytest.param(
        {"drain": DRAIN, "nodes": [{}]},
        "spec.nodes[0].selector",
        "Required value",
        id="node-entry-without-selector",
    ),
    pytest.param(
        {"drain": DRAIN, "nodes": [{"selector": {}, "namespaceSelector": {}}]},
        "spec.nodes[0].namespaceSelector",
        "unknown field",
        id="node-entry-namespace-selector",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{}]},
        "spec.pods[0]",
        "Required value: must set at least one of selector or namespaceSelector",
        id="pod-entry-empty",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchLabels": {"a": "b"}}}, {}]},
        "spec.pods[1]",
        "Required value: must set at least one of selector or namespaceSelector",
        id="second-pod-entry-empty",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": None, "namespaceSelector": None}]},
        "spec.pods[0]",
        "Required value: must set at least one of selector or namespaceSelector",
        id="pod-entry-nulls",
    ),
    pytest.param(
        {"drain": DRAIN, "nodes": [{"selector": {}}, {"selector": {}}]},
        "spec.nodes[1]",
        "Duplicate value: same as spec.nodes[0]",
        id="duplicate-nodes",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [
            {"selector": {"matchLabels": {"a": "1"}}},
            {"selector": {"matchLabels": {"a": "2"}}},
            {"selector": {"matchLabels": {"a": "1"}}},
        ]},
        "spec.pods[2]",
        "Duplicate value: same as spec.pods[0]",
        id="duplicate-pods",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchLabels": {"a": 1}}}]},
        "spec.pods[0].selector.matchLabels[a]",
        'Invalid value: "integer": must be of type string',
        id="label-value-not-string",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"namespaceSelector": {"matchLabels": {"-a": "b"}}}]},
        "spec.pods[0].namespaceSelector.matchLabels",
        f'Invalid value: "-a": {KEY_MSG}',
        id="bad-label-key",
    ),
    pytest.param(
        {"drain": DRAIN, "nodes": [{"selector": {"matchLabels": {"a": "b c"}}}]},
        "spec.nodes[0].selector.matchLabels",
        f'Invalid value: "b c": {VALUE_MSG}',
        id="bad-label-value",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "In"}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].values",
        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        id="in-without-values",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "NotIn", "values": []}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].values",
        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        id="notin-with-empty-values",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "Exists"},
            {"key": "b", "operator": "DoesNotExist", "values": ["x"]},
        ]}}]},
        "spec.pods[0].selector.matchExpressions[1].values",
        "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        id="does-not-exist-with-values",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "Gt", "values": ["1"]}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].operator",
        'Unsupported value: "Gt": supported values: "In", "NotIn", "Exists", "DoesNotExist"',
        id="node-selector-only-operator",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a/b/c", "operator": "Exists"}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].key",
        'Invalid value: "a/b/c": a valid label key must consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName', "
        " or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and "
        "'/' (e.g. 'example.com/MyName')",
        id="bad-expression-key",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "In", "values": ["ok", "{x} y"]}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].values[1]",
        f'Invalid value: "{{x}} y": {VALUE_MSG}',
        id="bad-expression-value-with-braces",
    ),
    pytest.param(
        {"drain": DRAIN, "pods": [{"selector": {"matchExpressions": [
            {"key": "a", "operator": "In", "values": "x"}
        ]}}]},
        "spec.pods[0].selector.matchExpressions[0].values",
        'Invalid value: "string": must be of type array',
        id="values-not-a-list",
    ),
    pytest.param(None, "spec", 'Invalid value: "null": must be of type object', id="null-spec"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "field", "reason"), INVALID)
def test_invalid_rules_name_the_field(spec: Any, field: str, reason: str) -> None:
    with pytest.raises(InvalidResource) as info:
        parse(rule(spec))
    err = info.value
    assert (err.field, err.reason) == (field, reason)
    assert str(err) == f"{field}: {reason}"


@pytest.mark.parametrize(
    ("obj", "field", "reason"),
    [
        (
            rule({"drain": DRAIN}, apiVersion="nodeops.dev/v1beta1"),
            "apiVersion",
            'Unsupported value: "nodeops.dev/v1beta1": supported values: "nodeops.dev/v1alpha1"',
        ),
        (
            rule({"drain": DRAIN}, kind="MachineDrainRule"),
            "kind",
            'Unsupported value: "MachineDrainRule": supported values: "NodeDrainRule"',
        ),
        ({"metadata": {"name": "r"}}, "spec", "Required value"),
        ({"spec": {"drain": DRAIN}}, "metadata", "Required value"),
        (rule({"drain": DRAIN}, status={}), "status", "unknown field"),
    ],
)
def test_envelope(obj: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidResource) as info:
        parse(obj)
    assert (info.value.field, info.value.reason) == (field, reason)


def test_every_problem_is_in_causes() -> None:
    bad = rule({"drain": {"behavior": "Bogus"}, "nodes": [], "pods": [{}]})
    with pytest.raises(InvalidResource) as info:
        parse(bad)
    assert [c.field for c in info.value.causes] == [
        "spec.drain.behavior",
        "spec.nodes",
        "spec.pods[0]",
    ]
    assert str(info.value) == str(info.value.causes[0])


def test_api_objects_parse_with_server_fields() -> None:
    # What a list or watch returns: metadata full of server-set fields, no kind on list items.
    obj = {
        "metadata": {
            "name": "db-last",
            "uid": "0c6f",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-10-09T16:13:59Z",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {"drain": {"behavior": "Drain", "order": 10}},
    }
    parsed = parse(obj)
    assert (parsed.name, parsed.metadata.generation) == ("db-last", 3)
    assert parsed.kind == "NodeDrainRule"
    assert parsed.api_version == "nodeops.dev/v1alpha1"


def test_order_defaults_without_being_written() -> None:
    parsed = parse(rule({"drain": {"behavior": "Skip"}}))
    assert parsed.order == 0
    assert parsed.behavior == "Skip"
    assert parsed.spec.drain.order is None
    assert "order" not in parsed.to_dict()["spec"]["drain"]
    assert parse(rule({"drain": {"behavior": "Drain", "order": 7}})).order == 7


def test_round_trip_is_lossless() -> None:
    spec = {
        "drain": {"behavior": "Drain", "order": 3},
        "nodes": [{"selector": {"matchLabels": {"pool": "a"}}}],
        "pods": [
            {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]
                },
                "namespaceSelector": {"matchLabels": {"team": "t"}},
            }
        ],
    }
    parsed = parse(rule(spec))
    assert parsed.to_dict() == rule(spec)
    assert parse(parsed.to_dict()) == parsed


def test_models_are_frozen_and_copyable() -> None:
    parsed = parse(rule({"drain": DRAIN, "pods": [{"selector": {"matchLabels": {"a": "b"}}}]}))
    with pytest.raises(ValidationError):
        parsed.spec.drain.behavior = "Skip"
    clone = copy.deepcopy(parsed)
    assert clone == parsed
    assert clone.applies_to_pod({"a": "b"}, None)
    assert parsed.model_copy(deep=True) == parsed


def test_python_names_are_accepted_too() -> None:
    spec = NodeDrainRuleSpec.model_validate(
        {"drain": DRAIN, "pods": [{"namespace_selector": {"match_labels": {"t": "x"}}}]}
    )
    assert spec.pods is not None
    assert spec.pods[0].to_dict() == {"namespaceSelector": {"matchLabels": {"t": "x"}}}


# --- matching --------------------------------------------------------------------------------


def drain_rule(**spec: Any) -> NodeDrainRule:
    return parse(rule({"drain": DRAIN, **spec}))


def test_omitted_nodes_select_every_node() -> None:
    r = drain_rule()
    assert r.applies_to_node({"any": "thing"})
    assert r.applies_to_node({})
    assert r.applies_to_node(None)


def test_node_entries_are_ored() -> None:
    r = drain_rule(
        nodes=[
            {"selector": {"matchLabels": {"pool": "a"}}},
            {"selector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}},
        ]
    )
    assert r.applies_to_node({"pool": "a"})
    assert r.applies_to_node({"pool": "b", "gpu": "true"})
    assert not r.applies_to_node({"pool": "b"})
    assert not r.applies_to_node(None)


def test_empty_node_selector_selects_every_node() -> None:
    r = drain_rule(nodes=[{"selector": {}}])
    assert r.applies_to_node({})
    assert r.applies_to_node({"x": "y"})


def test_a_node_selector_ands_its_requirements() -> None:
    r = drain_rule(
        nodes=[
            {
                "selector": {
                    "matchLabels": {"pool": "a"},
                    "matchExpressions": [
                        {"key": "zone", "operator": "NotIn", "values": ["z1"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ],
                }
            }
        ]
    )
    assert r.applies_to_node({"pool": "a", "zone": "z2"})
    assert r.applies_to_node({"pool": "a"})  # NotIn holds for an absent key
    assert not r.applies_to_node({"pool": "a", "zone": "z1"})
    assert not r.applies_to_node({"pool": "a", "spot": "true"})
    assert not r.applies_to_node({"zone": "z2"})


def test_omitted_pods_select_every_pod() -> None:
    r = drain_rule()
    assert r.applies_to_pod({"app": "x"}, {"team": "y"})
    assert r.applies_to_pod(None, None)


def test_pod_entries_are_ored() -> None:
    r = drain_rule(
        pods=[
            {"selector": {"matchLabels": {"app": "db"}}},
            {"namespaceSelector": {"matchLabels": {"team": "infra"}}},
        ]
    )
    assert r.applies_to_pod({"app": "db"}, {"team": "web"})
    assert r.applies_to_pod({"app": "web"}, {"team": "infra"})
    assert not r.applies_to_pod({"app": "web"}, {"team": "web"})
    assert not r.applies_to_pod(None, None)


def test_selector_and_namespace_selector_are_anded() -> None:
    r = drain_rule(
        pods=[
            {
                "selector": {"matchLabels": {"app": "db"}},
                "namespaceSelector": {"matchLabels": {"team": "infra"}},
            }
        ]
    )
    assert r.applies_to_pod({"app": "db"}, {"team": "infra"})
    assert not r.applies_to_pod({"app": "db"}, {"team": "web"})
    assert not r.applies_to_pod({"app": "web"}, {"team": "infra"})
    assert not r.applies_to_pod({"app": "db"}, None)


def test_an_omitted_selector_does_not_restrict() -> None:
    by_namespace = drain_rule(pods=[{"namespaceSelector": {"matchLabels": {"team": "infra"}}}])
    assert by_namespace.applies_to_pod(None, {"team": "infra"})
    by_labels = drain_rule(pods=[{"selector": {"matchLabels": {"app": "db"}}}])
    assert by_labels.applies_to_pod({"app": "db"}, None)


def test_empty_pod_selectors_select_every_pod() -> None:
    r = drain_rule(pods=[{"selector": {}}])
    assert r.applies_to_pod(None, None)
    assert r.applies_to_pod({"a": "b"}, {"c": "d"})


def test_node_and_pod_matching_are_independent() -> None:
    r = drain_rule(
        nodes=[{"selector": {"matchLabels": {"pool": "a"}}}],
        pods=[{"selector": {"matchLabels": {"app": "db"}}}],
    )
    assert r.applies_to_node({"pool": "a"}) and r.applies_to_pod({"app": "db"}, {})
    assert not r.applies_to_node({"pool": "b"})
    assert not r.applies_to_pod({"app": "web"}, {})
