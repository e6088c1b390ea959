"""Load balancers of the simulated cloud: registrations, deregistration with draining, and the
load balancers tagged for a Service.

Classic load balancers register an instance without a port and target groups per port, as on
AWS; deregistering an absent target is a success, so a repeated detach does no harm.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from nodeops.common.looptime import loop_time
from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    LoadBalancerTarget,
    ProviderError,
    RegistrationState,
    ServiceRef,
    TargetHealth,
)
from nodeops.providers.sim.api import SimApi, parse_answer, q

__all__ = [
    "deregister",
    "register",
    "registrations",
    "target_health",
    "targets_behind_services",
    "targets_of",
    "wait_drained",
]

_KINDS: Final = frozenset({CLASSIC, TARGET_GROUP})

# Tags that tie a load balancer to a Service, as the Kubernetes cloud provider and the AWS Load
# Balancer Controller write them.
_SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"
_SERVICE_STACK_TAG: Final = "service.k8s.aws/stack"
_CLUSTER_TAG_PREFIX: Final = "kubernetes.io/cluster/"
_LBC_CLUSTER_TAG: Final = "elbv2.k8s.aws/cluster"


def _unsupported(target: LoadBalancerTarget, operation: str) -> ProviderError:
    return ProviderError(
        "UnsupportedTarget",
        f"the simulated cloud has no load balancer kind {target.kind!r}",
        retryable=False,
        operation=operation,
    )


async def targets_of(
    api: SimApi,
    instance_id: str,
    *,
    among: Sequence[LoadBalancerTarget] | None = None,
) -> list[LoadBalancerTarget]:
    """Registrations that are not draining; a classic load balancer's carry no port."""
    operation = "loadbalancers.list"
    data = await api.call(
        "GET", "/loadbalancers", operation=operation, params=[("instanceId", instance_id)]
    )
    wanted = None if among is None else {(t.kind, t.name) for t in among}

    def convert(d: Any) -> list[LoadBalancerTarget]:
        found: list[LoadBalancerTarget] = []
        for lb in d["loadBalancers"]:
            kind, name = str(lb["type"]), str(lb["name"])
            if wanted is not None and (kind, name) not in wanted:
                continue
            for row in lb["targets"]:
                if row["instanceId"] != instance_id or row["state"] == "draining":
                    continue
                port = None if kind == CLASSIC else int(row["port"])
                found.append(LoadBalancerTarget(kind, name, port))
        return sorted(set(found), key=lambda t: (t.kind, t.name, t.port or 0))

    return parse_answer(operation, convert, data)


async def registrations(
    api: SimApi, *, among: Sequence[LoadBalancerTarget] | None = None
) -> dict[str, list[LoadBalancerTarget]]:
    """Every instance's registrations that are not draining, from one listing."""
    operation = "loadbalancers.list"
    data = await api.call("GET", "/loadbalancers", operation=operation)
    wanted = None if among is None else {(t.kind, t.name) for t in among}

    def convert(d: Any) -> dict[str, list[LoadBalancerTarget]]:
        found: dict[str, set[LoadBalancerTarget]] = {}
        for lb in d["loadBalancers"]:
            kind, name = str(lb["type"]), str(lb["name"])
            if wanted is not None and (kind, name) not in wanted:
                continue
            for row in lb["targets"]:
                if row["state"] == "draining":
                    continue
                port = None if kind == CLASSIC else int(row["port"])
                found.setdefault(str(row["instanceId"]), set()).add(
                    LoadBalancerTarget(kind, name, port)
                )
        return {
            iid: sorted(targets, key=lambda t: (t.kind, t.name, t.port or 0))
            for iid, targets in sorted(found.items())
        }

    return parse_answer(operation, convert, data)


async def deregister(api: SimApi, target: LoadBalancerTarget, instance_id: str) -> None:
    """Start draining; without a port, every port the instance is registered on."""
    operation = "targets.deregister"
    _check_kind(target, operation)
    params = [] if target.port is None or target.kind == CLASSIC else [("port", str(target.port))]
    try:
        await api.call(
            "DELETE",
            f"/loadbalancers/{q(target.name)}/targets/{q(instance_id)}",
            operation=operation,
            params=params,
        )
    except ProviderError as exc:
        if exc.code not in ("TargetNotFound", "LoadBalancerNotFound"):
            raise


