"""The workload controllers of kube-controller-manager, started together on shared caches.

Each controller lives in its own module (`replicaset`, `deployment`, `statefulset`,
`daemonset`); this one only wires them to the informers, so that one pod cache serves all four.
"""

from __future__ import annotations

import asyncio

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    DAEMONSETS,
    DEPLOYMENTS,
    NODES,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiClient,
)
from nodeops.sim.cluster.daemonset import (
    DAEMONSET_TOLERATIONS,
    DaemonSetController,
    daemon_tolerations,
    node_should_run,
)
from nodeops.sim.cluster.deployment import (
    DeploymentController,
    new_rs_target,
    old_rs_targets,
    surge_and_unavailable,
)
from nodeops.sim.cluster.informer import InformerSet
from nodeops.sim.cluster.replicaset import ReplicaSetController, pods_to_delete, replica_diff
from nodeops.sim.cluster.runtime import supervise
from nodeops.sim.cluster.statefulset import StatefulSetController, plan_statefulset

__all__ = [
    "DAEMONSET_TOLERATIONS",
    "DaemonSetController",
    "DeploymentController",
    "ReplicaSetController",
    "StatefulSetController",
    "WorkloadControllers",
    "daemon_tolerations",
    "new_rs_target",
    "node_should_run",
    "old_rs_targets",
    "plan_statefulset",
    "pods_to_delete",
    "replica_diff",
    "surge_and_unavailable",
]


class WorkloadControllers:
    """ReplicaSet, Deployment, StatefulSet and DaemonSet controllers over one `InformerSet`."""

    def __init__(self, clock: Clock, client: ApiClient, informers: InformerSet) -> None:
        pods = informers.get(PODS)
        nodes = informers.get(NODES)
        replicasets = informers.get(REPLICASETS)
        self.replicaset = ReplicaSetController(clock, client, pods, replicasets)
        self.deployment = DeploymentController(
            clock, client, informers.get(DEPLOYMENTS), replicasets
        )
        self.statefulset = StatefulSetController(clock, client, pods, informers.get(STATEFULSETS))
        self.daemonset = DaemonSetController(clock, client, pods, nodes, informers.get(DAEMONSETS))

    async def run(self) -> None:
        await asyncio.gather(
            supervise("replicaset", self.replicaset.run),
            supervise("deployment", self.deployment.run),
            supervise("statefulset", self.statefulset.run),
            supervise("daemonset", self.daemonset.run),
        )
