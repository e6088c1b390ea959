"""The demo's cluster: node groups, a shop of workloads with disruption budgets, a load balancer.

Sized from the number of nodes: about three pods per node, so a roll moves real work without
the simulator's cost drowning the operator's.
"""

from __future__ import annotations

from typing import Any

from nodeops.sim.scenario import Scenario

__all__ = ["NAMESPACE", "ZONES", "demo_scenario", "group_names"]

NAMESPACE = "shop"
ZONES = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]


def group_names(groups: int) -> list[str]:
    return [f"workers-{chr(ord('a') + i)}" for i in range(groups)]


def demo_scenario(
    nodes: int,
    *,
    groups: int = 2,
    boot_seconds: float = 60.0,
    grace_seconds: int = 10,
    pods_per_node: float = 3.0,
    web_budget: int | str = 1,
    stateful: bool = True,
    seed: int = 0,
) -> Scenario:
    """`nodes` worker nodes in `groups` cloud node groups, and workloads to keep running.

    `web_budget` is the web Deployment's maxUnavailable: 1 makes its pods move one at a time
    (a demanding budget the roll must respect); a share like "10%" lets a wide roll move many.
    """
    if nodes < 1:
        raise ValueError("a cluster needs at least one node")
    groups = max(1, min(groups, nodes))
    sizes = {
        name: nodes // groups + (1 if i < nodes % groups else 0)
        for i, name in enumerate(group_names(groups))
    }
    pods = max(6, round(nodes * pods_per_node))
    web = max(2, pods // 2)
    api = max(2, pods - web - (3 if stateful else 0))

    def workload(kind: str, name: str, **extra: Any) -> dict[str, Any]:
        return {
            "kind": kind,
            "name": name,
            "namespace": NAMESPACE,
            "terminationGracePeriodSeconds": grace_seconds,
            **extra,
        }

    return Scenario.model_validate(
        {
            "seed": seed,
            "nodeGroups": [
                {
                    "name": name,
                    "size": size,
                    "zones": ZONES,
                    "instanceType": "m5.xlarge",
                    "labels": {"role": "worker"},
                    "bootSeconds": float(boot_seconds),
                }
                for name, size in sizes.items()
            ],
            "namespaces": [NAMESPACE],
            "workloads": [
                workload(
                    "Deployment",
                    "web",
                    replicas=web,
                    pdb={"maxUnavailable": web_budget},
                    service={"type": "LoadBalancer", "port": 80},
                ),
                workload("Deployment", "api", replicas=api, pdb={"maxUnavailable": "25%"}),
                *(
                    [workload("StatefulSet", "db", replicas=3, pdb={"maxUnavailable": 1})]
                    if stateful
                    else []
                ),
                {
                    "kind": "DaemonSet",
                    "name": "log-shipper",
                    "namespace": "kube-system",
                    "containers": 1,
                    "terminationGracePeriodSeconds": 1,
                },
            ],
            "loadBalancers": [
                {"name": "web", "type": "target-group", "port": 30080, "nodeGroups": list(sizes)}
            ],
        }
    )
