"""OpenStack: find and delete the Nova server behind a node.

This is the cloud half of Kubernikus-style node replacement: once a node is drained, its VM is
deleted and the cluster's node pool launches a new one. Credentials come either from a
`clouds.yaml` cloud (the OpenStack client convention) or from the `[Global]` section of a
`cloudprovider.conf`, the file the OpenStack cloud controller manager of the cluster already
reads, so an operator next to it needs no second copy of the secret.

openstacksdk is synchronous (keystoneauth on requests). Every SDK call therefore runs in a small
dedicated thread pool: the event loop never blocks, and a hung cloud can occupy at most
`max_workers` threads instead of the loop's shared default executor. The SDK's own retries are
switched off so `call_with_retry` is the only retry layer, and each HTTP request is bounded by
`retry.attempt_timeout` (a thread cannot be cancelled, so the request itself must end).
"""

from __future__ import annotations

import asyncio
import configparser
import contextvars
import dataclasses
import functools
import re
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import urlsplit

import openstack.config
import openstack.connection
import openstack.exceptions as os_exc
import structlog
import yaml
from keystoneauth1 import exceptions as ksa_exc
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nodeops.providers.base import (
    BaseProvider,
    ProviderConfigError,
    ProviderError,
    Server,
    node_name,
    node_provider_id,
)
from nodeops.providers.retry import RetryPolicy, call_with_retry

__all__ = [
    "GONE_STATUSES",
    "CloudproviderConf",
    "OpenStackConfig",
    "OpenStackProvider",
    "classify_openstack_error",
    "parse_cloudprovider_conf",
]

T = TypeVar("T")

_log = structlog.get_logger("nodeops.providers.openstack")

_NAME: Final = "openstack"
_KEY: Final = f"providers.{_NAME}"

GONE_STATUSES: Final = frozenset({"DELETED", "SOFT_DELETED"})
"""Nova statuses of a server that no longer runs.

`SOFT_DELETED` is what a delete produces on clouds with deferred deletion
(`reclaim_instance_interval`): the VM is powered off and Nova reclaims it later, so for the node
it is gone, and waiting for the 404 would wait for the reclaim interval (hours)."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


class OpenStackConfig(BaseModel):
    """Configuration block of the `openstack` provider.

    Exactly one credential source: `cloud` (a clouds.yaml entry) or `cloudprovider_conf`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cloud: str | None = Field(
        default=None, description="Name of the cloud in clouds.yaml to authenticate as."
    )
    clouds_yaml: Path | None = Field(
        default=None,
        description="clouds.yaml to read `cloud` from; unset means the standard locations "
        "(./clouds.yaml, ~/.config/openstack/, /etc/openstack/).",
    )
    cloudprovider_conf: Path | None = Field(
        default=None,
        description="cloudprovider.conf whose [Global] section holds the credentials "
        "(auth-url, username, password, domain-name, tenant-id, region, ...).",
    )
    region: str | None = Field(
        default=None, description="Region to use, overriding the one of the credential source."
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    poll_interval: float = Field(
        default=2.0, gt=0, description="Between checks while waiting for a server to go."
    )
    max_workers: int = Field(
        default=4, ge=1, le=64, description="Threads running blocking SDK calls."
    )

    @field_validator("cloud", "region")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty (leave the key out instead)")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> OpenStackConfig:
        if (self.cloud is None) == (self.cloudprovider_conf is None):
            raise ValueError(
                "set exactly one of `cloud` (a clouds.yaml cloud) and `cloudprovider_conf` "
                "(a file with a [Global] section)"
            )
        if self.clouds_yaml is not None and self.cloud is None:
            raise ValueError("`clouds_yaml` needs `cloud`, the name of the cloud to use in it")
        return self


@dataclasses.dataclass(frozen=True, slots=True)
class CloudproviderConf:
    """Credentials read from a cloudprovider.conf, in keystoneauth's terms."""

    auth_type: str
    auth: dict[str, str] = dataclasses.field(repr=False)
    region: str | None = None
    cacert: str | None = None
    verify: bool = True


_GLOBAL: Final = "global"

# keystoneauth option <- the [Global] keys that set it. The `tenant-*` spellings are those of the
# OpenStack cloud controller manager (and gophercloud); `project-*` ones are accepted alongside.
_AUTH_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "auth_url": ("auth-url",),
    "username": ("username",),
    "user_id": ("user-id",),
    "password": ("password",),
    "project_id": ("tenant-id", "project-id"),
    "project_name": ("tenant-name", "project-name"),
    "user_domain_id": ("user-domain-id",),
    "user_domain_name": ("user-domain-name",),
    "project_domain_id": ("tenant-domain-id", "project-domain-id"),
    "project_domain_name": ("tenant-domain-name", "project-domain-name"),
    "application_credential_id": ("application-credential-id",),
    "application_credential_name": ("application-credential-name",),
    "application_credential_secret": ("application-credential-secret",),
}
_SECRET_KEYS: Final = frozenset({"password", "application-credential-secret"})
_TRUE: Final = frozenset({"true", "yes", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})


