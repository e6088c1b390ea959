"""Where the controller gets the cloud that deletes a node's VM, and its credentials.

In order of precedence:

1. `cloudProviderSecret` in kubernikus.yaml: a Secret read through the API when a VM is to be
   deleted, holding `cloudprovider.conf` (the `[Global]` section of the cluster's own
   `cloud-config` Secret) or `clouds.yaml`. Read on use, not cached in an informer, so RBAC can
   grant `get` on that one Secret and a rotated password is picked up at the next deletion.
2. The provider of `nodeops run --provider ... --provider-config ...` (any provider that
   implements `Servers`; `openstack` reads a cloudprovider.conf or clouds.yaml file there).
3. `provider/cloudprovider.conf` relative to the working directory, where the reference
   controller expects the mounted Secret.

Credentials never reach a log line, an Event or an error message: the Secret's content goes
straight into the provider, and errors name the Secret and key, not what is in them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
import yaml

from nodeops.controllers.kubernikus.config import CloudProviderSecret
from nodeops.kube import errors
from nodeops.kube.client import Client
from nodeops.kube.resources import SECRETS
from nodeops.providers.base import Provider, ProviderConfigError, Servers
from nodeops.providers.openstack import OpenStackConfig, OpenStackProvider

__all__ = ["CLOUDPROVIDER_CONF_KEY", "CLOUDS_YAML_KEY", "CredentialsError", "ServersSource"]

log = structlog.get_logger(__name__)

CLOUDPROVIDER_CONF_KEY = "cloudprovider.conf"
CLOUDS_YAML_KEY = "clouds.yaml"

OpenStackFactory = Callable[[OpenStackConfig, str], OpenStackProvider]


class CredentialsError(Exception):
    """The credentials cannot be had (Secret missing, key missing, content invalid).

    Retrying helps once someone fixes the Secret, so reconcilers requeue on it; the message
    names the Secret and key and never quotes their content.
    """


class ServersSource:
    """Hands out the `Servers` provider to use now, rebuilding it when its Secret changed."""

    def __init__(
        self,
        client: Client,
        secret: CloudProviderSecret,
        *,
        fallback: Provider | None = None,
        openstack_settings: dict[str, Any] | None = None,
        openstack_factory: OpenStackFactory = OpenStackProvider.from_text,
    ) -> None:
        self.client = client
        self.secret = secret
        self.fallback = fallback
        self.openstack_settings = dict(openstack_settings or {})
        self._factory = openstack_factory
        self._cached: tuple[str, OpenStackProvider] | None = None

    async def get(self) -> Servers:
        if self.secret.configured:
            return await self._from_secret()
        if self.fallback is None:
            raise CredentialsError(
                "no cloud credentials: set cloudProviderSecret in kubernikus.yaml, run with "
                "--provider and --provider-config, or mount provider/cloudprovider.conf"
            )
        if not isinstance(self.fallback, Servers):
            raise CredentialsError(
                f"provider {type(self.fallback).__name__} cannot delete servers (no Servers support)"
            )
        return self.fallback

    async def _from_secret(self) -> OpenStackProvider:
        ref = self.secret
        where = f"secret {ref.namespace}/{ref.name}"
        try:
            secret = await self.client.get(SECRETS, ref.name, ref.namespace)
        except errors.NotFound:
            raise CredentialsError(f"{where} does not exist") from None
        except errors.Forbidden:
            raise CredentialsError(
                f"{where} cannot be read: the operator's service account needs `get` on it"
            ) from None
        version = str((secret.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._cached
        if cached is not None and cached[0] == version:
            return cached[1]
        data = secret.get("data") or {}
        if CLOUDPROVIDER_CONF_KEY in data:
            key = CLOUDPROVIDER_CONF_KEY
            config = self._config(cloudprovider_conf=Path(f"{where} key {key}"))
        elif CLOUDS_YAML_KEY in data:
            key = CLOUDS_YAML_KEY
            text = _decode(data[key], where, key)
            cloud = ref.cloud or _only_cloud(text, where)
            config = self._config(cloud=cloud, clouds_yaml=Path(f"{where} key {key}"))
        else:
            raise CredentialsError(
                f"{where} has neither a {CLOUDPROVIDER_CONF_KEY} nor a {CLOUDS_YAML_KEY} key"
            )
        provider = self._factory(config, _decode(data[key], where, key))
        try:
            await provider.connect()
        except ProviderConfigError as exc:
            await provider.close()
            raise CredentialsError(str(exc)) from None
        if cached is not None:
            await cached[1].close()
        self._cached = (version, provider)
        log.info("cloud credentials loaded", secret=f"{ref.namespace}/{ref.name}", key=key)
        return provider

    def _config(self, **source: Any) -> OpenStackConfig:
        settings = {
            k: v
            for k, v in self.openstack_settings.items()
            if k not in ("cloud", "clouds_yaml", "cloudprovider_conf")
        }
        try:
            return OpenStackConfig(**settings, **source)
        except ValueError as exc:
            raise CredentialsError(f"openstack settings: {exc}") from None

    async def close(self) -> None:
        cached, self._cached = self._cached, None
        if cached is not None:
            await cached[1].close()


def _decode(value: Any, where: str, key: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode("utf-8-sig")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise CredentialsError(f"{where} key {key} is not base64-encoded UTF-8 text") from None


def _only_cloud(text: str, where: str) -> str:
    """The single cloud of a clouds.yaml, when the reference names none."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        raise CredentialsError(f"{where} key {CLOUDS_YAML_KEY} is not valid YAML") from None
    clouds = document.get("clouds") if isinstance(document, dict) else None
    if not isinstance(clouds, dict) or len(clouds) != 1:
        raise CredentialsError(
            f"{where} key {CLOUDS_YAML_KEY} defines {len(clouds or {})} clouds; name the one to "
            "use with cloudProviderSecret.cloud"
        )
    return str(next(iter(clouds)))
