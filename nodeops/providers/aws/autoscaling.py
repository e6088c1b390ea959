"""Auto Scaling groups: describe with instances and launch versions, detach, attach.

Detach and attach first ask Auto Scaling where the instance stands (DescribeAutoScalingInstances)
and only then act, so repeating them is a no-op decided by state, not by matching the text of a
ValidationError. Cyclops matched messages, and took "is not in InService or Standby" to mean
"already detaching", which is also what AWS says for a Pending instance that was never detached;
here a Pending instance is a retryable `IncorrectInstanceState` instead.

Instances in a warm pool are not members of the group (AWS does not list them with it) and are
not reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from nodeops.providers.aws.api import AwsApi
from nodeops.providers.aws.ec2 import provider_id_of
from nodeops.providers.aws.launch import (
    current_specs,
    describe_templates,
    instance_spec,
    is_out_of_date,
    template_refs,
)
from nodeops.providers.base import Instance, Lifecycle, NodeGroup, ProviderError

__all__ = [
    "attach_instance",
    "describe_groups",
    "detach_instance",
    "lifecycle_of",
]

_NAMES_PER_CALL: Final = 100  # DescribeAutoScalingGroups: at most MaxRecords (100) names.

_DETACHABLE: Final = frozenset({"InService", "Standby"})
_LEAVING: Final = frozenset(
    {
        "Detaching",
        "Detached",
        "Terminating",
        "Terminating:Wait",
        "Terminating:Proceed",
        "Terminated",
    }
)


def lifecycle_of(state: str) -> Lifecycle:
    """Map an Auto Scaling lifecycle state (lifecycle hooks included) onto `Lifecycle`."""
    if state == "InService":
        return Lifecycle.IN_SERVICE
    if state.startswith("Pending"):
        return Lifecycle.PENDING
    if state in ("Standby", "EnteringStandby"):
        return Lifecycle.STANDBY
    if state in ("Detaching", "Detached"):
        return Lifecycle.DETACHING
    if state == "Terminated":
        return Lifecycle.TERMINATED
    if state.startswith("Terminating"):
        return Lifecycle.TERMINATING
    if state.startswith("Warmed"):
        return Lifecycle.WARMED
    return Lifecycle.UNKNOWN


async def _raw_groups(api: AwsApi, names: Sequence[str]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for start in range(0, len(names), _NAMES_PER_CALL):
        chunk = list(names[start : start + _NAMES_PER_CALL])
        async for page in api.pages(
            "autoscaling",
            "describe_auto_scaling_groups",
            AutoScalingGroupNames=chunk,
            MaxRecords=100,
        ):
            found.extend(page.get("AutoScalingGroups", ()))
    return found


async def describe_groups(api: AwsApi, names: Sequence[str]) -> list[NodeGroup]:
    """Groups in the order asked, each with instances marked out of date or not."""
    unique = list(dict.fromkeys(names))
    if not unique:
        return []
    raw_groups = await _raw_groups(api, unique)
    templates = await describe_templates(api, template_refs(raw_groups))
    by_name = {g["AutoScalingGroupName"]: g for g in raw_groups}
    groups: list[NodeGroup] = []
    for name in unique:
        raw = by_name.get(name)
        if raw is None:
            continue
        current = current_specs(raw, templates)
        instances = []
        for item in raw.get("Instances", ()):
            launched = instance_spec(item, templates)
            zone = item.get("AvailabilityZone")
            state = str(item.get("LifecycleState", ""))
            instances.append(
                Instance(
                    id=item["InstanceId"],
                    provider_id=provider_id_of(zone, item["InstanceId"]),
                    zone=zone,
                    lifecycle_state=lifecycle_of(state),
                    healthy=item.get("HealthStatus") == "Healthy",
                    launch_version=launched.label() if launched is not None else None,
                    out_of_date=is_out_of_date(item, current, templates),
                    protected_from_scale_in=bool(item.get("ProtectedFromScaleIn", False)),
                    raw_state=state,
                )
            )
        groups.append(
            NodeGroup(
                name=name,
                desired=int(raw["DesiredCapacity"]),
                min=int(raw["MinSize"]),
                max=int(raw["MaxSize"]),
                instances=instances,
                launch_version=current.default.label()
                if current.known and current.default
                else None,
            )
        )
    return groups


async def _membership(api: AwsApi, instance_id: str) -> tuple[str, str] | None:
    """(group name, lifecycle state) of an instance, or None when it is in no group."""
    response = await api.call(
        "autoscaling", "describe_auto_scaling_instances", InstanceIds=[instance_id]
    )
    for row in response.get("AutoScalingInstances", ()):
        if row.get("InstanceId") == instance_id:
            return str(row["AutoScalingGroupName"]), str(row.get("LifecycleState", ""))
    return None


async def detach_instance(api: AwsApi, group: str, instance_id: str) -> None:
    """Detach without decrementing the desired capacity, so the group launches a replacement."""
    member = await _membership(api, instance_id)
    if member is None or member[0] != group or member[1] in _LEAVING:
        return
    state = member[1]
    if state not in _DETACHABLE:
        raise ProviderError(
            "IncorrectInstanceState",
            f"instance {instance_id} is {state} in Auto Scaling group {group}; "
            "it can be detached once it is InService or Standby",
            retryable=True,
            operation="autoscaling.detach_instances",
        )
    try:
        await api.call(
            "autoscaling",
            "detach_instances",
            AutoScalingGroupName=group,
            InstanceIds=[instance_id],
            ShouldDecrementDesiredCapacity=False,
        )
    except ProviderError as exc:
        # Someone else detached or terminated it between the check and the call.
        if exc.code != "ValidationError":
            raise
        member = await _membership(api, instance_id)
        if member is not None and member[0] == group and member[1] not in _LEAVING:
            raise


async def attach_instance(api: AwsApi, group: str, instance_id: str) -> None:
    """Attach a detached instance; Auto Scaling raises the desired capacity by one for it."""
    member = await _membership(api, instance_id)
    if member is not None:
        owner, state = member
        if owner != group:
            raise ProviderError(
                "InstanceInOtherGroup",
                f"instance {instance_id} belongs to Auto Scaling group {owner}, not {group}",
                retryable=False,
                operation="autoscaling.attach_instances",
            )
        if state in _LEAVING:
            raise ProviderError(
                "IncorrectInstanceState",
                f"instance {instance_id} is {state} in Auto Scaling group {group}; "
                "it can be attached again once it has left",
                retryable=True,
                operation="autoscaling.attach_instances",
            )
        return
    if not await _raw_groups(api, [group]):
        raise ProviderError(
            "NotFound",
            f"Auto Scaling group {group} does not exist",
            retryable=False,
            operation="autoscaling.attach_instances",
        )
    try:
        await api.call(
            "autoscaling", "attach_instances", AutoScalingGroupName=group, InstanceIds=[instance_id]
        )
    except ProviderError as exc:
        if exc.code != "ValidationError":
            raise
        member = await _membership(api, instance_id)
        if member is None or member[0] != group:
            raise
