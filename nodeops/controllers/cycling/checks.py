"""Health checks and pre-termination checks over HTTP(S).

Endpoints are templates rendered per node (`http://{{ .NodeIP }}:8080/healthz`). A check passes
when the status code is one of `validStatusCodes` and the body matches `regexMatch` (if set).
A failure is an outcome, not an exception: whether it fails the request depends on how long the
check has been failing, which the caller decides from the times it keeps in status. TLS material
comes from a Secret (`tls.secretRef`) or, as in Cyclops, from environment variables named in
`rootCA`, `crt` and `key`; a CA alone verifies the server, a CA with a certificate and key is
mTLS.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from nodeops.api.cycling import HealthCheck, PreTerminationCheck, TLSConfig
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import SECRETS

__all__ = ["CheckOutcome", "CheckRunner", "CheckTarget", "render_endpoint"]

_ACTION: Final = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_LABEL: Final = re.compile(r'^(?:index\s+\.Labels\s+"([^"]+)"|\.Labels\.([A-Za-z0-9_]+))$')
_BODY_LIMIT: Final = 1 << 20  # regexMatch reads at most 1 MiB of a body


@dataclass(frozen=True)
class CheckTarget:
    """The node a check is about, with what its endpoint templates may use."""

    node_name: str
    node_ip: str | None
    provider_id: str = ""
    instance_id: str = ""
    node_group: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Mapping[str, Any], node_group: str = "") -> CheckTarget:
        ip = None
        for address in (node.get("status") or {}).get("addresses") or ():
            if address.get("type") == "InternalIP":
                ip = address.get("address")
                break
        provider_id = str((node.get("spec") or {}).get("providerID") or "")
        return cls(
            node_name=o.name(node),
            node_ip=ip,
            provider_id=provider_id,
            instance_id=provider_id.rstrip("/").rsplit("/", 1)[-1] if provider_id else "",
            node_group=node_group,
            labels=dict(o.labels(node)),
        )


class TemplateValueMissing(ValueError):
    pass


def render_endpoint(template: str, target: CheckTarget) -> str:
    """The endpoint for one node; raises TemplateValueMissing when the node lacks a value."""
    values = {
        ".NodeIP": target.node_ip,
        ".NodeName": target.node_name,
        ".ProviderID": target.provider_id,
        ".InstanceID": target.instance_id,
        ".NodeGroupName": target.node_group,
    }

    def one(match: re.Match[str]) -> str:
        action = match.group(1)
        label = _LABEL.match(action)
        value = target.labels.get(label.group(1) or label.group(2)) if label else values.get(action)
        if not value:
            raise TemplateValueMissing(f"node {target.node_name} has no value for {action}")
        return value

    return _ACTION.sub(one, template)


@dataclass(frozen=True)
class CheckOutcome:
    ok: bool
    detail: str


class CheckRunner:
    """Runs checks with one HTTP client per TLS configuration (connections are reused)."""

    def __init__(
        self,
        client: Client,
        *,
        timeout: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.transport = transport
        self._http: dict[str, httpx.AsyncClient] = {}

    async def close(self) -> None:
        for http in self._http.values():
            await http.aclose()
        self._http.clear()

    async def health(self, check: HealthCheck, target: CheckTarget, namespace: str) -> CheckOutcome:
        """GET the endpoint; healthy on a valid status code and a matching body."""
        return await self._request(
            "GET",
            check.endpoint,
            target,
            namespace,
            tls=check.tls,
            valid=check.valid_status_codes,
            regex=check.regex_match,
        )

    async def trigger(
        self, check: PreTerminationCheck, target: CheckTarget, namespace: str
    ) -> CheckOutcome:
        """POST the trigger; accepted on a valid status code."""
        return await self._request(
            "POST",
            check.trigger_endpoint,
            target,
            namespace,
            tls=check.tls,
            valid=check.valid_status_codes,
            regex=None,
        )

    async def _request(
        self,
        method: str,
        template: str,
        target: CheckTarget,
        namespace: str,
        *,
        tls: TLSConfig | None,
        valid: list[int],
        regex: str | None,
    ) -> CheckOutcome:
        try:
            url = render_endpoint(template, target)
        except TemplateValueMissing as e:
            return CheckOutcome(False, str(e))
        try:
            http = await self._client_for(tls, namespace)
        except TlsSetupError as e:
            return CheckOutcome(False, f"{method} {url}: {e}")
        try:
            async with http.stream(method, url) as resp:
                body = b""
                if regex:
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        if len(body) >= _BODY_LIMIT:
                            break
        except httpx.TimeoutException:
            return CheckOutcome(False, f"{method} {url}: no answer within {self.timeout:g}s")
        except httpx.HTTPError as e:
            return CheckOutcome(False, f"{method} {url}: {type(e).__name__}: {e}")
        if resp.status_code not in valid:
            return CheckOutcome(
                False, f"{method} {url}: status {resp.status_code}, expected one of {valid}"
            )
        if regex and not re.search(regex, body.decode("utf-8", "replace")):
            return CheckOutcome(False, f"{method} {url}: body does not match {regex!r}")
        return CheckOutcome(True, f"{method} {url}: {resp.status_code}")

    async def _client_for(self, tls: TLSConfig | None, namespace: str) -> httpx.AsyncClient:
        material = await self._material(tls, namespace)
        key = hashlib.sha256(repr(material).encode()).hexdigest()
        http = self._http.get(key)
        if http is None:
            verify: ssl.SSLContext | bool = True
            if material is not None:
                verify = _ssl_context(*material)
            http = httpx.AsyncClient(
                verify=verify,
                timeout=self.timeout,
                follow_redirects=False,
                transport=self.transport,
            )
            self._http[key] = http
        return http

    async def _material(
        self, tls: TLSConfig | None, namespace: str
    ) -> tuple[str, str | None, str | None] | None:
        """(CA, certificate, key) PEM texts, or None for the system's CAs."""
        if tls is None or not tls.configured:
            return None
        if tls.secret_ref is not None:
            ref = tls.secret_ref
            ns = ref.namespace or namespace
            try:
                secret = await self.client.get(SECRETS, ref.name, ns)
            except errors.NotFound:
                raise TlsSetupError(f"secret {ns}/{ref.name} not found") from None
            data = secret.get("data") or {}

            def read(key: str, required: bool) -> str | None:
                raw = data.get(key)
                if raw is None:
                    if required:
                        raise TlsSetupError(f"secret {ns}/{ref.name} has no key {key!r}")
                    return None
                return base64.b64decode(raw).decode()

            ca = read(ref.ca_key, True)
            cert = read(ref.cert_key, False)
            key = read(ref.key_key, False) if cert is not None else None
            if cert is not None and key is None:
                raise TlsSetupError(f"secret {ns}/{ref.name} has a certificate but no key")
            assert ca is not None
            return ca, cert, key

        def env(name: str | None) -> str | None:
            if name is None:
                return None
            value = os.environ.get(name)
            if not value:
                raise TlsSetupError(f"environment variable {name} is not set")
            return value

        ca = env(tls.root_ca)
        assert ca is not None
        return ca, env(tls.crt), env(tls.key)


class TlsSetupError(Exception):
    pass


def _ssl_context(ca: str, cert: str | None, key: str | None) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cadata=ca)
    except ssl.SSLError as e:
        raise TlsSetupError(f"the CA is not valid PEM: {e}") from None
    if cert is not None and key is not None:
        # The ssl module loads client certificates from files only.
        with tempfile.TemporaryDirectory() as tmp:
            cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            with open(cert_path, "w", encoding="utf-8") as f:
                f.write(cert)
            with open(key_path, "w", encoding="utf-8") as f:
                f.write(key)
            os.chmod(key_path, 0o600)
            try:
                ctx.load_cert_chain(cert_path, key_path)
            except ssl.SSLError as e:
                raise TlsSetupError(f"the client certificate or key is not valid: {e}") from None
    return ctx
