"""Node groups of the simulated cloud: describe, detach, attach, terminate.

The idempotency rules are the `aws` provider's: detaching a detached or leaving instance and
terminating a terminated or unknown one are successes, decided from the cloud's state (read
again after a refusal) rather than from error messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from nodeops.providers.base import Instance, Lifecycle, NodeGroup, ProviderError
from nodeops.providers.sim.api import SimApi, parse_answer, q

__all__ = ["attach_instance", "describe_groups", "detach_instance", "terminate_instance"]

_LEAVING: Final = frozenset({"Detaching", "Detached", "Terminating", "Terminated"})
_LIFECYCLE: Final = {
    "Pending": Lifecycle.PENDING,
    "InService": Lifecycle.IN_SERVICE,
    "Standby": Lifecycle.STANDBY,
    "Detaching": Lifecycle.DETACHING,
    "Detached": Lifecycle.DETACHING,
    "Terminating": Lifecycle.TERMINATING,
    "Terminated": Lifecycle.TERMINATED,
}


def _instance(raw: Mapping[str, Any]) -> Instance:
    state = str(raw["lifecycleState"])
    return Instance(
        id=str(raw["instanceId"]),
        provider_id=str(raw["providerId"]),
        zone=raw.get("zone"),
        lifecycle_state=_LIFECYCLE.get(state, Lifecycle.UNKNOWN),
        healthy=raw.get("healthStatus") == "Healthy",
        launch_version=raw.get("launchVersion"),
        out_of_date=bool(raw.get("outOfDate")),
        protected_from_scale_in=bool(raw.get("protectedFromScaleIn")),
        raw_state=state,
    )


def _group(raw: Mapping[str, Any]) -> NodeGroup:
    return NodeGroup(
        name=str(raw["name"]),
        desired=int(raw["desiredCapacity"]),
        min=int(raw["minSize"]),
        max=int(raw["maxSize"]),
        instances=[_instance(i) for i in raw["instances"]],
        launch_version=raw.get("launchVersion"),
    )


async def describe_groups(api: SimApi, names: Sequence[str]) -> list[NodeGroup]:
    unique = list(dict.fromkeys(names))
    if not unique:
        return []
    data = await api.call(
        "GET",
        "/nodegroups",
        operation="nodegroups.list",
        params=[("names", n) for n in unique],
    )
    found = parse_answer(
        "nodegroups.list", lambda d: {g.name: g for g in map(_group, d["nodeGroups"])}, data
    )
    return [found[n] for n in unique if n in found]


async def detach_instance(api: SimApi, group: str, instance_id: str) -> None:
    """Detach keeping the desired capacity, so the group launches a replacement."""
    operation = "nodegroups.detach"
    raw = await api.raw_instance(instance_id)
    if not _detachable(raw, group, instance_id, operation):
        return
    try:
        await api.call(
            "POST",
            f"/nodegroups/{q(group)}/detach",
            operation=operation,
            body={"instanceIds": [instance_id], "shouldDecrementDesiredCapacity": False},
        )
    except ProviderError as exc:
        # Someone else detached or terminated it between the check and the call.
        if exc.code not in ("ValidationError", "NodeGroupNotFound"):
            raise
        raw = await api.raw_instance(instance_id)
        if _detachable(raw, group, instance_id, operation):
            raise


def _detachable(
    raw: Mapping[str, Any] | None, group: str, instance_id: str, operation: str
) -> bool:
    """Whether a detach is still to be done; raises while the instance cannot be yet."""
    if raw is None or raw.get("nodeGroup") != group:
        return False
    state = str(raw.get("lifecycleState"))
    if state in _LEAVING:
        return False
    if state != "InService":
        raise ProviderError(
            "IncorrectInstanceState",
            f"instance {instance_id} is {state} in node group {group}; it can be detached "
            "once it is InService",
            retryable=True,
            operation=operation,
        )
    return True


async def attach_instance(api: SimApi, group: str, instance_id: str) -> None:
    """Attach a detached instance; the group's desired capacity grows by one for it."""
    operation = "nodegroups.attach"
    raw = await api.raw_instance(instance_id)
    if _attached(raw, group, instance_id, operation):
        return
    try:
        await api.call(
            "POST",
            f"/nodegroups/{q(group)}/attach",
            operation=operation,
            body={"instanceIds": [instance_id]},
        )
    except ProviderError as exc:
        if exc.code not in ("ValidationError", "InstanceInOtherGroup"):
            raise
        raw = await api.raw_instance(instance_id)
        if raw is None or raw.get("nodeGroup") != group:
            raise


def _attached(raw: Mapping[str, Any] | None, group: str, instance_id: str, operation: str) -> bool:
    """Whether the instance is in the group already; raises when it cannot join it."""
    if raw is None:
        raise ProviderError(
            "NotFound",
            f"instance {instance_id} does not exist",
            retryable=False,
            operation=operation,
        )
    owner = raw.get("nodeGroup")
    state = str(raw.get("lifecycleState"))
    if owner is None:
        if state in ("Terminating", "Terminated"):
            raise ProviderError(
                "IncorrectInstanceState",
                f"instance {instance_id} is {state}; it cannot be attached",
                retryable=False,
                operation=operation,
            )
        return False
    if state in _LEAVING:
        raise ProviderError(
            "IncorrectInstanceState",
            f"instance {instance_id} is {state} in node group {owner}; it can be attached "
            "once it has left",
            retryable=True,
            operation=operation,
        )
    if owner != group:
        raise ProviderError(
            "InstanceInOtherGroup",
            f"instance {instance_id} belongs to node group {owner}, not {group}",
            retryable=False,
            operation=operation,
        )
    return True


async def terminate_instance(api: SimApi, instance_id: str) -> None:
    try:
        await api.call("DELETE", f"/instances/{q(instance_id)}", operation="instances.terminate")
    except ProviderError as exc:
        if exc.code != "InstanceNotFound":
            raise