def parse_cloudprovider_conf(
    text: str, *, source: str = "cloudprovider.conf", key: str = f"{_KEY}.cloudprovider_conf"
) -> CloudproviderConf:
    """Read the `[Global]` section of a cloudprovider.conf.

    The file is Go's gcfg dialect, not Python's INI: values may be double-quoted with
    backslash escapes, and an unquoted `;` or `#` starts a comment, so passwords containing them
    are quoted and must be unquoted here exactly as the cloud controller manager does.
    `domain-name`/`domain-id` name the domain of both the user and the project unless the
    specific keys are given (Kubernikus writes only `domain-name`). Other keys and sections
    belong to the cloud controller manager and are ignored.

    Raises `ProviderConfigError` under `key`, the message naming the file and the [Global] key.
    """

    def fail(message: str) -> ProviderConfigError:
        return ProviderConfigError(key, f"{source}: {message}")

    parser = configparser.ConfigParser(
        delimiters=("=",),
        comment_prefixes=("#", ";"),
        inline_comment_prefixes=None,
        interpolation=None,
        strict=False,
        allow_no_value=True,
        empty_lines_in_values=False,
    )
    try:
        parser.read_string(text, source=source)
    except configparser.MissingSectionHeaderError as exc:
        # configparser's own message quotes the line, which may be a password: lines only.
        raise fail(f"not a valid INI file: line {exc.lineno} comes before any [section]") from None
    except configparser.ParsingError as exc:
        lines = ", ".join(str(number) for number, _ in exc.errors)
        raise fail(
            f"not a valid INI file: cannot parse line {lines} (expected key = value)"
        ) from None
    except configparser.Error as exc:
        raise fail(f"not a valid INI file: {exc.message}") from None
    sections = [s for s in parser.sections() if s.strip().lower() == _GLOBAL]
    if not sections:
        raise fail("has no [Global] section")
    raw: dict[str, str | None] = {}
    for section in sections:
        raw.update(parser.items(section))

    values: dict[str, str] = {}
    for name, value in raw.items():
        if value is None:
            if name == "tls-insecure":
                values[name] = "true"  # gcfg: a bare boolean variable means true
                continue
            raise fail(f"[Global] {name} has no value")
        try:
            values[name] = _gcfg_value(value)
        except ValueError as exc:
            if name in _SECRET_KEYS:  # the reason may quote a piece of the secret
                raise fail(f"[Global] {name}: unterminated quote or invalid escape") from None
            raise fail(f"[Global] {name}: {exc}") from None

    def one_of(names: tuple[str, ...]) -> str | None:
        given = {n: values[n] for n in names if values.get(n)}
        if len(set(given.values())) > 1:
            listed = " and ".join(given)
            raise fail(f"[Global] {listed} are both set, to different values; keep one")
        return next(iter(given.values()), None)

    if (values.get("use-clouds") or "").lower() in _TRUE:
        raise fail(
            f"[Global] use-clouds refers to a clouds.yaml; set {_KEY}.cloud and "
            f"{_KEY}.clouds_yaml instead of {_KEY}.cloudprovider_conf"
        )

    auth = {opt: v for opt, names in _AUTH_KEYS.items() if (v := one_of(names)) is not None}
    domain_id = values.get("domain-id") or None
    domain_name = values.get("domain-name") or None

    auth_url = auth.get("auth_url")
    if not auth_url:
        raise fail("[Global] auth-url is missing")
    parts = urlsplit(auth_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise fail(f"[Global] auth-url {auth_url!r} is not an http:// or https:// URL")

    has_user_domain = bool(
        auth.get("user_domain_id") or auth.get("user_domain_name") or domain_id or domain_name
    )
    if any(k.startswith("application_credential") for k in auth):
        auth_type = "v3applicationcredential"
        if not auth.get("application_credential_secret"):
            raise fail("[Global] application-credential-secret is missing")
        if not auth.get("application_credential_id"):
            if not auth.get("application_credential_name"):
                raise fail(
                    "[Global] application-credential-id (or application-credential-name "
                    "with the user) is missing"
                )
            if not (auth.get("user_id") or (auth.get("username") and has_user_domain)):
                raise fail(
                    "[Global] application-credential-name needs user-id, or username with "
                    "domain-name"
                )
        # Project and password are part of the credential itself; keystone rejects extras.
        for extra in ("password", "project_id", "project_name"):
            auth.pop(extra, None)
        auth.pop("project_domain_id", None)
        auth.pop("project_domain_name", None)
    else:
        auth_type = "password"
        if not auth.get("password"):
            raise fail("[Global] password is missing")
        if not (auth.get("username") or auth.get("user_id")):
            raise fail("[Global] username (or user-id) is missing")
        if auth.get("username") and not has_user_domain:
            raise fail("[Global] username needs its domain: domain-name or user-domain-name")
        if not (auth.get("project_id") or auth.get("project_name")):
            raise fail(
                "[Global] tenant-id (or tenant-name) is missing; without a project the token "
                "has no service catalog"
            )
        if (
            not auth.get("project_id")
            and not (auth.get("project_domain_id") or auth.get("project_domain_name"))
            and not (domain_id or domain_name)
        ):
            raise fail("[Global] tenant-name needs its domain: domain-name or tenant-domain-name")
        if not (auth.get("project_domain_id") or auth.get("project_domain_name")):
            if domain_id:
                auth["project_domain_id"] = domain_id
            elif domain_name:
                auth["project_domain_name"] = domain_name

    if not (auth.get("user_domain_id") or auth.get("user_domain_name")) and (auth.get("username")):
        if domain_id:
            auth["user_domain_id"] = domain_id
        elif domain_name:
            auth["user_domain_name"] = domain_name

    verify = True
    insecure = values.get("tls-insecure")
    if insecure is not None:
        lowered = insecure.lower()
        if lowered not in _TRUE | _FALSE:
            raise fail(f"[Global] tls-insecure {insecure!r} is not a boolean")
        verify = lowered in _FALSE

    return CloudproviderConf(
        auth_type=auth_type,
        auth=auth,
        region=values.get("region") or None,
        cacert=values.get("ca-file") or None,
        verify=verify,
    )


_ESCAPES: Final = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}


