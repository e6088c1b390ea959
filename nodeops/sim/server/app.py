"""`SimServer`: the simulated kube-apiserver assembled and served on loopback."""

from __future__ import annotations

import base64
import random
import secrets
import ssl
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from nodeops.sim.clock import Clock
from nodeops.sim.server.accounting import RequestStats, stats_routes
from nodeops.sim.server.auth import Authenticator, RBACAuthorizer, bootstrap_policy
from nodeops.sim.server.discovery import kube_version
from nodeops.sim.server.errors import ApiError
from nodeops.sim.server.faults import FaultInjector
from nodeops.sim.server.http import BOOKMARK_SECONDS, ApiHttp
from nodeops.sim.server.registry import Registry
from nodeops.sim.server.resources import ResourceType
from nodeops.sim.server.store import Store
from nodeops.sim.server.tls import self_signed, server_context

_RBAC_KINDS = {
    "Role": ("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "ClusterRole": ("rbac.authorization.k8s.io", "v1", "clusterroles"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
}


class SimServer:
    """A kube-apiserver look-alike on 127.0.0.1.

    With `auth=True` every request needs a bearer token (`admin_token` is in system:masters;
    service account tokens come from TokenRequest); with `rbac=True` requests are also
    authorized against the Roles and bindings stored in the server.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        auth: bool = False,
        rbac: bool = False,
        faults: str | None = None,
        seed: int = 0,
        history_size: int = 20_000,
        bookmark_interval: float = BOOKMARK_SECONDS,
        tls: bool = False,
        kube_version: str | None = None,
    ) -> None:
        self.clock = clock or Clock()
        self.host = host
        self.port = port
        self.store = Store(history_size=history_size)
        self.registry = Registry(self.store, self.clock, random.Random(seed))
        self.stats = RequestStats()
        self.faults = FaultInjector(faults, seed)
        self.admin_token: str | None = None
        authn: Authenticator | None = None
        authz: RBACAuthorizer | None = None
        if auth or rbac:
            self.admin_token = secrets.token_urlsafe(24)
            authn = Authenticator(
                admin_token=self.admin_token,
                clock=self.clock.now,
                service_account_uid=self._service_account_uid,
            )
        if rbac:
            authz = RBACAuthorizer(self._rbac_lookup)
            for obj in bootstrap_policy():
                kind = obj["kind"]
                rt = self.registry.lookup(*_RBAC_KINDS[kind])
                self.registry.create(rt, obj["metadata"].get("namespace", ""), obj)
        self.authn = authn
        self.http = ApiHttp(
            self.registry,
            stats=self.stats,
            faults=self.faults,
            authn=authn,
            authz=authz,
            bookmark_interval=bookmark_interval,
        )
        if kube_version is not None:
            self.set_kube_version(kube_version)
        self._runner: web.AppRunner | None = None
        self.ca_pem: bytes | None = None
        self._ssl: ssl.SSLContext | None = None
        if tls:
            cert, key = self_signed(host)
            self.ca_pem = cert
            self._ssl = server_context(cert, key)
        # Served beside the Kubernetes API (the simulated cloud's /sim/cloud/ API); set before
        # start(), because the catch-all Kubernetes route would otherwise shadow them.
        self.extra_routes: list[web.AbstractRouteDef] = []

    def set_kube_version(self, git_version: str) -> None:
        """Answer `/version` as a server running `git_version` does (a control-plane upgrade)."""
        self.http.version = kube_version(git_version)

    def _service_account_uid(self, namespace: str, name: str) -> str | None:
        rt = self.registry.lookup("", "v1", "serviceaccounts")
        entry = self.store.bucket(rt.storage_key).get(namespace, name)
        return entry.uid if entry is not None else None

    def _rbac_lookup(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        rt = self.registry.lookup(*_RBAC_KINDS[kind])
        bucket = self.store.bucket(rt.storage_key)
        return [e.decode() for e in bucket.entries(namespace if namespace else None)]

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(stats_routes(self.stats, self.faults))
        app.add_routes(self.extra_routes)
        app.router.add_route("*", "/{tail:.*}", self.http.handle)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, reuse_address=True, ssl_context=self._ssl
        )
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.http.server_address = f"{self.host}:{self.port}"

    async def stop(self) -> None:
        self.http.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def kubeconfig(self, token: str | None = None) -> dict[str, Any]:
        user: dict[str, Any] = {}
        if token or self.admin_token:
            user["token"] = token or self.admin_token
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "nodeops-sim", "cluster": self._cluster_entry()}],
            "users": [{"name": "nodeops-sim-admin", "user": user}],
            "contexts": [
                {
                    "name": "nodeops-sim",
                    "context": {"cluster": "nodeops-sim", "user": "nodeops-sim-admin"},
                }
            ],
            "current-context": "nodeops-sim",
            "preferences": {},
        }

    def _cluster_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"server": self.url}
        if self.ca_pem is not None:
            entry["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        return entry

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(token), sort_keys=False))
        target.chmod(0o600)
        return target

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object in-process (scenario loading); same rules as a POST."""
        rt, ns = self._type_of(obj)
        return self.registry.create(rt, ns, obj)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an object in-process; same rules as a PUT."""
        rt, ns = self._type_of(obj)
        name = str((obj.get("metadata") or {}).get("name") or "")
        return self.registry.update(rt, ns, name, obj)

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Write an object's status in-process; same rules as a PUT of its status."""
        rt, ns = self._type_of(obj)
        name = str((obj.get("metadata") or {}).get("name") or "")
        return self.registry.update(rt, ns, name, obj, "status")

    def _type_of(self, obj: dict[str, Any]) -> tuple[ResourceType, str]:
        """The stored type of `obj` (by apiVersion and kind) and its namespace."""
        api_version = obj.get("apiVersion", "v1")
        group, _, version = api_version.rpartition("/")
        rt = next(
            (
                t
                for t in self.registry.all_types()
                if t.group == group and t.version == version and t.kind == obj.get("kind")
            ),
            None,
        )
        if rt is None:
            raise ApiError(404, "NotFound", f"no resource for {api_version} {obj.get('kind')}")
        ns = (obj.get("metadata") or {}).get("namespace", "default") if rt.namespaced else ""
        return rt, ns
