"""Scheduling predicates: quantities, requests, taints and tolerations, affinity, fit, score."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NODES, PODS, ApiClient
from nodeops.sim.cluster.informer import Informer
from nodeops.sim.cluster.quantity import cpu_millis, parse_quantity, units
from nodeops.sim.cluster.scheduler import Scheduler, feasible_nodes_to_find
from nodeops.sim.cluster.scheduling import (
    NodeUsage,
    effective_taints,
    least_allocated_score,
    node_allocatable,
    node_change_may_help,
    node_matches_affinity,
    pod_requests,
    resource_filter,
    static_filter,
    summarize_reasons,
    tolerates,
    untolerated_taint,
)


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    ready: str = "True",
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pod(
    name: str = "p",
    *,
    cpu: str | None = "100m",
    memory: str | None = "128Mi",
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]
    }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def required_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


# -- quantities ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Decimal("0.1")),
        ("1.5", Decimal("1.5")),
        ("2Gi", Decimal(2 * 2**30)),
        ("512Mi", Decimal(512 * 2**20)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("3", Decimal(3)),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_quantity_rounding_and_errors() -> None:
    assert cpu_millis("0.0001") == 1
    assert cpu_millis("250m") == 250
    assert cpu_millis(2) == 2000
    assert units("1.5Ki") == 1536
    assert units(None) == 0
    with pytest.raises(ValueError):
        parse_quantity("lots")
    with pytest.raises(ValueError):
        parse_quantity("")


# -- requests -----------------------------------------------------------------------------------


def test_pod_requests_sum_containers_and_take_the_largest_init_container() -> None:
    p = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
                {"resources": {"limits": {"cpu": "200m"}}},  # requests default to limits
            ],
            "initContainers": [
                {"resources": {"requests": {"cpu": "1", "memory": "10Mi"}}},
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
            ],
            "overhead": {"cpu": "10m"},
        }
    }
    req = pod_requests(p)
    # containers 300m + sidecar 50m = 350m < the 1-core init container: 1000m; + 10m overhead.
    assert req["cpu"] == 1010
    assert req["memory"] == 100 * 2**20


# -- taints and tolerations ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Equal", "value": "v"}, {"key": "k", "value": "v"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "w"}, False),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "w"}, True),
        ({"operator": "Exists"}, {"key": "anything", "effect": "NoExecute"}, True),
        ({"key": "", "operator": "Equal"}, {"key": "k"}, False),
        (
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "k", "effect": "NoExecute"},
            False,
        ),
        (
            {"key": "k", "operator": "Exists", "effect": ""},
            {"key": "k", "effect": "NoExecute"},
            True,
        ),
        ({"key": "other", "operator": "Exists"}, {"key": "k"}, False),
    ],
)
def test_tolerates(toleration: dict[str, Any], taint: dict[str, Any], expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_untolerated_taint_ignores_prefer_no_schedule() -> None:
    taints = [
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "hard", "effect": "NoSchedule"},
    ]
    assert untolerated_taint(taints, []) == {"key": "hard", "effect": "NoSchedule"}
    assert untolerated_taint(taints, [{"key": "hard", "operator": "Exists"}]) is None


def test_effective_taints_anticipate_cordon_and_unready() -> None:
    keys = {(t["key"], t["effect"]) for t in effective_taints(node(unschedulable=True))}
    assert keys == {("node.kubernetes.io/unschedulable", "NoSchedule")}
    keys = {(t["key"], t["effect"]) for t in effective_taints(node(ready="Unknown"))}
    assert keys == {("node.kubernetes.io/unreachable", "NoSchedule")}
    keys = {(t["key"], t["effect"]) for t in effective_taints(node(ready="False"))}
    assert keys == {("node.kubernetes.io/not-ready", "NoSchedule")}


def test_static_filter_reasons() -> None:
    assert static_filter(pod(), node()) is None
    assert static_filter(pod(), node(unschedulable=True)) == "node(s) were unschedulable"
    cordon_ok = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    assert static_filter(pod(tolerations=cordon_ok), node(unschedulable=True)) is None
    tainted = node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    assert static_filter(pod(), tainted) == "node(s) had untolerated taint {gpu: yes}"
    assert static_filter(pod(tolerations=[{"key": "gpu", "operator": "Exists"}]), tainted) is None
    assert static_filter(pod(), node(ready="False")) is not None
    assert static_filter(pod(tolerations=[{"operator": "Exists"}]), node(ready="False")) is None


# -- affinity -----------------------------------------------------------------------------------


def test_node_selector_and_required_affinity() -> None:
    n = node(labels={"zone": "a", "size": "8"})
    assert node_matches_affinity(pod(node_selector={"zone": "a"})["spec"], n)
    assert not node_matches_affinity(pod(node_selector={"zone": "b"})["spec"], n)
    cases = [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "gpu", "operator": "NotIn", "values": ["x"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, True),
        ({"key": "size", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "size", "operator": "Lt", "values": ["4"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["4"]}, False),
    ]
    for expr, expected in cases:
        spec = pod(affinity=required_affinity({"matchExpressions": [expr]}))["spec"]
        assert node_matches_affinity(spec, n) is expected, expr


def test_affinity_terms_are_ored_and_requirements_anded() -> None:
    n = node("n7", labels={"zone": "a"})
    miss = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}
    both = {
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n8"]}],
    }
    assert node_matches_affinity(pod(affinity=required_affinity(miss, by_name))["spec"], n)
    assert not node_matches_affinity(pod(affinity=required_affinity(both))["spec"], n)
    # An empty term matches nothing, and an empty list of terms matches nothing.
    assert not node_matches_affinity(pod(affinity=required_affinity({}))["spec"], n)
    assert not node_matches_affinity(pod(affinity=required_affinity())["spec"], n)


# -- fit and score ------------------------------------------------------------------------------


def test_resource_filter() -> None:
    alloc = node_allocatable(node(cpu="1", memory="1Gi", pods="2"))
    usage = NodeUsage()
    req = pod_requests(pod(cpu="600m", memory="100Mi"))
    assert resource_filter(req, alloc, usage) is None
    usage.add(req)
    assert resource_filter(req, alloc, usage) == "Insufficient cpu"
    small = pod_requests(pod(cpu="100m", memory="2Gi"))
    assert resource_filter(small, alloc, usage) == "Insufficient memory"
    tiny = pod_requests(pod(cpu="1m", memory="1Mi"))
    usage.add(tiny)
    assert resource_filter(tiny, alloc, usage) == "Too many pods"
    usage.remove(tiny)
    assert usage.pods == 1


def test_least_allocated_prefers_emptier_nodes_and_counts_requestless_pods() -> None:
    alloc = node_allocatable(node())
    empty, busy = NodeUsage(), NodeUsage()
    busy.add(pod_requests(pod(cpu=None, memory=None)))  # scored as 100m / 200Mi
    req = pod_requests(pod())
    assert least_allocated_score(req, alloc, empty) > least_allocated_score(req, alloc, busy)


def test_feasible_nodes_to_find_follows_kube() -> None:
    assert feasible_nodes_to_find(50) == 50
    assert feasible_nodes_to_find(1000) == 420
    assert feasible_nodes_to_find(5000) == 500
    assert feasible_nodes_to_find(200) == 100


def test_node_change_may_help_only_for_improvements() -> None:
    base = node()
    assert node_change_may_help(None, base)
    assert not node_change_may_help(base, node(unschedulable=True))
    assert node_change_may_help(node(unschedulable=True), base)
    assert not node_change_may_help(base, node(ready="Unknown"))
    assert node_change_may_help(node(ready="Unknown"), base)
    tainted = node(taints=[{"key": "k", "effect": "NoSchedule"}])
    assert not node_change_may_help(base, tainted)
    assert node_change_may_help(tainted, base)
    assert node_change_may_help(base, node(cpu="8"))
    assert node_change_may_help(base, node(labels={"new": "label"}))


def test_summarize_reasons_sorts_as_kube_scheduler_does() -> None:
    # FitError.Error sorts the "count reason" strings, not the reasons: as kube-scheduler
    # (1.24) wrote it for the same pod on a real control plane.
    assert (
        summarize_reasons(3, {"Insufficient cpu": 2, "node(s) were unschedulable": 1})
        == "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
    )
    assert (
        summarize_reasons(
            14, {"Insufficient cpu": 4, "node(s) didn't match Pod's node affinity/selector": 10}
        )
        == "0/14 nodes are available: 10 node(s) didn't match Pod's node affinity/selector, "
        "4 Insufficient cpu."
    )


# -- node selection -----------------------------------------------------------------------------


def _scheduler(nodes: list[dict[str, Any]]) -> Scheduler:
    clock = Clock(1.0)
    client = ApiClient("http://127.0.0.1:1")
    node_inf = Informer(client, NODES)
    pod_inf = Informer(client, PODS)
    sched = Scheduler(clock, client, pod_inf, node_inf)
    for n in nodes:
        node_inf._upsert(n)
    return sched


def test_select_node_spreads_and_reports_reasons() -> None:
    sched = _scheduler([node(f"n{i}") for i in range(3)])
    placed: dict[str, int] = {}
    for i in range(6):
        p = pod(f"p{i}")
        chosen, _ = sched.select_node(p)
        assert chosen is not None
        placed[chosen] = placed.get(chosen, 0) + 1
        sched._account(("default", f"p{i}"), chosen, p)
    assert placed == {"n0": 2, "n1": 2, "n2": 2}
    chosen, reasons = sched.select_node(pod("big", cpu="64"))
    assert chosen is None
    assert reasons == {"Insufficient cpu": 3}


def test_select_node_respects_cordon_selector_and_taints() -> None:
    sched = _scheduler(
        [
            node("cordoned", unschedulable=True),
            node("tainted", taints=[{"key": "dedicated", "effect": "NoSchedule"}]),
            node("plain", labels={"disk": "ssd"}),
            node("other"),
        ]
    )
    chosen, _ = sched.select_node(pod(node_selector={"disk": "ssd"}))
    assert chosen == "plain"
    chosen, reasons = sched.select_node(pod(node_selector={"disk": "hdd"}))
    assert chosen is None
    assert reasons["node(s) didn't match Pod's node affinity/selector"] == 2
    assert reasons["node(s) were unschedulable"] == 1
    assert reasons["node(s) had untolerated taint {dedicated: }"] == 1
