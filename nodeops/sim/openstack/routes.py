"""Keystone v3 and Nova v2.1 under `/sim/openstack/`, enough for openstacksdk and gophercloud.

The OpenStack provider reaches the simulated cloud exactly as it reaches a real one: it reads a
cloudprovider.conf whose `auth-url` is `<simulator>/sim/openstack/v3`, asks Keystone for a
project-scoped token, finds Nova in the token's service catalog, discovers its version and then
lists, reads and deletes servers. Nothing is special-cased for the simulator on that path.

Identity::

    GET    /sim/openstack/                     the identity version list (300 Multiple Choices)
    GET    /sim/openstack/v3                   the v3 version document
    POST   /sim/openstack/v3/auth/tokens       password or token auth -> 201, X-Subject-Token,
                                               a catalog with identity and compute endpoints

Compute (every request needs `X-Auth-Token`)::

    GET    /sim/openstack/v2.1                 the version document (microversions 2.1-2.96)
    GET    /sim/openstack/v2.1/servers[/detail][?name=<regex>]   servers Nova still lists
    GET    /sim/openstack/v2.1/servers/{id}    a server, 404 once it is gone
    DELETE /sim/openstack/v2.1/servers/{id}    204; the server is DELETED `shutdownSeconds` later

As in Nova, `name` is a regular expression matched anywhere in the name, a server being deleted
shows `OS-EXT-STS:task_state: deleting`, and errors carry Nova's fault bodies (`itemNotFound`,
...) or Keystone's `{"error": ...}`. Faults and accounting use the simulator's `--faults`
grammar on resources `openstack/tokens` (create) and `openstack/servers` (get, list, delete).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson
from aiohttp import web

from nodeops.sim.openstack.model import Credentials, NovaError
from nodeops.sim.openstack.state import NovaState
from nodeops.sim.openstack.views import server_body
from nodeops.sim.server.accounting import RequestStats
from nodeops.sim.server.faults import FaultInjector

__all__ = ["OPENSTACK_PREFIX", "openstack_routes"]

OPENSTACK_PREFIX: Final = "/sim/openstack"

Obj = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.Response]]

_NOVA_FAULTS: Final = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    409: "conflictingRequest",
    429: "overLimit",
}
_TOKEN_HOURS: Final = 12


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    request_id = f"req-{uuid.uuid4()}"
    return web.Response(
        body=orjson.dumps(data),
        status=status,
        content_type="application/json",
        headers={"X-Openstack-Request-Id": request_id, **(headers or {})},
    )


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000000Z")


class _Api:
    def __init__(
        self,
        state: NovaState,
        credentials: Credentials,
        faults: FaultInjector,
        stats: RequestStats,
    ) -> None:
        self.state = state
        self.credentials = credentials
        self.faults = faults
        self.stats = stats
        self.issued: dict[str, float] = {}

    # -- plumbing ------------------------------------------------------------------------------

    def endpoint(self, verb: str, resource: str | None, handler: Handler, *, nova: bool) -> Handler:
        """Faults, token checks (Nova), error bodies and accounting around `handler`."""

        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            status = 500
            try:
                if resource is not None and self.faults.enabled:
                    injected = self.faults.maybe_error(verb, resource)
                    delay = self.faults.latency(verb, resource)
                    if delay:
                        await asyncio.sleep(delay)
                    if injected is not None:
                        retry = injected.headers.get("Retry-After")
                        raise NovaError(
                            injected.code,
                            injected.message,
                            retry_after=int(retry) if retry else None,
                        )
                if nova:
                    self._check_token(request)
                response = await handler(request)
                status = response.status
                return response
            except NovaError as exc:
                status = exc.status
                return self._error(exc, nova=nova)
            finally:
                if resource is not None:
                    self.stats.record(
                        verb,
                        resource,
                        status,
                        request.headers.get("User-Agent", ""),
                        time.perf_counter() - started,
                    )

        return handle

    def _check_token(self, request: web.Request) -> None:
        token = request.headers.get("X-Auth-Token", "")
        expires = self.issued.get(token)
        if expires is None or expires < time.time():
            raise NovaError(401, "The request you have made requires authentication.")

    @staticmethod
    def _error(exc: NovaError, *, nova: bool) -> web.Response:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        if nova:
            fault = _NOVA_FAULTS.get(exc.status, "computeFault")
            body: Obj = {fault: {"code": exc.status, "message": exc.message}}
        else:
            body = {"error": {"code": exc.status, "message": exc.message, "title": "Error"}}
        return _json(body, exc.status, headers)

    @staticmethod
    def _base(request: web.Request) -> str:
        return f"{request.url.origin()}{OPENSTACK_PREFIX}"

    # -- Keystone ------------------------------------------------------------------------------

    def _identity_version(self, request: web.Request) -> Obj:
        return {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{self._base(request)}/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    async def identity_root(self, request: web.Request) -> web.Response:
        return _json({"versions": {"values": [self._identity_version(request)]}}, 300)

    async def identity_v3(self, request: web.Request) -> web.Response:
        return _json({"version": self._identity_version(request)})

    async def tokens(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise NovaError(400, "Expecting to find auth in request body.") from None
        auth = body.get("auth") if isinstance(body, dict) else None
        if not isinstance(auth, dict):
            raise NovaError(400, "Expecting to find auth in request body.")
        identity = auth.get("identity") or {}
        methods = identity.get("methods") or []
        if "password" in methods:
            ok = self._password_ok(identity.get("password") or {})
        elif "token" in methods:
            ok = (identity.get("token") or {}).get("id") in self.issued
        else:
            ok = False
        if not ok or not self._scope_ok(auth.get("scope") or {}):
            raise NovaError(401, "The request you have made requires authentication.")
        token = secrets.token_hex(16)
        now = datetime.now(UTC)
        expires = now + timedelta(hours=_TOKEN_HOURS)
        self.issued[token] = expires.timestamp()
        creds = self.credentials
        domain = {"id": "default-domain", "name": creds.user_domain}
        base = self._base(request)
        payload = {
            "token": {
                "methods": methods,
                "expires_at": _stamp(expires),
                "issued_at": _stamp(now),
                "user": {"id": "kubernikus-user", "name": creds.username, "domain": domain},
                "project": {"id": creds.project_id, "name": creds.project_name, "domain": domain},
                "roles": [{"id": "member-role", "name": "member"}],
                "catalog": [
                    _service("identity", "keystone", f"{base}/v3", creds.region),
                    _service("compute", "nova", f"{base}/v2.1", creds.region),
                ],
            }
        }
        return _json(payload, 201, {"X-Subject-Token": token})

    def _password_ok(self, password: Mapping[str, Any]) -> bool:
        user = password.get("user") or {}
        domain = user.get("domain") or {}
        creds = self.credentials
        given = str(user.get("password", ""))
        return (
            user.get("name") == creds.username
            and domain.get("name") == creds.user_domain
            and secrets.compare_digest(given.encode(), creds.password.encode())
        )

    def _scope_ok(self, scope: Mapping[str, Any]) -> bool:
        project = scope.get("project") or {}
        creds = self.credentials
        if project.get("id"):
            return bool(project["id"] == creds.project_id)
        return bool(
            project.get("name") == creds.project_name
            and (project.get("domain") or {}).get("name") == creds.user_domain
        )

    # -- Nova ----------------------------------------------------------------------------------

    async def compute_version(self, request: web.Request) -> web.Response:
        return _json(
            {
                "version": {
                    "id": "v2.1",
                    "status": "CURRENT",
                    "version": "2.96",
                    "min_version": "2.1",
                    "updated": "2013-07-23T11:33:21Z",
                    "links": [{"rel": "self", "href": f"{self._base(request)}/v2.1/"}],
                    "media-types": [
                        {
                            "base": "application/json",
                            "type": "application/vnd.openstack.compute+json;version=2.1",
                        }
                    ],
                }
            }
        )

    async def list_servers(self, request: web.Request) -> web.Response:
        pattern = request.query.get("name")
        try:
            matcher = re.compile(pattern) if pattern else None
        except re.error:
            raise NovaError(400, f"Invalid filter name: {pattern!r}") from None
        self.state.advance()
        servers = [
            s for s in self.state.listed() if matcher is None or matcher.search(s.name) is not None
        ]
        project = self.credentials.project_id
        if request.path.endswith("/detail"):
            listed = [server_body(s, project) for s in servers]
        else:
            listed = [{"id": s.id, "name": s.name, "links": []} for s in servers]
        return _json({"servers": listed})

    async def get_server(self, request: web.Request) -> web.Response:
        self.state.advance()
        server = self.state.server(request.match_info["id"])
        return _json({"server": server_body(server, self.credentials.project_id)})

    async def delete_server(self, request: web.Request) -> web.Response:
        self.state.advance()
        self.state.delete(request.match_info["id"])
        return web.Response(status=204)


def _service(kind: str, name: str, url: str, region: str) -> Obj:
    return {
        "id": f"{kind}-service",
        "type": kind,
        "name": name,
        "endpoints": [
            {
                "id": f"{kind}-{interface}",
                "interface": interface,
                "region": region,
                "region_id": region,
                "url": url,
            }
            for interface in ("public", "internal", "admin")
        ],
    }


def openstack_routes(
    state: NovaState,
    credentials: Credentials,
    *,
    faults: FaultInjector | None = None,
    stats: RequestStats | None = None,
) -> list[web.RouteDef]:
    api = _Api(state, credentials, faults or FaultInjector(), stats or RequestStats())
    p = OPENSTACK_PREFIX
    servers = "openstack/servers"
    tokens = "openstack/tokens"
    return [
        web.get(f"{p}", api.endpoint("get", None, api.identity_root, nova=False)),
        web.get(f"{p}/", api.endpoint("get", None, api.identity_root, nova=False)),
        web.get(f"{p}/v3", api.endpoint("get", None, api.identity_v3, nova=False)),
        web.get(f"{p}/v3/", api.endpoint("get", None, api.identity_v3, nova=False)),
        web.post(f"{p}/v3/auth/tokens", api.endpoint("create", tokens, api.tokens, nova=False)),
        web.get(f"{p}/v2.1", api.endpoint("get", None, api.compute_version, nova=False)),
        web.get(f"{p}/v2.1/", api.endpoint("get", None, api.compute_version, nova=False)),
        web.get(f"{p}/v2.1/servers", api.endpoint("list", servers, api.list_servers, nova=True)),
        web.get(
            f"{p}/v2.1/servers/detail", api.endpoint("list", servers, api.list_servers, nova=True)
        ),
        web.get(
            f"{p}/v2.1/servers/{{id}}", api.endpoint("get", servers, api.get_server, nova=True)
        ),
        web.delete(
            f"{p}/v2.1/servers/{{id}}",
            api.endpoint("delete", servers, api.delete_server, nova=True),
        ),
    ]
