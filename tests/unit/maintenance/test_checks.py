"""Checks that read the node or the cluster's nodes, and the notification schedules."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest

from nodeops.controllers.maintenance.plugins import checks, pods, schedules
from nodeops.controllers.maintenance.plugins.base import PluginError, ScheduleContext
from nodeops.controllers.maintenance.state import State

from .fakes import NOW, MemoryCluster, context, node


def make(cls: Any, config_cls: Any, **config: Any) -> Any:
    return cls(config_cls.model_validate(config))


async def test_has_label_and_annotation() -> None:
    n = node("a", {"k": "v"}, annotations={"x": "1"})
    assert (await make(checks.HasLabel, checks.KeyValueConfig, key="k").check(context(n))).passed
    r = await make(checks.HasLabel, checks.KeyValueConfig, key="k", value="w").check(context(n))
    assert not r.passed and "not 'w'" in r.info["reason"]
    c = make(checks.HasAnnotation, checks.KeyValueConfig, key="x", value=1)
    assert (await c.check(context(n))).passed  # YAML `value: 1` means the text "1"
    assert not (
        await make(checks.HasAnnotation, checks.KeyValueConfig, key="y").check(context(n))
    ).passed


async def test_any_label_condition_node_count() -> None:
    a, b = node("a"), node("b", {"go": "yes"})
    cluster = MemoryCluster([a, b])
    assert (
        await make(checks.AnyLabel, checks.KeyValueConfig, key="go").check(context(a, cluster))
    ).passed
    assert not (
        await make(checks.AnyLabel, checks.KeyValueConfig, key="go", value="no").check(
            context(a, cluster)
        )
    ).passed
    ready = node("r", status={"conditions": [{"type": "Ready", "status": "True"}]})
    cond = make(checks.Condition, checks.ConditionConfig, type="Ready", status="True")
    assert (await cond.check(context(ready))).passed
    assert not (await cond.check(context(node("x")))).passed
    count = make(checks.NodeCount, checks.NodeCountConfig, count=2)
    assert (await count.check(context(a, cluster))).passed
    assert not (await count.check(context(a, MemoryCluster([a])))).passed


async def test_cluster_semver() -> None:
    keys = MemoryCluster().keys
    old = node("old", {"v": "1.2.3", keys.profile: "p"})
    new = node("new", {"v": "v1.10.0", keys.profile: "q"})
    cluster = MemoryCluster([old, new])
    check = make(checks.ClusterSemver, checks.ClusterSemverConfig, key="v")
    assert (await check.check(context(old, cluster))).passed
    assert not (await check.check(context(new, cluster))).passed
    scoped = make(checks.ClusterSemver, checks.ClusterSemverConfig, key="v", profileScoped=True)
    assert not (await scoped.check(context(old, cluster, profile="p"))).passed
    with pytest.raises(PluginError, match="no label v"):
        await check.check(context(node("none"), cluster))


def in_maintenance(
    name: str, keys: Any, labels: dict[str, str], since: Any = NOW
) -> dict[str, Any]:
    data = {
        "Profiles": {
            "p": {"Current": "in-maintenance", "Previous": "in-maintenance",
                  "Transition": since.strftime("%Y-%m-%dT%H:%M:%SZ")}
        }
    }  # fmt: skip
    return node(
        name,
        {keys.state: "in-maintenance", keys.profile: "p", **labels},
        annotations={keys.data: orjson.dumps(data).decode()},
    )


async def test_max_maintenance_scope_group_and_skip_after() -> None:
    keys = MemoryCluster().keys
    me = node("me", {keys.profile: "p", "zone": "a"})
    busy = in_maintenance("busy", keys, {"zone": "a"})
    other_zone = in_maintenance("far", keys, {"zone": "b"})
    stuck = in_maintenance("stuck", keys, {"zone": "a"}, since=NOW - timedelta(hours=5))
    cluster = MemoryCluster([me, busy, other_zone, stuck])
    plain = make(checks.MaxMaintenance, checks.MaxMaintenanceConfig, max=3)
    assert not (await plain.check(context(me, cluster))).passed
    grouped = make(checks.MaxMaintenance, checks.MaxMaintenanceConfig, max=3, groupBy=["zone"])
    r = await grouped.check(context(me, cluster))
    assert r.passed and r.info["maintained"] == 2 and r.info["scope"] == {"zone": "a"}
    legacy = make(checks.MaxMaintenance, checks.MaxMaintenanceConfig, max=2, groupLabel="zone")
    assert not (await legacy.check(context(me, cluster))).passed
    skip = make(
        checks.MaxMaintenance, checks.MaxMaintenanceConfig, max=2, groupBy=["zone"], skipAfter="1h"
    )
    assert (await skip.check(context(me, cluster))).passed
    other_profile = make(checks.MaxMaintenance, checks.MaxMaintenanceConfig, max=1, profile="q")
    assert (await other_profile.check(context(me, cluster))).passed


async def test_time_window() -> None:
    tw = make(
        checks.TimeWindow,
        checks.TimeWindowConfig,
        start="09:00",
        end="11:00",
        weekdays=["wednesday"],
        exclude=["Dec 24"],
    )
    assert (await tw.check(context(node("a"), now=NOW))).passed
    assert not (await tw.check(context(node("a"), now=NOW.replace(hour=11)))).passed  # exclusive
    assert not (await tw.check(context(node("a"), now=NOW + timedelta(days=1)))).passed
    assert not (await tw.check(context(node("a"), now=NOW.replace(month=12, day=24)))).passed


async def test_wait_and_wait_exclude() -> None:
    wait = make(checks.Wait, checks.WaitConfig, duration="1h")
    r = await wait.check(context(node("a"), transition=NOW - timedelta(minutes=30)))
    assert not r.passed and r.info["remaining_seconds"] == 1800
    assert (await wait.check(context(node("a"), transition=NOW - timedelta(hours=2)))).passed
    # From Friday noon to Monday noon is 72 h, but only 24 h count without the weekend.
    friday = NOW.replace(day=3, hour=12)
    monday = friday + timedelta(days=3)
    assert checks.elapsed_excluding(friday, monday, {5, 6}) == 24 * 3600
    we = make(checks.WaitExclude, checks.WaitExcludeConfig, duration="25h", exclude=["sat", "sun"])
    assert not (await we.check(context(node("a"), now=monday, transition=friday))).passed


def pod(name: str, node_name: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running"},
    }


def critical(name: str, node_name: str, keys: Any) -> dict[str, Any]:
    p = pod(name, node_name)
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": keys.state, "operator": "In", "values": ["operational"]}
                        ]
                    },
                }
            ]
        }
    }
    return p


async def test_affinity_sends_nodes_without_critical_pods_first() -> None:
    keys = MemoryCluster().keys
    data = orjson.dumps(
        {"Profiles": {"p": {"Current": "maintenance-required", "Previous": "maintenance-required",
                            "Transition": "2026-07-01T00:00:00Z"}}}
    ).decode()  # fmt: skip
    a = node("a", {keys.profile: "p"}, annotations={keys.data: data})
    b = node("b", {keys.profile: "p"}, annotations={keys.data: data})
    cluster = MemoryCluster([a, b], pods={"a": [critical("c1", "a", keys)], "b": [pod("x", "b")]})
    aff = make(pods.Affinity, pods.AffinityConfig)
    ra = await aff.check(context(a, cluster, state=State.REQUIRED.value))
    assert not ra.passed and "node b" in ra.info["reason"]
    assert (await aff.check(context(b, cluster, state=State.REQUIRED.value))).passed
    cluster.pods["b"] = [critical("c2", "b", keys)]
    assert (await aff.check(context(a, cluster, state=State.REQUIRED.value))).passed
    enough = make(pods.Affinity, pods.AffinityConfig, minOperational=1)
    c = node("c", {keys.profile: "p"})
    cluster.node_list.append(c)
    cluster.pods["b"] = []
    assert (await enough.check(context(a, cluster, state=State.REQUIRED.value))).passed


async def test_pods_on_node_do_not_disrupt_and_selector() -> None:
    n = node("a")
    blocker = pod("db", "a", annotations={"karpenter.sh/do-not-disrupt": "true"})
    done = pod("job", "a", labels={"app": "batch"})
    done["status"]["phase"] = "Succeeded"
    running = pod("batch", "a", labels={"app": "batch"})
    cluster = MemoryCluster([n], pods={"a": [blocker, done, running]})
    dnd = make(
        pods.PodsOnNode, pods.PodsOnNodeConfig, annotations={"karpenter.sh/do-not-disrupt": True}
    )
    r = await dnd.check(context(n, cluster))
    assert not r.passed and r.info["pods"] == ["default/db"]
    sel = make(pods.PodsOnNode, pods.PodsOnNodeConfig, selector="app in (batch)", max=1)
    assert (await sel.check(context(n, cluster))).passed  # the finished job does not count
    with pytest.raises(ValueError, match="selector"):
        pods.PodsOnNodeConfig.model_validate({"selector": "app in ("})


def sched(**kw: Any) -> ScheduleContext:
    base: dict[str, Any] = dict(
        now=NOW, last_sent=None, state="maintenance-required", state_changed=False, transition=NOW
    )
    base.update(kw)
    return ScheduleContext(**base)


def test_periodic() -> None:
    p = schedules.Periodic(schedules.PeriodicConfig.model_validate({"interval": "1h"}))
    assert p.due(sched(state_changed=True, state="operational", last_sent=NOW))
    assert not p.due(sched(state="operational"))
    assert not p.due(sched(last_sent=NOW - timedelta(minutes=59)))
    assert p.due(sched(last_sent=NOW - timedelta(hours=1)))


def test_scheduled_compares_whole_dates() -> None:
    s = schedules.Scheduled(
        schedules.ScheduledConfig.model_validate({"instant": "09:30", "weekdays": ["wed"]})
    )
    assert s.due(sched())
    assert not s.due(sched(last_sent=NOW - timedelta(hours=1)))
    # A month earlier on the same day of the month is another day (the reference's bug).
    assert s.due(sched(last_sent=NOW.replace(month=6, day=1)))
    assert not s.due(sched(now=NOW.replace(hour=9, minute=0)))
    assert not s.due(sched(now=NOW + timedelta(days=1)))


def test_oneshot() -> None:
    o = schedules.Oneshot(schedules.OneshotConfig.model_validate({}))
    entered = NOW - timedelta(seconds=30)
    assert not o.due(sched(transition=entered))
    assert o.due(sched(transition=NOW - timedelta(minutes=2)))
    assert not o.due(
        sched(transition=NOW - timedelta(minutes=2), last_sent=NOW - timedelta(minutes=1))
    )
