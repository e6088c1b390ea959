"""The simulated cloud's HTTP API: one session, retried calls, and what its answers mean.

Every call goes through the network with the retry policy and timeouts a real cloud gets, never
through the simulator's own code, so the operator's cloud-facing paths are exercised as they run
in production. A failure becomes a `ProviderError` from the cloud's `{"code", "message"}` body;
an answer of the wrong shape is `InvalidResponse`, retried like a server hiccup.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import quote

import aiohttp
import orjson

from nodeops import __version__
from nodeops.providers.base import ProviderError
from nodeops.providers.retry import call_with_retry
from nodeops.providers.sim.config import SimConfig

__all__ = [
    "NAME",
    "SimApi",
    "classify_sim_error",
    "http_error",
    "invalid_answer",
    "parse_answer",
    "q",
]

T = TypeVar("T")

NAME: Final = "sim"
"""The provider's name in the registry and the scheme of its nodes' provider IDs."""
_PREFIX: Final = "/sim/cloud"

_RETRYABLE_CODES: Final = frozenset({"Throttling", "ResourceContention", "IncorrectInstanceState"})


def classify_sim_error(exc: BaseException) -> ProviderError | None:
    """Transport failures are retryable; anything else is not a cloud failure."""
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return ProviderError("ConnectionError", str(exc) or type(exc).__name__, retryable=True)
    return None


def http_error(status: int, raw: bytes) -> ProviderError:
    """The cloud's `{"code", "message"}`; a body of another shape keeps the HTTP status."""
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code")
    if not isinstance(code, str) or not code:
        code = str(body.get("reason") or status)
    message = str(body.get("message") or f"HTTP {status}")
    retryable = status >= 500 or status == 429 or code in _RETRYABLE_CODES
    return ProviderError(code, message, retryable=retryable)


def invalid_answer(operation: str, detail: str) -> ProviderError:
    return ProviderError(
        "InvalidResponse", f"unexpected answer: {detail}", retryable=True, operation=operation
    )


def parse_answer(operation: str, convert: Callable[[Any], T], data: Any) -> T:
    """Convert a decoded answer, turning a missing or mistyped field into `InvalidResponse`."""
    try:
        return convert(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise invalid_answer(operation, f"{type(exc).__name__}: {exc}") from None


def q(value: str) -> str:
    """`value` as one path segment: every reserved character escaped, `/` included."""
    return quote(value, safe="")


class SimApi:
    """The HTTP session to the simulated cloud, opened on first use and closed once."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ProviderError("Closed", "the sim provider is closed", retryable=False)
        if self._session is None or self._session.closed:
            headers = {
                "User-Agent": f"nodeops/{__version__} (provider sim)",
                "Accept": "application/json",
            }
            if self.config.token:
                headers["Authorization"] = f"Bearer {self.config.token}"
            tls: ssl.SSLContext | bool = True
            if self.config.ca_file:
                tls = ssl.create_default_context(cafile=self.config.ca_file)
            self._session = aiohttp.ClientSession(
                headers=headers,
                connector=aiohttp.TCPConnector(ssl=tls),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    sock_connect=self.config.connect_timeout,
                    sock_read=self.config.read_timeout,
                ),
            )
        return self._session

    async def call(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Sequence[tuple[str, str]] = (),
        body: Any = None,
    ) -> Any:
        """One API call under the retry policy; the decoded JSON answer."""
        url = f"{self.config.url}{_PREFIX}{path}"
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None

        async def attempt() -> Any:
            session = self._client()
            async with session.request(
                method, url, params=list(params), data=data, headers=headers
            ) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise http_error(resp.status, raw)
            try:
                return orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError as exc:
                raise invalid_answer(operation, f"not JSON: {exc}") from None

        return await call_with_retry(
            attempt,
            operation=operation,
            policy=self.config.retry,
            classify=classify_sim_error,
            provider=NAME,
        )

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def raw_instance(self, instance_id: str) -> dict[str, Any] | None:
        """The cloud's instance as it answers it, None when it does not know the id."""
        try:
            raw = await self.call("GET", f"/instances/{q(instance_id)}", operation="instances.get")
        except ProviderError as exc:
            if exc.code == "InstanceNotFound":
                return None
            raise
        if not isinstance(raw, dict):
            raise invalid_answer("instances.get", "an instance must be an object")
        return raw
