"""Owner-reference helpers and owner mapping respect scopes, as garbage collection does."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.kube.controller import Request, to_controller_owner
from nodeops.kube.objects import (
    is_controlled_by,
    is_owned_by,
    owner_reference,
    set_owner_reference,
)

WIDGET: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "uid": "u-1"},
}
NODE: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "uid": "u-n"}}


def _child(namespace: str | None = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c"}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


def test_owner_reference_of_an_owner() -> None:
    assert owner_reference(WIDGET) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert "controller" not in owner_reference(WIDGET, controller=False)
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        owner_reference({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})


def test_set_owner_reference_checks_scope_and_controller() -> None:
    child = set_owner_reference(_child(), WIDGET)
    assert is_controlled_by(child, WIDGET) and is_owned_by(child, WIDGET)
    set_owner_reference(child, WIDGET)  # refreshing the same owner is fine
    assert len(child["metadata"]["ownerReferences"]) == 1
    other = {**WIDGET, "metadata": {**WIDGET["metadata"], "name": "w2", "uid": "u-2"}}
    with pytest.raises(ValueError, match="already controlled"):
        set_owner_reference(child, other)
    set_owner_reference(child, other, controller=False)
    assert is_owned_by(child, other) and not is_controlled_by(child, other)
    with pytest.raises(ValueError, match="another namespace"):
        set_owner_reference(_child("elsewhere"), WIDGET)
    with pytest.raises(ValueError, match="cluster-scoped object"):
        set_owner_reference(_child(None), WIDGET)
    pod = set_owner_reference(_child(), NODE, owner_namespaced=False)
    assert is_controlled_by(pod, NODE)


def test_controller_owner_mapping_respects_the_owner_scope() -> None:
    pod = set_owner_reference(_child(), NODE, owner_namespaced=False)
    # A Node is cluster-scoped: the request names the node, not `ns/n`.
    assert to_controller_owner("Node")(pod) == [Request("n", None)]
    assert to_controller_owner("Thing", "example.com", namespaced=False)(
        set_owner_reference(_child(), {**WIDGET, "kind": "Thing"}, owner_namespaced=True)
    ) == [Request("w", None)]
    widget_child = set_owner_reference(_child(), WIDGET)
    assert to_controller_owner("Widget", "example.com")(widget_child) == [Request("w", "ns")]
    assert to_controller_owner("Widget", "other.com")(widget_child) == []
