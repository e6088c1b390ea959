"""Every phase and transition of a CycleNodeRequest against the simulated cluster: the paths
that fail and heal, the spec fields that select nodes, Wait vs Drain, and what a request leaves
behind."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from nodeops.controllers.cycling.keys import (
    ANNOTATION_MANAGED,
    NODE_FINALIZER,
    NODE_GROUP_ANNOTATION,
    SCALE_DOWN_DISABLED,
    SELECTED_LABEL,
)
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS, NODEGROUPS
from nodeops.demo.scenario import group_names
from nodeops.demo.world import World
from nodeops.kube import errors
from nodeops.kube.metrics import REGISTRY
from nodeops.kube.resources import EVENTS, NODES, PDBS, PODS
from nodeops.sim.cloud.model import DETACHED, IN_SERVICE
from tests.waiting import until

from .harness import (
    NS,
    Transitions,
    assert_clean,
    assert_every_transition_is_an_event,
    blocking_budget,
    children,
    cloud_groups,
    instance_states,
    nodes,
    on_write,
    request,
    scenario,
    wait_phase,
    world,
)

GROUP = ["workers-a"]


async def test_invalid_specs_fail_naming_the_field() -> None:
    async with world(scenario(2)) as w:
        await w.create_request(request("missing-group", ["workers-a", "nope"]))
        failed = await wait_phase(w, "missing-group", "Failed")
        assert failed["status"]["message"] == (
            "spec.nodeGroupsList[0]: node group 'nope' not found in provider sim"
        )
        await w.create_request(request("bad-provider", GROUP, provider="gcp"))
        failed = await wait_phase(w, "bad-provider", "Failed")
        assert failed["status"]["message"].startswith("spec.provider:")
        ready = {c["type"]: c for c in failed["status"]["conditions"]}["Ready"]
        assert ready["status"] == "False"
        # Nothing was touched.
        assert_clean(await nodes(w))
        assert all(g == "workers-a" for g, _ in (await instance_states(w)).values())


async def test_named_nodes_with_and_without_skipping_missing_ones() -> None:
    async with world(scenario(3)) as w:
        names = sorted(n["metadata"]["name"] for n in await nodes(w))
        await w.create_request(request("strict", GROUP, nodeNames=[names[0], "no-such-node"]))
        failed = await wait_phase(w, "strict", "Failed")
        assert (
            "spec.nodeNames[1]: node 'no-such-node' is not among the selected nodes"
            in (failed["status"]["message"])
        )
        assert failed["status"]["progress"]["total"] == 0
        assert not any(SELECTED_LABEL in n["metadata"].get("labels", {}) for n in await nodes(w))
        await w.create_request(
            request(
                "lenient",
                GROUP,
                nodeNames=[names[0], "no-such-node"],
                validationOptions={"skipMissingNamedNodes": True},
            )
        )
        done = await wait_phase(w, "lenient", "Successful")
        assert done["status"]["progress"]["total"] == 1
        assert [c["spec"]["nodeName"] for c in await children(w, "lenient")] == [names[0]]
        # Not only an Event: the request's status says what it skipped.
        assert done["status"]["message"] == (
            "spec.nodeNames: no-such-node skipped: not among the selected nodes of the node groups"
        )
        after = {n["metadata"]["name"] for n in await nodes(w)}
        assert names[0] not in after and set(names[1:]) <= after
        assert w.client is not None
        events, _ = await w.client.list(EVENTS, NS)
        assert any(e.get("reason") == "SkipMissingNamedNode" for e in events)
        assert_clean(await nodes(w))


async def test_wait_method_waits_for_do_not_disrupt_pods() -> None:
    async with world(scenario(1)) as w:
        assert w.client is not None
        (old,) = [n["metadata"]["name"] for n in await nodes(w)]
        # A pod that must finish on its own, and one protected for a while after it started.
        for name, value in (("batch-job", "true"), ("warm-cache", "2m")):
            await w.client.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": "shop",
                        "annotations": {"karpenter.sh/do-not-disrupt": value}
                        if value != "true"
                        else {"cyclops.atlassian.com/do-not-disrupt": "true"},
                    },
                    "spec": {
                        "nodeName": old,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
                "shop",
            )
        await w.create_request(request("wait", GROUP, cycleSettings={"method": "Wait"}))

        async def waiting() -> Any:
            found = await children(w, "wait")
            status = found[0].get("status", {}) if found else {}
            return status.get("phase") == "WaitingPods" and status.get("message") and found[0]

        child = await until(waiting, timeout=60, what="the node waiting for its pods")
        assert "shop/batch-job" in child["status"]["message"]
        await asyncio.sleep(1)
        assert (await children(w, "wait"))[0]["status"]["phase"] == "WaitingPods"
        # The job finishes; the warm-cache pod's two minutes run out by themselves.
        await w.client.delete(PODS, "batch-job", "shop", grace_period=0)
        await wait_phase(w, "wait", "Successful")
        assert old not in {n["metadata"]["name"] for n in await nodes(w)}


async def test_a_failed_node_heals_the_rest_and_fails_the_request() -> None:
    async with world(scenario(3, workloads=blocking_budget)) as w:
        assert w.client is not None
        pods, _ = await w.client.list(PODS, "shop", label_selector="app=api")
        held = {p["spec"]["nodeName"] for p in pods}
        transitions = Transitions(w)
        await w.create_request(
            request(
                "blocked",
                GROUP,
                cycleSettings={"concurrency": 1, "cyclingTimeout": "90s"},
            )
        )
        failed = await wait_phase(w, "blocked", "Failed", timeout=180)
        status = failed["status"]
        assert "not replaced within its cycling timeout" in status["message"]
        # One at a time, the roll replaces the nodes the blocking budget's pods are not on (the
        # scheduler chose where they went) until it meets one that holds them: that one fails.
        outcome = {
            c["spec"]["nodeName"]: c["status"]["phase"] for c in await children(w, "blocked")
        }
        [failed_node] = [n for n, phase in outcome.items() if phase == "Failed"]
        assert failed_node in held
        assert all(phase == "Successful" for n, phase in outcome.items() if n != failed_node)
        # The node that failed is back in its group and schedulable; nothing is detached.
        states = await instance_states(w)
        assert all(state in (IN_SERVICE,) or group is None for group, state in states.values())
        assert not [i for i, (g, s) in states.items() if s == DETACHED]
        # As documented (docs/cycling.md, Healing): the failed node is back and its
        # replacement stays, so the group is one node larger than before the roll.
        assert cloud_groups(w)["workers-a"].desired == 4
        assert sum(1 for g, s in states.values() if g == "workers-a" and s == IN_SERVICE) == 4
        assert len(await nodes(w)) == 4
        assert_clean(await nodes(w))
        assert w.record.violations == []
        assert transitions.of("blocked")[-2:] == ["Healing", "Failed"]
        await assert_every_transition_is_an_event(w, transitions)


async def test_every_phase_change_is_an_event(tmp_path: Path) -> None:
    """`kubectl describe` of a request, or of one of its CycleNodeStatuses, tells its story: an
    Event for every phase it went through, the phase as reason and what it did as note."""
    async with world(scenario(2)) as w:
        transitions = Transitions(w)
        await w.create_request(request("told", GROUP, cycleSettings={"concurrency": 1}))
        await wait_phase(w, "told", "Successful")
        batch = ["Initialised", "ScalingUp", "CordoningNode", "WaitingTermination"]
        assert transitions.of("told") == ["Pending", *batch, *batch, "Initialised", "Successful"]
        replaced = [c["metadata"]["name"] for c in await children(w, "told")]
        assert len(replaced) == 2
        for name in replaced:
            assert transitions.of(name) == [
                "Pending",
                "RemovingLabelsFromPods",
                "DrainingPods",
                "DeletingNode",
                "TerminatingNode",
                "Successful",
            ]
        await assert_every_transition_is_an_event(w, transitions)
        if shutil.which("kubectl") is not None:
            config = w.sim.server.write_kubeconfig(tmp_path / "kubeconfig")
            proc = await asyncio.create_subprocess_exec(
                *("kubectl", "--kubeconfig", str(config), "-n", NS, "describe", "cnr", "told"),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
            assert proc.returncode == 0, err.decode()
            events = out.decode().split("Events:", 1)[1]
            scaling = [line.split() for line in events.splitlines() if "ScalingUp" in line]
            assert len(scaling) == 2 and all(line[0] == "Normal" for line in scaling), events
            assert all("detaching 1 nodes:" in " ".join(line) for line in scaling), events
            assert "Successful" in events


async def test_scale_up_limit_heals_the_detached_batch() -> None:
    slow = scenario(2)
    async with world(slow, settings={"scale_up_limit": 60.0}) as w:
        # Replacements never boot.
        w.sim.cloud.state.groups["workers-a"].spec = w.sim.cloud.state.groups[
            "workers-a"
        ].spec.model_copy(update={"boot_seconds": 1e6})
        await w.create_request(request("slow", GROUP, cycleSettings={"concurrency": 1}))
        failed = await wait_phase(w, "slow", "Failed", timeout=120)
        assert "scale-up did not finish within 60s" in failed["status"]["message"]
        states = await instance_states(w)
        assert not [i for i, (_, s) in states.items() if s == DETACHED]
        assert_clean(await nodes(w))


async def test_pending_repairs_a_detached_instance_and_removes_an_orphaned_node() -> None:
    async with world(scenario(3)) as w:
        assert w.client is not None
        state = w.sim.cloud.state
        members = [state.instances[i] for i in state.groups["workers-a"].members]
        detached, orphan = members[0], members[1]
        # A detached instance a crashed cycle left behind, marked as cycling marks it.
        state.detach("workers-a", [detached.id], decrement=True)
        # A node whose instance is gone, held by our finalizer.
        for instance in (detached, orphan):
            await w.client.patch(
                NODES,
                instance.node_name,
                {
                    "metadata": {
                        "finalizers": [NODE_FINALIZER],
                        "annotations": {NODE_GROUP_ANNOTATION: "workers-a"},
                    }
                },
            )
        state.terminate(orphan.id)
        state.groups["workers-a"].desired -= 0
        await w.create_request(request("repair", GROUP, cycleSettings={"concurrency": 3}))
        done = await wait_phase(w, "repair", "Successful", timeout=180)
        assert done["status"]["progress"]["failed"] == 0
        assert w.client is not None
        try:
            await w.client.get(NODES, orphan.node_name)
            raise AssertionError("the orphaned node is still there")
        except errors.NotFound:
            pass
        assert_clean(await nodes(w))
        assert not [i for i, (_, s) in (await instance_states(w)).items() if s == DETACHED]


async def test_scale_down_disabled_annotation_only_during_the_roll() -> None:
    """Each batch's new nodes carry the annotation from its scale-up until the next batch's
    (the two batches' nodes never at once) or the end of the roll."""
    async with world(scenario(2)) as w:
        await w.create_request(request("annotated", GROUP, cycleSettings={"concurrency": 1}))
        seen: set[str] = set()
        most = 0

        async def annotated_until_done() -> bool:
            nonlocal most
            now = set()
            for node in await nodes(w):
                annotations = node["metadata"].get("annotations") or {}
                if annotations.get(ANNOTATION_MANAGED) == "annotated":
                    assert annotations[SCALE_DOWN_DISABLED] == "true"
                    now.add(node["metadata"]["name"])
            seen.update(now)
            most = max(most, len(now))
            obj = await w.request("annotated")
            return ((obj or {}).get("status") or {}).get("phase") == "Successful"

        await until(annotated_until_done, timeout=120, what="the roll to end")
        assert len(seen) == 2 and most == 1, (seen, most)
        done = await wait_phase(w, "annotated", "Successful")
        for node in await nodes(w):
            annotations = node["metadata"].get("annotations") or {}
            assert SCALE_DOWN_DISABLED not in annotations
            assert ANNOTATION_MANAGED not in annotations
        assert not done["status"].get("annotatedNodes")


async def test_a_nodegroup_can_keep_the_autoscaler_annotation_off_its_nodes() -> None:
    """A NodeGroup annotated `nodeops.dev/disable-annotation-management: "true"` (or with
    Cyclops's key) keeps scale-down-disabled off its cloud groups' new nodes; a group of the same
    request whose NodeGroup does not opt out still gets it."""
    async with world(scenario(3, groups=3)) as w:
        assert w.client is not None
        opt_outs = {
            "workers-a": "nodeops.dev/disable-annotation-management",
            "workers-b": "cyclops.atlassian.com/disable-annotation-management",
            "workers-c": None,
        }
        for group, key in opt_outs.items():
            await w.client.create(
                NODEGROUPS,
                {
                    "apiVersion": "nodeops.dev/v1alpha1",
                    "kind": "NodeGroup",
                    "metadata": {"name": group, "annotations": {key: "true"} if key else {}},
                    "spec": {
                        "nodeGroupName": group,
                        "nodeSelector": {"matchLabels": {"role": "worker"}},
                        "cycleSettings": {"method": "Drain", "concurrency": 1},
                    },
                },
            )
        annotated: set[str] = set()

        def seen(kind: str, node: dict[str, Any], prev: dict[str, Any] | None) -> None:
            del kind, prev
            if SCALE_DOWN_DISABLED in (node["metadata"].get("annotations") or {}):
                annotated.add(node["metadata"]["name"])

        on_write(w, NODES, seen)
        await w.create_request(request("mixed", group_names(3), cycleSettings={"concurrency": 3}))
        done = await wait_phase(w, "mixed", ("Successful", "Failed"))
        assert done["status"]["phase"] == "Successful", done["status"]
        group_of = {i.node_name: i.group for i in w.sim.cloud.state.instances.values()}
        assert {group_of.get(name) for name in annotated} == {"workers-c"}
        for node in await nodes(w):
            assert SCALE_DOWN_DISABLED not in (node["metadata"].get("annotations") or {})


async def test_a_terminal_phase_stays_terminal() -> None:
    """Successful and Failed are final: what happens afterwards (new nodes in the group, other
    nodes replaced, the spec edited, even into a valid one) wakes no further action."""
    async with world(scenario(2, groups=2)) as w:
        assert w.client is not None
        transitions = Transitions(w)
        await w.create_request(request("done", ["workers-a"], cycleSettings={"concurrency": 1}))
        await wait_phase(w, "done", "Successful")
        await _cleaned_up(w, "done")
        await w.create_request(request("broken", ["workers-a"], provider="gcp"))
        await wait_phase(w, "broken", "Failed")
        await _cleaned_up(w, "broken")
        ended = {name: (await w.request(name) or {})["status"] for name in ("done", "broken")}
        children_before = {c["metadata"]["name"] for c in await children(w, "done")}
        changes = len(transitions.seen)
        # The world changes: spec edits (the failed one's fixed), a new node in their group,
        # and another request replacing nodes of the other group.
        for name, spec in (
            ("done", {"cycleSettings": {"concurrency": 2, "method": "Wait"}}),
            ("broken", {"provider": None}),
        ):
            await w.client.patch(CYCLENODEREQUESTS, name, {"spec": spec}, NS)
        state = w.sim.cloud.state
        state.update_group("workers-a", desired=state.groups["workers-a"].desired + 1)

        async def grown() -> bool:
            members = [state.instances[i] for i in state.groups["workers-a"].members]
            names = {n["metadata"]["name"] for n in await nodes(w)}
            return len(members) == 2 and all(
                m.lifecycle == IN_SERVICE and m.node_name in names for m in members
            )

        await until(grown, timeout=60, what="a new node in workers-a")
        await w.create_request(request("later", ["workers-b"], cycleSettings={"concurrency": 1}))
        await wait_phase(w, "later", "Successful")
        # Unchanged, but for the zeros the API server's schema defaults fill in on a write.
        defaults = {"activeChildren": 0, "numNodesCycled": 0}
        for name in ("done", "broken"):
            assert (await w.request(name) or {})["status"] == {**defaults, **ended[name]}, name
        assert [t for t in transitions.seen[changes:] if t.name in ("done", "broken")] == []
        assert {c["metadata"]["name"] for c in await children(w, "done")} == children_before
        assert await children(w, "broken") == []
        members = [state.instances[i] for i in state.groups["workers-a"].members]
        assert len(members) == 2 and all(m.lifecycle == IN_SERVICE for m in members)
        assert_clean(await nodes(w))


async def _cleaned_up(w: World, name: str) -> None:
    async def check() -> bool:
        status = (await w.request(name) or {}).get("status") or {}
        return any(
            c["type"] == "CleanedUp" and c["status"] == "True"
            for c in status.get("conditions") or ()
        )

    await until(check, timeout=60, what=f"{name} cleaned up")


async def test_deleting_a_request_mid_roll_puts_its_nodes_back() -> None:
    async with world(scenario(3, workloads=blocking_budget)) as w:
        assert w.client is not None
        transitions = Transitions(w)
        await w.create_request(request("doomed", GROUP, cycleSettings={"concurrency": 1}))

        async def draining() -> bool:
            found = await children(w, "doomed")
            return bool(found) and found[0].get("status", {}).get("phase") == "DrainingPods"

        await until(draining, timeout=60, what="a node draining")
        await w.client.delete(CYCLENODEREQUESTS, "doomed", NS)

        async def gone() -> bool:
            return await w.request("doomed") is None

        await until(gone, timeout=60, what="the request to go")
        assert_clean(await nodes(w))
        assert not [i for i, (_, s) in (await instance_states(w)).items() if s == DETACHED]
        # The node whose drain was stopped says so, like every other phase change.
        stopped = [t for t in transitions.seen if t.kind == "CycleNodeStatus"]
        assert stopped[-1].phase == "Failed", stopped
        assert stopped[-1].message == "its CycleNodeRequest was deleted"
        await assert_every_transition_is_an_event(w, transitions)


async def test_the_cloud_is_not_polled_for_a_request_waiting_on_its_drains() -> None:
    """A drain held by its budget can last hours; polling the groups all that time (every
    instance, every interval) is work for nothing, and at a thousand nodes it was the cost
    that grew with the length of the roll."""
    async with world(scenario(2, workloads=blocking_budget)) as w:
        await w.create_request(request("held", GROUP, cycleSettings={"concurrency": 2}))

        async def held() -> bool:
            found = await children(w, "held")
            obj = await w.request("held")
            return (
                obj is not None
                and obj.get("status", {}).get("phase") == "WaitingTermination"
                and bool(found)
                and all(c.get("status", {}).get("phase") == "DrainingPods" for c in found)
            )

        await until(held, timeout=60, what="both nodes draining, held by the budget")
        stats = w.sim.server.stats

        def describes() -> int:
            ours = stats.snapshot()["by_agent"].get("nodeops", {}).get("by_verb_resource", {})
            return sum(
                bucket["requests"]
                for pair, bucket in ours.items()
                if pair.endswith("/cloud/nodegroups")
            )

        before = describes()
        # Twelve of the poller's intervals (5 s of the cluster's time each).
        await asyncio.sleep(60 / w.sim.clock.time_scale)
        assert await held()
        assert describes() == before
        # Letting the budget go ends the roll, which needs the cloud again.
        assert w.client is not None
        budgets, _ = await w.client.list(PDBS)
        for pdb in budgets:
            if pdb["metadata"]["name"] == "api":
                await w.client.delete(PDBS, "api", pdb["metadata"]["namespace"])
        done = await wait_phase(w, "held", ("Successful", "Failed"), timeout=120)
        assert done["status"]["phase"] == "Successful", done["status"]


async def test_a_request_waits_for_another_cycling_the_same_nodes() -> None:
    async with world(scenario(2)) as w:
        await w.create_request(request("first", GROUP, cycleSettings={"concurrency": 1}))
        await w.create_request(request("second", GROUP, cycleSettings={"concurrency": 1}))
        first = await wait_phase(w, "first", "Successful")
        second = await wait_phase(w, "second", "Successful")
        assert second["status"]["progress"]["total"] == 2
        # The second selected the replacements the first left, not the same old nodes.
        old = {c["spec"]["nodeName"] for c in await children(w, "first")}
        assert len(old) == first["status"]["progress"]["total"] == 2
        assert not old & {c["spec"]["nodeName"] for c in await children(w, "second")}


def _pod(name: str, node: str, labels: dict[str, str], annotations: dict[str, str]) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


async def test_healing_leaves_nodes_still_being_replaced_to_their_cycle() -> None:
    """One node of a batch fails while the other still waits for its pod: Healing puts back the
    failed one at once, but the other stays cordoned and detached until its replacement is done,
    and only then is the request Failed."""
    # Only the pods below: the second node's drain, once its pod is done, has nothing to wait for.
    async with world(scenario(2, workloads=lambda _: [])) as w:
        assert w.client is not None
        first, second = sorted(n["metadata"]["name"] for n in await nodes(w))
        # `first` cannot be drained (a budget allowing no disruption of its pod); `second` has a
        # pod that must finish on its own.
        await w.client.create(
            PODS, _pod("stuck", first, {"app": "stuck", "in-lb": "yes"}, {}), "shop"
        )
        await w.client.create(
            PDBS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "stuck", "namespace": "shop"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "stuck"}}},
            },
            "shop",
        )
        await w.client.create(
            PODS,
            _pod("job", second, {"app": "job"}, {"nodeops.dev/do-not-disrupt": "true"}),
            "shop",
        )
        await w.create_request(
            request(
                "split",
                GROUP,
                cycleSettings={
                    "method": "Wait",
                    "concurrency": 2,
                    "labelsToRemove": ["in-lb"],
                    "drainDeadline": "30s",
                    "onDrainDeadline": "Fail",
                },
            )
        )
        healing = await wait_phase(w, "split", "Healing", timeout=120)
        assert "not drained within its drain deadline" in healing["status"]["message"]

        async def first_put_back() -> bool:
            node = await w.client.get(NODES, first)  # type: ignore[union-attr]
            return not node["spec"].get("unschedulable") and NODE_FINALIZER not in (
                node["metadata"].get("finalizers") or ()
            )

        await until(first_put_back, timeout=60, what=f"{first} put back")
        state = w.sim.cloud.state
        by_node = {i.node_name: i for i in state.instances.values()}
        assert (by_node[first].group, by_node[first].lifecycle) == ("workers-a", IN_SERVICE)
        # The label went before the drain began.
        stuck = await w.client.get(PODS, "stuck", "shop")
        assert "in-lb" not in stuck["metadata"]["labels"]
        # `second` is still being replaced: not re-attached, still cordoned, request not Failed.
        await asyncio.sleep(1)
        still = await w.client.get(NODES, second)
        assert still["spec"].get("unschedulable")
        assert by_node[second].group is None
        assert (await w.request("split") or {})["status"]["phase"] == "Healing"
        phases = {c["spec"]["nodeName"]: c["status"]["phase"] for c in await children(w, "split")}
        assert phases == {first: "Failed", second: "WaitingPods"}
        # Its pod finishes: the node is replaced after all, and the request ends Failed.
        await w.client.delete(PODS, "job", "shop", grace_period=0)
        failed = await wait_phase(w, "split", "Failed", timeout=120)
        phases = {c["spec"]["nodeName"]: c["status"]["phase"] for c in await children(w, "split")}
        assert phases == {first: "Failed", second: "Successful"}
        assert second not in {n["metadata"]["name"] for n in await nodes(w)}
        assert not [i for i, (_, s) in (await instance_states(w)).items() if s == DETACHED]
        assert_clean(await nodes(w))
        assert w.record.violations == []
        assert failed["status"]["progress"]["failed"] == 1
        # Metrics: the failure by its reason, and how long the phases took.
        text = generate_latest(REGISTRY).decode()
        assert (
            'nodeops_cycling_failures_total{kind="CycleNodeStatus",reason="DrainDeadline"}' in text
        )
        assert 'nodeops_cycling_failures_total{kind="CycleNodeRequest",reason="NodeFailed"}' in text
        assert (
            'nodeops_cycling_phase_duration_seconds_count{kind="CycleNodeStatus",'
            'phase="WaitingPods"}' in text
        )
        assert 'nodeops_cycling_requests{phase="Failed"}' in text


