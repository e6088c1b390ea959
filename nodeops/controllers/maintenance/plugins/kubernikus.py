"""kubernikusCount: the cluster has as many nodes as its Kubernikus node pools ask for.

Credentials come from an OpenStack `cloudprovider.conf` (`[Global]` auth-url, username,
password, region, domain-name, tenant-id), read from a Secret (key `cloudprovider.conf`) or from
`./provider/cloudprovider.conf`. The Keystone token is cached until shortly before it expires.
"""

from __future__ import annotations

import asyncio
import base64
import configparser
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field

from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginError,
    PluginType,
)
from nodeops.kube import errors
from nodeops.kube.resources import SECRETS

DEFAULT_CONF = "./provider/cloudprovider.conf"
TIMEOUT = 15.0


class SecretRef(BaseModel):
    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)


class KubernikusCountConfig(PluginConfig):
    cluster: str = Field(min_length=1)
    cloudProviderSecret: SecretRef | None = None
    cloudProviderConfig: str = DEFAULT_CONF  # file used when no Secret is named
    url: str = ""  # Kubernikus API; default https://kubernikus.<region>.cloud.sap


@dataclass(frozen=True)
class OpenStackCredentials:
    auth_url: str
    username: str
    password: str
    region: str
    domain_name: str
    tenant_id: str


def parse_cloudprovider_conf(text: str) -> OpenStackCredentials:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        raise PluginError(f"cloudprovider.conf: {exc}") from None
    if "Global" not in parser:
        raise PluginError("cloudprovider.conf: no [Global] section")
    g = parser["Global"]

    def value(key: str) -> str:
        raw = g.get(key)
        if raw is None or not raw.strip():
            raise PluginError(f"cloudprovider.conf: [Global] {key} is missing")
        return raw.strip().strip('"')

    return OpenStackCredentials(
        auth_url=value("auth-url"),
        username=value("username"),
        password=value("password"),
        region=value("region"),
        domain_name=value("domain-name"),
        tenant_id=value("tenant-id"),
    )


class KubernikusCount:
    def __init__(self, config: KubernikusCountConfig) -> None:
        self.config = config
        self._token: tuple[str, float] | None = None

    async def credentials(self, ctx: PluginContext) -> OpenStackCredentials:
        ref = self.config.cloudProviderSecret
        if ref is None:
            try:
                text = await asyncio.to_thread(Path(self.config.cloudProviderConfig).read_text)
                return parse_cloudprovider_conf(text)
            except OSError as exc:
                raise PluginError(f"cannot read {self.config.cloudProviderConfig}: {exc}") from exc
        try:
            secret = await ctx.cluster.client.get(SECRETS, ref.name, ref.namespace)
        except errors.KubeError as exc:
            raise PluginError(f"cannot read Secret {ref.namespace}/{ref.name}: {exc}") from exc
        raw = (secret.get("data") or {}).get("cloudprovider.conf")
        if not raw:
            raise PluginError(f"Secret {ref.namespace}/{ref.name} has no key cloudprovider.conf")
        return parse_cloudprovider_conf(base64.b64decode(raw).decode())

    async def token(self, http: httpx.AsyncClient, creds: OpenStackCredentials) -> str:
        if self._token is not None and self._token[1] > time.monotonic():
            return self._token[0]
        body = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": creds.username,
                            "password": creds.password,
                            "domain": {"name": creds.domain_name},
                        }
                    },
                },
                "scope": {"project": {"id": creds.tenant_id}},
            }
        }
        url = creds.auth_url.rstrip("/") + "/auth/tokens"
        try:
            resp = await http.post(url, json=body, timeout=TIMEOUT)
        except httpx.HTTPError as exc:
            raise PluginError(f"keystone {url}: {type(exc).__name__}: {exc}") from exc
        token = resp.headers.get("X-Subject-Token")
        if resp.status_code >= 400 or not token:
            raise PluginError(f"keystone {url}: HTTP {resp.status_code}: {resp.text[:200]}")
        lifetime = 600.0
        try:
            expires = (resp.json().get("token") or {}).get("expires_at")
            if expires:
                left = (
                    datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp() - time.time()
                )
                lifetime = max(0.0, left - 60)
        except (ValueError, AttributeError):
            pass
        self._token = (token, time.monotonic() + lifetime)
        return token

    async def check(self, ctx: PluginContext) -> CheckResult:
        creds = await self.credentials(ctx)
        http = ctx.cluster.http
        token = await self.token(http, creds)
        base = self.config.url or f"https://kubernikus.{creds.region}.cloud.sap"
        url = f"{base.rstrip('/')}/api/v1/clusters/{self.config.cluster}"
        try:
            resp = await http.get(url, headers={"x-auth-token": token}, timeout=TIMEOUT)
        except httpx.HTTPError as exc:
            raise PluginError(f"kubernikus {url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code == 401:
            self._token = None
        if resp.status_code >= 400:
            raise PluginError(f"kubernikus {url}: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            cluster: Any = resp.json()
            pools = (cluster.get("spec") or {}).get("nodePools") or []
            expected = sum(int(p.get("size") or 0) for p in pools)
        except (ValueError, AttributeError, TypeError):
            raise PluginError(f"kubernikus {url}: unexpected answer {resp.text[:200]!r}") from None
        nodes = ctx.cluster.node_count()
        info = {"nodes": nodes, "expected": expected}
        if nodes >= expected:
            return CheckResult.ok(**info)
        return CheckResult.blocked(f"{nodes} nodes, node pools want {expected}", **info)


TYPES = [
    PluginType(
        "check", "kubernikusCount", KubernikusCountConfig, KubernikusCount, "node pools complete"
    )
]
