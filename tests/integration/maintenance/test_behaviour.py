"""Controller behaviour on the simulator: profiles, reservations, drains, limits, reloads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from nodeops.controllers.maintenance.config import ConfigError
from nodeops.controllers.maintenance.engine import BLOCKED_BY_PROFILE, Engine
from nodeops.kube import errors
from nodeops.kube.resources import DEPLOYMENTS, LEASES, PODS
from tests.waiting import until

from .harness import Harness, harness


def data_of(node: dict[str, Any], h: Harness) -> dict[str, Any]:
    return orjson.loads(node["metadata"]["annotations"][h.keys.data])


async def wait_for(fn: Any, what: str, timeout: float = 20.0) -> Any:
    return await until(fn, timeout=timeout, what=what)


TWO_PROFILES = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: hasLabel, name: done, config: {key: done}}
  - {type: hasLabel, name: go_b, config: {key: go_b}}
  - {type: hasLabel, name: done_b, config: {key: done_b}}
profiles:
- name: a
  operational:
    transitions: [{check: go, next: in-maintenance}]
  in-maintenance:
    transitions: [{check: done, next: operational}]
- name: b
  operational:
    transitions: [{check: go_b, next: in-maintenance}]
  in-maintenance:
    transitions: [{check: done_b, next: operational}]
"""


async def test_only_one_profile_in_maintenance_at_a_time(tmp_path: Path) -> None:
    async with harness(tmp_path, TWO_PROFILES) as h:
        # Both want in within the same reconcile: the first profile of the label goes.
        await h.label("node-0", **{h.keys.profile: "a--b", "go": "1", "go_b": "1"})
        node = await h.wait_state("node-0", "in-maintenance")
        states = {k: v["Current"] for k, v in data_of(node, h)["Profiles"].items()}
        assert states == {"a": "in-maintenance", "b": "operational"}
        info = h.reconciler.info.get("node-0")
        assert info is not None
        waiting = next(p for p in info["profiles"] if p["name"] == "b")
        assert waiting["applied"]["transitions"][0]["error"] == BLOCKED_BY_PROFILE
        assert info["blockedByProfileNote"] == BLOCKED_BY_PROFILE
        # a leaves; then b may enter.
        await h.label("node-0", done="1", go=None)

        async def swapped() -> bool:
            h.poke("node-0")
            profiles = data_of(await h.node("node-0"), h)["Profiles"]
            return profiles["a"]["Current"] == "operational" and (
                profiles["b"]["Current"] == "in-maintenance"
            )

        await wait_for(swapped, "b in maintenance after a left")


SAME_TARGET = """\
instances:
  check:
  - {type: hasLabel, name: x, config: {key: x}}
  - {type: hasLabel, name: y, config: {key: y}}
  trigger:
  - {type: alterLabel, name: tx, config: {key: via, value: x}}
  - {type: alterLabel, name: ty, config: {key: via, value: y}}
profiles:
- name: p
  operational:
    transitions:
    - {check: x, trigger: tx, next: maintenance-required}
    - {check: y, trigger: ty, next: maintenance-required}
"""


async def test_triggers_belong_to_the_transition_that_fired(tmp_path: Path) -> None:
    async with harness(tmp_path, SAME_TARGET) as h:
        await h.label("node-0", **{h.keys.profile: "p", "y": "1"})
        node = await h.wait_state("node-0", "maintenance-required")
        assert node["metadata"]["labels"]["via"] == "y"


STAGGER = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: hasLabel, name: never, config: {key: never}}
  - type: stagger
    name: stagger
    config: {duration: 1h, leaseName: mnt, leaseNamespace: default, parallel: PARALLEL}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: maintenance-required}]
  maintenance-required:
    transitions:
    - {check: "stagger && never", next: operational}
    - {check: stagger, next: in-maintenance}