async def test_progress_is_driven_by_events_not_by_polling() -> None:
    """With the retry interval of every phase far longer than the test, a roll still goes
    through: each step is started by what it waits for (a child's phase, a node, the cloud
    poller), not by a timer."""
    async with world(scenario(3), settings={"check_interval": 1e6}) as w:
        await w.create_request(request("evented", GROUP, cycleSettings={"concurrency": 2}))
        done = await wait_phase(w, "evented", ("Successful", "Failed"), timeout=120)
        assert done["status"]["phase"] == "Successful", done["status"]
        assert done["status"]["progress"]["cycled"] == 3


async def test_pending_gives_up_when_the_cloud_and_the_cluster_never_agree() -> None:
    async with world(scenario(2), settings={"equilibrium_wait_limit": 60.0}) as w:
        state = w.sim.cloud.state
        # The group launches an instance that never registers its node.
        group = state.groups["workers-a"]
        group.spec = group.spec.model_copy(update={"boot_seconds": 1e6})
        state.update_group("workers-a", desired=group.desired + 1)
        await w.create_request(request("uneven", GROUP))
        failed = await wait_phase(w, "uneven", "Failed", timeout=120)
        assert "did not agree within 60s" in failed["status"]["message"]
        assert "has no node yet" in failed["status"]["message"]
        # Nothing was touched.
        assert await children(w, "uneven") == []
        assert_clean(await nodes(w))


