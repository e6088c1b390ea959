"""Finalizer helpers: idempotent, and never undoing a concurrent writer's finalizer."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.finalizers import add_finalizer, remove_finalizer
from nodeops.kube.resources import CONFIGMAPS, NODES

NS = "default"
MINE = "nodeops.dev/cleanup"


async def test_add_and_remove_are_idempotent(client: Client) -> None:
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "f1"}}, NS)
    added = await add_finalizer(client, CONFIGMAPS, cm, MINE)
    assert added["metadata"]["finalizers"] == [MINE]
    again = await add_finalizer(client, CONFIGMAPS, added, MINE)
    # Already there: no write, so no new resourceVersion.
    assert again["metadata"]["resourceVersion"] == added["metadata"]["resourceVersion"]
    removed = await remove_finalizer(client, CONFIGMAPS, again, MINE)
    assert not removed["metadata"].get("finalizers")
    same = await remove_finalizer(client, CONFIGMAPS, removed, MINE)
    assert same["metadata"]["resourceVersion"] == removed["metadata"]["resourceVersion"]


async def test_a_stale_object_never_drops_another_writers_finalizer(client: Client) -> None:
    node = await client.create(NODES, {"metadata": {"name": "f-node", "finalizers": ["x/a"]}})
    # Someone else adds their finalizer after we read the node.
    await client.patch(NODES, "f-node", {"metadata": {"finalizers": ["x/a", "x/b"]}})
    added = await add_finalizer(client, NODES, node, MINE)
    assert added["metadata"]["finalizers"] == ["x/a", "x/b", MINE]
    # Another writer again; removing ours from the copy we hold keeps theirs too.
    await client.patch(NODES, "f-node", {"metadata": {"finalizers": ["x/a", "x/b", MINE, "x/c"]}})
    removed = await remove_finalizer(client, NODES, added, MINE)
    assert removed["metadata"]["finalizers"] == ["x/a", "x/b", "x/c"]


async def test_an_object_without_resource_version_is_read_first(client: Client) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "f3", "finalizers": ["x/a"]}}, NS)
    bare: dict[str, Any] = {"metadata": {"name": "f3", "namespace": NS}}
    added = await add_finalizer(client, CONFIGMAPS, bare, MINE)
    assert added["metadata"]["finalizers"] == ["x/a", MINE]


async def test_removing_from_a_deleted_object_is_done(client: Client) -> None:
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "f4", "finalizers": [MINE]}}, NS)
    await client.delete(CONFIGMAPS, "f4", NS)
    removed = await remove_finalizer(client, CONFIGMAPS, cm, MINE)  # removes it: object goes
    assert not removed["metadata"].get("finalizers")
    with pytest.raises(errors.NotFound):
        await client.get(CONFIGMAPS, "f4", NS)
    assert await remove_finalizer(client, CONFIGMAPS, cm, MINE) == cm  # gone: nothing to do
