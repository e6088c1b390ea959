"""The JSON shapes of the simulated cloud's HTTP API (camelCase, like the AWS APIs it mimics)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodeops.sim.cloud.model import (
    PENDING,
    Registration,
    SimInstance,
    SimLoadBalancer,
    SimNodeGroup,
)
from nodeops.sim.cloud.state import CloudState

__all__ = ["group_view", "instance_view", "load_balancer_view", "target_view"]

Obj = dict[str, Any]


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def instance_view(state: CloudState, instance: SimInstance) -> Obj:
    return {
        "instanceId": instance.id,
        "providerId": instance.provider_id,
        "nodeGroup": instance.group,
        "launchedIn": instance.origin,
        "zone": instance.zone,
        "lifecycleState": instance.lifecycle,
        "state": instance.machine_state,
        "healthStatus": "Healthy" if instance.running else "Unhealthy",
        "launchVersion": instance.launch_version,
        "outOfDate": state.out_of_date(instance),
        "protectedFromScaleIn": instance.protected,
        "terminationProtected": instance.termination_protected,
        "privateIp": instance.private_ip,
        "privateDnsName": instance.node_name,
        "launchTime": _time(instance.launched_at),
        "terminateTime": _time(instance.terminated_at),
    }


def group_view(state: CloudState, group: SimNodeGroup) -> Obj:
    return {
        "name": group.name,
        "desiredCapacity": group.desired,
        "minSize": group.min_size,
        "maxSize": group.max_size,
        "launchVersion": group.launch_version,
        "instanceType": group.spec.instance_type,
        "zones": group.spec.zone_list,
        "bootSeconds": group.spec.boot_seconds,
        "newInstancesProtectedFromScaleIn": group.protect_new,
        "instances": [instance_view(state, state.instances[iid]) for iid in group.members],
    }


def _target_state(state: CloudState, registration: Registration, lb: str | None) -> str:
    """A target group's health states: what its health checks say when traffic flows through
    it (they check the node's endpoints), else healthy once the instance is in service."""
    if registration.draining:
        return "draining"
    instance = state.instances.get(registration.instance_id)
    if instance is None:
        return "unused"
    if instance.lifecycle == PENDING:
        return "initial"
    if not instance.running:
        return "unhealthy"
    checked = (
        state.health_checks(lb, registration.instance_id, registration.port)
        if lb is not None and state.health_checks is not None
        else None
    )
    return checked or "healthy"


def target_view(state: CloudState, registration: Registration, lb: str | None = None) -> Obj:
    return {
        "instanceId": registration.instance_id,
        "port": registration.port,
        "state": _target_state(state, registration, lb),
        "registeredAt": _time(registration.registered_at),
        "drainingUntil": _time(registration.draining_until),
    }


def load_balancer_view(
    state: CloudState, lb: SimLoadBalancer, *, instance_id: str | None = None
) -> Obj:
    registrations = (
        lb.of(instance_id)
        if instance_id is not None
        else [lb.registrations[k] for k in sorted(lb.registrations)]
    )
    return {
        "name": lb.name,
        "type": lb.kind,
        "port": lb.port,
        "nodeGroups": list(lb.node_groups),
        "deregistrationDelaySeconds": lb.deregistration_delay,
        "tags": dict(lb.tags),
        "targets": [target_view(state, r, lb.name) for r in registrations],
    }