async def test_an_instance_that_cannot_be_terminated_is_not_put_back_without_its_node() -> None:
    """A node is drained and deleted, then its instance refuses to terminate: Healing must not
    re-attach it (its group would count a machine with no node as capacity)."""
    async with world(scenario(2, workloads=lambda _: [])) as w:
        assert w.client is not None
        state = w.sim.cloud.state
        for iid in state.groups["workers-a"].members:
            state.instances[iid].termination_protected = True
        await w.create_request(request("stuck", GROUP, cycleSettings={"concurrency": 1}))
        failed = await wait_phase(w, "stuck", "Failed", timeout=120)
        assert "OperationNotPermitted" in failed["status"]["message"]
        (child,) = await children(w, "stuck")
        gone = child["spec"]["nodeName"]
        instance = next(i for i in state.instances.values() if i.node_name == gone)
        assert instance.group is None, "a node-less instance was put back into its group"
        group = state.groups["workers-a"]
        members = [state.instances[i] for i in group.members]
        assert all(m.lifecycle == IN_SERVICE and not m.node_gone for m in members)
        assert w.client is not None
        events, _ = await w.client.list(EVENTS, NS)
        assert any(e.get("reason") == "InstanceLeftDetached" for e in events)
        assert_clean(await nodes(w))


async def test_scale_up_notices_soon_when_the_cloud_lags_behind_ready_nodes() -> None:
    """A replacement's Node is Ready while the cloud keeps its instance pending a little
    longer (a lifecycle hook, say), and no event will say when that ends. With a cloud poll and
    a retry interval far longer than that, the request still moves on within seconds of the
    instance entering service: it looks at the cloud again soon while the cluster is ahead."""
    from nodeops.kube import objects as o

    lagging = scenario(2)
    async with world(lagging, settings={"check_interval": 60.0, "cloud_poll_interval": 600.0}) as w:
        group = w.sim.cloud.state.groups["workers-a"]
        group.spec = group.spec.model_copy(update={"in_service_seconds": 10.0})
        await w.create_request(request("lagging", GROUP, cycleSettings={"concurrency": 2}))
        scaling = await wait_phase(w, "lagging", "ScalingUp", timeout=60)
        started = o.parse_time(scaling["status"]["scaleUpStarted"])
        assert started is not None

        async def past_scale_up() -> float | None:
            obj = await w.request("lagging")
            phase = ((obj or {}).get("status") or {}).get("phase")
            if phase in ("CordoningNode", "WaitingTermination", "Initialised", "Successful"):
                return (w.sim.clock.now() - started).total_seconds()
            assert phase == "ScalingUp", obj
            return None

        took = await until(past_scale_up, timeout=120, what="the end of the scale-up")
        # Boot 30 s + 10 s pending after registration; before, the request waited for the
        # next retry (3 x 60 s) or poll (600 s).
        assert 40 <= took <= 60, took
        done = await wait_phase(w, "lagging", "Successful", timeout=120)
        assert done["status"]["progress"]["cycled"] == 2