"""


async def test_stagger_reserves_only_after_the_chain_passed(tmp_path: Path) -> None:
    async with harness(tmp_path, STAGGER.replace("PARALLEL", "1")) as h:
        for n in ("node-0", "node-1"):
            await h.label(n, **{h.keys.profile: "p", "go": "1"})
        await until(
            lambda: _count_states(h, ["node-0", "node-1"], "in-maintenance", 1),
            what="one node in maintenance",
        )
        lease = await h.client.get(LEASES, "mnt-0", "default")
        holder = lease["spec"]["holderIdentity"]
        other = "node-1" if holder == "node-0" else "node-0"
        assert (await h.node(holder))["metadata"]["labels"][h.keys.state] == "in-maintenance"

        async def blocked_on_the_slot() -> bool:
            # The other may still be reconciled from before its own label arrived: poke it
            # until its last evaluation is the one in maintenance-required.
            h.poke(other)
            info = h.reconciler.info.get(other)
            transitions = info["profiles"][0]["applied"]["transitions"] if info else []
            return len(transitions) > 1 and any(
                "next slot frees in" in r for r in transitions[1]["reasons"]
            )

        await until(blocked_on_the_slot, what=f"{other} blocked on the stagger slot")
        for _ in range(3):  # and it stays blocked there
            h.poke("node-0", "node-1")
        queue = h.controller.queue

        async def worked_off() -> bool:
            return len(queue) == 0 and queue.processing == 0

        await until(worked_off, what="the pokes reconciled")
        info = h.reconciler.info.get(other)
        assert info is not None
        reasons = info["profiles"][0]["applied"]["transitions"][1]["reasons"]
        assert any("next slot frees in" in r for r in reasons)
        # `stagger && never` never passed, so it never took a slot: one Lease, one holder.
        items, _ = await h.client.list(LEASES, "default")
        assert [
            i["metadata"]["name"] for i in items if i["metadata"]["name"].startswith("mnt")
        ] == ["mnt-0"]


async def test_a_failed_write_gives_the_slot_back(tmp_path: Path) -> None:
    async with harness(tmp_path, STAGGER.replace("PARALLEL", "1"), nodes=1) as h:
        h.controller.queue.shutdown()  # decide by hand below
        await h.label("node-0", **{h.keys.profile: "p", "go": "1"})
        engine = Engine(h.source.current, h.keys, h.view)
        node = await h.node("node-0")
        out = await engine.evaluate(node, datetime.now(UTC))
        await h.reconciler._commit(node, out, None)
        node = await h.node("node-0")
        out = await engine.evaluate(node, datetime.now(UTC))
        assert out.reservations, "the transition took the stagger slot"
        await h.label("node-0", meanwhile="changed")  # the node moves on under us
        with pytest.raises(errors.Conflict):
            await h.reconciler._commit(node, out, None)
        assert await h.client.get_or_none(LEASES, "mnt-0", "default") is None


MAX_ONE = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: maxMaintenance, name: one, config: {max: 1}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: maintenance-required}]
  maintenance-required:
    transitions: [{check: one, next: in-maintenance}]
"""


async def test_max_maintenance_is_never_exceeded(tmp_path: Path) -> None:
    async with harness(tmp_path, MAX_ONE, nodes=4) as h:
        names = [f"node-{i}" for i in range(4)]
        for n in names:
            await h.label(n, **{h.keys.profile: "p", "go": "1"})
        await until(lambda: _count_states(h, names, "in-maintenance", 1), what="one in maintenance")
        await until(
            lambda: _count_states(h, names, "maintenance-required", 3), what="three waiting"
        )
        h.poke(*names)
        await until(lambda: _count_states(h, names, "in-maintenance", 1), what="still one")


async def _count_states(h: Harness, names: list[str], state: str, n: int) -> bool:
    h.poke(*names)
    found = 0
    for name in names:
        node = await h.node(name)
        if (node["metadata"].get("labels") or {}).get(h.keys.state) == state:
            found += 1
    return found == n


DRAIN = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  trigger:
  - {type: eviction, name: cordon, config: {action: cordon}}
  - {type: eviction, name: drain, config: {action: drain}}
  - {type: eviction, name: uncordon, config: {action: uncordon}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: in-maintenance}]
  in-maintenance:
    enter: cordon && drain
    transitions: [{check: "!go", trigger: uncordon, next: operational}]
"""


def deployment(name: str, replicas: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "nginx"}],
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                },
            },
        },
    }


async def test_enter_chain_drains_without_blocking(tmp_path: Path) -> None:
    async with harness(tmp_path, DRAIN, nodes=2, pods=True) as h:
        await h.client.create(DEPLOYMENTS, deployment("web", 2, "node-0"), "default")

        async def pods_on(node: str) -> list[Any]:
            items, _ = await h.client.list(PODS, "default", field_selector=f"spec.nodeName={node}")
            return [p for p in items if not p["metadata"].get("deletionTimestamp")]

        await until(lambda: _nonempty(pods_on("node-0")), what="pods on node-0")
        await h.label("node-0", **{h.keys.profile: "p", "go": "1"})
        node = await h.wait_state("node-0", "in-maintenance")

        async def drained() -> bool:
            h.poke("node-0")
            n = await h.node("node-0")
            profile = data_of(n, h)["Profiles"]["p"]
            return (
                n["spec"].get("unschedulable") is True
                and profile["Previous"] == "in-maintenance"
                and not await pods_on("node-0")
            )

        await wait_for(drained, "node-0 drained and the enter chain done", timeout=40)
        # The pods on the node when it entered maintenance were counted as shuffled.
        owner = {"owner": "deployment/default/web", "profile": "p"}
        shuffled = await until(
            lambda: _sample("nodeops_maintenance_pod_shuffle_count_total", owner),
            what="shuffle metrics",
        )
        per_replica = _sample_now("nodeops_maintenance_pod_shuffles_per_replica_total", owner)
        assert per_replica == pytest.approx(shuffled / 2)
        assert (
            _sample_now("nodeops_maintenance_nodes", {"profile": "p", "state": "in-maintenance"})
            == 1
        )
        await h.label("node-0", go=None)
        node = await h.wait_state("node-0", "operational")
        assert not node["spec"].get("unschedulable")
        assert (
            _sample_now("nodeops_maintenance_nodes", {"profile": "p", "state": "operational"}) == 1
        )


def _sample_now(name: str, labels: dict[str, str]) -> float:
    from nodeops.kube.metrics import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


async def _sample(name: str, labels: dict[str, str]) -> float:
    return _sample_now(name, labels)


FAILING = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  - {type: clusterSemver, name: newer, config: {key: version}}
profiles:
- name: failing
  operational:
    transitions: [{check: go && newer, next: maintenance-required}]
"""


