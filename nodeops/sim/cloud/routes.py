"""The simulated cloud's HTTP API under `/sim/cloud/`: a small JSON API in AWS's terms.

The `sim` provider reaches the cloud through this API like any provider reaches its cloud, so
the operator is tested through a network boundary, with faults and request counts, rather than
through function calls that can never fail.

Requests and answers are JSON. When the simulator runs with authentication, every request needs
`Authorization: Bearer <admin token>`. An error is answered with its HTTP status and
`{"code": ..., "message": ...}`; clients branch on `code`.

Node groups (Auto Scaling groups)::

    GET    /sim/cloud/nodegroups[?names=a,b]       {"nodeGroups": [group...]} (unknown names
                                                   left out)
    GET    /sim/cloud/nodegroups/{name}            group
    PATCH  /sim/cloud/nodegroups/{name}            any of {"desiredCapacity", "minSize",
                                                   "maxSize", "launchVersion",
                                                   "newInstancesProtectedFromScaleIn"} -> group
    POST   /sim/cloud/nodegroups/{name}/detach     {"instanceIds": [...],
                                                   "shouldDecrementDesiredCapacity": false}
                                                   -> {"instances": [instance...]}
    POST   /sim/cloud/nodegroups/{name}/attach     {"instanceIds": [...]} -> {"instances": [...]}

    group    = {"name", "desiredCapacity", "minSize", "maxSize", "launchVersion", "instanceType",
                "zones", "bootSeconds", "newInstancesProtectedFromScaleIn", "instances": [...]}

Instances (EC2)::

    GET    /sim/cloud/instances[?ids=a,b][&nodeGroup=g][&privateDnsName=n]   {"instances": [...]}
    GET    /sim/cloud/instances/{id}               instance
    PATCH  /sim/cloud/instances/{id}               {"protectedFromScaleIn": bool} -> instance
    DELETE /sim/cloud/instances/{id}               terminate -> instance (terminating again is fine)

    instance = {"instanceId", "providerId" (sim:///<group launched in>/<id>), "nodeGroup" (null
                once out of every group), "launchedIn", "zone", "lifecycleState" (Pending,
                InService, Detaching, Detached, Terminating, Terminated), "state" (pending,
                running, shutting-down, terminated), "healthStatus", "launchVersion",
                "outOfDate", "protectedFromScaleIn", "terminationProtected" (DELETE answers
                400 `OperationNotPermitted`), "privateIp", "privateDnsName" (the node
                name), "launchTime", "terminateTime"}

Load balancers (classic load balancers and target groups)::

    GET    /sim/cloud/loadbalancers[?instanceId=i]   {"loadBalancers": [lb...]} (targets of i only)
    GET    /sim/cloud/loadbalancers/{name}           lb
    PATCH  /sim/cloud/loadbalancers/{name}           {"deregistrationDelaySeconds", "tags"} -> lb
    GET    /sim/cloud/loadbalancers/{name}/targets[?instanceId=i]  {"targets": [target...]}
    POST   /sim/cloud/loadbalancers/{name}/targets   {"instanceId", "port"?} register -> target
    DELETE /sim/cloud/loadbalancers/{name}/targets/{id}[?port=p]
                                                     deregister -> {"targets": [draining...]}

    lb     = {"name", "type" (classic | target-group), "port", "nodeGroups",
              "deregistrationDelaySeconds", "tags", "targets": [...]}
    target = {"instanceId", "port", "state" (initial, healthy, unhealthy, draining, unused),
              "registeredAt", "drainingUntil"}

Codes: 400 `ValidationError`, `InvalidTarget`, `InstanceInOtherGroup`; 401 `Unauthorized`; 404
`NodeGroupNotFound`, `InstanceNotFound`, `LoadBalancerNotFound`, `TargetNotFound`; 409
`IncorrectInstanceState` (passes by itself: an instance still booting or detaching) and
`ResourceContention`; 429 `Throttling` (with Retry-After); 500 `InternalError`.

Faults and accounting: each request is a Kubernetes-style verb on a `cloud/...` resource, so
the `--faults` grammar and `/sim/requests` cover the cloud too (`error=500:0.2@*/cloud/*`,
`latency=200ms@delete/cloud/instances`). Resources: `cloud/nodegroups` (get, list, patch),
`cloud/detach` and `cloud/attach` (create), `cloud/instances` (get, list, patch, delete),
`cloud/loadbalancers` (get, list, patch), `cloud/targets` (list, create, delete). Injected 500s
answer `InternalError`, 429s `Throttling` and 409s `ResourceContention`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import orjson
from aiohttp import web

from nodeops.sim.cloud.model import CloudError
from nodeops.sim.cloud.state import CloudState
from nodeops.sim.cloud.views import group_view, instance_view, load_balancer_view, target_view
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.errors import ApiError
from nodeops.sim.server.faults import FaultInjector

__all__ = ["CLOUD_PREFIX", "authenticate", "cloud_routes"]

CLOUD_PREFIX: Final = "/sim/cloud"

Obj = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[Any]]

_FAULT_CODES: Final = {500: "InternalError", 429: "Throttling", 409: "ResourceContention"}


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(data),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def authenticate(request: web.Request, token: str | None) -> None:
    """Refuse a request without the admin bearer token, when the cloud checks tokens."""
    if token is None:
        return
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(
        credential.strip().encode(), token.encode()
    ):
        raise CloudError(401, "Unauthorized", "a valid bearer token is required")


def _from_fault(error: ApiError) -> CloudError:
    retry_after = error.headers.get("Retry-After")
    return CloudError(
        error.code,
        _FAULT_CODES.get(error.code, "InternalError"),
        error.message,
        retry_after=int(retry_after) if retry_after else None,
    )


def _bad(message: str) -> CloudError:
    return CloudError(400, "ValidationError", message)


async def _body(request: web.Request) -> Obj:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _bad("the body must be a JSON object")
    return data


def _only(body: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise _bad(f"unknown fields {unknown}; allowed: {sorted(allowed)}")


def _int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"{key} must be an integer")
    return value


def _bool(body: Mapping[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _bad(f"{key} must be true or false")
    return value


def _port(value: Any, key: str = "port") -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise _bad(f"{key} must be an integer") from None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise _bad(f"{key} must be a port number (1-65535)")
    return value


def _ids(body: Mapping[str, Any]) -> list[str]:
    ids = body.get("instanceIds")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise _bad("instanceIds must be a non-empty list of instance IDs")
    return ids


def _csv(request: web.Request, key: str) -> list[str] | None:
    values = request.query.getall(key, [])
    if not values:
        return None
    return [v for value in values for v in value.split(",") if v]


class _Api:
    """The handlers, bound to one cloud's state and the server's faults and counters."""

    def __init__(
        self,
        state: CloudState,
        faults: FaultInjector,
        stats: RequestStats,
        token: str | None,
    ) -> None:
        self.state = state
        self.faults = faults
        self.stats = stats
        self.token = token

    def endpoint(self, verb: str, resource: str, handler: Handler) -> Handler:
        """Authentication, fault injection, errors as JSON and accounting around `handler`."""

        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            status = 500
            try:
                self._authenticate(request)
                if self.faults.enabled:
                    injected = self.faults.maybe_error(verb, resource)
                    delay = self.faults.latency(verb, resource)
                    if delay:
                        await asyncio.sleep(delay)
                    if injected is not None:
                        raise _from_fault(injected)
                response = _json(await handler(request))
                status = response.status
                return response
            except CloudError as exc:
                status = exc.status
                headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
                return _json({"code": exc.code, "message": exc.message}, exc.status, headers)
            finally:
                self.stats.record(
                    verb,
                    resource,
                    status,
                    request.headers.get("User-Agent", ""),
                    time.perf_counter() - started,
                )

        return handle

    def _authenticate(self, request: web.Request) -> None:
        authenticate(request, self.token)

    # -- node groups ---------------------------------------------------------------------------

    async def list_groups(self, request: web.Request) -> Obj:
        names = _csv(request, "names")
        groups = (
            list(self.state.groups.values())
            if names is None
            else [self.state.groups[n] for n in dict.fromkeys(names) if n in self.state.groups]
        )
        return {"nodeGroups": [group_view(self.state, g) for g in groups]}

    async def get_group(self, request: web.Request) -> Obj:
        return group_view(self.state, self.state.group(request.match_info["name"]))

    async def patch_group(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(
            body,
            {
                "desiredCapacity",
                "minSize",
                "maxSize",
                "launchVersion",
                "newInstancesProtectedFromScaleIn",
            },
        )
        version = body.get("launchVersion")
        if version is not None and not isinstance(version, str | int):
            raise _bad("launchVersion must be a string")
        group = self.state.update_group(
            request.match_info["name"],
            desired=_int(body, "desiredCapacity"),
            min_size=_int(body, "minSize"),
            max_size=_int(body, "maxSize"),
            launch_version=None if version is None else str(version),
            protect_new=_bool(body, "newInstancesProtectedFromScaleIn"),
        )
        return group_view(self.state, group)

    async def detach(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(body, {"instanceIds", "shouldDecrementDesiredCapacity"})
        instances = self.state.detach(
            request.match_info["name"],
            _ids(body),
            decrement=bool(_bool(body, "shouldDecrementDesiredCapacity")),
        )
        return {"instances": [instance_view(self.state, i) for i in instances]}

    async def attach(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(body, {"instanceIds"})
        instances = self.state.attach(request.match_info["name"], _ids(body))
        return {"instances": [instance_view(self.state, i) for i in instances]}

    # -- instances -----------------------------------------------------------------------------

    async def list_instances(self, request: web.Request) -> Obj:
        ids = _csv(request, "ids")
        group = request.query.get("nodeGroup")
        dns = request.query.get("privateDnsName")
        found = [
            i
            for i in self.state.instances.values()
            if (ids is None or i.id in ids)
            and (group is None or i.group == group)
            and (dns is None or i.node_name == dns)
        ]
        return {"instances": [instance_view(self.state, i) for i in found]}

    async def get_instance(self, request: web.Request) -> Obj:
        return instance_view(self.state, self.state.instance(request.match_info["id"]))

    async def patch_instance(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(body, {"protectedFromScaleIn"})
        iid = request.match_info["id"]
        protected = _bool(body, "protectedFromScaleIn")
        instance = (
            self.state.instance(iid)
            if protected is None
            else self.state.set_protection(iid, protected)
        )
        return instance_view(self.state, instance)

    async def terminate(self, request: web.Request) -> Obj:
        return instance_view(self.state, self.state.terminate(request.match_info["id"]))

    # -- load balancers ------------------------------------------------------------------------

    async def list_load_balancers(self, request: web.Request) -> Obj:
        iid = request.query.get("instanceId")
        return {
            "loadBalancers": [
                load_balancer_view(self.state, lb, instance_id=iid)
                for lb in self.state.load_balancers.values()
            ]
        }

    async def get_load_balancer(self, request: web.Request) -> Obj:
        lb = self.state.load_balancer(request.match_info["name"])
        return load_balancer_view(self.state, lb)

    async def patch_load_balancer(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(body, {"deregistrationDelaySeconds", "tags"})
        delay = body.get("deregistrationDelaySeconds")
        if delay is not None and (not isinstance(delay, int | float) or isinstance(delay, bool)):
            raise _bad("deregistrationDelaySeconds must be a number")
        tags = body.get("tags")
        if tags is not None and not (
            isinstance(tags, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
        ):
            raise _bad("tags must be an object of strings")
        lb = self.state.update_load_balancer(
            request.match_info["name"],
            deregistration_delay=None if delay is None else float(delay),
            tags=tags,
        )
        return load_balancer_view(self.state, lb)

    async def list_targets(self, request: web.Request) -> Obj:
        lb = self.state.load_balancer(request.match_info["name"])
        view = load_balancer_view(self.state, lb, instance_id=request.query.get("instanceId"))
        return {"targets": view["targets"]}

    async def register(self, request: web.Request) -> Obj:
        body = await _body(request)
        _only(body, {"instanceId", "port"})
        iid = body.get("instanceId")
        if not isinstance(iid, str) or not iid:
            raise _bad("instanceId must be an instance ID")
        name = request.match_info["name"]
        registration = self.state.register(name, iid, _port(body.get("port")))
        return target_view(self.state, registration, name)

    async def deregister(self, request: web.Request) -> Obj:
        port = _port(request.query.get("port"))
        changed = self.state.deregister(request.match_info["name"], request.match_info["id"], port)
        return {"targets": [target_view(self.state, r) for r in changed]}


def cloud_routes(
    state: CloudState,
    *,
    faults: FaultInjector | None = None,
    stats: RequestStats | None = None,
    token: str | None = None,
) -> list[web.RouteDef]:
    """The `/sim/cloud/` routes; `faults` and `stats` are normally the API server's own, so one
    fault spec and one request count cover both."""
    api = _Api(state, faults or FaultInjector(), stats or RequestStats(), token)
    p = CLOUD_PREFIX
    groups, lbs = f"{p}/nodegroups", f"{p}/loadbalancers"
    e = api.endpoint
    return [
        web.get(groups, e("list", "cloud/nodegroups", api.list_groups), allow_head=False),
        web.get(
            f"{groups}/{{name}}", e("get", "cloud/nodegroups", api.get_group), allow_head=False
        ),
        web.patch(f"{groups}/{{name}}", e("patch", "cloud/nodegroups", api.patch_group)),
        web.post(f"{groups}/{{name}}/detach", e("create", "cloud/detach", api.detach)),
        web.post(f"{groups}/{{name}}/attach", e("create", "cloud/attach", api.attach)),
        web.get(
            f"{p}/instances", e("list", "cloud/instances", api.list_instances), allow_head=False
        ),
        web.get(
            f"{p}/instances/{{id}}",
            e("get", "cloud/instances", api.get_instance),
            allow_head=False,
        ),
        web.patch(f"{p}/instances/{{id}}", e("patch", "cloud/instances", api.patch_instance)),
        web.delete(f"{p}/instances/{{id}}", e("delete", "cloud/instances", api.terminate)),
        web.get(lbs, e("list", "cloud/loadbalancers", api.list_load_balancers), allow_head=False),
        web.get(
            f"{lbs}/{{name}}",
            e("get", "cloud/loadbalancers", api.get_load_balancer),
            allow_head=False,
        ),
        web.patch(f"{lbs}/{{name}}", e("patch", "cloud/loadbalancers", api.patch_load_balancer)),
        web.get(
            f"{lbs}/{{name}}/targets",
            e("list", "cloud/targets", api.list_targets),
            allow_head=False,
        ),
        web.post(f"{lbs}/{{name}}/targets", e("create", "cloud/targets", api.register)),
        web.delete(f"{lbs}/{{name}}/targets/{{id}}", e("delete", "cloud/targets", api.deregister)),
    ]
