"""A whole roll against the simulated cluster: every node replaced, nothing lost or violated."""

from __future__ import annotations

import itertools
from typing import Any

from prometheus_client import generate_latest

from nodeops.controllers.cycling.cns import NOTE_SECONDS
from nodeops.controllers.cycling.keys import CYCLE_TAINT, NODE_FINALIZER, SELECTED_LABEL
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, CYCLENODESTATUSES
from nodeops.demo.scenario import demo_scenario, group_names
from nodeops.kube.metrics import REGISTRY

from .harness import children, nodes, on_write, request, wait_phase, world


async def test_a_roll_replaces_every_node() -> None:
    scenario = demo_scenario(4, groups=2, boot_seconds=30, grace_seconds=2)
    async with world(scenario) as w:
        before = {n["metadata"]["name"] for n in await nodes(w)}
        # The status never lists more nodes than a batch: it is read at every event of the
        # roll, so what it holds must not grow with the node group.
        longest: list[int] = []
        queued: list[int] = []

        def written(_: str, obj: dict[str, Any], __: dict[str, Any] | None) -> None:
            status = obj.get("status") or {}
            lists = (v for k, v in status.items() if isinstance(v, list) and k != "conditions")
            longest.append(max(map(len, lists), default=0))
            queued.append(int((status.get("progress") or {}).get("queued") or 0))

        on_write(w, CYCLENODEREQUESTS, written)
        await w.create_request(request("roll", group_names(2), cycleSettings={"concurrency": 2}))
        done = await wait_phase(w, "roll", ("Successful", "Failed"))
        status = done["status"]
        assert longest and max(longest) <= 2  # the batch
        # The queue, counted: four selected, then two left once the first batch is taken.
        assert [q for i, q in enumerate(queued) if i == 0 or q != queued[i - 1]][-3:] == [4, 2, 0]
        assert status["phase"] == "Successful", status
        assert status["progress"] == {
            "total": 4,
            "cycled": 4,
            "inProgress": 0,
            "failed": 0,
            "queued": 0,
        }
        assert status["selectedByGroup"] == {g: 2 for g in group_names(2)}
        after = await nodes(w)
        assert not before & {n["metadata"]["name"] for n in after}
        assert len(after) == 4
        for node in after:
            assert not node["spec"].get("unschedulable")
            assert NODE_FINALIZER not in (node["metadata"].get("finalizers") or ())
            assert all(t["key"] != CYCLE_TAINT for t in node["spec"].get("taints") or ())
            assert SELECTED_LABEL not in node["metadata"].get("labels", {})
        assert [c["status"]["phase"] for c in await children(w, "roll")] == ["Successful"] * 4
        assert w.record.violations == []
        # The metrics say the same.
        text = generate_latest(REGISTRY).decode()
        assert 'nodeops_cycling_requests{phase="Successful"} 1.0' in text
        assert (
            'nodeops_cycling_transitions_total{kind="CycleNodeRequest",phase="Successful"}' in text
        )
        assert "nodeops_cycling_nodes_cycled_total" in text


async def test_no_request_is_lost_between_batches() -> None:
    """Clients send requests through a load balancer whose health checks pass a node only
    while it runs a ready endpoint of the Service. A batch is detached (and so leaves the load
    balancer) only once another target is healthy: not while the previous batch's replacements
    are still being checked, which would leave the load balancer nothing to send to."""
    scenario = demo_scenario(6, groups=2, boot_seconds=60, grace_seconds=2)
    async with world(scenario, traffic={"web": "shop/web"}) as w:
        await w.create_request(request("served", group_names(2), cycleSettings={"concurrency": 3}))
        done = await wait_phase(w, "served", ("Successful", "Failed"), timeout=240)
        assert done["status"]["phase"] == "Successful", done["status"]
        assert w.requests_sent > 0
        assert w.requests_failed == 0
        assert w.record.violations == []


async def test_a_drains_message_is_rewritten_at_most_every_few_seconds() -> None:
    """Each pod leaving changes a drain's message; each write of it is decoded by every watcher
    of CycleNodeStatuses, so it is written at most every `NOTE_SECONDS` of cluster time while the
    drain goes on, and still ends current (the phase change that ends the drain is written at
    once)."""
    scenario = demo_scenario(2, groups=1, boot_seconds=30, grace_seconds=2, pods_per_node=12)
    async with world(scenario) as w:
        notes: dict[str, list[tuple[float, str]]] = {}

        def written(_: str, obj: dict[str, Any], prev: dict[str, Any] | None) -> None:
            status, before = obj.get("status") or {}, (prev or {}).get("status") or {}
            if status.get("phase") != "DrainingPods" or before.get("phase") != "DrainingPods":
                return
            if status.get("message") != before.get("message"):
                at = w.clock.now().timestamp()
                notes.setdefault(obj["metadata"]["name"], []).append((at, status["message"]))

        on_write(w, CYCLENODESTATUSES, written)
        await w.create_request(request("roll", group_names(1), cycleSettings={"concurrency": 2}))
        done = await wait_phase(w, "roll", ("Successful", "Failed"))
        assert done["status"]["phase"] == "Successful", done["status"]
        assert notes, "no drain wrote a second message: the test drains too little"
        for child, written_at in notes.items():
            gaps = [b[0] - a[0] for a, b in itertools.pairwise(written_at)]
            # A little under NOTE_SECONDS: the clock is read as the write is stored.
            assert all(g >= NOTE_SECONDS - 0.5 for g in gaps), (child, gaps)