async def test_a_request_an_earlier_release_listed_its_nodes_in_is_rolled_to_the_end() -> None:
    """A manager upgraded mid-roll finds the queue in `status.nodesAvailable`, as releases
    before the selection label kept it: it labels those nodes and rolls them all, not just
    the batch in flight."""
    async with world(scenario(3), controllers=False) as w:
        assert w.client is not None
        old = sorted(await nodes(w), key=lambda n: n["metadata"]["name"])
        listed = [
            {
                "name": n["metadata"]["name"],
                "providerId": n["spec"]["providerID"],
                "nodeGroupName": GROUP[0],
            }
            for n in old
        ]
        await w.create_request(request("legacy", GROUP, cycleSettings={"concurrency": 1}))
        await w.client.patch_status(
            CYCLENODEREQUESTS,
            "legacy",
            {
                "phase": "Initialised",
                "provider": "sim",
                "nodeGroups": GROUP,
                "concurrency": 1,
                "nodesToTerminate": listed,
                "nodesAvailable": listed,
            },
            NS,
        )
        w.start_manager()
        done = await wait_phase(w, "legacy", ("Successful", "Failed"))
        assert done["status"]["phase"] == "Successful", done["status"]
        assert "nodesToTerminate" not in done["status"]
        assert "nodesAvailable" not in done["status"]
        assert done["status"]["progress"]["total"] == 3
        assert done["status"]["selectedByGroup"] == {GROUP[0]: 3}
        after = await nodes(w)
        assert not {n["metadata"]["name"] for n in old} & {n["metadata"]["name"] for n in after}
        assert len(after) == 3
        assert_clean(after)
