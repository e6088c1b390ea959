"""The observer: requests for node groups whose launch version or OnDelete DaemonSet pods are
out of date, one at a time per group, lower priorities first."""

from __future__ import annotations

from typing import Any

from nodeops.controllers.cycling.keys import REASON_ANNOTATION, SUPERSEDED_LABEL
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.kube import objects as o
from nodeops.kube.resources import DAEMONSETS, PODS
from tests.waiting import until

from .harness import NS, nodes, scenario, wait_phase, world

OBSERVER = {"check_interval": 5.0, "wait_interval": 0.0}


def nodegroup(name: str, group: str, priority: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {
            "nodeGroupName": group,
            "nodeSelector": {"matchLabels": {"role": "worker"}},
            "cycleSettings": {"method": "Drain", "concurrency": 2},
            "priority": priority,
        },
    }


async def requests_of(w: Any) -> list[dict[str, Any]]:
    items, _ = await w.client.list(CYCLENODEREQUESTS, NS)
    return sorted(items, key=lambda r: r["metadata"]["creationTimestamp"])


async def test_out_of_date_launch_versions_by_priority() -> None:
    async with world(scenario(2, groups=2), observer=OBSERVER) as w:
        assert w.client is not None
        # workers-a goes first; workers-b waits for it.
        await w.client.create(NODEGROUPS, nodegroup("a", "workers-a", priority=0))
        await w.client.create(NODEGROUPS, nodegroup("b", "workers-b", priority=1))
        for group in ("workers-a", "workers-b"):
            w.sim.cloud.state.update_group(group, launch_version="2")

        async def first() -> list[dict[str, Any]]:
            return await requests_of(w)

        (made,) = await until(first, timeout=60, what="the observer's first request")
        assert made["metadata"]["name"].startswith("observer-a-")
        assert (
            "launch version 1 is out of date" in made["metadata"]["annotations"][REASON_ANNOTATION]
        )
        assert made["spec"]["nodeGroupName"] == "workers-a"
        await wait_phase(w, o.name(made), "Successful")

        async def second() -> list[dict[str, Any]]:
            found = await requests_of(w)
            return found if len(found) == 2 else []

        _, then = await until(second, timeout=60, what="the observer's second request")
        assert then["metadata"]["name"].startswith("observer-b-")
        await wait_phase(w, o.name(then), "Successful")
        # Everything is up to date now: no further request.
        assert w.observer is not None
        assert await w.observer.observe() == []
        assert len(await requests_of(w)) == 2


async def test_outdated_ondelete_daemonset_pods() -> None:
    async with world(scenario(1), observer=OBSERVER) as w:
        assert w.client is not None
        labels = {"app": "agent"}
        await w.client.create(
            DAEMONSETS,
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": "kube-system"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "updateStrategy": {"type": "OnDelete"},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "agent", "image": "agent:1"}],
                        },
                    },
                },
            },
            "kube-system",
        )

        async def agent_running() -> bool:
            pods, _ = await w.client.list(PODS, "kube-system", label_selector="app=agent")  # type: ignore[union-attr]
            return any(p["status"].get("phase") == "Running" for p in pods)

        await until(agent_running, timeout=60, what="the agent running")
        await w.client.create(NODEGROUPS, nodegroup("workers", "workers-a"))
        # Nothing is out of date yet.
        assert w.observer is not None
        assert await w.observer.observe() == []
        await w.client.patch(
            DAEMONSETS,
            "agent",
            {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}
                }
            },
            "kube-system",
            patch_type="strategic",
        )

        async def made() -> list[dict[str, Any]]:
            return await requests_of(w)

        (request,) = await until(made, timeout=60, what="a request for the outdated agent")
        assert (
            "DaemonSet kube-system/agent pod is out of date"
            in (request["metadata"]["annotations"][REASON_ANNOTATION])
        )
        assert request["spec"]["nodeNames"] == [n["metadata"]["name"] for n in await nodes(w)]
        await wait_phase(w, o.name(request), "Successful")


async def test_failed_requests_block_a_group_beyond_its_allowance() -> None:
    from .harness import request

    async with world(scenario(2), observer={**OBSERVER, "check_interval": 1e6}) as w:
        assert w.client is not None
        group = nodegroup("a", "workers-a")
        await w.client.create(NODEGROUPS, group)
        # A request of the group that failed (a named node that does not exist).
        await w.create_request(request("broken", ["workers-a"], nodeNames=["ghost"]))
        await wait_phase(w, "broken", "Failed")
        w.sim.cloud.state.update_group("workers-a", launch_version="2")
        assert w.observer is not None
        # maxFailedCycleNodeRequests 0: one Failed request is one too many.
        assert await w.observer.observe() == []
        assert [o.name(r) for r in await requests_of(w)] == ["broken"]
        await w.client.patch(NODEGROUPS, "a", {"spec": {"maxFailedCycleNodeRequests": 1}})
        (made,) = await w.observer.observe()
        assert o.name(made).startswith("observer-a-")
        await wait_phase(w, o.name(made), "Successful")
        # The success supersedes the failed request made before it: the group is unblocked,
        # and the failed request stays, with its reason, where a user looks for it.

        async def superseded() -> dict[str, Any] | None:
            broken = await w.request("broken")
            assert broken is not None, "the failed request was deleted"
            labels = broken["metadata"].get("labels") or {}
            return broken if labels.get(SUPERSEDED_LABEL) == o.name(made) else None

        broken = await until(superseded, timeout=60, what="the failed request superseded")
        assert broken is not None
        assert broken["status"]["phase"] == "Failed"
        assert "spec.nodeNames[0]: node 'ghost'" in broken["status"]["message"]
        # With no allowance for failures again, the superseded failure does not block it.
        await w.client.patch(NODEGROUPS, "a", {"spec": {"maxFailedCycleNodeRequests": 0}})
        w.sim.cloud.state.update_group("workers-a", launch_version="3")
        (again,) = await w.observer.observe()
        await wait_phase(w, o.name(again), "Successful")
