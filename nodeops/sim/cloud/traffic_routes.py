"""The simulated traffic's HTTP API, under `/sim/cloud/traffic` (see `traffic` for the model).

A test or a benchmark starts a flow through a load balancer, does something to the cluster, and
reads what became of the requests::

    POST   /sim/cloud/traffic                 {"loadBalancer", "service": "<ns>/<name>",
                                               "requestsPerSecond"?, "requestSeconds"?,
                                               "healthCheck"?: {"intervalSeconds",
                                               "healthyThreshold", "unhealthyThreshold"}}
                                              -> flow (409 FlowExists while one flows)
    GET    /sim/cloud/traffic                 {"flows": [flow...]}
    GET    /sim/cloud/traffic/{lb}            flow
    DELETE /sim/cloud/traffic/{lb}            stop sending -> flow (in-flight requests finish)
    GET    /sim/cloud/traffic/{lb}/requests[?since=T][&node=N][&outcome=failed][&limit=K]
                                              {"requests": [request...]}

    flow    = {"loadBalancer", "service", "requestsPerSecond", "requestSeconds", "healthCheck",
               "startedAt", "stoppedAt", "now", "sent", "succeeded", "failed", "inFlight",
               "nodes": {node: {"sent", "succeeded", "failed", "lastSentAt",
                                "lastSucceededAt", "lastFailedAt"}},
               "targets": [{"instanceId", "port", "node", "health"}]}
    request = {"id", "sentAt", "completedAt", "node", "instanceId", "pod",
               "outcome" (pending | succeeded | failed), "reason"}

Times are seconds since the epoch on the simulator's clock (`now` in a flow is the clock when it
was read). These are control routes, like `/sim/faults`: faults are not injected into them and
they are not counted as cloud requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson
from aiohttp import web

from nodeops.sim.cloud.model import CloudError
from nodeops.sim.cloud.routes import CLOUD_PREFIX, authenticate
from nodeops.sim.cloud.traffic import FlowSpec, HealthCheck, TrafficSimulator

__all__ = ["TRAFFIC_PREFIX", "traffic_routes"]

TRAFFIC_PREFIX: Final = f"{CLOUD_PREFIX}/traffic"

_FLOW_FIELDS: Final = frozenset(
    {"loadBalancer", "service", "requestsPerSecond", "requestSeconds", "healthCheck"}
)
_CHECK_FIELDS: Final = frozenset({"intervalSeconds", "healthyThreshold", "unhealthyThreshold"})

Handler = Callable[[web.Request], Awaitable[Any]]


def _respond(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _bad(message: str) -> CloudError:
    return CloudError(400, "ValidationError", message)


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _bad(f"{key} must be a number")
    return float(value)


def _count(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"{key} must be an integer")
    return value


def flow_spec(body: Any) -> FlowSpec:
    """A flow from its JSON form; every problem is a 400 naming the field."""
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    unknown = sorted(set(body) - _FLOW_FIELDS)
    if unknown:
        raise _bad(f"unknown fields {unknown}; allowed: {sorted(_FLOW_FIELDS)}")
    lb = body.get("loadBalancer")
    if not isinstance(lb, str) or not lb:
        raise _bad("loadBalancer must be a load balancer name")
    service = body.get("service")
    namespace, sep, name = service.partition("/") if isinstance(service, str) else ("", "", "")
    if not sep or not namespace or not name:
        raise _bad("service must be <namespace>/<name>")
    check = body.get("healthCheck") or {}
    if not isinstance(check, dict):
        raise _bad("healthCheck must be an object")
    unknown = sorted(set(check) - _CHECK_FIELDS)
    if unknown:
        raise _bad(f"unknown healthCheck fields {unknown}; allowed: {sorted(_CHECK_FIELDS)}")
    defaults = HealthCheck()
    try:
        return FlowSpec(
            load_balancer=lb,
            namespace=namespace,
            service=name,
            rate=_number(body, "requestsPerSecond", 10.0),
            request_seconds=_number(body, "requestSeconds", 0.5),
            health=HealthCheck(
                interval=_number(check, "intervalSeconds", defaults.interval),
                healthy_threshold=_count(check, "healthyThreshold", defaults.healthy_threshold),
                unhealthy_threshold=_count(
                    check, "unhealthyThreshold", defaults.unhealthy_threshold
                ),
            ),
        )
    except ValueError as exc:
        raise _bad(str(exc)) from None


def traffic_routes(traffic: TrafficSimulator, *, token: str | None = None) -> list[web.RouteDef]:
    def endpoint(handler: Handler) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            try:
                authenticate(request, token)
                return _respond(await handler(request))
            except CloudError as exc:
                return _respond({"code": exc.code, "message": exc.message}, exc.status)

        return handle

    async def start(request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise _bad(f"invalid JSON: {exc}") from None
        return traffic.summary(traffic.start_flow(flow_spec(body)))

    async def list_flows(_: web.Request) -> Any:
        return {"flows": [traffic.summary(f) for f in traffic.flows.values()]}

    async def get_flow(request: web.Request) -> Any:
        return traffic.summary(traffic.flow(request.match_info["lb"]))

    async def stop(request: web.Request) -> Any:
        return traffic.summary(traffic.stop_flow(request.match_info["lb"]))

    async def requests(request: web.Request) -> Any:
        flow = traffic.flow(request.match_info["lb"])
        query = request.query
        try:
            since = float(query["since"]) if "since" in query else None
            limit = int(query["limit"]) if "limit" in query else None
        except ValueError:
            raise _bad("since must be a number and limit an integer") from None
        outcome = query.get("outcome")
        if outcome is not None and outcome not in ("pending", "succeeded", "failed"):
            raise _bad("outcome must be pending, succeeded or failed")
        return {
            "requests": traffic.records(
                flow, since=since, node=query.get("node"), outcome=outcome, limit=limit
            )
        }

    p = TRAFFIC_PREFIX
    return [
        web.post(p, endpoint(start)),
        web.get(p, endpoint(list_flows), allow_head=False),
        web.get(f"{p}/{{lb}}", endpoint(get_flow), allow_head=False),
        web.delete(f"{p}/{{lb}}", endpoint(stop)),
        web.get(f"{p}/{{lb}}/requests", endpoint(requests), allow_head=False),
    ]