def _gcfg_value(raw: str) -> str:
    """A gcfg value: quotes removed, escapes resolved, an unquoted comment and trailing blanks cut."""
    out: list[str] = []
    blanks = ""
    quoted = False
    chars = iter(raw.strip())
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None or escaped not in _ESCAPES:
                raise ValueError(f"invalid escape sequence \\{escaped or ''}")
            out.append(blanks + _ESCAPES[escaped])
            blanks = ""
        elif quoted:
            if char == '"':
                quoted = False
            else:
                out.append(char)
        elif char == '"':
            out.append(blanks)
            blanks = ""
            quoted = True
        elif char in ";#":
            break
        elif char.isspace():
            blanks += char
        else:
            out.append(blanks + char)
            blanks = ""
    if quoted:
        raise ValueError("unterminated quoted value")
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def classify_openstack_error(exc: BaseException) -> ProviderError | None:
    """A `ProviderError` for a cloud or transport failure, None for anything else.

    HTTP failures carry the status as code (Nova and Keystone have no finer error codes: their
    bodies name a fault class per status) and the request ID in the message, which is what an
    OpenStack operator greps their logs for. 409 is retryable because Nova answers it while a
    server is in a transitional task state (migrating, resizing) that ends by itself.
    """
    if isinstance(exc, os_exc.HttpException):
        return _http_error(exc.status_code, exc.details or exc.message, exc.request_id)
    if isinstance(exc, ksa_exc.HttpError):
        return _http_error(exc.http_status, exc.message, exc.request_id)
    if isinstance(exc, ksa_exc.ConnectTimeout):
        return ProviderError("Timeout", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.SSLError):
        # A certificate problem does not go away by asking again.
        return ProviderError("SSLError", str(exc), retryable=False)
    if isinstance(exc, ksa_exc.ConnectionError):
        return ProviderError("ConnectionError", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.EndpointNotFound | os_exc.ServiceDisabledException):
        return ProviderError(
            "EndpointNotFound",
            f"{exc}; check the region ({_KEY}.region) and the project of the credentials",
            retryable=False,
        )
    if isinstance(exc, ksa_exc.DiscoveryFailure):
        # Raised when every version document was unreachable, typically a 5xx in front of
        # Keystone; a wrong auth URL also lands here, but then the retry budget just runs out.
        return ProviderError("DiscoveryFailure", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.AuthPluginException | os_exc.ConfigException):
        return ProviderError("InvalidConfiguration", str(exc), retryable=False)
    if isinstance(exc, ksa_exc.ClientException | os_exc.SDKException):
        return ProviderError(type(exc).__name__, str(exc), retryable=False)
    return None


