"""`nodeops drain NODE --kubeconfig K` of an attached node, with a Deployment behind a
PodDisruptionBudget on it: the node is cordoned and emptied, and at no moment the pods report
are fewer of them ready than the budget allows (the eviction API, the disruption controller and
the ReplicaSet controller of the cluster judge every eviction)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.e2e.external.attached import Attached
from tests.e2e.external.conftest import kubectl
from tests.e2e.external.podwatch import Pods, PodWatch, on_node, ready
from tests.e2e.external.workloads import apply_and_wait_ready, pinned_deployment

REPLICAS, MAX_UNAVAILABLE = 4, 1


def test_nodeops_drain_empties_a_node_within_its_budget(
    kubeconfig: Path, namespace: str, sim_attach: Callable[..., Attached]
) -> None:
    attached = sim_attach("--nodes", "2", expect_nodes=2)
    apply_and_wait_ready(
        kubeconfig,
        pinned_deployment(attached, namespace, "web", REPLICAS, max_unavailable=MAX_UNAVAILABLE),
    )
    lowest: list[int] = []

    def count(pods: Pods) -> None:
        if lowest:  # from the moment every pod was reported ready
            lowest[0] = min(lowest[0], sum(map(ready, pods.values())))

    def all_ready(pods: Pods) -> bool:
        if sum(map(ready, pods.values())) == REPLICAS:
            lowest[:] = [REPLICAS]
        return bool(lowest)

    watch = PodWatch(kubeconfig, namespace, "app=web", count)
    try:
        watch.wait_for("every pod reported ready", all_ready)
        # The node with the most of the pods, so that the budget has to hold them back.
        node = max(attached.nodes, key=lambda n: len(on_node(watch.pods, n)))
        moved = {p["metadata"]["name"] for p in on_node(watch.pods, node)}
        assert moved, f"no pod on {node}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeops.cli",
                "drain",
                node,
                "--kubeconfig",
                str(kubeconfig),
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout",
                "120s",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == f"node/{node} cordoned", lines
        assert lines[-1] == f"node/{node} drained", lines
        for name in moved:
            assert f"pod/{name} evicted" in lines, lines

        def settled(pods: Pods) -> bool:
            back = sum(map(ready, pods.values())) == REPLICAS
            return back and not on_node(pods, node) and not moved & set(pods)

        watch.wait_for("the replacements ready elsewhere", settled)
    finally:
        watch.stop()
    assert lowest[0] >= REPLICAS - MAX_UNAVAILABLE, f"only {lowest[0]} pods were ready at one time"
    unschedulable = kubectl(kubeconfig, "get", "node", node, "-o", "jsonpath={.spec.unschedulable}")
    assert unschedulable.stdout == "true", unschedulable
    left = kubectl(
        kubeconfig, "get", "pods", "-n", namespace, "--field-selector", f"spec.nodeName={node}",
        "-o", "name",
    )  # fmt: skip
    assert left.returncode == 0 and left.stdout.strip() == "", left
