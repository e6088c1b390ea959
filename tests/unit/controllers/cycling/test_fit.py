"""The capacity check before a batch: requests, taints, selectors, affinity, inter-pod rules,
exclusions."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.common.nodematch import node_matches_affinity
from nodeops.controllers.cycling import fit
from nodeops.controllers.cycling.fit import check_fit, neighbours


def node(
    name: str, cpu: str = "2", mem: str = "4Gi", pods: int = 110, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": extra.pop("labels", {"zone": "a"})},
        "spec": {
            "taints": extra.pop("taints", []),
            "unschedulable": extra.pop("unschedulable", False),
        },
        "status": {
            "allocatable": {"cpu": cpu, "memory": mem, "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": extra.pop("ready", "True")}],
        },
    }


def no_pods(_: str) -> list[dict[str, Any]]:
    return []


def pod(
    name: str, node_name: str, cpu: str = "500m", mem: str = "512Mi", **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
    }
    body.update(spec)
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {"kind": "ReplicaSet", "controller": True, "name": "rs", "uid": "1"}
            ],
        },
        "spec": body,
        "status": {"phase": "Running"},
    }


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The nodes the check looks at, one entry a look, in order."""
    seen: list[str] = []

    def counted(spec: Any, n: Any) -> bool:
        seen.append(n["metadata"]["name"])
        return node_matches_affinity(spec, n)

    monkeypatch.setattr(fit, "node_matches_affinity", counted)
    return seen


def test_pods_fit_on_a_new_node() -> None:
    old = [pod(f"p{i}", "old") for i in range(3)]
    result = check_fit(old, [node("old"), node("new")], {"old": old}.get, exclude={"old"})
    assert result.fits and result.pods == 3


def test_the_pods_other_batches_drain_take_their_room_first() -> None:
    """Room for two pods, and another batch is draining two: the batch's one pod does not fit,
    though it would alone."""
    others = [pod(f"o{i}", "other", cpu="1") for i in range(2)]
    mine = [pod("m0", "old", cpu="1")]
    nodes = [node("old"), node("other"), node("stay", cpu="2")]
    pods_of = {"old": mine, "other": others}.get
    leaving = {"old", "other"}
    assert check_fit(mine, nodes, pods_of, exclude=leaving).fits
    result = check_fit(mine, nodes, pods_of, exclude=leaving, moving=others)
    assert not result.fits
    assert (result.pods, result.moving, result.unplaced) == (3, 2, ["default/m0"])
    assert result.message == (
        "1 of 3 pods do not fit on the ready nodes (with 2 still on nodes other batches drain; "
        "first: default/m0: not enough cpu, memory or pods)"
    )
    # Evicted, they still count until they are gone: their replacements may not be placed.
    for p in others:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not check_fit(mine, nodes, pods_of, exclude=leaving, moving=others).fits
    # A DaemonSet's pod goes with its node and needs no room.
    for p in others:
        p["metadata"]["ownerReferences"] = [
            {"kind": "DaemonSet", "controller": True, "name": "d", "uid": "2"}
        ]
    assert check_fit(mine, nodes, pods_of, exclude=leaving, moving=others).fits


