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
from typing import Any, Final

__all__ = ["POLICY", "SERVICE_PREFIXES", "actions", "render"]

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


def actions() -> frozenset[str]:
    """Every action the policy allows."""
    return frozenset(a for statement in POLICY["Statement"] for a in statement["Action"])


def render() -> str:
    """The policy document as it appears in the documentation."""
    return json.dumps(POLICY, indent=2)


if __name__ == "__main__":
    print(render())
