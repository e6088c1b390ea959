"""Classic load balancers and ELBv2 target groups: where an instance is registered, and changing it.

Discovery lists the load balancers once per call (DescribeLoadBalancers for CLBs, which carries
their instances; DescribeTargetGroups for v2) and asks DescribeTargetHealth only of target groups
that can hold instances (target type `instance`), in the configured VPC, and, when the caller
knows which load balancers matter (`among`, usually from `targets_behind_services`), only of
those. node-detacher asked every target group of the region, one call each, for every node.

A target group registers an instance per port, so a target group target carries its port, and
deregistering without a port removes every port the instance is registered on (the API alone
would only remove the group's default port).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodeops.common.looptime import loop_time
from nodeops.providers.aws.api import AwsApi
from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    LoadBalancerTarget,
    ProviderError,
    RegistrationState,
    ServiceRef,
    TargetHealth,
)

__all__ = [
    "LoadBalancerScan",
    "deregister",
    "register",
    "registrations",
    "target_health",
    "targets_behind_services",
    "targets_of",
    "wait_drained",
]

_PAGE_SIZE: Final = 400  # the maximum of both DescribeLoadBalancers APIs
_TAGS_PER_CALL: Final = 20  # the maximum of both DescribeTags APIs

# Tags of the Kubernetes AWS cloud provider (CLBs and NLB target groups of Services).
SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"
CLUSTER_TAG_PREFIX: Final = "kubernetes.io/cluster/"
LEGACY_CLUSTER_TAG: Final = "KubernetesCluster"
# Tags of the AWS Load Balancer Controller.
LBC_SERVICE_STACK_TAG: Final = "service.k8s.aws/stack"
LBC_CLUSTER_TAG: Final = "elbv2.k8s.aws/cluster"


@dataclass(frozen=True, slots=True)
class _Registration:
    instance_id: str
    port: int | None
    state: str
    reason: str

    @property
    def registered(self) -> bool:
        """Registered and not on its way out: what a re-register would have to restore."""
        return self.state != "draining" and self.reason != "Target.NotRegistered"


def _unsupported(target: LoadBalancerTarget, operation: str) -> ProviderError:
    return ProviderError(
        "UnsupportedTarget",
        f"the AWS provider has no load balancer kind {target.kind!r}",
        retryable=False,
        operation=operation,
    )


class LoadBalancerScan:
    """The load balancer listings of one provider call, each fetched at most once."""

    def __init__(self, api: AwsApi) -> None:
        self.api = api
        self._classic: list[Mapping[str, Any]] | None = None
        self._groups: list[Mapping[str, Any]] | None = None
        self._health: dict[str, list[_Registration]] = {}

    def _in_vpc(self, vpc: str | None) -> bool:
        wanted = self.api.config.vpc_id
        return wanted is None or vpc == wanted

    async def classic(self) -> list[Mapping[str, Any]]:
        if self._classic is None:
            found: list[Mapping[str, Any]] = []
            async for page in self.api.pages(
                "elb",
                "describe_load_balancers",
                token_in="Marker",
                token_out="NextMarker",
                PageSize=_PAGE_SIZE,
            ):
                found.extend(
                    lb
                    for lb in page.get("LoadBalancerDescriptions", ())
                    if self._in_vpc(lb.get("VPCId"))
                )
            self._classic = found
        return self._classic

    async def target_groups(self) -> list[Mapping[str, Any]]:
        if self._groups is None:
            found: list[Mapping[str, Any]] = []
            async for page in self.api.pages(
                "elbv2",
                "describe_target_groups",
                token_in="Marker",
                token_out="NextMarker",
                PageSize=_PAGE_SIZE,
            ):
                found.extend(
                    tg for tg in page.get("TargetGroups", ()) if self._in_vpc(tg.get("VpcId"))
                )
            self._groups = found
        return self._groups

    async def registrations(self, arn: str) -> list[_Registration]:
        cached = self._health.get(arn)
        if cached is None:
            cached = await _registrations(self.api, arn)
            self._health[arn] = cached
        return cached


async def _registrations(
    api: AwsApi, arn: str, only: Mapping[str, Any] | None = None
) -> list[_Registration]:
    """The target group's registrations, or the health of the one target `only` names.

    Asking for one target also answers for a target that is no longer listed (draining after
    its instance terminated, or `unused` once gone), which a plain listing leaves out.
    """
    params: dict[str, Any] = {"TargetGroupArn": arn}
    if only is not None:
        params["Targets"] = [dict(only)]
    try:
        response = await api.call("elbv2", "describe_target_health", **params)
    except ProviderError as exc:
        if exc.code == "TargetGroupNotFound":
            return []
        raise
    found = []
    for row in response.get("TargetHealthDescriptions", ()):
        target = row.get("Target") or {}
        health = row.get("TargetHealth") or {}
        port = target.get("Port")
        found.append(
            _Registration(
                instance_id=str(target.get("Id", "")),
                port=int(port) if port is not None else None,
                state=str(health.get("State", "")),
                reason=str(health.get("Reason", "")),
            )
        )
    return found


async def targets_of(
    api: AwsApi,
    instance_ids: Sequence[str],
    *,
    among: Sequence[LoadBalancerTarget] | None = None,
    scan: LoadBalancerScan | None = None,
) -> dict[str, list[LoadBalancerTarget]]:
    """For each instance, the CLBs and (target group, port) pairs it is registered in."""
    found = await registrations(api, among=among, scan=scan, instance_ids=instance_ids)
    return {i: found.get(i, []) for i in instance_ids}


async def registrations(
    api: AwsApi,
    *,
    among: Sequence[LoadBalancerTarget] | None = None,
    scan: LoadBalancerScan | None = None,
    instance_ids: Sequence[str] | None = None,
) -> dict[str, list[LoadBalancerTarget]]:
    """Every instance (or those of `instance_ids`) with the targets it is registered in."""
    scan = scan or LoadBalancerScan(api)
    wanted = None if instance_ids is None else set(instance_ids)
    result: dict[str, list[LoadBalancerTarget]] = {}
    classic_names = None if among is None else {t.name for t in among if t.kind == CLASSIC}
    group_arns = None if among is None else {t.name for t in among if t.kind == TARGET_GROUP}

    if classic_names is None or classic_names:
        for lb in sorted(await scan.classic(), key=lambda lb: str(lb["LoadBalancerName"])):
            name = lb["LoadBalancerName"]
            if classic_names is not None and name not in classic_names:
                continue
            for member in lb.get("Instances", ()):
                iid = member.get("InstanceId")
                if iid and (wanted is None or iid in wanted):
                    result.setdefault(iid, []).append(LoadBalancerTarget(CLASSIC, name))

    if group_arns is None or group_arns:
        candidates = sorted(
            tg["TargetGroupArn"]
            for tg in await scan.target_groups()
            if tg.get("TargetType", "instance") == "instance"
            and (group_arns is None or tg["TargetGroupArn"] in group_arns)
        )
        limit = asyncio.Semaphore(api.config.max_concurrency)

        async def health(arn: str) -> list[_Registration]:
            async with limit:
                return await scan.registrations(arn)

        async with asyncio.TaskGroup() as tasks:
            pending = [(arn, tasks.create_task(health(arn))) for arn in candidates]
        for arn, task in pending:
            rows = sorted(task.result(), key=lambda r: (r.instance_id, r.port or 0))
            for row in rows:
                if row.registered and (wanted is None or row.instance_id in wanted):
                    result.setdefault(row.instance_id, []).append(
                        LoadBalancerTarget(TARGET_GROUP, arn, row.port)
                    )
    return result


async def deregister(api: AwsApi, target: LoadBalancerTarget, instance_id: str) -> None:
    if target.kind == CLASSIC:
        try:
            await api.call(
                "elb",
                "deregister_instances_from_load_balancer",
                LoadBalancerName=target.name,
                Instances=[{"InstanceId": instance_id}],
            )
        except ProviderError as exc:
            # Gone load balancer, or an instance it does not know: nothing to deregister.
            if exc.code not in ("LoadBalancerNotFound", "InvalidInstance", "InvalidEndPoint"):
                raise
        return
    if target.kind != TARGET_GROUP:
        raise _unsupported(target, "deregister")
    if target.port is None:
        ports = [
            r.port
            for r in await _registrations(api, target.name)
            if r.instance_id == instance_id and r.registered
        ]
        targets = [_target(instance_id, port) for port in ports]
    else:
        targets = [_target(instance_id, target.port)]
    if not targets:
        return
    try:
        await api.call("elbv2", "deregister_targets", TargetGroupArn=target.name, Targets=targets)
    except ProviderError as exc:
        # InvalidTarget: not registered (any more), or never could be: either way done.
        if exc.code not in ("TargetGroupNotFound", "InvalidTarget"):
            raise


def _target(instance_id: str, port: int | None) -> dict[str, Any]:
    return {"Id": instance_id} if port is None else {"Id": instance_id, "Port": port}


async def register(api: AwsApi, target: LoadBalancerTarget, instance_id: str) -> None:
    if target.kind == CLASSIC:
        # The API is idempotent on AWS, but asking first keeps emulators that append
        # duplicates honest and costs one call on a rare path.
        response = await api.call("elb", "describe_load_balancers", LoadBalancerNames=[target.name])
        for lb in response.get("LoadBalancerDescriptions", ()):
            if any(m.get("InstanceId") == instance_id for m in lb.get("Instances", ())):
                return
        await api.call(
            "elb",
            "register_instances_with_load_balancer",
            LoadBalancerName=target.name,
            Instances=[{"InstanceId": instance_id}],
        )
        return
    if target.kind != TARGET_GROUP:
        raise _unsupported(target, "register")
    await api.call(
        "elbv2",
        "register_targets",
        TargetGroupArn=target.name,
        Targets=[_target(instance_id, target.port)],
    )


async def _classic_registered(api: AwsApi, name: str, instance_id: str) -> bool | None:
    """Whether the CLB still lists the instance; None when the CLB is gone."""
    try:
        response = await api.call(
            "elb",
            "describe_instance_health",
            LoadBalancerName=name,
            Instances=[{"InstanceId": instance_id}],
        )
    except ProviderError as exc:
        if exc.code == "LoadBalancerNotFound":
            return None
        if exc.code == "InvalidInstance":
            return False
        raise
    states = response.get("InstanceStates", ())
    return any(
        s.get("InstanceId") == instance_id and s.get("State") not in (None, "Unknown")
        for s in states
    )


async def _classic_draining_seconds(api: AwsApi, name: str) -> float:
    try:
        response = await api.call("elb", "describe_load_balancer_attributes", LoadBalancerName=name)
    except ProviderError as exc:
        if exc.code == "LoadBalancerNotFound":
            return 0.0
        raise
    draining = (response.get("LoadBalancerAttributes") or {}).get("ConnectionDraining") or {}
    return float(draining.get("Timeout", 0)) if draining.get("Enabled") else 0.0


def _still_registered(target: LoadBalancerTarget, instance_id: str) -> ProviderError:
    return ProviderError(
        "IncorrectTargetState",
        f"instance {instance_id} is still registered in {target.kind} {target.name}; "
        "deregister it before waiting for it to drain",
        retryable=False,
        operation="wait_drained",
    )


async def wait_drained(
    api: AwsApi, target: LoadBalancerTarget, instance_id: str, timeout: float
) -> None:
    """Wait out connection draining after a deregistration.

    A target group reports `draining` until its deregistration delay is over, so it is polled. A
    classic load balancer does not show draining at all: once the instance is off its list, this
    waits the load balancer's connection-draining timeout, which bounds how long requests run.
    """
    deadline = loop_time() + timeout
    if target.kind == CLASSIC:
        registered = await _classic_registered(api, target.name, instance_id)
        if registered is None:
            return
        if registered:
            raise _still_registered(target, instance_id)
        period = await _classic_draining_seconds(api, target.name)
        if period <= 0:
            return
        await asyncio.sleep(min(period, timeout))
        if period > timeout:
            raise _drain_timeout(target, instance_id, timeout)
        return
    if target.kind != TARGET_GROUP:
        raise _unsupported(target, "wait_drained")
    while True:
        rows = [
            r
            for r in await _registrations(api, target.name)
            if r.instance_id == instance_id and (target.port is None or r.port == target.port)
        ]
        if any(r.registered for r in rows):
            raise _still_registered(target, instance_id)
        if not any(r.state == "draining" for r in rows):
            return
        remaining = deadline - loop_time()
        if remaining <= 0:
            raise _drain_timeout(target, instance_id, timeout)
        await asyncio.sleep(min(api.config.poll_interval, remaining))


async def target_health(api: AwsApi, target: LoadBalancerTarget, instance_id: str) -> TargetHealth:
    """DescribeTargetHealth for a target group; DescribeInstanceHealth for a classic load
    balancer, whose connection-draining timeout becomes `drain_seconds` once the instance is
    off its list (it does not report draining)."""
    if target.kind == CLASSIC:
        registered = await _classic_registered(api, target.name, instance_id)
        if registered is None:
            return TargetHealth(RegistrationState.UNUSED, "LoadBalancerNotFound")
        if registered:
            return TargetHealth(RegistrationState.REGISTERED, "InService")
        drain = await _classic_draining_seconds(api, target.name)
        return TargetHealth(RegistrationState.UNUSED, "NotRegistered", drain_seconds=drain)
    if target.kind != TARGET_GROUP:
        raise _unsupported(target, "target_health")
    only = None if target.port is None else _target(instance_id, target.port)
    rows = [
        r
        for r in await _registrations(api, target.name, only)
        if r.instance_id == instance_id and (target.port is None or r.port == target.port)
    ]
    live = [r for r in rows if r.registered]
    if live:
        return TargetHealth(RegistrationState.REGISTERED, live[0].state)
    if any(r.state == "draining" for r in rows):
        return TargetHealth(RegistrationState.DRAINING, "draining")
    return TargetHealth(
        RegistrationState.UNUSED, rows[0].reason if rows else "Target.NotRegistered"
    )


def _drain_timeout(target: LoadBalancerTarget, instance_id: str, timeout: float) -> ProviderError:
    return ProviderError(
        "Timeout",
        f"instance {instance_id} still draining from {target.kind} {target.name} "
        f"after {timeout:.0f}s",
        retryable=True,
        operation="wait_drained",
    )


def _tags_of(description: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in description.get("Tags", ())}


async def _describe_tags(
    api: AwsApi, service: str, key: str, id_field: str, values: Sequence[str]
) -> dict[str, dict[str, str]]:
    """Tags by resource, twenty at a time; resources deleted meanwhile are left out."""
    missing = "TargetGroupNotFound" if service == "elbv2" else "LoadBalancerNotFound"

    async def batch(chunk: Sequence[str]) -> dict[str, dict[str, str]]:
        response = await api.call(service, "describe_tags", **{key: list(chunk)})
        return {str(d[id_field]): _tags_of(d) for d in response.get("TagDescriptions", ())}

    tags: dict[str, dict[str, str]] = {}
    for start in range(0, len(values), _TAGS_PER_CALL):
        chunk = values[start : start + _TAGS_PER_CALL]
        try:
            tags.update(await batch(chunk))
        except ProviderError as exc:
            if exc.code != missing:
                raise
            for value in chunk:
                try:
                    tags.update(await batch([value]))
                except ProviderError as single:
                    if single.code != missing:
                        raise
    return tags


def _service_of(tags: Mapping[str, str]) -> str | None:
    return tags.get(LBC_SERVICE_STACK_TAG) or tags.get(SERVICE_NAME_TAG)


def _in_cluster(tags: Mapping[str, str], cluster: str | None) -> bool:
    if cluster is None:
        return True
    return (
        tags.get(LBC_CLUSTER_TAG) == cluster
        or f"{CLUSTER_TAG_PREFIX}{cluster}" in tags
        or tags.get(LEGACY_CLUSTER_TAG) == cluster
    )


async def targets_behind_services(
    api: AwsApi,
    services: Iterable[ServiceRef],
    *,
    cluster: str | None = None,
    scan: LoadBalancerScan | None = None,
) -> dict[ServiceRef, list[LoadBalancerTarget]]:
    """The CLBs and target groups that the cloud provider or the AWS Load Balancer Controller
    made for the Services, matched by their tags.

    The Kubernetes cloud provider tags a Service's CLB, and the target groups of its NLB, with
    `kubernetes.io/service-name=<namespace>/<name>` and `kubernetes.io/cluster/<cluster>`; the
    AWS Load Balancer Controller tags its target groups with
    `service.k8s.aws/stack=<namespace>/<name>` and `elbv2.k8s.aws/cluster=<cluster>`.
    """
    scan = scan or LoadBalancerScan(api)
    cluster = cluster or api.config.cluster_name
    wanted = {str(s): s for s in services}
    result: dict[ServiceRef, list[LoadBalancerTarget]] = {s: [] for s in wanted.values()}
    if not wanted:
        return result

    arns = sorted(str(tg["TargetGroupArn"]) for tg in await scan.target_groups())
    for arn, tags in sorted(
        (await _describe_tags(api, "elbv2", "ResourceArns", "ResourceArn", arns)).items()
    ):
        service = _service_of(tags)
        if service in wanted and _in_cluster(tags, cluster):
            result[wanted[service]].append(LoadBalancerTarget(TARGET_GROUP, arn))

    names = sorted(str(lb["LoadBalancerName"]) for lb in await scan.classic())
    for name, tags in sorted(
        (await _describe_tags(api, "elb", "LoadBalancerNames", "LoadBalancerName", names)).items()
    ):
        service = tags.get(SERVICE_NAME_TAG)
        if service in wanted and _in_cluster(tags, cluster):
            result[wanted[service]].append(LoadBalancerTarget(CLASSIC, name))
    return result
