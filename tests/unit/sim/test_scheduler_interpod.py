"""The simulated scheduler holds pods to their inter-pod rules as kube-scheduler's
PodTopologySpread and InterPodAffinity filters do, and words the refusals as they do."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.common.interpod import (
    AFFINITY,
    ANTI_AFFINITY,
    EXISTING_ANTI_AFFINITY,
    SPREAD_MISSING_LABEL,
    SPREAD_SKEW,
    pod_rules,
)
from nodeops.sim.cluster.scheduler import Scheduler
from nodeops.sim.cluster.scheduling import summarize_reasons
from tests.unit.sim.test_cluster_scheduling import _scheduler, node, pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def labelled(p: dict[str, Any], **labels: str) -> dict[str, Any]:
    p["metadata"]["labels"] = labels
    return p


def anti(p: dict[str, Any], key: str = HOST, **match: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    p["spec"].setdefault("affinity", {})["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [term]
    }
    return p


def affine(p: dict[str, Any], key: str = HOST, **match: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    p["spec"].setdefault("affinity", {})["podAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [term]
    }
    return p


def spread(p: dict[str, Any], key: str, max_skew: int = 1, **extra: Any) -> dict[str, Any]:
    p["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": p["metadata"]["labels"]},
            **extra,
        }
    ]
    return p


def hosts(*names: str, **kw: Any) -> list[dict[str, Any]]:
    return [node(n, labels={HOST: n, **kw.get(n, {})}) for n in names]


def place(sched: Scheduler, p: dict[str, Any]) -> str:
    chosen, reasons = sched.select_node(p)
    assert chosen is not None, reasons
    sched._account(("default", p["metadata"]["name"]), chosen, p)
    return chosen


def test_required_anti_affinity_puts_one_replica_per_node_and_then_refuses() -> None:
    sched = _scheduler(hosts("a", "b", "c"))
    placed = {place(sched, anti(labelled(pod(f"web{i}"), app="web"), app="web")) for i in range(3)}
    assert placed == {"a", "b", "c"}
    chosen, reasons = sched.select_node(anti(labelled(pod("web3"), app="web"), app="web"))
    assert chosen is None
    assert summarize_reasons(3, reasons) == f"0/3 nodes are available: 3 {ANTI_AFFINITY}."


def test_a_placed_pods_anti_affinity_keeps_others_off_its_node() -> None:
    sched = _scheduler(hosts("a", "b"))
    sched._account(("default", "loner"), "a", anti(labelled(pod("loner")), app="batch"))
    chosen, reasons = sched.select_node(labelled(pod("batch"), app="batch"))
    assert chosen == "b"
    sched._account(("default", "loner2"), "b", anti(labelled(pod("loner2")), app="batch"))
    chosen, reasons = sched.select_node(labelled(pod("batch"), app="batch"))
    assert chosen is None
    assert reasons == {EXISTING_ANTI_AFFINITY: 2}
    # Pods its terms do not select go anywhere.
    assert sched.select_node(labelled(pod("other"), app="other"))[0] is not None
    # Once it is gone, so is its rule.
    sched._unaccount(("default", "loner2"))
    assert sched.select_node(labelled(pod("batch"), app="batch"))[0] == "b"


def test_required_affinity_follows_the_pods_it_names_and_lets_the_first_of_a_group_in() -> None:
    zones = {"a1": {ZONE: "a"}, "a2": {ZONE: "a"}, "b1": {ZONE: "b"}}
    sched = _scheduler(hosts("a1", "a2", "b1", **zones))
    web = affine(labelled(pod("web"), app="web"), ZONE, app="cache")
    chosen, reasons = sched.select_node(web)
    assert chosen is None
    assert reasons == {AFFINITY: 3}
    sched._account(("default", "cache"), "b1", labelled(pod("cache"), app="cache"))
    assert sched.select_node(web)[0] == "b1"
    # A pod that matches its own terms may start a group where none is yet.
    first = affine(labelled(pod("peer"), app="peer"), ZONE, app="peer")
    assert sched.select_node(first)[0] is not None


def test_spread_over_zones_keeps_the_skew() -> None:
    zones = {"a1": {ZONE: "a"}, "a2": {ZONE: "a"}, "b1": {ZONE: "b"}}
    sched = _scheduler(hosts("a1", "a2", "b1", **zones))
    sched._account(("default", "w0"), "a1", labelled(pod("w0"), app="w"))
    sched._account(("default", "w1"), "a2", labelled(pod("w1"), app="w"))
    sched._account(("default", "w2"), "b1", labelled(pod("w2"), app="w"))
    # a has 2, b has 1: only b is within a skew of 1.
    assert sched.select_node(spread(labelled(pod("w3"), app="w"), ZONE))[0] == "b1"
    chosen, reasons = sched.select_node(
        spread(labelled(pod("w3"), app="w"), ZONE, max_skew=1, minDomains=3)
    )
    # Fewer zones than minDomains: the smallest count is taken as 0.
    assert chosen is None
    assert reasons == {SPREAD_SKEW: 3}


def test_a_cordoned_empty_node_is_still_a_domain_of_zero() -> None:
    """The roll's own trap: with hostname spread and two replicas a node, a drained node holds
    every other replica to the nodes that have none, until it is deleted."""
    nodes = hosts("old", "n1", "n2")
    nodes[0]["spec"]["unschedulable"] = True
    sched = _scheduler(nodes)
    for i, where in enumerate(["n1", "n1", "n2", "n2"]):
        sched._account(("default", f"w{i}"), where, labelled(pod(f"w{i}"), app="w"))
    moved = spread(labelled(pod("moved"), app="w"), HOST)
    chosen, reasons = sched.select_node(moved)
    assert chosen is None
    assert summarize_reasons(3, reasons) == (
        f"0/3 nodes are available: 1 node(s) were unschedulable, 2 {SPREAD_SKEW}."
    )
    # Ignoring taints is the default; a constraint that honours them leaves the cordoned node
    # out (the cordon's taint), and the pod fits.
    honoured = spread(labelled(pod("moved"), app="w"), HOST, nodeTaintsPolicy="Honor")
    assert sched.select_node(honoured)[0] in {"n1", "n2"}
    # Pods being deleted are not counted.
    sched._infos["old"].update({**nodes[0], "spec": {}})
    for i in range(2):
        going = labelled(pod(f"w{i}"), app="w")
        going["metadata"]["deletionTimestamp"] = "now"
        sched._account(("default", f"w{i}"), "n1", going)
    assert sched.select_node(moved)[0] in {"n1", "old"}


def test_nodes_without_the_spread_key_are_refused_by_name() -> None:
    sched = _scheduler([node("racked", labels={"rack": "r1"}), node("bare")])
    chosen, reasons = sched.select_node(spread(labelled(pod("w"), app="w"), "rack"))
    assert chosen == "racked"
    sched._account(("default", "w0"), "racked", labelled(pod("w0"), app="w"))
    sched._account(("default", "w1"), "racked", labelled(pod("w1"), app="w"))
    sched._infos["racked"].update({**sched._infos["racked"].node, "spec": {"unschedulable": True}})
    sched._forget_order()
    chosen, reasons = sched.select_node(spread(labelled(pod("w"), app="w"), "rack"))
    assert chosen is None
    assert summarize_reasons(2, reasons) == (
        f"0/2 nodes are available: 1 {SPREAD_MISSING_LABEL}, 1 node(s) were unschedulable."
    )


def test_terms_read_namespaces_and_their_labels() -> None:
    sched = _scheduler(hosts("a"))
    other = labelled(pod("elsewhere"), app="web")
    other["metadata"]["namespace"] = "shop"
    sched._account(("shop", "elsewhere"), "a", other)
    # By default a term looks at the pod's own namespace only.
    assert sched.select_node(anti(labelled(pod("p"), app="x"), app="web"))[0] == "a"
    p = anti(labelled(pod("p"), app="x"), app="web")
    term = p["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    term[0]["namespaceSelector"] = {"matchLabels": {"team": "shop"}}
    assert sched.select_node(p)[0] == "a"  # no namespace informer: no labels, no match
    term[0]["namespaceSelector"] = {}
    assert sched.select_node(p)[1] == {ANTI_AFFINITY: 1}
    term[0].pop("namespaceSelector")
    term[0]["namespaces"] = ["shop"]
    assert sched.select_node(p)[1] == {ANTI_AFFINITY: 1}


def test_rules_are_parsed_once_per_shape_and_pods_without_any_cost_nothing() -> None:
    plain = pod("plain")
    assert not pod_rules(plain)
    a, b = (anti(labelled(pod(n), app="w"), app="w") for n in ("a", "b"))
    assert pod_rules(a) is pod_rules(b)
    assert pod_rules(labelled(pod("s"), app="w")) is pod_rules(labelled(pod("t"), app="w"))


async def test_a_pod_placed_retries_those_waiting_for_pods_to_come() -> None:
    sched = _scheduler(hosts("a"))
    web = affine(labelled(pod("web"), app="web"), HOST, app="cache")
    sched.pods._upsert(web)
    sched._schedule_one(("default", "web"), web)
    assert ("default", "web") in sched._unschedulable
    # A pod of no interest to it placed elsewhere still wakes it: kube-scheduler requeues on
    # any pod added, and so does this one for pods with affinity or spread.
    sched._account(("default", "cache"), "a", labelled(pod("cache"), app="cache"))
    assert ("default", "web") in sched._active
    assert not sched._unschedulable
    await sched.stop()
    await asyncio.sleep(0)


def _reference(
    p: dict[str, Any], nodes: list[dict[str, Any]], placed: list[tuple[str, dict[str, Any]]]
) -> dict[str, str | None]:
    """kube-scheduler's filters as its source reads, node by node over every pod, with none
    of the scheduler's indexes: what the check must agree with."""
    from nodeops.common.selectors.labels import label_selector_from_object

    ns = p["metadata"]["namespace"]
    mine = p["metadata"].get("labels") or {}
    labels_of = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}

    def pods_of(pod: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        aff = (pod["spec"].get("affinity") or {}).get(kind) or {}
        return aff.get("requiredDuringSchedulingIgnoredDuringExecution") or []

    def term_matches(term: dict[str, Any], owner_ns: str, other: dict[str, Any]) -> bool:
        namespaces = term.get("namespaces") or [owner_ns]
        sel = label_selector_from_object(term.get("labelSelector"))
        return other["metadata"]["namespace"] in namespaces and sel.matches(
            other["metadata"].get("labels") or {}
        )

    def pairs(counted: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for key, where in counted:
            value = labels_of[where].get(key)
            if value is not None:
                out[(key, value)] = out.get((key, value), 0) + 1
        return out

    spread = [
        c
        for c in p["spec"].get("topologySpreadConstraints") or []
        if c["whenUnsatisfiable"] == "DoNotSchedule"
    ]
    domains: list[dict[str, int]] = []
    for c in spread:
        sel = label_selector_from_object(c["labelSelector"])
        d: dict[str, int] = {}
        for n in nodes:
            nl = n["metadata"]["labels"]
            if all(x["topologyKey"] in nl for x in spread):
                d.setdefault(nl[c["topologyKey"]], 0)
                for where, q in placed:
                    if where == n["metadata"]["name"] and q["metadata"]["namespace"] == ns:
                        if not q["metadata"].get("deletionTimestamp") and sel.matches(
                            q["metadata"].get("labels") or {}
                        ):
                            d[nl[c["topologyKey"]]] += 1
        domains.append(d)
    affinity, anti = pods_of(p, "podAffinity"), pods_of(p, "podAntiAffinity")
    aff_counts = pairs(
        [
            (t["topologyKey"], where)
            for where, q in placed
            if affinity and all(term_matches(t, ns, q) for t in affinity)
            for t in affinity
        ]
    )
    anti_counts = pairs(
        [(t["topologyKey"], where) for where, q in placed for t in anti if term_matches(t, ns, q)]
    )
    existing = pairs(
        [
            (t["topologyKey"], where)
            for where, q in placed
            for t in pods_of(q, "podAntiAffinity")
            if term_matches(t, q["metadata"]["namespace"], p)
        ]
    )
    out: dict[str, str | None] = {}
    for n in nodes:
        nl, name, reason = n["metadata"]["labels"], n["metadata"]["name"], None
        for c, d in zip(spread, domains, strict=True):
            if c["topologyKey"] not in nl:
                reason = reason or SPREAD_MISSING_LABEL
                continue
            own = 1 if label_selector_from_object(c["labelSelector"]).matches(mine) else 0
            if d and d.get(nl[c["topologyKey"]], 0) + own - min(d.values()) > c["maxSkew"]:
                reason = reason or SPREAD_SKEW
        if reason is None and affinity:
            ok = all(t["topologyKey"] in nl for t in affinity)
            found = ok and all(
                aff_counts.get((t["topologyKey"], nl[t["topologyKey"]]), 0) > 0 for t in affinity
            )
            if ok and not found:
                found = not aff_counts and all(term_matches(t, ns, p) for t in affinity)
            if not found:
                reason = AFFINITY
        if reason is None and any(
            anti_counts.get((t["topologyKey"], nl.get(t["topologyKey"])), 0) for t in anti
        ):
            reason = ANTI_AFFINITY
        if reason is None and any(existing.get(kv, 0) for kv in nl.items()):
            reason = EXISTING_ANTI_AFFINITY
        out[name] = reason
    return out


def test_the_indexed_check_agrees_with_a_walk_over_every_pod() -> None:
    import random

    from nodeops.common.interpod import InterPodCheck, PlacedPods

    rng = random.Random(7)
    apps, keys = ["a", "b", "c"], [HOST, ZONE]

    def rules(p: dict[str, Any]) -> dict[str, Any]:
        for kind in ("podAffinity", "podAntiAffinity"):
            if rng.random() < 0.3:
                term = {
                    "labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
                    "topologyKey": rng.choice(keys),
                }
                p["spec"].setdefault("affinity", {})[kind] = {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term]
                }
        if rng.random() < 0.4:
            p["spec"]["topologySpreadConstraints"] = [
                {
                    "maxSkew": rng.choice([1, 2]),
                    "topologyKey": rng.choice([*keys, "rack"]),
                    "whenUnsatisfiable": rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                    "labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
                }
            ]
        return p

    for _ in range(200):
        nodes = [node(f"n{i}", labels={HOST: f"n{i}", ZONE: rng.choice("xyz")}) for i in range(6)]
        placed: list[tuple[str, dict[str, Any]]] = []
        index = PlacedPods()
        for j in range(rng.randrange(12)):
            q = rules(labelled(pod(f"q{j}"), app=rng.choice(apps)))
            q["metadata"]["namespace"] = rng.choice(["default", "other"])
            if rng.random() < 0.2:
                q["metadata"]["deletionTimestamp"] = "now"
            where = rng.choice(nodes)["metadata"]["name"]
            placed.append((where, q))
            index.add((q["metadata"]["namespace"], f"q{j}"), where, q)
        p = rules(labelled(pod("incoming"), app=rng.choice(apps)))
        sched = _scheduler(nodes)
        check = InterPodCheck(p, pod_rules(p), sched._infos, index, lambda _: {})
        got = {n["metadata"]["name"]: check.reason(n["metadata"]["labels"]) for n in nodes}
        assert got == _reference(p, nodes, placed), (p, placed)


async def test_a_class_refused_for_want_of_pods_is_asked_again_once_a_pod_is_placed() -> None:
    """Its refused pod may be gone (its ReplicaSet replaced it): the next of its class must not
    be refused on the old answer once the pod it waited for is there."""
    sched = _scheduler(hosts("a"))
    web = affine(labelled(pod("web"), app="web"), HOST, app="cache")
    sched.pods._upsert(web)
    sched._schedule_one(("default", "web"), web)
    sched._forget_pending(("default", "web"))
    sched._account(("default", "cache"), "a", labelled(pod("cache"), app="cache"))
    again = affine(labelled(pod("web2"), app="web"), HOST, app="cache")
    sched.pods._upsert(again)
    sched._schedule_one(("default", "web2"), again)
    assert ("default", "web2") not in sched._unschedulable
    assert ("default", "web2") in sched._binding
    await sched.stop()