def test_pods_still_to_be_placed_take_their_room_before_the_batch() -> None:
    """Room for two pods, and one made a moment ago waits for the scheduler: the batch's two
    do not both fit. Pending pods that fit nowhere hold nothing."""
    mine = [pod(f"m{i}", "old", cpu="1") for i in range(2)]
    nodes = [node("old"), node("stay", cpu="2")]
    pods_of = {"old": mine}.get
    waiting = [pod("w0", "", cpu="1")]
    assert check_fit(mine, nodes, pods_of, exclude={"old"}).fits
    result = check_fit(mine, nodes, pods_of, exclude={"old"}, waiting=waiting)
    assert (result.fits, result.pods, result.waiting) == (False, 2, 1)
    assert result.unplaced == ["default/m1"]
    assert result.message == (
        "1 of 2 pods do not fit on the ready nodes (after 1 Pending pods the scheduler "
        "places first; first: default/m1: not enough cpu, memory or pods)"
    )
    # Pending for want of a node no roll brings: too large for any, or for another pool.
    stuck = [pod(f"s{i}", "", cpu="8") for i in range(3)]
    elsewhere = [pod("e0", "", nodeSelector={"pool": "gpu"})]
    result = check_fit(mine, nodes, pods_of, exclude={"old"}, waiting=[*stuck, *elsewhere])
    assert (result.fits, result.waiting) == (True, 0)
    # A DaemonSet's pod is placed on its own node, by its own rule.
    daemon = pod("d0", "", cpu="1")
    daemon["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    assert check_fit(mine, nodes, pods_of, exclude={"old"}, waiting=[daemon]).fits


def test_pending_pods_of_a_lower_priority_give_way() -> None:
    """The scheduler would preempt a Pending pod of a lower priority than every pod that
    moves; one of the same priority keeps its room."""
    mine = [pod(f"m{i}", "old", cpu="1", priority=1000) for i in range(2)]
    nodes = [node("old"), node("stay", cpu="2")]
    pods_of = {"old": mine}.get
    low = [pod("w0", "", cpu="1", priority=-10)]
    result = check_fit(mine, nodes, pods_of, exclude={"old"}, waiting=low)
    assert (result.fits, result.waiting) == (True, 0)
    same = [pod("w1", "", cpu="1", priority=1000)]
    assert not check_fit(mine, nodes, pods_of, exclude={"old"}, waiting=same).fits


def test_pods_of_a_negative_priority_need_not_fit_and_come_last() -> None:
    """Placeholders (priority -1) that keep room for an autoscaler: the batch goes on without
    room for them, and they are given what is left after the pods that need it."""
    mine = [pod("m0", "old", cpu="1", priority=0)]
    placeholders = [pod(f"h{i}", "old", cpu="1", priority=-1) for i in range(3)]
    batch = [*placeholders, *mine]
    nodes = [node("old"), node("stay", cpu="2")]
    result = check_fit(batch, nodes, {"old": batch}.get, exclude={"old"})
    assert (result.fits, result.pods, result.spare_unplaced) == (True, 4, 2)
    assert result.message == (
        "2 of 4 pods fit on the ready nodes; 2 of a negative priority may wait for room"
    )
    # Without room for the pod that needs it, the batch waits, whatever the placeholders do.
    full = [pod("busy", "stay", cpu="1500m")]
    held = check_fit(batch, nodes, {"old": batch, "stay": full}.get, exclude={"old"})
    assert not held.fits and held.unplaced == ["default/m0"]


def test_placeholders_on_the_ready_nodes_give_their_room_to_the_pods_that_need_it() -> None:
    """The new node is full of placeholders (priority -1) that took its room while they
    waited: the batch's pods fit in it all the same, since the scheduler preempts them, and
    the message says how many lose their place. A pod that may not preempt
    (`preemptionPolicy: Never`) and a placeholder of the batch get only the room left."""
    mine = [pod(f"m{i}", "old", cpu="1") for i in range(3)]
    placeholders = [pod(f"h{i}", "new", cpu="1", priority=-1) for i in range(4)]
    nodes = [node("old"), node("new", cpu="4")]
    on = {"old": mine, "new": placeholders}.get
    result = check_fit(mine, nodes, on, exclude={"old"})
    assert (result.fits, result.pods, result.preempted, result.spare_unplaced) == (True, 3, 3, 0)
    assert (
        result.message == "3 pods fit on the ready nodes, in the room of 3 of a negative priority"
    )
    # Room no placeholder holds is taken first, on any node: one more free core, one fewer
    # victim; two more on a node further on, one victim.
    roomier = check_fit(mine, [node("old"), node("new", cpu="5")], on, exclude={"old"})
    assert (roomier.fits, roomier.preempted) == (True, 2)
    further = check_fit(mine, [*nodes, node("last", cpu="2")], on, exclude={"old"})
    assert (further.fits, further.preempted) == (True, 1)

    patient = [pod("never", "old", cpu="1", preemptionPolicy="Never")]
    held = check_fit(patient, nodes, {"old": patient, "new": placeholders}.get, exclude={"old"})
    assert not held.fits and held.unplaced == ["default/never"]

    spare = [pod("h-old", "old", cpu="1", priority=-1)]
    waits = check_fit(spare, nodes, {"old": spare, "new": placeholders}.get, exclude={"old"})
    assert (waits.fits, waits.spare_unplaced, waits.preempted) == (True, 1, 0)
    # Pods of the default priority already there keep their room.
    busy = [pod(f"b{i}", "new", cpu="1") for i in range(2)]
    full = check_fit(mine, nodes, {"old": mine, "new": [*busy, *placeholders]}.get, exclude={"old"})
    assert not full.fits and len(full.unplaced) == 1


def test_a_cluster_full_of_placeholders_is_walked_once_without_preemption(
    walked: list[str],
) -> None:
    """No node has room but for its placeholder's: once a walk has found none, the pods after
    it look only where they would preempt, not at every node first."""
    nodes = [node(f"n{i}", cpu="2") for i in range(50)]
    on = {
        f"n{i}": [pod(f"w{i}", f"n{i}", cpu="1"), pod(f"h{i}", f"n{i}", cpu="1", priority=-1)]
        for i in range(50)
    }
    batch = [pod(f"b{i}", "old", cpu="500m") for i in range(20)]
    result = check_fit(batch, [node("old"), *nodes], {**on, "old": batch}.get, exclude={"old"})
    assert (result.fits, result.preempted) == (True, 10)
    # 50 for the first pod's walk, then each pod from the first node to the one it fills.
    assert len(walked) < 200


def test_placeholders_neither_keep_out_nor_draw_in_and_policies_are_no_shape() -> None:
    """A pod that needs a placeholder near finds none: the scheduler would have it preempt
    that very one. A pod that may not preempt and one that may are not judged alike: the
    first's "nowhere" is no answer for the second, which takes the placeholder's room."""
    host = "kubernetes.io/hostname"
    new = node("new", cpu="3", labels={host: "new"})
    holder = pod("h0", "new", cpu="2", priority=-1)
    holder["metadata"]["labels"] = {"app": "ph"}
    term = {"labelSelector": {"matchLabels": {"app": "ph"}}, "topologyKey": host}
    near = pod(
        "near", "old", cpu="2",
        affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )  # fmt: skip
    around = neighbours(
        [near], {"new"}, {"new": new}.get, lambda k, v: [holder], lambda: [holder], []
    )
    on = {"old": [near], "new": [holder]}.get
    drawn = check_fit([near], [node("old"), new], on, exclude={"old"}, neighbours=around)
    assert not drawn.fits and "pod affinity" in drawn.reasons["default/near"]

    mine = [pod("m0", "old", cpu="2")]
    never = pod("w0", "", cpu="2", preemptionPolicy="Never")
    preempting = pod("w1", "", cpu="2")
    on = {"old": mine, "new": [holder]}.get
    held = check_fit(mine, [node("old"), new], on, exclude={"old"}, waiting=[never, preempting])
    assert (held.fits, held.waiting) == (False, 1)
    # Memory short: the placeholder that frees it goes, not the one with more CPU.
    room = fit._Room("n", {}, {}, [], cpu=10_000, mem=1 << 30, pods=100)
    room.spare = [(1000, 0), (100, 2 << 30)]
    assert room.preempted() == 1


def test_pending_pods_alike_are_judged_once(walked: list[str]) -> None:
    """A thousand Pending pods of one shape that fit nowhere: the nodes are walked for the
    first only, and again for a pod of another shape."""
    nodes = [node(f"n{i}", cpu="1") for i in range(50)]
    queue = [pod(f"q{i}", "", cpu="4") for i in range(1000)]
    other = pod("big", "", cpu="3")
    result = check_fit([], nodes, no_pods, exclude=set(), waiting=[*queue, other])
    assert (result.fits, result.waiting) == (True, 0)
    assert len(walked) == 100


def test_not_enough_cpu_is_reported() -> None:
    old = [pod(f"p{i}", "old", cpu="1") for i in range(3)]
    existing = [pod("busy", "new", cpu="1")]
    result = check_fit(
        old, [node("old"), node("new")], {"old": old, "new": existing}.get, exclude={"old"}
    )
    assert not result.fits
    assert len(result.unplaced) == 2
    assert "do not fit" in result.message


def test_taints_selectors_and_affinity() -> None:
    tainted = node("tainted", taints=[{"key": "gpu", "effect": "NoSchedule"}])
    other_zone = node("b", labels={"zone": "b"})
    picky = pod("picky", "old", nodeSelector={"zone": "a"})
    result = check_fit([picky], [tainted, other_zone], no_pods, exclude={"old"})
    assert not result.fits
    tolerant = pod(
        "tolerant",
        "old",
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    )
    assert check_fit([tolerant], [tainted, other_zone], no_pods, exclude={"old"}).fits


def test_not_ready_cordoned_and_excluded_nodes_do_not_count() -> None:
    p = [pod("p", "old")]
    nodes = [
        node("old"),
        node("nr", ready="False"),
        node("cordoned", unschedulable=True),
        node("draining"),
    ]
    assert not check_fit(p, nodes, no_pods, exclude={"old", "draining"}).fits


def test_daemonset_and_finished_pods_do_not_move() -> None:
    ds = pod("ds", "old")
    ds["metadata"]["ownerReferences"] = [
        {"kind": "DaemonSet", "controller": True, "name": "d", "uid": "2"}
    ]
    done = pod("done", "old")
    done["status"]["phase"] = "Succeeded"
    result = check_fit([ds, done], [node("old")], no_pods, exclude={"old"})
    assert result.fits and result.pods == 0


def test_only_the_nodes_the_first_fit_reaches_are_read() -> None:
    """A batch's pods usually fit on the first nodes with room: the check must not read the
    pods of every node of a large cluster for each batch."""
    old = [pod(f"p{i}", "old") for i in range(2)]
    asked: list[str] = []
    read: list[str] = []

    def pods_of(name: str) -> list[dict[str, Any]]:
        asked.append(name)
        return []

    def nodes() -> Any:
        for i in range(1000):
            read.append(f"n{i}")
            yield node(f"n{i}")

    result = check_fit(old, nodes(), pods_of, exclude={"old"})
    assert result.fits
    assert asked == ["n0"]
    assert len(read) == 1


# ---------------------------------------------------------------------------------------------
# Inter-pod rules: the batch's pods against the pods that stay, and against each other


def labelled(p: dict[str, Any], **labels: str) -> dict[str, Any]:
    p["metadata"]["labels"] = dict(labels)
    return p


def one_a_node(app: str, key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def host(name: str, **labels: str) -> dict[str, Any]:
    return node(name, labels={"kubernetes.io/hostname": name, "zone": "a", **labels})


def fit_with_rules(
    batch: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    staying: list[dict[str, Any]],
    *,
    leaving: set[str],
    waiting: list[dict[str, Any]] | None = None,
) -> Any:
    """The check as the request runs it: the neighbours of the batch read from every pod."""
    waiting = waiting or []
    everything = batch + staying + waiting
    around = neighbours(
        waiting + batch,
        {n["metadata"]["name"] for n in nodes} - leaving,
        {n["metadata"]["name"]: n for n in nodes}.get,
        lambda k, v: [p for p in everything if p["metadata"].get("labels", {}).get(k) == v],
        lambda: everything,
        [p for p in everything if "podAntiAffinity" in (p["spec"].get("affinity") or {})],
    )
    on: dict[str, list[dict[str, Any]]] = {}
    for p in staying:
        on.setdefault(p["spec"]["nodeName"], []).append(p)
    return check_fit(batch, nodes, on.get, exclude=leaving, neighbours=around, waiting=waiting)


def test_two_replicas_one_a_node_do_not_share_the_one_new_node() -> None:
    """Each fits alone on the empty new node; together they do not. Without the rule the
    check put both there, and the second was stranded Pending by the scheduler."""
    batch = [
        labelled(pod(f"solo-{i}", f"old{i}", affinity=one_a_node("solo")), app="solo")
        for i in range(2)
    ]
    nodes = [host("old0"), host("old1"), host("new0")]
    result = fit_with_rules(batch, nodes, [], leaving={"old0", "old1"})
    assert not result.fits
    assert result.unplaced == ["default/solo-1"] or result.unplaced == ["default/solo-0"]
    assert result.reasons[result.unplaced[0]] == "node(s) didn't match pod anti-affinity rules"
    assert fit_with_rules(batch, [*nodes, host("new1")], [], leaving={"old0", "old1"}).fits
    # Without the rules, as before: both on new0.
    assert check_fit(batch, nodes, {}.get, exclude={"old0", "old1"}).fits


def test_a_staying_pods_anti_affinity_keeps_matching_pods_off_its_node() -> None:
    guard = labelled(pod("guard", "new0", affinity=one_a_node("web")), app="guard")
    web = labelled(pod("web", "old"), app="web")
    nodes = [host("old"), host("new0")]
    result = fit_with_rules([web], nodes, [guard], leaving={"old"})
    assert not result.fits
    assert (
        result.reasons["default/web"] == "node(s) didn't satisfy existing pods anti-affinity rules"
    )
    assert fit_with_rules([web], [*nodes, host("new1")], [guard], leaving={"old"}).fits


def spread_over(key: str, app: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]


def test_zone_spread_counts_the_pods_that_stay_and_those_placed() -> None:
    """Zone a keeps one replica, zone b none: the batch's replica may go to zone b only, and
    the node there has no room until it has."""
    nodes = [
        host("old", zone="a"),
        host("a1", zone="a"),
        node("b1", cpu="100m", labels={"kubernetes.io/hostname": "b1", "zone": "b"}),
    ]
    stays = labelled(pod("s-0", "a1", topologySpreadConstraints=spread_over("zone", "s")), app="s")
    moves = labelled(pod("s-1", "old", topologySpreadConstraints=spread_over("zone", "s")), app="s")
    result = fit_with_rules([moves], nodes, [stays], leaving={"old"})
    assert not result.fits
    # The last node tried (b1) had no room; a1 was refused for the skew.
    assert result.reasons["default/s-1"] in (
        "node(s) didn't match pod topology spread constraints",
        "not enough cpu, memory or pods",
    )
    nodes[2] = host("b1", zone="b")
    assert fit_with_rules([moves], nodes, [stays], leaving={"old"}).fits


def test_a_spread_pending_pod_is_judged_again_once_another_is_placed() -> None:
    """Zone a has one replica, zone b none, and zone b's node a taint (which, as in
    kube-scheduler, leaves zone b a domain of the spread). Of three Pending replicas alike in
    size, the first does not tolerate the taint and is refused zone a for the skew; the
    second, tolerating it, goes to zone b; the third, shaped as the first, now fits in zone a.
    A spread makes a pod's shape no key."""
    spread = {"topologySpreadConstraints": spread_over("zone", "s")}
    taint = {"key": "dedicated", "value": "b", "effect": "NoSchedule"}
    nodes = [
        host("a1", zone="a"),
        node("b1", labels={"kubernetes.io/hostname": "b1", "zone": "b"}, taints=[taint]),
    ]
    stays = labelled(pod("s-0", "a1", **spread), app="s")
    tolerates = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    waiting = [
        labelled(pod("p0", "", **spread), app="s"),
        labelled(pod("q", "", **spread, **tolerates), app="s"),
        labelled(pod("p1", "", **spread), app="s"),
    ]
    result = fit_with_rules([], nodes, [stays], leaving=set(), waiting=waiting)
    assert result.waiting == 2


def test_spread_over_a_label_only_the_leaving_nodes_carry_fits_nowhere() -> None:
    rack = spread_over("example.com/rack", "r")
    batch = [labelled(pod("r-0", "old", topologySpreadConstraints=rack), app="r")]
    nodes = [host("old", **{"example.com/rack": "r1"}), host("new0")]
    result = fit_with_rules(batch, nodes, [], leaving={"old"})
    assert result.reasons["default/r-0"] == (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )


def test_required_affinity_follows_the_pod_it_needs() -> None:
    needs_db = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
            ]
        }
    }
    db = labelled(pod("db", "b1"), app="db")
    app = labelled(pod("app", "old", affinity=needs_db), app="app")
    nodes = [host("old", zone="b"), host("a1", zone="a"), host("b1", zone="b")]
    assert fit_with_rules([app], nodes, [db], leaving={"old"}).fits
    result = fit_with_rules([app], nodes[:2], [], leaving={"old"})
    assert result.reasons["default/app"] == "node(s) didn't match pod affinity rules"


