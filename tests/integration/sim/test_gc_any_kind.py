"""Conformance: the simulated garbage collector collects dependents of any kind, as
kube-controller-manager's does, whatever the owner's kind: custom resources owning ConfigMaps and
Secrets, ConfigMaps owning custom resources, with background, foreground and orphan deletion and
blockOwnerDeletion holding a foreground owner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.common.resources import CONFIGMAPS, CRDS, SECRETS, Resource
from nodeops.sim.clock import Clock
from nodeops.sim.cluster import ClusterLoops
from nodeops.sim.cluster.apiclient import ApiClient, NotFound
from nodeops.sim.server.app import SimServer
from tests.waiting import until

NS = "default"
WIDGETS = Resource("example.com", "v1", "widgets", "Widget", True)
WIDGET_CRD = {
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
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def _ref(owner: dict[str, Any], *, block: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


class Env:
    def __init__(self, client: ApiClient) -> None:
        self.client = client

    async def widget(self, name: str, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": NS}
        if owners:
            meta["ownerReferences"] = owners
        body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, "spec": {}}
        return await self.client.create(WIDGETS, body, NS)

    async def configmap(self, name: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": owners},
            "data": {"k": "v"},
        }
        return await self.client.create(CONFIGMAPS, body, NS)

    async def secret(self, name: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": owners},
            "stringData": {"k": "v"},
        }
        return await self.client.create(SECRETS, body, NS)

    async def exists(self, resource: Resource, name: str) -> dict[str, Any] | None:
        try:
            return await self.client.get(resource, name, NS)
        except NotFound:
            return None

    async def gone(self, resource: Resource, name: str) -> bool:
        return await self.exists(resource, name) is None


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = Clock(50.0)
    server = SimServer(clock=clock, bookmark_interval=0.2)
    await server.start()
    client = ApiClient(server.url, server.admin_token, component="test")
    loops = ClusterLoops(server.url, server.admin_token, clock, instant=True)
    try:
        await loops.start()
        # The definition arrives after the collector started: it must follow discovery.
        await client.create(CRDS, WIDGET_CRD)

        async def served() -> bool:
            try:
                await client.list(WIDGETS, NS)
            except NotFound:
                return False
            return True

        await until(served, what="widgets served")
        yield Env(client)
    finally:
        await loops.stop()
        await client.close()
        await server.stop()


async def test_background_deletion_of_a_custom_resource_collects_its_configmap_and_secret(
    env: Env,
) -> None:
    owner = await env.widget("w-bg")
    await env.configmap("cm-bg", [_ref(owner)])
    await env.secret("s-bg", [_ref(owner)])
    await env.client.delete(WIDGETS, "w-bg", NS, propagation_policy="Background")
    await until(lambda: env.gone(CONFIGMAPS, "cm-bg"), timeout=30, what="configmap collected")
    await until(lambda: env.gone(SECRETS, "s-bg"), timeout=30, what="secret collected")


async def test_a_configmap_owning_a_custom_resource_takes_it_along(env: Env) -> None:
    cm = await env.configmap("cm-owner", [])
    await env.widget("w-dep", [_ref(cm)])
    await env.client.delete(CONFIGMAPS, "cm-owner", NS)
    await until(lambda: env.gone(WIDGETS, "w-dep"), timeout=30, what="widget collected")


async def test_foreground_deletion_holds_the_custom_resource_until_dependents_are_gone(
    env: Env,
) -> None:
    owner = await env.widget("w-fg")
    # A dependent that cannot go yet: its own finalizer holds it, so the owner must wait.
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cm-held",
            "namespace": NS,
            "ownerReferences": [_ref(owner)],
            "finalizers": ["example.com/hold"],
        },
    }
    await env.client.create(CONFIGMAPS, body, NS)
    await env.secret("s-fg", [_ref(owner)])
    await env.client.delete(WIDGETS, "w-fg", NS, propagation_policy="Foreground")

    async def held() -> dict[str, Any] | None:
        cm = await env.exists(CONFIGMAPS, "cm-held")
        secret_gone = await env.gone(SECRETS, "s-fg")
        return cm if cm and cm["metadata"].get("deletionTimestamp") and secret_gone else None

    await until(held, timeout=30, what="dependents deleted, the held one terminating")
    owner_now = await env.exists(WIDGETS, "w-fg")
    assert owner_now is not None, "the owner went while a blocking dependent remained"
    assert "foregroundDeletion" in owner_now["metadata"]["finalizers"]

    await env.client.patch(CONFIGMAPS, "cm-held", {"metadata": {"finalizers": None}}, NS)
    await until(lambda: env.gone(WIDGETS, "w-fg"), timeout=30, what="owner removed at last")


async def test_orphan_deletion_keeps_dependents_and_drops_the_reference(env: Env) -> None:
    owner = await env.widget("w-or")
    await env.configmap("cm-or", [_ref(owner)])
    await env.client.delete(WIDGETS, "w-or", NS, propagation_policy="Orphan")
    await until(lambda: env.gone(WIDGETS, "w-or"), timeout=30, what="owner removed")
    cm = await env.exists(CONFIGMAPS, "cm-or")
    assert cm is not None
    assert not cm["metadata"].get("ownerReferences")


async def test_a_dependent_created_after_its_owner_vanished_is_collected(env: Env) -> None:
    """A reference to an owner that no longer exists (same name, other uid) is dangling."""
    owner = await env.widget("w-gone")
    ref = _ref(owner)
    await env.client.delete(WIDGETS, "w-gone", NS)
    await until(lambda: env.gone(WIDGETS, "w-gone"), what="owner removed")
    await env.widget("w-gone")  # a new object under the old name
    await env.configmap("cm-dangling", [ref])
    await until(lambda: env.gone(CONFIGMAPS, "cm-dangling"), timeout=30, what="collected")
