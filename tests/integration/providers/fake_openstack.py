"""A Keystone v3 + Nova v2.1 server on loopback, just large enough for the real openstacksdk.

The OpenStack provider is tested through the SDK's actual HTTP traffic (version discovery,
password and application-credential token requests, the service catalog, microversion headers)
rather than by patching SDK calls, so a change in how the SDK talks to a cloud shows up here.

Identity and compute share one port: Keystone's multi-version document answers `/`, Keystone v3
lives under `/v3` and Nova under `/v2.1`, and the token's catalog points compute at this server.

Behaviour the tests steer:

- `faults[route] = [503, 429, ...]`: the next requests of that route answer these statuses first
  (the route names are the `ROUTE_*` constants);
- `hits[route]`: how often each route was requested, to count retries and polls;
- a deleted server stays visible through `GET /v2.1/servers/{id}` for `gone_after` polls with
  `status_while_deleting` ("DELETED", or "ACTIVE" with task state "deleting" as Nova shows it
  while the compute host is still tearing the VM down), then answers 404.

The server runs on the test's own event loop; the provider under test calls the SDK in worker
threads, so an accidental blocking call on the loop would stall this server and fail the test.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

ROUTE_ROOT: Final = "root"
ROUTE_IDENTITY_VERSION: Final = "identity_version"
ROUTE_TOKENS: Final = "tokens"
ROUTE_COMPUTE_VERSION: Final = "compute_version"
ROUTE_SERVERS_DETAIL: Final = "servers_detail"
ROUTE_SERVER_GET: Final = "server_get"
ROUTE_SERVER_DELETE: Final = "server_delete"

REGION: Final = "RegionOne"
USER_DOMAIN: Final = "kubernikus"
USERNAME: Final = "operator"
PASSWORD: Final = "s3cr#t;pw"
PROJECT_ID: Final = "0f7e43c1d6b94b1e9b8f6f6a3f8d2c11"
PROJECT_NAME: Final = "cluster-project"
APP_CRED_ID: Final = "5c2b6a0a5f1f4c3e8a61a7c2d3e4f5a6"
APP_CRED_SECRET: Final = "app-secret"

_NOVA_FAULTS: Final = {
    400: "badRequest",
    403: "forbidden",
    404: "itemNotFound",
    409: "conflictingRequest",
    429: "overLimit",
}


@dataclass
class FakeServer:
    """One Nova server and how its deletion plays out."""

    id: str
    name: str
    status: str = "ACTIVE"
    availability_zone: str = "nova"
    gone_after: int = 1
    status_while_deleting: str = "DELETED"
    deleting: bool = False
    polls_while_deleting: int = 0

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "tenant_id": PROJECT_ID,
            "user_id": "u-1",
            "metadata": {},
            "OS-EXT-AZ:availability_zone": self.availability_zone,
            "OS-EXT-STS:task_state": "deleting" if self.deleting else None,
            "OS-EXT-STS:vm_state": "deleted" if self.status == "DELETED" else "active",
            "created": "2026-01-01T00:00:00Z",
            "updated": "2026-01-01T00:00:00Z",
            "addresses": {},
            "links": [],
        }


@dataclass
class FakeOpenStack:
    """The state of the fake cloud; `start()` serves it, `stop()` ends it."""

    servers: dict[str, FakeServer] = field(default_factory=dict)
    faults: dict[str, list[int]] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    tokens: set[str] = field(default_factory=set)
    auth_bodies: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""
    _runner: web.AppRunner | None = None

    def add_server(
        self,
        name: str,
        *,
        server_id: str | None = None,
        status: str = "ACTIVE",
        availability_zone: str = "nova",
        gone_after: int = 1,
        status_while_deleting: str = "DELETED",
    ) -> FakeServer:
        server = FakeServer(
            id=server_id or str(uuid.uuid4()),
            name=name,
            status=status,
            availability_zone=availability_zone,
            gone_after=gone_after,
            status_while_deleting=status_while_deleting,
        )
        self.servers[server.id] = server
        return server

    # ----------------------------------------------------------------------------------------
    # Serving
    # ----------------------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application(middlewares=[self._inject_faults])
        app.router.add_get("/", self._root, name=ROUTE_ROOT)
        app.router.add_get("/v3", self._identity_version, name=ROUTE_IDENTITY_VERSION)
        app.router.add_get("/v3/", self._identity_version)
        app.router.add_post("/v3/auth/tokens", self._tokens, name=ROUTE_TOKENS)
        app.router.add_get("/v2.1", self._compute_version, name=ROUTE_COMPUTE_VERSION)
        app.router.add_get("/v2.1/", self._compute_version)
        app.router.add_get("/v2.1/servers/detail", self._servers_detail, name=ROUTE_SERVERS_DETAIL)
        app.router.add_get("/v2.1/servers/{id}", self._server_get, name=ROUTE_SERVER_GET)
        app.router.add_delete("/v2.1/servers/{id}", self._server_delete, name=ROUTE_SERVER_DELETE)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def auth_url(self) -> str:
        return f"{self.base_url}/v3"

    # ----------------------------------------------------------------------------------------
    # Middleware
    # ----------------------------------------------------------------------------------------

    @web.middleware
    async def _inject_faults(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # Unnamed aliases (`/v3/`, `/v2.1/`) count under the named route of the same path.
        route = request.match_info.route.name or _alias(request.path)
        self.hits[route] += 1
        pending = self.faults.get(route)
        if pending:
            status = pending.pop(0)
            headers = {"Retry-After": "0"} if status == 429 else {}
            return _error(
                status, f"injected fault {status}", nova=route.startswith("server"), headers=headers
            )
        if route.startswith("server") and request.headers.get("X-Auth-Token") not in self.tokens:
            return _error(401, "The request you have made requires authentication.", nova=False)
        response: web.StreamResponse = await handler(request)
        return response

    # ----------------------------------------------------------------------------------------
    # Keystone
    # ----------------------------------------------------------------------------------------

    async def _root(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"versions": {"values": [self._identity_version_doc()]}}, status=300
        )

    async def _identity_version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self._identity_version_doc()})

    def _identity_version_doc(self) -> dict[str, Any]:
        return {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{self.base_url}/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    async def _tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.auth_bodies.append(body)
        identity = body.get("auth", {}).get("identity", {})
        methods = identity.get("methods", [])
        if "password" in methods:
            user = identity.get("password", {}).get("user", {})
            domain = user.get("domain", {})
            ok = (
                user.get("name") == USERNAME
                and user.get("password") == PASSWORD
                and domain.get("name") == USER_DOMAIN
            )
            scope = body.get("auth", {}).get("scope", {}).get("project", {})
            ok = ok and (
                scope.get("id") == PROJECT_ID
                or (
                    scope.get("name") == PROJECT_NAME
                    and scope.get("domain", {}).get("name") == USER_DOMAIN
                )
            )
        elif "application_credential" in methods:
            cred = identity.get("application_credential", {})
            ok = cred.get("id") == APP_CRED_ID and cred.get("secret") == APP_CRED_SECRET
        else:
            ok = False
        if not ok:
            return _error(401, "The request you have made requires authentication.", nova=False)
        token = uuid.uuid4().hex
        self.tokens.add(token)
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        domain_ref = {"id": "d-1", "name": USER_DOMAIN}
        payload = {
            "token": {
                "methods": methods,
                "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "issued_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "user": {"id": "u-1", "name": USERNAME, "domain": domain_ref},
                "project": {"id": PROJECT_ID, "name": PROJECT_NAME, "domain": domain_ref},
                "roles": [{"id": "r-1", "name": "member"}],
                "catalog": [
                    _service("identity", "keystone", f"{self.base_url}/v3"),
                    _service("compute", "nova", f"{self.base_url}/v2.1"),
                ],
            }
        }
        return web.json_response(payload, status=201, headers={"X-Subject-Token": token})

    # ----------------------------------------------------------------------------------------
    # Nova
    # ----------------------------------------------------------------------------------------

    async def _compute_version(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": {
                    "id": "v2.1",
                    "status": "CURRENT",
                    "version": "2.96",
                    "min_version": "2.1",
                    "updated": "2013-07-23T11:33:21Z",
                    "links": [{"rel": "self", "href": f"{self.base_url}/v2.1/"}],
                    "media-types": [
                        {
                            "base": "application/json",
                            "type": "application/vnd.openstack.compute+json;version=2.1",
                        }
                    ],
                }
            }
        )

    async def _servers_detail(self, request: web.Request) -> web.Response:
        pattern = request.query.get("name")
        # Nova filters names with the database's regular expressions, not by equality.
        listed = [
            s.body()
            for s in self.servers.values()
            if s.status not in ("DELETED", "SOFT_DELETED")
            and not s.deleting
            and (pattern is None or re.search(pattern, s.name))
        ]
        return web.json_response({"servers": listed})

    async def _server_get(self, request: web.Request) -> web.Response:
        server = self.servers.get(request.match_info["id"])
        if server is None:
            return _not_found(request.match_info["id"])
        if server.deleting:
            if server.polls_while_deleting >= server.gone_after:
                del self.servers[server.id]
                return _not_found(server.id)
            server.polls_while_deleting += 1
            server.status = server.status_while_deleting
        return web.json_response({"server": server.body()})

    async def _server_delete(self, request: web.Request) -> web.Response:
        server = self.servers.get(request.match_info["id"])
        if server is None or server.status == "DELETED":
            return _not_found(request.match_info["id"])
        server.deleting = True
        return web.Response(status=204)


def _alias(path: str) -> str:
    return {"/v3/": ROUTE_IDENTITY_VERSION, "/v2.1/": ROUTE_COMPUTE_VERSION}.get(path, path)


def _service(kind: str, name: str, url: str) -> dict[str, Any]:
    return {
        "id": f"svc-{kind}",
        "type": kind,
        "name": name,
        "endpoints": [
            {
                "id": f"ep-{kind}-{interface}",
                "interface": interface,
                "region": REGION,
                "region_id": REGION,
                "url": url,
            }
            for interface in ("public", "internal", "admin")
        ],
    }


def _not_found(server_id: str) -> web.Response:
    return _error(404, f"Instance {server_id} could not be found.", nova=True)


def _error(
    status: int, message: str, *, nova: bool, headers: dict[str, str] | None = None
) -> web.Response:
    """An error body in the shape of the service that answers: Nova's fault or Keystone's."""
    request_id = f"req-{uuid.uuid4()}"
    if nova:
        fault = _NOVA_FAULTS.get(status, "computeFault")
        body: dict[str, Any] = {fault: {"code": status, "message": message}}
    else:
        body = {"error": {"code": status, "message": message, "title": "Error"}}
    return web.json_response(
        body,
        status=status,
        headers={"X-Openstack-Request-Id": request_id, **(headers or {})},
    )
