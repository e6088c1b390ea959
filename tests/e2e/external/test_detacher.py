"""The detacher (`nodeops run --controllers detacher --detacher-stop-pods`) on the external
cluster, with the simulated cloud's load balancer attached: a cordoned node leaves the load
balancer, its deregistration delay runs out, and only then do its pods stop; uncordoned, it is
registered again. The operator runs as the ServiceAccount holding the detacher component's
roles, so the scenario is also the proof of that RBAC."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.external.attached import Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.operator import operator_identity, running
from tests.e2e.external.podwatch import Pods, PodWatch, on_node, ready
from tests.e2e.external.workloads import apply_and_wait_ready, pinned_deployment

SCENARIO = """\
nodeGroups:
  - name: web
    size: 2
    zone: eu-west-1a
    bootSeconds: 5
loadBalancers:
  - name: web-tg
    type: target-group
    port: 30080
    nodeGroups: [web]
"""
REPLICAS = 2
DEREGISTRATION_DELAY = 4  # simulated seconds the load balancer drains a target
IN_SERVICE = ("initial", "healthy", "unhealthy", "draining")


def target_states(attached: Attached, instance: str) -> list[str]:
    """The states of the instance's targets in every load balancer, as the cloud has them."""
    found = attached.cloud("GET", f"/sim/cloud/loadbalancers?instanceId={instance}")
    return sorted(t["state"] for lb in found["loadBalancers"] for t in lb["targets"])


def wait_record(kubeconfig: Path, namespace: str, node: str, condition: str) -> None:
    """Until the node's LoadBalancerAttachment meets a `kubectl wait --for=jsonpath` CONDITION."""
    done = kubectl(
        kubeconfig, "wait", "loadbalancerattachments.nodeops.dev", node, "-n", namespace,
        f"--for=jsonpath={condition}", "--timeout=90s",
    )  # fmt: skip
    assert done.returncode == 0, f"{node}'s record never {condition}: {done.stderr}"


def test_a_cordoned_node_leaves_the_load_balancer_before_its_pods_stop(
    crds_installed: Path,
    namespace: str,
    sim_attach: Callable[..., Attached],
    tmp_path: Path,
) -> None:
    kubeconfig = crds_installed
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    attached = sim_attach("--scenario", str(scenario), expect_nodes=2)
    attached.cloud(
        "PATCH",
        "/sim/cloud/loadbalancers/web-tg",
        {"deregistrationDelaySeconds": DEREGISTRATION_DELAY},
    )
    providers: dict[str, Any] = attached.providers()
    providers["sim"]["poll_interval"] = 0.1
    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump({"providers": providers}))
    apply_and_wait_ready(
        kubeconfig, pinned_deployment(attached, namespace, "web", REPLICAS, max_unavailable=1)
    )
    at_first_stop: list[list[str]] = []
    nodes = yaml.safe_load(
        kubectl(kubeconfig, "get", "nodes", "-l", attached.selector, "-o", "yaml").stdout
    )["items"]
    instances = {n["metadata"]["name"]: n["spec"]["providerID"].rsplit("/", 1)[1] for n in nodes}

    with operator_identity(kubeconfig, tmp_path, "detacher", namespace) as identity:
        watch: PodWatch | None = None
        with running(
            identity, "--controllers", "detacher", "--provider", "sim",
            "--provider-config", str(config), "--detacher-stop-pods",
            "--detacher-draining-poll-seconds", "0.1",
        ) as operator:  # fmt: skip
            node = ""
            moving: list[frozenset[str]] = []  # the node's pods, once chosen

            def judge(pods: Pods) -> None:
                """At the first sign of a pod of the node stopping (terminating or gone): is
                the node out of the load balancer already?"""
                if moving and not at_first_stop:
                    gone = [n for n in moving[0] if n not in pods]
                    stopping = [
                        n
                        for n in moving[0]
                        if n in pods and pods[n]["metadata"].get("deletionTimestamp")
                    ]
                    if gone or stopping:
                        at_first_stop.append(target_states(attached, instances[node]))

            watch = PodWatch(kubeconfig, namespace, "app=web", judge)
            try:
                watch.wait_for(
                    "the pods reported", lambda p: sum(map(ready, p.values())) == REPLICAS
                )
                node = next(n for n in attached.nodes if on_node(watch.pods, n))
                instance = instances[node]
                # Registered (its health checks may not have passed yet at time scale 1).
                assert target_states(attached, instance) in (["initial"], ["healthy"])
                moved = frozenset(p["metadata"]["name"] for p in on_node(watch.pods, node))
                moving.append(moved)
                done = kubectl(kubeconfig, "cordon", node)
                assert done.returncode == 0, done.stderr

                def moved_away(pods: Pods) -> bool:
                    back = sum(map(ready, pods.values())) == REPLICAS
                    return back and not on_node(pods, node) and not moved & set(pods)

                watch.wait_for("the node's pods stopped and replaced", moved_away)
            finally:
                watch.stop()
            operator.alive()
            wait_record(kubeconfig, namespace, node, "{.status.phase}=Detached")
            wait_record(kubeconfig, namespace, node, "{.status.podsStoppedAt}")
            assert at_first_stop, "no pod of the node was seen stopping"
            # Out of every target, its deregistration delay over, before the first pod stopped.
            assert not set(at_first_stop[0]) & set(IN_SERVICE), at_first_stop[0]

            done = kubectl(kubeconfig, "uncordon", node)
            assert done.returncode == 0, done.stderr
            wait_record(kubeconfig, namespace, node, "{.status.phase}=Attached")
            assert target_states(attached, instance) in (["initial"], ["healthy"])
