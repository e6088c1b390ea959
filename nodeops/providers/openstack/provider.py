"""The `openstack` provider: find and delete the Nova server behind a node.

openstacksdk is synchronous (keystoneauth on requests). Every SDK call therefore runs in a small
dedicated thread pool: the event loop never blocks, and a hung cloud can occupy at most
`max_workers` threads instead of the loop's shared default executor. The SDK's own retries are
switched off so `call_with_retry` is the only retry layer, and each HTTP request is bounded by
`retry.attempt_timeout` (a thread cannot be cancelled, so the request itself must end).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

import structlog
from pydantic import BaseModel

from nodeops.common.extras import optional_dependencies

with optional_dependencies("openstack"):
    import openstack.connection
    import openstack.exceptions as os_exc

from nodeops.providers.base import (
    BaseProvider,
    ProviderError,
    Server,
    node_name,
    node_provider_id,
)
from nodeops.providers.openstack.config import KEY, NAME, OpenStackConfig
from nodeops.providers.openstack.credentials import cloud_region
from nodeops.providers.openstack.errors import classify_openstack_error, is_not_found
from nodeops.providers.openstack.servers import (
    GONE_STATUSES,
    is_uuid,
    name_regex,
    server_from_sdk,
)
from nodeops.providers.retry import call_with_retry

__all__ = ["OpenStackProvider"]

T = TypeVar("T")

_log = structlog.get_logger("nodeops.providers.openstack")


class OpenStackProvider(BaseProvider):
    """Nova servers behind nodes (`Servers`).

    A node is matched by `spec.providerID` (`openstack:///<server uuid>`, or
    `openstack://<region>/<uuid>` in multi-region clusters). A node without one is matched by
    name, as Kubernikus does: the server whose name equals the node name, and an error when
    several do, because deleting the wrong VM is worse than deleting none.
    """

    name: ClassVar[str] = NAME
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
        region = cloud_region(self.config, self._source_text)
        return openstack.connection.Connection(config=region, app_name="nodeops")

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
            if provider_id.scheme != NAME or not is_uuid(provider_id.id):
                return None
            await self._connection()
            if provider_id.host and self._region and provider_id.host != self._region:
                raise ProviderError(
                    "RegionMismatch",
                    f"node {name} runs in region {provider_id.host} ({provider_id}), the "
                    f"provider is configured for {self._region}; set {KEY}.region",
                    retryable=False,
                    operation="compute.get_server",
                )
            server = await self._get(provider_id.id)
            if server is None or server.status in GONE_STATUSES:
                return None
            return dataclasses.replace(server, provider_id=str(provider_id))
        return await self._find_by_name(name)

    async def _find_by_name(self, name: str) -> Server | None:
        pattern = name_regex(name)

        def list_named(conn: openstack.connection.Connection) -> list[Server]:
            return [server_from_sdk(s) for s in conn.compute.servers(details=True, name=pattern)]

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
            return server_from_sdk(conn.compute.get_server(server_id))

        try:
            return await self._call("compute.get_server", get)
        except ProviderError as exc:
            if is_not_found(exc):
                return None
            raise

    async def delete_server(self, server: Server) -> None:
        """Delete the server; one that is already gone (404) counts as deleted."""

        def delete(conn: openstack.connection.Connection) -> None:
            conn.compute.delete_server(server.id, ignore_missing=False)

        try:
            await self._call("compute.delete_server", delete)
        except ProviderError as exc:
            if not is_not_found(exc):
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
