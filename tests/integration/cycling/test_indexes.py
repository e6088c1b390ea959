"""The cycling indexes on real informers fed by the simulated API server: each answers what a
scan of every object answered, and goes on answering it as phases, owners and annotations
change."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodeops.api.crd import all_crds
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.keys import ANNOTATION_MANAGED
from nodeops.controllers.cycling.request.env import BY_NODE, Children
from nodeops.controllers.cycling.request.indexes import (
    ACTIVE,
    BY_ANNOTATED_FOR,
    BY_OWNER_MOVES,
    BY_OWNER_STATE,
    BY_STATE,
    annotated_for,
    in_namespace,
    owner_moves,
    owner_state,
    phase_of,
    requests_of,
    spec_node,
    states,
)
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.kube import Client, Informer, Request, errors
from nodeops.kube import objects as o
from nodeops.kube.informer import InformerFactory
from nodeops.kube.resources import CRDS, NAMESPACES, NODES
from nodeops.sim.serve import SimCluster, SimOptions
from tests.waiting import until

NS = "cycling"


@pytest.fixture
async def cluster() -> AsyncIterator[Client]:
    sim = SimCluster(SimOptions(nodes=3, instant=True, time_scale=20.0))
    await sim.start()
    client = Client(sim.server.url, token=sim.server.admin_token, qps=0)
    try:
        for crd in all_crds():
            with contextlib.suppress(errors.AlreadyExists):
                await client.create(CRDS, crd)
        await client.create(NAMESPACES, {"metadata": {"name": NS}})
        yield client
    finally:
        await client.close()
        await sim.stop()


async def _served(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return await client.create(CYCLENODEREQUESTS, body, NS)
    except errors.NotFound:
        return {}  # the kind is not served yet


async def _request(client: Client, name: str, phase_: str | None) -> dict[str, Any]:
    body = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeGroupName": "web",
            "selector": {"matchLabels": {"role": "web"}},
            "cycleSettings": {"method": "Drain"},
        },
    }
    created: dict[str, Any] = await until(
        lambda: _served(client, body), what="the CycleNodeRequest kind served", timeout=10
    )
    if phase_ is not None:
        created = await _status(client, CYCLENODEREQUESTS, name, {"phase": phase_})
    return created


async def _status(client: Client, res: Any, name: str, status: dict[str, Any]) -> dict[str, Any]:
    return await client.patch(res, name, {"status": status}, NS, subresource="status")


async def _child(
    client: Client, owner: dict[str, Any], node: str, phase_: str, moves: int | None
) -> None:
    name = f"{o.name(owner)}-{node}"
    body = {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeStatus",
        "metadata": {
            "name": name,
            "namespace": NS,
            "ownerReferences": [o.owner_reference(owner, controller=True)],
        },
        "spec": {"nodeName": node, "cycleSettings": {"method": "Drain"}},
    }
    await client.create(CYCLENODESTATUSES, body, NS)
    status: dict[str, Any] = {"phase": phase_}
    if moves is not None:
        status["podsToMove"] = moves
    await _status(client, CYCLENODESTATUSES, name, status)


def _moves(c: dict[str, Any]) -> int:
    return int((c.get("status") or {}).get("podsToMove") or 0)


def _scan_children(children: Informer, uid: str) -> dict[str, Any]:
    """What the request read before the indexes: every child decoded, then filtered."""
    mine = [c for c in children.objects() if (o.controller_ref(c) or {}).get("uid") == uid]
    return {
        "active": [o.name(c) for c in mine if phase_of(c) not in TERMINAL_PHASES],
        "failed": [o.name(c) for c in mine if phase_of(c) == "Failed"],
        "successful": sum(1 for c in mine if phase_of(c) == "Successful"),
        "moves": sum(_moves(c) for c in mine),
    }


def _indexed_children(children: Informer, uid: str) -> dict[str, Any]:
    found = Children(children, uid)
    return {
        "active": [o.name(c) for c in found.active],
        "failed": [o.name(c) for c in found.failed],
        "successful": found.successful,
        "moves": found.pod_moves(),
    }


async def test_children_counted_through_the_indexes_as_a_scan_counts_them(
    cluster: Client,
) -> None:
    client = cluster
    roll = await _request(client, "roll", "WaitingTermination")
    other = await _request(client, "other", "Initialised")
    # Moves with several bits set, and the same moves on two finished children.
    await _child(client, roll, "a", "Successful", 13)
    await _child(client, roll, "b", "Successful", 13)
    await _child(client, roll, "c", "Failed", 6)
    await _child(client, roll, "d", "DrainingPods", 5)
    await _child(client, roll, "e", "Pending", None)
    await _child(client, other, "a", "Successful", 1000)
    factory = InformerFactory(client)
    children = factory.informer(
        CYCLENODESTATUSES,
        namespace=NS,
        indexers={
            BY_OWNER_STATE: owner_state,
            BY_OWNER_MOVES: owner_moves,
            BY_NODE: spec_node,
        },
    )
    factory.start()
    try:
        assert await factory.wait_synced(10)
        uid = o.uid(roll)
        expected = {"active": ["roll-d", "roll-e"], "failed": ["roll-c"], "successful": 2}
        assert _indexed_children(children, uid) == _scan_children(children, uid)
        assert _indexed_children(children, uid) == {**expected, "moves": 37}
        assert _indexed_children(children, o.uid(other))["moves"] == 1000
        found = Children(children, uid)
        a = found.for_node("a")
        assert a is not None and o.name(a) == "roll-a"  # not other's child on the same node
        assert found.for_node("z") is None

        # A child finishing moves from the read ones to the counted ones; its moves stay.
        await _status(client, CYCLENODESTATUSES, "roll-d", {"phase": "Successful"})
        await _status(client, CYCLENODESTATUSES, "roll-e", {"phase": "Failed"})
        await client.delete(CYCLENODESTATUSES, "roll-a", NS)
        await until(
            _async(lambda: _indexed_children(children, uid)["active"] == []),
            what="the drain's end in the cache",
        )
        await until(
            _async(lambda: children.get("roll-a", NS) is None), what="roll-a gone from the cache"
        )
        assert _indexed_children(children, uid) == _scan_children(children, uid)
        assert _indexed_children(children, uid) == {
            "active": [],
            "failed": ["roll-c", "roll-e"],
            "successful": 2,
            "moves": 24,
        }
    finally:
        await factory.stop()


def _async(check: Any) -> Any:
    async def run() -> bool:
        return bool(check())

    return run


async def test_unfinished_requests_and_annotated_nodes_from_their_indexes(
    cluster: Client,
) -> None:
    client = cluster
    await _request(client, "new", None)
    await _request(client, "running", "ScalingUp")
    await _request(client, "done", "Successful")
    nodes_list, _ = await client.list(NODES)
    names = sorted(o.name(n) for n in nodes_list)
    marked = {ANNOTATION_MANAGED: "running"}
    await client.patch(NODES, names[0], {"metadata": {"annotations": marked}})
    await client.patch(NODES, names[1], {"metadata": {"annotations": {ANNOTATION_MANAGED: "x"}}})
    factory = InformerFactory(client)
    requests = factory.informer(CYCLENODEREQUESTS, namespace=NS, indexers={BY_STATE: states})
    nodes = factory.informer(NODES, indexers={BY_ANNOTATED_FOR: annotated_for})
    factory.start()
    try:
        assert await factory.wait_synced(10)
        unfinished = in_namespace(requests.index_keys(BY_STATE, ACTIVE), NS)
        scanned = [
            Request(o.name(r), o.namespace(r))
            for r in requests.objects(NS)
            if phase_of(r) not in TERMINAL_PHASES
        ]
        assert requests_of(unfinished) == scanned == [Request("new", NS), Request("running", NS)]
        assert in_namespace(requests.index_keys(BY_STATE, ACTIVE), "elsewhere") == []
        assert [o.name(n) for n in nodes.by_index(BY_ANNOTATED_FOR, "running")] == [names[0]]

        # Finishing a request and taking the marker off a node leave their buckets.
        await _status(client, CYCLENODEREQUESTS, "running", {"phase": "Failed"})
        unmark = {ANNOTATION_MANAGED: None}
        await client.patch(NODES, names[0], {"metadata": {"annotations": unmark}})
        await until(
            _async(lambda: requests.index_keys(BY_STATE, ACTIVE) == [f"{NS}/new"]),
            what="the finished request out of the unfinished ones",
        )
        await until(
            _async(lambda: nodes.by_index(BY_ANNOTATED_FOR, "running") == []),
            what="the unmarked node out of the request's",
        )
        assert [o.name(n) for n in nodes.by_index(BY_ANNOTATED_FOR, "x")] == [names[1]]
    finally:
        await factory.stop()