def _http_error(status: int | None, message: str | None, request_id: str | None) -> ProviderError:
    code = str(status) if status else "HttpError"
    text = (message or "").strip() or f"HTTP {code}"
    if request_id:
        text = f"{text} (request {request_id})"
    retryable = status is not None and (
        status in (409, 429) or (status >= 500 and status not in (501, 505))
    )
    return ProviderError(code, text, retryable=retryable)


def _is_not_found(exc: ProviderError) -> bool:
    return exc.code == "404"


# --------------------------------------------------------------------------------------------
# Provider
# --------------------------------------------------------------------------------------------


class OpenStackProvider(BaseProvider):
    """Nova servers behind nodes (`Servers`).

    A node is matched by `spec.providerID` (`openstack:///<server uuid>`, or
    `openstack://<region>/<uuid>` in multi-region clusters). A node without one is matched by
    name, as Kubernikus does: the server whose name equals the node name, and an error when
    several do, because deleting the wrong VM is worse than deleting none.
    """

    name: ClassVar[str] = _NAME
    Config: ClassVar[type[BaseModel]] = OpenStackConfig

    def __init__(self, config: OpenStackConfig) -> None:
        if not isinstance(config, OpenStackConfig):
            raise TypeError(f"expected OpenStackConfig, got {type(config).__name__}")
        self.config = config
        self._executor = ThreadPoolExecutor(
            max_workers=config.max_workers, thread_name_prefix="nodeops-openstack"
        )
        self._conn: openstack.connection.Connection | None = None
        self._region: str | None = None
        self._source_text: str | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_text(cls, config: OpenStackConfig, text: str) -> OpenStackProvider:
        """A provider whose credential source is `text` instead of the file `config` names.

        For credentials read from a Kubernetes Secret through the API: `text` is a
        cloudprovider.conf when `config.cloudprovider_conf` is set, else a clouds.yaml holding
        `config.cloud`. The configured path is then only the source's name in error messages,
        and nothing is written to disk.
        """
        provider = cls(config)
        provider._source_text = text
        return provider

    # ----------------------------------------------------------------------------------------
    # Connection
    # ----------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Read the credential source and prepare the SDK connection, without network I/O.

        Every call does this on first use; calling it at startup reports a bad file as a
        `ProviderConfigError` before any node is touched.
        """
        await self._connection()

    @property
    def region(self) -> str | None:
        """The region in use, known after `connect()` or the first call."""
        return self._region

    async def _connection(self) -> openstack.connection.Connection:
        conn = self._conn
        if conn is not None:
            return conn
        async with self._lock:
            if self._closed:
                raise ProviderError("Closed", "the OpenStack provider is closed", retryable=False)
            if self._conn is None:
                self._conn = await self._in_thread(self._open)
                self._region = self._conn.config.get_region_name("compute") or None
            return self._conn

    def _open(self) -> openstack.connection.Connection:
        """Build the SDK connection (reads files only; authentication happens on first call)."""
        options: dict[str, Any] = {
            "api_timeout": self.config.retry.attempt_timeout,
            "connect_retries": 0,
            "status_code_retries": 0,
        }
        if self.config.region is not None:
            options["region_name"] = self.config.region
        if self.config.cloud is not None and self._source_text is not None:
            source = str(self.config.clouds_yaml or "clouds.yaml")
            region = _clouds_yaml_text_region(self._source_text, self.config.cloud, source, options)
        elif self.config.cloud is not None:
            region = self._load_clouds_yaml(self.config.cloud, self.config.clouds_yaml, options)
        else:
            assert self.config.cloudprovider_conf is not None  # the model guarantees one source
            region = self._load_cloudprovider_conf(
                self.config.cloudprovider_conf, options, self._source_text
            )
        return openstack.connection.Connection(config=region, app_name="nodeops")

    @staticmethod
    def _load_clouds_yaml(
        cloud: str, path: Path | None, options: dict[str, Any]
    ) -> openstack.config.cloud_region.CloudRegion:
        files: list[str] | None = None
        secure: list[str] | None = None
        if path is not None:
            _check_clouds_yaml(path, cloud)
            files = [str(path)]
            secure = [str(path.with_name("secure.yaml"))]
        try:
            # Environment variables stay out: the cloud named in the configuration is the one
            # used, whatever OS_* variables the pod happens to have.
            loader = openstack.config.OpenStackConfig(
                config_files=files, secure_files=secure, load_envvars=False
            )
            return loader.get_one(cloud=cloud, **options)
        except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
            where = f"{path}: " if path is not None else ""
            region_fault = "region_name" in options and "region" in str(exc).lower()
            key = f"{_KEY}.region" if region_fault else f"{_KEY}.cloud"
            raise ProviderConfigError(key, f"{where}{exc}") from None

    @staticmethod
    def _load_cloudprovider_conf(
        path: Path, options: dict[str, Any], text: str | None = None
    ) -> openstack.config.cloud_region.CloudRegion:
        key = f"{_KEY}.cloudprovider_conf"
        if text is None:
            try:
                text = path.read_text(encoding="utf-8-sig")
            except FileNotFoundError:
                raise ProviderConfigError(key, f"{path}: no such file") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ProviderConfigError(key, f"{path}: {exc}") from None
        conf = parse_cloudprovider_conf(text, source=str(path), key=key)
        options.setdefault("region_name", conf.region)
        if options["region_name"] is None:
            del options["region_name"]
        if conf.cacert is not None:
            options["cacert"] = conf.cacert
        try:
            loader = openstack.config.OpenStackConfig(
                config_files=[], vendor_files=[], secure_files=[], load_envvars=False
            )
            return loader.get_one(
                auth_type=conf.auth_type, auth=dict(conf.auth), verify=conf.verify, **options
            )
        except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
            raise ProviderConfigError(key, f"{path}: {exc}") from None

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the provider's pool, with the caller's context (log bindings)."""
        if self._closed:
            raise ProviderError("Closed", "the OpenStack provider is closed", retryable=False)
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(context.run, fn, *args)
        )

    async def _call(self, operation: str, fn: Callable[[openstack.connection.Connection], T]) -> T:
        """`fn(connection)` in the thread pool, under the retry policy."""

        async def attempt() -> T:
            conn = await self._connection()
            try:
                return await self._in_thread(fn, conn)
            except os_exc.ServiceDisabledException:
                # The SDK remembers a service missing from the catalog for the life of the
                # connection; start afresh next time so a fixed catalog or region is seen.
                if self._conn is conn:
                    self._conn = None
                raise

        return await call_with_retry(
            attempt,
            operation=operation,
            policy=self.config.retry,
            classify=classify_openstack_error,
            provider=self.name,
        )

    async def close(self) -> None:
        """Release the connection pool; later calls fail with the `Closed` code.

        Calls already queued still run (cancelling their futures would surface as a
        cancellation of tasks nobody cancelled); the connection closes behind them.
        """
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            conn, self._conn = self._conn, None
        closing = None
        if conn is not None:
            closing = asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._executor.shutdown(wait=False)
        if closing is not None:
            await closing

    # ----------------------------------------------------------------------------------------
    # Servers
    # ----------------------------------------------------------------------------------------

    async def find_server(self, node: Mapping[str, Any]) -> Server | None:
        """The live Nova server of a node, or None if it is gone or not an OpenStack node.

        A node with a provider ID is looked up by server ID only; a 404 there means its VM is
        gone, and the name is not tried, because a server of the same name is then another VM.
        """
        provider_id = node_provider_id(node)
        name = node_name(node)
        if provider_id is not None:
            if provider_id.scheme != _NAME or not _is_uuid(provider_id.id):
                return None
            await self._connection()
            if provider_id.host and self._region and provider_id.host != self._region:
                raise ProviderError(
                    "RegionMismatch",
                    f"node {name} runs in region {provider_id.host} ({provider_id}), the "
                    f"provider is configured for {self._region}; set {_KEY}.region",
                    retryable=False,
                    operation="compute.get_server",
                )
            server = await self._get(provider_id.id)
            if server is None or server.status in GONE_STATUSES:
                return None
            return dataclasses.replace(server, provider_id=str(provider_id))
        return await self._find_by_name(name)

    async def _find_by_name(self, name: str) -> Server | None:
        pattern = _name_regex(name)

        def list_named(conn: openstack.connection.Connection) -> list[Server]:
            return [_server(s) for s in conn.compute.servers(details=True, name=pattern)]

        listed = await self._call("compute.list_servers", list_named)
        # Nova matches `name` as a regular expression of its database; equality is decided here.
        matches = [s for s in listed if s.name == name and s.status not in GONE_STATUSES]
        if not matches:
            return None
        if len(matches) > 1:
            ids = ", ".join(sorted(s.id for s in matches))
            raise ProviderError(
                "AmbiguousNode",
                f"node {name} has no providerID and {len(matches)} servers are named like it "
                f"({ids}); set the node's spec.providerID or remove the extra servers",
                retryable=False,
                operation="compute.list_servers",
            )
        return matches[0]

    async def _get(self, server_id: str) -> Server | None:
        """The server, or None for a 404."""

        def get(conn: openstack.connection.Connection) -> Server:
            return _server(conn.compute.get_server(server_id))

        try:
            return await self._call("compute.get_server", get)
        except ProviderError as exc:
            if _is_not_found(exc):
                return None
            raise

    async def delete_server(self, server: Server) -> None:
        """Delete the server; one that is already gone (404) counts as deleted."""

        def delete(conn: openstack.connection.Connection) -> None:
            conn.compute.delete_server(server.id, ignore_missing=False)

        try:
            await self._call("compute.delete_server", delete)
        except ProviderError as exc:
            if not _is_not_found(exc):
                raise
            _log.info("server already deleted", server=server.id, name=server.name)
            return
        _log.info("server deleted", server=server.id, name=server.name)

    async def wait_deleted(self, server: Server, timeout: float) -> None:
        """Return once Nova no longer has the server (404) or shows it DELETED/SOFT_DELETED.

        Nova has no watch or event stream for tenants, so this polls every `poll_interval`;
        deletes take seconds to a minute, so the cost is a handful of GETs per node. A poll that
        fails retryably (after its own retries) does not end the wait; the timeout does.
        """
        last = server.status
        last_error: ProviderError | None = None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        current = await self._get(server.id)
                    except ProviderError as exc:
                        if not exc.retryable:
                            raise
                        last_error = exc
                    else:
                        last_error = None
                        if current is None or current.status in GONE_STATUSES:
                            return
                        last = current.status
                    await asyncio.sleep(self.config.poll_interval)
        except TimeoutError:
            detail = f"last poll failed: {last_error}" if last_error else f"status {last}"
            raise ProviderError(
                "Timeout",
                f"server {server.id} ({server.name}) still exists after {timeout:g}s ({detail})",
                retryable=True,
                operation="compute.get_server",
            ) from None


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _check_clouds_yaml(path: Path, cloud: str) -> None:
    """Fail on an unreadable clouds.yaml or a missing cloud with the file's own words.

    The SDK skips a file it cannot parse with a log line and then reports the cloud as not
    found, which sends the reader looking in the wrong place.
    """
    key = f"{_KEY}.clouds_yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProviderConfigError(key, f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProviderConfigError(key, f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ProviderConfigError(key, f"{path}: not valid YAML: {exc}") from None
    clouds = document.get("clouds") if isinstance(document, dict) else None
    if not isinstance(clouds, dict):
        raise ProviderConfigError(key, f"{path}: has no `clouds` mapping")
    if cloud not in clouds:
        known = ", ".join(sorted(map(str, clouds))) or "none"
        raise ProviderConfigError(
            f"{_KEY}.cloud", f"{path}: no cloud named {cloud!r} (defined: {known})"
        )


