"""The IAM policy the `aws` provider needs, as data: exactly the API actions it calls.

`docs/providers.md` shows `render()` verbatim, and a unit test reads the provider's source for
every AWS operation it calls and compares them with `actions()`, so the documented policy, this
module and the code cannot drift apart: a new call fails the test until it is listed here (and
in the document), and a listed action nothing calls fails it too, since least privilege means
no extra rights.

Describe actions do not support resource-level permissions, hence `"Resource": "*"`; the
changing actions can be narrowed further by tag conditions, as the document explains.

`python -m nodeops.providers.aws.iam` prints the policy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["METHOD_ACTIONS", "POLICY", "SERVICE_PREFIXES", "actions", "policy_for", "render"]

SERVICE_PREFIXES: Final = {
    "autoscaling": "autoscaling",
    "ec2": "ec2",
    "elb": "elasticloadbalancing",
    "elbv2": "elasticloadbalancing",
}
"""IAM action prefix of each botocore service the provider opens a client for."""

POLICY: Final[dict[str, Any]] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "NodeopsDescribe",
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "ec2:DescribeInstances",
                "ec2:DescribeLaunchTemplates",
                "elasticloadbalancing:DescribeInstanceHealth",
                "elasticloadbalancing:DescribeLoadBalancerAttributes",
                "elasticloadbalancing:DescribeLoadBalancers",
                "elasticloadbalancing:DescribeTags",
                "elasticloadbalancing:DescribeTargetGroups",
                "elasticloadbalancing:DescribeTargetHealth",
            ],
            "Resource": "*",
        },
        {
            "Sid": "NodeopsNodeGroups",
            "Effect": "Allow",
            "Action": [
                "autoscaling:AttachInstances",
                "autoscaling:DetachInstances",
            ],
            "Resource": "*",
        },
        {
            "Sid": "NodeopsTerminateInstances",
            "Effect": "Allow",
            "Action": [
                "ec2:TerminateInstances",
            ],
            "Resource": "*",
        },
        {
            "Sid": "NodeopsLoadBalancerTargets",
            "Effect": "Allow",
            "Action": [
                "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
                "elasticloadbalancing:DeregisterTargets",
                "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
                "elasticloadbalancing:RegisterTargets",
            ],
            "Resource": "*",
        },
    ],
}


_ELB: Final = "elasticloadbalancing"

METHOD_ACTIONS: Final[dict[str, tuple[str, ...]]] = {
    "describe_groups": (
        "autoscaling:DescribeAutoScalingGroups",
        "ec2:DescribeLaunchTemplates",
    ),
    "detach_instance": (
        "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DetachInstances",
    ),
    "attach_instance": (
        "autoscaling:AttachInstances",
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeAutoScalingInstances",
    ),
    "terminate_instance": ("ec2:TerminateInstances",),
    "targets_of": (
        f"{_ELB}:DescribeLoadBalancers",
        f"{_ELB}:DescribeTargetGroups",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "targets_of_many": (
        f"{_ELB}:DescribeLoadBalancers",
        f"{_ELB}:DescribeTargetGroups",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "registrations": (
        f"{_ELB}:DescribeLoadBalancers",
        f"{_ELB}:DescribeTargetGroups",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "deregister": (
        f"{_ELB}:DeregisterInstancesFromLoadBalancer",
        f"{_ELB}:DeregisterTargets",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "register": (
        f"{_ELB}:DescribeLoadBalancers",
        f"{_ELB}:RegisterInstancesWithLoadBalancer",
        f"{_ELB}:RegisterTargets",
    ),
    "targets_behind_services": (
        f"{_ELB}:DescribeLoadBalancers",
        f"{_ELB}:DescribeTags",
        f"{_ELB}:DescribeTargetGroups",
    ),
    "wait_drained": (
        f"{_ELB}:DescribeInstanceHealth",
        f"{_ELB}:DescribeLoadBalancerAttributes",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "target_health": (
        f"{_ELB}:DescribeInstanceHealth",
        f"{_ELB}:DescribeLoadBalancerAttributes",
        f"{_ELB}:DescribeTargetHealth",
    ),
    "find_server": ("ec2:DescribeInstances",),
    "delete_server": ("ec2:TerminateInstances",),
    "wait_deleted": ("ec2:DescribeInstances",),
}
"""The actions each method of the provider calls (checked against the code by a unit test), so
a controller that uses a few methods can document exactly the policy it needs."""


def policy_for(methods: Iterable[str], *, sid: str = "Nodeops") -> dict[str, Any]:
    """The least-privilege policy of a caller of these provider methods: the describe actions
    (no resource-level permissions), then those that change something."""
    wanted = sorted({a for m in methods for a in METHOD_ACTIONS[m]})
    describe = [a for a in wanted if a.split(":", 1)[1].startswith("Describe")]
    change = [a for a in wanted if a not in describe]
    statements = []
    for suffix, group in (("Describe", describe), ("Change", change)):
        if group:
            statements.append(
                {"Sid": f"{sid}{suffix}", "Effect": "Allow", "Action": group, "Resource": "*"}
            )
    return {"Version": "2012-10-17", "Statement": statements}


def actions() -> frozenset[str]:
    """Every action the policy allows."""
    return frozenset(a for statement in POLICY["Statement"] for a in statement["Action"])


def render(policy: dict[str, Any] | None = None) -> str:
    """The policy document (the provider's whole policy by default) as documentation shows it."""
    return json.dumps(POLICY if policy is None else policy, indent=2)


if __name__ == "__main__":
    print(render())