async def test_plugin_failures_are_counted_and_explained(tmp_path: Path) -> None:
    async with harness(tmp_path, FAILING) as h:
        before = _sample_now(
            "nodeops_maintenance_transition_failure_count_total", {"profile": "failing"}
        )
        await h.label("node-0", **{h.keys.profile: "failing", "go": "1"})

        async def counted() -> Any:
            h.poke("node-0")
            now = _sample_now(
                "nodeops_maintenance_transition_failure_count_total", {"profile": "failing"}
            )
            return now > before

        await until(counted, what="a counted failure")
        info = h.reconciler.info.get("node-0")
        assert info is not None
        [t] = info["profiles"][0]["applied"]["transitions"]
        assert t["error"] == "failed check instances: newer"
        assert "node has no label version" in t["chain"]["info"]["newer"]["error"]
        assert (await h.node("node-0"))["metadata"]["labels"][h.keys.state] == "operational"


async def _nonempty(coro: Any) -> bool:
    return bool(await coro)


async def test_bad_reload_keeps_the_last_good_config(tmp_path: Path) -> None:
    async with harness(tmp_path, MAX_ONE) as h:
        good = h.source.current
        h.source.path.write_text(MAX_ONE.replace("max: 1", "max: -1"))
        assert not h.source.reload()
        assert h.source.current is good
        assert h.source.last_error is not None and "maintenance.yaml:4: " in h.source.last_error
        h.source.path.write_text(MAX_ONE.replace("max: 1", "max: 2"))
        assert h.source.reload()
        assert h.source.current.checks["one"].plugin.config.max == 2
        h.source.path.write_text("profiles: [")
        with pytest.raises(ConfigError):
            type(h.source)(h.source.path).load()


async def test_unreadable_record_is_reported_not_overwritten(tmp_path: Path) -> None:
    async with harness(tmp_path, MAX_ONE) as h:
        await h.label("node-0", **{h.keys.profile: "p"})
        await h.annotate("node-0", {h.keys.data: "{not json"})

        async def reported() -> Any:
            h.poke("node-0")
            info = h.reconciler.info.get("node-0")
            return info if info and info["error"] else None

        info = await wait_for(reported, "the error in the explanation")
        assert "not JSON" in info["error"]
        node = await h.node("node-0")
        assert node["metadata"]["annotations"][h.keys.data] == "{not json"
        assert await h.events("MaintenanceDataInvalid")


async def test_a_new_leader_resumes_a_drain_from_the_record(tmp_path: Path) -> None:
    """The controller stops mid-drain (a PodDisruptionBudget holds it); the next one picks the
    drain up from the node's record alone and completes the enter chain."""
    from nodeops.kube.resources import PDBS
    from nodeops.sim.serve import SimCluster, SimOptions

    sim = SimCluster(SimOptions(nodes=2, instant=True, time_scale=20.0))
    await sim.start()
    try:
        async with harness(tmp_path, DRAIN, sim=sim) as h:
            await h.client.create(DEPLOYMENTS, deployment("web", 2, "node-0"), "default")
            pdb = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 0},
            }
            await h.client.create(PDBS, pdb, "default")

            async def placed() -> bool:
                items, _ = await h.client.list(
                    PODS, "default", field_selector="spec.nodeName=node-0"
                )
                running = [p for p in items if (p.get("status") or {}).get("phase") == "Running"]
                return len(running) >= 1

            await until(placed, what="pods on node-0")
            await h.label("node-0", **{h.keys.profile: "p", "go": "1"})
            node = await h.wait_state("node-0", "in-maintenance")

            async def cordoned_and_held() -> bool:
                h.poke("node-0")
                n = await h.node("node-0")
                info = h.reconciler.info.get("node-0") or {}
                enter = (info.get("profiles") or [{}])[0].get("enter", "")
                return n["spec"].get("unschedulable") is True and enter.startswith("retry")

            await wait_for(cordoned_and_held, "drain held by the budget")
            assert data_of(await h.node("node-0"), h)["Profiles"]["p"]["Previous"] != (
                "in-maintenance"
            )
        # The first controller is gone; the budget is relaxed; a new one starts from the record.
        async with harness(tmp_path, DRAIN, sim=sim) as h2:
            await h2.client.delete(PDBS, "web", "default")

            async def resumed() -> bool:
                h2.poke("node-0")
                n = await h2.node("node-0")
                return data_of(n, h2)["Profiles"]["p"]["Previous"] == "in-maintenance"

            await wait_for(resumed, "the enter chain completed by the new controller", timeout=40)
            items, _ = await h2.client.list(PODS, "default", field_selector="spec.nodeName=node-0")
            assert not [p for p in items if not p["metadata"].get("deletionTimestamp")]
            assert node["metadata"]["name"] == "node-0"
    finally:
        await sim.stop()
