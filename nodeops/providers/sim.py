"""The `sim` provider: the simulated cloud of `nodeops sim serve`, reached over its HTTP API.

It talks to `/sim/cloud/` exactly as the other providers talk to their clouds, through the
network with retries and timeouts and never by importing the simulator, so the operator's
cloud-facing paths (idempotent detach and terminate, draining waits, retried 5xx) run the same
way against the simulator as in production. The idempotency rules are the `aws` provider's:
detaching a detached or leaving instance, terminating a terminated or unknown one, and
deregistering an absent target are successes, decided from the cloud's state rather than from
error messages.

Node provider IDs are `sim:///<group>/<instance id>`; a node without one is matched by its name
against the instances' private DNS names, as on AWS.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from nodeops import __version__
from nodeops.providers.base import (
    CLASSIC,
    TARGET_GROUP,
    BaseProvider,
    Instance,
    Lifecycle,
    LoadBalancerTarget,
    NodeGroup,
    ProviderError,
    RegistrationState,
    Server,
    ServiceRef,
    TargetHealth,
    node_name,
    node_provider_id,
)
from nodeops.providers.retry import RetryPolicy, call_with_retry

__all__ = ["SimConfig", "SimProvider", "classify_sim_error"]

T = TypeVar("T")

_NAME: Final = "sim"
_PREFIX: Final = "/sim/cloud"

_RETRYABLE_CODES: Final = frozenset({"Throttling", "ResourceContention", "IncorrectInstanceState"})
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
_KINDS: Final = frozenset({CLASSIC, TARGET_GROUP})

# Tags that tie a load balancer to a Service, as the Kubernetes cloud provider and the AWS Load
# Balancer Controller write them.
_SERVICE_NAME_TAG: Final = "kubernetes.io/service-name"
_SERVICE_STACK_TAG: Final = "service.k8s.aws/stack"
_CLUSTER_TAG_PREFIX: Final = "kubernetes.io/cluster/"
_LBC_CLUSTER_TAG: Final = "elbv2.k8s.aws/cluster"


class SimConfig(BaseModel):
    """Configuration block of the `sim` provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Base URL of the simulator, e.g. http://127.0.0.1:8001.")
    token: str | None = Field(
        default=None,
        repr=False,
        description="Bearer token, when the simulator runs with --auth (its admin token).",
    )
    ca_file: str | None = Field(
        default=None,
        description="PEM file of the CA to trust for an https:// URL (the simulator's "
        "self-signed CA, the kubeconfig's certificate-authority-data decoded).",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    connect_timeout: float = Field(default=5.0, gt=0, description="Limit of one connect (s).")
    read_timeout: float = Field(default=20.0, gt=0, description="Limit of one read (s).")
    poll_interval: float = Field(
        default=1.0, gt=0, description="Between checks while waiting for draining or deletion."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("token")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave the key out instead)")
        return value


def classify_sim_error(exc: BaseException) -> ProviderError | None:
    """Transport failures are retryable; anything else is not a cloud failure."""
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return ProviderError("ConnectionError", str(exc) or type(exc).__name__, retryable=True)
    return None


def _http_error(status: int, raw: bytes) -> ProviderError:
    """The cloud's `{"code", "message"}`; a body of another shape keeps the HTTP status."""
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code")
    if not isinstance(code, str) or not code:
        code = str(body.get("reason") or status)
    message = str(body.get("message") or f"HTTP {status}")
    retryable = status >= 500 or status == 429 or code in _RETRYABLE_CODES
    return ProviderError(code, message, retryable=retryable)


def _invalid(operation: str, detail: str) -> ProviderError:
    return ProviderError(
        "InvalidResponse", f"unexpected answer: {detail}", retryable=True, operation=operation
    )


def _parse(operation: str, convert: Callable[[Any], T], data: Any) -> T:
    """Convert a decoded answer, turning a missing or mistyped field into `InvalidResponse`."""
    try:
        return convert(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _invalid(operation, f"{type(exc).__name__}: {exc}") from None


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


def _server(raw: Mapping[str, Any], name: str | None = None) -> Server:
    return Server(
        id=str(raw["instanceId"]),
        name=name or str(raw["privateDnsName"]),
        status=str(raw["state"]),
        provider_id=str(raw["providerId"]),
        zone=raw.get("zone"),
    )


def _unsupported(target: LoadBalancerTarget, operation: str) -> ProviderError:
    return ProviderError(
        "UnsupportedTarget",
        f"the simulated cloud has no load balancer kind {target.kind!r}",
        retryable=False,
        operation=operation,
    )


def _q(value: str) -> str:
    return quote(value, safe="")


class SimProvider(BaseProvider):
    """Node groups, load balancers and servers of the simulated cloud.

    Implements `NodeGroups`, `LoadBalancers`, `LoadBalancerDraining` and `Servers`.
    """

    name: ClassVar[str] = _NAME
    Config: ClassVar[type[SimConfig]] = SimConfig

    def __init__(self, config: SimConfig) -> None:
        if not isinstance(config, SimConfig):
            raise TypeError(f"expected SimConfig, got {type(config).__name__}")
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    # -- HTTP ----------------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ProviderError("Closed", "the sim provider is closed", retryable=False)
        if self._session is None or self._session.closed:
            headers = {
                "User-Agent": f"nodeops/{__version__} (provider sim)",
                "Accept": "application/json",
            }
            if self.config.token:
                headers["Authorization"] = f"Bearer {self.config.token}"
            tls: ssl.SSLContext | bool = True
            if self.config.ca_file:
                tls = ssl.create_default_context(cafile=self.config.ca_file)
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(ssl=tls),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    sock_connect=self.config.connect_timeout,
                    sock_read=self.config.read_timeout,
                ),
            )
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Sequence[tuple[str, str]] = (),
        body: Any = None,
    ) -> Any:
        """One API call under the retry policy; the decoded JSON answer."""
        url = f"{self.config.url}{_PREFIX}{path}"
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None

        async def attempt() -> Any:
            session = self._client()
            async with session.request(
                method, url, params=list(params), data=data, headers=headers
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise _http_error(resp.status, raw)
            try:
                return orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError as exc:
                raise _invalid(operation, f"not JSON: {exc}") from None

        return await call_with_retry(
            attempt,
            operation=operation,
            policy=self.config.retry,
            classify=classify_sim_error,
            provider=self.name,
        )

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _raw_instance(self, instance_id: str) -> dict[str, Any] | None:
        try:
            raw = await self._call(
                "GET", f"/instances/{_q(instance_id)}", operation="instances.get"
            )
        except ProviderError as exc:
            if exc.code == "InstanceNotFound":
                return None
            raise
        if not isinstance(raw, dict):
            raise _invalid("instances.get", "an instance must be an object")
        return raw

    # -- NodeGroups ----------------------------------------------------------------------------

    async def describe_groups(self, names: Sequence[str]) -> list[NodeGroup]:
        unique = list(dict.fromkeys(names))
        if not unique:
            return []
        data = await self._call(
            "GET",
            "/nodegroups",
            operation="nodegroups.list",
            params=[("names", n) for n in unique],
        )
        found = _parse(
            "nodegroups.list", lambda d: {g.name: g for g in map(_group, d["nodeGroups"])}, data
        )
        return [found[n] for n in unique if n in found]

    async def detach_instance(self, group: str, instance_id: str) -> None:
        """Detach keeping the desired capacity, so the group launches a replacement."""
        operation = "nodegroups.detach"
        raw = await self._raw_instance(instance_id)
        if not self._detachable(raw, group, instance_id, operation):
            return
        try:
            await self._call(
                "POST",
                f"/nodegroups/{_q(group)}/detach",
                operation=operation,
                body={"instanceIds": [instance_id], "shouldDecrementDesiredCapacity": False},
            )
        except ProviderError as exc:
            # Someone else detached or terminated it between the check and the call.
            if exc.code not in ("ValidationError", "NodeGroupNotFound"):
                raise
            raw = await self._raw_instance(instance_id)
            if self._detachable(raw, group, instance_id, operation):
                raise

    @staticmethod
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

    async def attach_instance(self, group: str, instance_id: str) -> None:
        """Attach a detached instance; the group's desired capacity grows by one for it."""
        operation = "nodegroups.attach"
        raw = await self._raw_instance(instance_id)
        if self._attached(raw, group, instance_id, operation):
            return
        try:
            await self._call(
                "POST",
                f"/nodegroups/{_q(group)}/attach",
                operation=operation,
                body={"instanceIds": [instance_id]},
            )
        except ProviderError as exc:
            if exc.code not in ("ValidationError", "InstanceInOtherGroup"):
                raise
            raw = await self._raw_instance(instance_id)
            if raw is None or raw.get("nodeGroup") != group:
                raise

    @staticmethod
    def _attached(
        raw: Mapping[str, Any] | None, group: str, instance_id: str, operation: str
    ) -> bool:
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

    async def terminate_instance(self, instance_id: str) -> None:
        try:
            await self._call(
                "DELETE", f"/instances/{_q(instance_id)}", operation="instances.terminate"
            )
        except ProviderError as exc:
            if exc.code != "InstanceNotFound":
                raise

    # -- LoadBalancers -------------------------------------------------------------------------

    async def targets_of(
        self,
        instance_id: str,
        *,
        among: Sequence[LoadBalancerTarget] | None = None,
    ) -> list[LoadBalancerTarget]:
        """Registrations that are not draining; a classic load balancer's carry no port."""
        operation = "loadbalancers.list"
        data = await self._call(
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

        return _parse(operation, convert, data)

    async def registrations(
        self, *, among: Sequence[LoadBalancerTarget] | None = None
    ) -> dict[str, list[LoadBalancerTarget]]:
        """Every instance's registrations that are not draining, from one listing."""
        operation = "loadbalancers.list"
        data = await self._call("GET", "/loadbalancers", operation=operation)
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

        return _parse(operation, convert, data)

    async def deregister(self, target: LoadBalancerTarget, instance_id: str) -> None:
        """Start draining; without a port, every port the instance is registered on."""
        operation = "targets.deregister"
        self._check_kind(target, operation)
        params = (
            [] if target.port is None or target.kind == CLASSIC else [("port", str(target.port))]
        )
        try:
            await self._call(
                "DELETE",
                f"/loadbalancers/{_q(target.name)}/targets/{_q(instance_id)}",
                operation=operation,
                params=params,
            )
        except ProviderError as exc:
            if exc.code not in ("TargetNotFound", "LoadBalancerNotFound"):
                raise

    async def register(self, target: LoadBalancerTarget, instance_id: str) -> None:
        operation = "targets.register"
        self._check_kind(target, operation)
        body: dict[str, Any] = {"instanceId": instance_id}
        if target.kind == TARGET_GROUP and target.port is not None:
            body["port"] = target.port
        await self._call(
            "POST", f"/loadbalancers/{_q(target.name)}/targets", operation=operation, body=body
        )

    @staticmethod
    def _check_kind(target: LoadBalancerTarget, operation: str) -> None:
        if target.kind not in _KINDS:
            raise _unsupported(target, operation)

    async def targets_behind_services(
        self,
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
        data = await self._call("GET", "/loadbalancers", operation=operation)

        def convert(d: Any) -> None:
            for lb in sorted(d["loadBalancers"], key=lambda lb: str(lb["name"])):
                tags = {str(k): str(v) for k, v in (lb.get("tags") or {}).items()}
                service = tags.get(_SERVICE_STACK_TAG) or tags.get(_SERVICE_NAME_TAG)
                if service not in wanted:
                    continue
                if cluster is not None and not (
                    tags.get(_LBC_CLUSTER_TAG) == cluster
                    or f"{_CLUSTER_TAG_PREFIX}{cluster}" in tags
                ):
                    continue
                result[wanted[service]].append(LoadBalancerTarget(str(lb["type"]), str(lb["name"])))

        _parse(operation, convert, data)
        return result

    # -- LoadBalancerDraining ------------------------------------------------------------------

    async def wait_drained(
        self, target: LoadBalancerTarget, instance_id: str, timeout: float
    ) -> None:
        """Poll until no registration of the instance is draining (the deregistration delay)."""
        operation = "targets.list"
        self._check_kind(target, operation)
        deadline = time.monotonic() + timeout
        while True:
            try:
                data = await self._call(
                    "GET",
                    f"/loadbalancers/{_q(target.name)}/targets",
                    operation=operation,
                    params=[("instanceId", instance_id)],
                )
            except ProviderError as exc:
                if exc.code == "LoadBalancerNotFound":
                    return
                raise
            states = _parse(
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
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderError(
                    "Timeout",
                    f"instance {instance_id} still draining from {target.kind} {target.name} "
                    f"after {timeout:g}s",
                    retryable=True,
                    operation="wait_drained",
                )
            await asyncio.sleep(min(self.config.poll_interval, remaining))

    async def target_health(self, target: LoadBalancerTarget, instance_id: str) -> TargetHealth:
        """The cloud's target states: draining until the deregistration delay is over."""
        operation = "targets.list"
        self._check_kind(target, operation)
        try:
            data = await self._call(
                "GET",
                f"/loadbalancers/{_q(target.name)}/targets",
                operation=operation,
                params=[("instanceId", instance_id)],
            )
        except ProviderError as exc:
            if exc.code == "LoadBalancerNotFound":
                return TargetHealth(RegistrationState.UNUSED, "LoadBalancerNotFound")
            raise
        states = _parse(
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

    # -- Servers -------------------------------------------------------------------------------

    async def find_server(self, node: Mapping[str, Any]) -> Server | None:
        """The live instance behind a node: by `sim://` provider ID, else by private DNS name."""
        provider_id = node_provider_id(node)
        name = node_name(node)
        if provider_id is not None:
            if provider_id.scheme != _NAME:
                return None
            raw = await self._raw_instance(provider_id.id)
            if raw is None or raw.get("state") == "terminated":
                return None
            return _parse("instances.get", lambda r: _server(r, name), raw)
        operation = "instances.list"
        data = await self._call(
            "GET", "/instances", operation=operation, params=[("privateDnsName", name)]
        )
        live = _parse(
            operation,
            lambda d: [_server(r, name) for r in d["instances"] if r["state"] != "terminated"],
            data,
        )
        if not live:
            return None
        if len(live) > 1:
            ids = ", ".join(sorted(s.id for s in live))
            raise ProviderError(
                "AmbiguousNode",
                f"node {name} has no providerID and several instances have its name as private "
                f"DNS name ({ids})",
                retryable=False,
                operation=operation,
            )
        return live[0]

    async def delete_server(self, server: Server) -> None:
        await self.terminate_instance(server.id)

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        """Poll until the instance is terminated or no longer listed."""
        deadline = time.monotonic() + timeout
        while True:
            raw = await self._raw_instance(server.id)
            state = None if raw is None else raw.get("state")
            if state is None or state == "terminated":
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderError(
                    "Timeout",
                    f"instance {server.id} is still {state} after {timeout:g}s",
                    retryable=True,
                    operation="instances.get",
                )
            await asyncio.sleep(min(self.config.poll_interval, remaining))
