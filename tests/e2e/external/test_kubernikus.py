"""The Kubernikus controller (`nodeops run --controllers kubernikus`) beside a simulated
OpenStack node pool attached to the external cluster: the pool's servers run a kubelet one minor
version behind the API server, so both nodes are labelled as needing an update; the one then
labelled for deletion (it carries a pod of a Deployment behind a budget) is cordoned, drained,
its server deleted through Nova and its Node removed, and the pool's replacement registers with
the API server's version, unlabelled. The operator runs as the ServiceAccount holding the
kubernikus component's roles, with the pool's credentials from the provider config `nodeops sim
attach` wrote."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.e2e.external.attached import Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.operator import operator_identity, running
from tests.e2e.external.podwatch import Pods, PodWatch
from tests.e2e.external.workloads import apply_and_wait_ready, pinned_deployment

NEEDS_UPDATE = "nodeops.dev/kubelet-needs-update"
CONFIG = """\
intervals:
  requeue: 2s
  podDeletion: {period: 250ms, timeout: 5m}
  podEviction: {period: 250ms, timeout: 5m, force: false}
"""


def versions(kubeconfig: Path) -> tuple[str, str]:
    """The API server's version, and a kubelet version one minor release behind it."""
    done = kubectl(kubeconfig, "version", "-o", "json")
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["serverVersion"]["gitVersion"]
    major, minor = server.lstrip("v").split(".")[:2]
    return server, f"v{major}.{int(minor) - 1}.0"


def kubelet(node: dict[str, object]) -> str:
    return str(node["status"]["nodeInfo"]["kubeletVersion"])  # type: ignore[index]


def labels(node: dict[str, object]) -> dict[str, str]:
    return node["metadata"].get("labels") or {}  # type: ignore[attr-defined]


def test_an_outdated_node_is_replaced_by_one_of_the_servers_version(
    kubeconfig: Path, namespace: str, sim_attach: Callable[..., Attached], tmp_path: Path
) -> None:
    current, behind = versions(kubeconfig)
    attached = sim_attach(
        "--nodes", "0", "--openstack-pool", f"workers:2:{behind}", "--kube-version", current,
        expect_nodes=2,
    )  # fmt: skip
    original = set(attached.nodes)
    config = tmp_path / "kubernikus.yaml"
    config.write_text(CONFIG)
    web = pinned_deployment(attached, namespace, "web", 2, max_unavailable=1)
    apply_and_wait_ready(kubeconfig, web)
    placed = kubectl(
        kubeconfig, "get", "pods", "-n", namespace, "-o", "jsonpath={.items[*].spec.nodeName}"
    )
    victim = sorted(placed.stdout.split())[0]  # a node with a pod to drain
    cordoned: list[bool] = []

    def watch_the_victim(found: Pods) -> None:
        if victim in found and found[victim]["spec"].get("unschedulable"):
            cordoned.append(True)

    nodes = PodWatch(kubeconfig, None, attached.selector, watch_the_victim, resource="nodes")
    try:
        nodes.wait_for("the pool's nodes", lambda n: set(n) == original)
        assert {kubelet(n) for n in nodes.pods.values()} == {behind}
        with operator_identity(kubeconfig, tmp_path, "kubernikus", namespace) as identity:
            with running(
                identity, "--controllers", "kubernikus", "--kubernikus-config", str(config),
                "--provider", "openstack", "--provider-config", str(attached.provider_config),
            ) as operator:  # fmt: skip

                def all_outdated(found: Pods) -> bool:
                    return all(labels(n).get(NEEDS_UPDATE) == "true" for n in found.values())

                nodes.wait_for("both nodes labelled as outdated", all_outdated)
                done = kubectl(kubeconfig, "label", "node", victim, "nodeops.dev/delete-node=true")
                assert done.returncode == 0, done.stderr

                def replaced(found: Pods) -> bool:
                    fresh = [n for name, n in found.items() if name not in original]
                    return (
                        victim not in found
                        and len(found) == 2
                        and len(fresh) == 1
                        and kubelet(fresh[0]) == current
                        and NEEDS_UPDATE not in labels(fresh[0])
                        and all(
                            c["status"] == "True"
                            for c in fresh[0]["status"].get("conditions", ())
                            if c["type"] == "Ready"
                        )
                    )

                # A new server boots in 60 simulated seconds (one minute at time scale 1).
                nodes.wait_for("the outdated node replaced", replaced, timeout=300)
                operator.alive()
                assert cordoned, f"{victim} was never seen cordoned before it went"
                apply_and_wait_ready(kubeconfig, web)  # the drained pod replaced
                left = kubectl(
                    kubeconfig, "get", "pods", "-n", namespace,
                    "--field-selector", f"spec.nodeName={victim}", "-o", "name",
                )  # fmt: skip
                assert left.returncode == 0 and left.stdout.strip() == "", left
                (other,) = original - {victim}
                kept = nodes.pods[other]
                assert labels(kept).get(NEEDS_UPDATE) == "true", "the other node was changed"
                assert not kept["spec"].get("unschedulable"), "the other node was cordoned"
    finally:
        nodes.stop()