async def register(api: SimApi, target: LoadBalancerTarget, instance_id: str) -> None:
    operation = "targets.register"
    _check_kind(target, operation)
    body: dict[str, Any] = {"instanceId": instance_id}
    if target.kind == TARGET_GROUP and target.port is not None:
        body["port"] = target.port
    await api.call(
        "POST", f"/loadbalancers/{q(target.name)}/targets", operation=operation, body=body
    )


def _check_kind(target: LoadBalancerTarget, operation: str) -> None:
    if target.kind not in _KINDS:
        raise _unsupported(target, operation)


async def targets_behind_services(
    api: SimApi,
    services: Sequence[ServiceRef],
    *,
    cluster: str | None = None,
) -> dict[ServiceRef, list[LoadBalancerTarget]]:
    """Load balancers tagged for the Services, with the tags AWS's controllers write."""
    wanted = {str(s): s for s in services}
    result: dict[ServiceRef, list[LoadBalancerTarget]] = {s: [] for s in wanted.values()}
    if not wanted:
        return result
    operation = "loadbalancers.list"
    data = await api.call("GET", "/loadbalancers", operation=operation)

    def convert(d: Any) -> None:
        for lb in sorted(d["loadBalancers"], key=lambda lb: str(lb["name"])):
            tags = {str(k): str(v) for k, v in (lb.get("tags") or {}).items()}
            service = tags.get(_SERVICE_STACK_TAG) or tags.get(_SERVICE_NAME_TAG)
            if service not in wanted:
                continue
            if cluster is not None and not (
                tags.get(_LBC_CLUSTER_TAG) == cluster or f"{_CLUSTER_TAG_PREFIX}{cluster}" in tags
            ):
                continue
            result[wanted[service]].append(LoadBalancerTarget(str(lb["type"]), str(lb["name"])))

    parse_answer(operation, convert, data)
    return result


async def wait_drained(
    api: SimApi, target: LoadBalancerTarget, instance_id: str, timeout: float
) -> None:
    """Poll until no registration of the instance is draining (the deregistration delay)."""
    operation = "targets.list"
    _check_kind(target, operation)
    deadline = loop_time() + timeout
    while True:
        try:
            data = await api.call(
                "GET",
                f"/loadbalancers/{q(target.name)}/targets",
                operation=operation,
                params=[("instanceId", instance_id)],
            )
        except ProviderError as exc:
            if exc.code == "LoadBalancerNotFound":
                return
            raise
        states = parse_answer(
            operation,
            lambda d: [
                str(r["state"])
                for r in d["targets"]
                if target.kind == CLASSIC or target.port is None or r["port"] == target.port
            ],
            data,
        )
        if any(s != "draining" for s in states):
            raise ProviderError(
                "IncorrectTargetState",
                f"instance {instance_id} is still registered in {target.kind} {target.name}; "
                "deregister it before waiting for it to drain",
                retryable=False,
                operation="wait_drained",
            )
        if not states:
            return
        remaining = deadline - loop_time()
        if remaining <= 0:
            raise ProviderError(
                "Timeout",
                f"instance {instance_id} still draining from {target.kind} {target.name} "
                f"after {timeout:g}s",
                retryable=True,
                operation="wait_drained",
            )
        await asyncio.sleep(min(api.config.poll_interval, remaining))


async def target_health(api: SimApi, target: LoadBalancerTarget, instance_id: str) -> TargetHealth:
    """The cloud's target states: draining until the deregistration delay is over."""
    operation = "targets.list"
    _check_kind(target, operation)
    try:
        data = await api.call(
            "GET",
            f"/loadbalancers/{q(target.name)}/targets",
            operation=operation,
            params=[("instanceId", instance_id)],
        )
    except ProviderError as exc:
        if exc.code == "LoadBalancerNotFound":
            return TargetHealth(RegistrationState.UNUSED, "LoadBalancerNotFound")
        raise
    states = parse_answer(
        operation,
        lambda d: [
            str(r["state"])
            for r in d["targets"]
            if target.kind == CLASSIC or target.port is None or r["port"] == target.port
        ],
        data,
    )
    live = [s for s in states if s != "draining"]
    if live:
        return TargetHealth(RegistrationState.REGISTERED, live[0])
    if states:
        return TargetHealth(RegistrationState.DRAINING, "draining")
    return TargetHealth(RegistrationState.UNUSED, "NotRegistered")
