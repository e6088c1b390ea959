"""kube-scheduler and the simulator's scheduler refuse the same pods for the same reasons.

Pods with inter-pod rules (anti-affinity, affinity, a placed pod's anti-affinity, topology
spread over a label no node has and over hostnames with a cordoned node among them) are
scheduled by the cluster onto attached nodes. Then the simulator's scheduler is given the
cluster's nodes and the pods kube-scheduler placed, and asked about each pod left Pending: it
must refuse each one, in the words kube-scheduler wrote in its PodScheduled condition. A
rehearsal's Pending pods are only as true as this."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeops.sim.cluster.preemption import no_fit_message, nothing_to_preempt
from tests.e2e.external.attached import Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.podwatch import Pods, PodWatch
from tests.e2e.external.workloads import pinned_deployment
from tests.unit.sim.test_cluster_scheduling import _scheduler

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _term(key: str, app: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _spread(key: str, app: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]


def _required(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def _apply(kubeconfig: Path, docs: list[dict[str, Any]]) -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    done = kubectl(kubeconfig, "apply", "-f", "-", stdin=text)
    assert done.returncode == 0, done.stderr


def _refusal(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            # From v1.34 the dynamic-resources plugin speaks before preemption; the simulator
            # answers as v1.31, where it is off.
            return str(c.get("message", "")).replace(" no new claims to deallocate,", "")
    return None


def _settled(count: int) -> Callable[[Pods], bool]:
    def check(pods: Pods) -> bool:
        return len(pods) == count and all(
            p["spec"].get("nodeName") or _refusal(p) for p in pods.values()
        )

    return check


def _simulated(nodes: list[dict[str, Any]], pods: Pods) -> dict[str, str | None]:
    """What the simulator's scheduler says of each pod the cluster left Pending, given the
    pods it placed: its refusal, or None where it would have placed the pod."""
    sched = _scheduler(nodes)
    for pod in pods.values():
        if pod["spec"].get("nodeName"):
            meta = pod["metadata"]
            sched._account((meta["namespace"], meta["name"]), pod["spec"]["nodeName"], pod)
    said: dict[str, str | None] = {}
    for name, pod in pods.items():
        if not pod["spec"].get("nodeName"):
            chosen, reasons = sched.select_node(pod)
            # No pod here outranks another: what preemption says is which nodes it could help.
            preemption = nothing_to_preempt(len(nodes), reasons)
            said[name] = None if chosen else no_fit_message(len(nodes), reasons, preemption)
    return said


def test_pending_pods_are_refused_as_kube_scheduler_refuses_them(
    kubeconfig: Path, namespace: str, sim_attach: Callable[..., Attached]
) -> None:
    attached = sim_attach("--nodes", "3", expect_nodes=3)
    cordoned = sorted(attached.nodes)[-1]
    done = kubectl(kubeconfig, "cordon", cordoned)
    assert done.returncode == 0, done.stderr

    def dep(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
        labels = {"parity": "yes"}
        docs = pinned_deployment(
            attached, namespace, name, replicas, max_unavailable=None, labels=labels, **spec
        )
        return docs[0]

    watch = PodWatch(kubeconfig, namespace, "parity=yes")
    try:
        _apply(
            kubeconfig,
            [
                dep("solo", 4, affinity=_required("podAntiAffinity", _term(HOST, "solo"))),
                dep("follower", 1, affinity=_required("podAffinity", _term(ZONE, "nothing"))),
                # One a node (so on both that take pods, whoever places them), and no batch
                # beside them.
                dep(
                    "guard",
                    2,
                    affinity=_required(
                        "podAntiAffinity", _term(HOST, "batch"), _term(HOST, "guard")
                    ),
                ),
                dep("peer", 2, affinity=_required("podAffinity", _term(HOST, "peer"))),
                dep("racked", 1, topologySpreadConstraints=_spread("rack", "racked")),
                dep("even", 3, topologySpreadConstraints=_spread(HOST, "even")),
            ],
        )
        watch.wait_for("13 pods placed or refused", _settled(13))
        # After the guards: they hold it off both nodes they run on, which it cannot know
        # before they are placed.
        _apply(kubeconfig, [dep("batch", 1)])
        watch.wait_for("14 pods placed or refused", _settled(14))
        nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-o", "json").stdout)["items"]
        seen: dict[str, Any] = {}

        def agree(pods: Pods) -> bool:
            # Refused pods are retried as pods are placed, so the last word may come later.
            real = {n: _refusal(p) for n, p in pods.items() if not p["spec"].get("nodeName")}
            seen["real"], seen["simulated"] = real, _simulated(nodes, pods)
            return bool(real) and seen["real"] == seen["simulated"]

        try:
            watch.wait_for("the simulator to refuse what kube-scheduler refused", agree, 60)
        except AssertionError:
            raise AssertionError(
                f"kube-scheduler: {seen.get('real')}\nsimulator: {seen.get('simulated')}"
            ) from None
        refused = {p["metadata"]["labels"]["app"] for p in watch.pods.values() if _refusal(p)}
        assert refused == {"solo", "follower", "batch", "racked", "even"}
    finally:
        watch.stop()