def _clouds_yaml_text_region(
    text: str, cloud: str, source: str, options: dict[str, Any]
) -> openstack.config.cloud_region.CloudRegion:
    """The cloud `cloud` of a clouds.yaml given as text, without reading any file."""
    key = f"{_KEY}.clouds_yaml"
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The position only: a YAML error's snippet may quote a password.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ProviderConfigError(key, f"{source}: not valid YAML{where}") from None
    clouds = document.get("clouds") if isinstance(document, dict) else None
    if not isinstance(clouds, dict):
        raise ProviderConfigError(key, f"{source}: has no `clouds` mapping")
    entry = clouds.get(cloud)
    if not isinstance(entry, dict):
        known = ", ".join(sorted(map(str, clouds))) or "none"
        raise ProviderConfigError(
            f"{_KEY}.cloud", f"{source}: no cloud named {cloud!r} (defined: {known})"
        )
    settings = {k: v for k, v in entry.items() if k not in ("profile", "regions")}
    settings.update(options)
    try:
        loader = openstack.config.OpenStackConfig(
            config_files=[], vendor_files=[], secure_files=[], load_envvars=False
        )
        return loader.get_one(**settings)
    except (os_exc.ConfigException, ksa_exc.AuthPluginException) as exc:
        raise ProviderConfigError(f"{_KEY}.cloud", f"{source}: {exc}") from None


_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9._-]+")


def _name_regex(name: str) -> str:
    """A Nova `name` filter matching `name` exactly.

    Nova hands the filter to its database's regex engine (MySQL, PostgreSQL), whose escaping
    rules differ from Python's; node names are DNS subdomains, whose only special character is
    `.`, left unescaped: it still matches itself, and equality is checked afterwards anyway.
    Anything else is escaped with a backslash, which every POSIX-style engine reads as literal.
    """
    if _PLAIN_NAME.fullmatch(name):
        body = name
    else:
        body = "".join(c if c.isalnum() else f"\\{c}" for c in name)
    return f"^{body}$"


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _server(raw: Any) -> Server:
    server_id = str(raw.id)
    return Server(
        id=server_id,
        name=str(raw.name or ""),
        status=str(raw.status or "").upper(),
        provider_id=f"{_NAME}:///{server_id}",
        zone=getattr(raw, "availability_zone", None) or None,
    )