class Reads:
    """The reads `neighbours` makes, by what it asked for: a node's name, `key=value`, or
    "every pod"."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def node(self, name: str) -> Any:
        self.seen.append(name)
        return host(name)

    def labelled(self, k: str, v: str) -> list[dict[str, Any]]:
        self.seen.append(f"{k}={v}")
        return []

    def every_pod(self) -> list[dict[str, Any]]:
        self.seen.append("every pod")
        return []

    def neighbours(self, batch: list[dict[str, Any]]) -> Any:
        return neighbours(batch, {"new0"}, self.node, self.labelled, self.every_pod, [])


def test_without_rules_nothing_more_is_read() -> None:
    """No batch pod has a rule and no pod has required anti-affinity: the check stays as lazy
    as before (no node, no pod read for the rules)."""
    reads = Reads()
    assert reads.neighbours([pod("p", "old")]) is None
    assert reads.seen == []


def test_only_the_pods_a_selector_can_match_are_read() -> None:
    """A selector that requires a label reads the pods carrying it; one that requires none
    (here: only that a key exists) reads every pod."""
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    reads = Reads()
    reads.neighbours([pod("p", "old", affinity=anti)])
    assert reads.seen == ["app=x"]
    term["labelSelector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    reads = Reads()
    reads.neighbours([pod("p", "old", affinity=anti)])
    assert reads.seen == ["every pod"]
