"""The one door to AWS: a session, its clients, retried calls and pagination.

One aioboto3 session per provider; each service client is opened on first use and kept in an
`AsyncExitStack` until `close()`, so a reconciler making hundreds of calls reuses connections and
nothing leaks. Clients belong to the event loop that opened them: a provider is used from one
loop.

botocore's own retries are switched off: `call_with_retry` is the only retry layer, so attempt
counts, backoff and the overall timeout are the same for every provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from typing import Any, Final

from nodeops.common.extras import optional_dependencies

with optional_dependencies("aws"):
    import aioboto3
    from aiobotocore.config import AioConfig

from nodeops.providers.aws.config import AwsConfig
from nodeops.providers.aws.errors import classify_aws_error
from nodeops.providers.base import ProviderError
from nodeops.providers.retry import call_with_retry

__all__ = ["AwsApi"]

_SERVICES: Final = frozenset({"autoscaling", "ec2", "elb", "elbv2"})


class AwsApi:
    """Retried, classified calls to the AWS query APIs the provider uses."""

    def __init__(self, config: AwsConfig, *, provider: str = "aws") -> None:
        self.config = config
        self.provider = provider
        self._session = aioboto3.Session(region_name=config.region, profile_name=config.profile)
        self._client_config = AioConfig(
            retries={"total_max_attempts": 1},
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            max_pool_connections=max(10, config.max_concurrency * 2),
            user_agent_extra="nodeops",
        )
        self._stack = AsyncExitStack()
        self._clients: dict[str, Any] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    async def client(self, service: str) -> Any:
        if service not in _SERVICES:
            raise ValueError(f"unexpected AWS service {service!r}")
        client = self._clients.get(service)
        if client is not None:
            return client
        async with self._lock:
            if self._closed:
                raise ProviderError("Closed", "the AWS provider is closed", retryable=False)
            client = self._clients.get(service)
            if client is None:
                try:
                    client = await self._stack.enter_async_context(
                        self._session.client(
                            service,
                            endpoint_url=self.config.endpoint_url,
                            config=self._client_config,
                        )
                    )
                except Exception as exc:
                    error = classify_aws_error(exc)
                    if error is None:
                        raise
                    raise ProviderError(
                        error.code, error.message, retryable=False, operation=f"{service}.client"
                    ) from exc
                self._clients[service] = client
        return client

    async def call(self, service: str, operation: str, **params: Any) -> dict[str, Any]:
        """`client.<operation>(**params)` under the retry policy; the response as a dict."""
        client = await self.client(service)
        method = getattr(client, operation)

        async def attempt() -> dict[str, Any]:
            response: dict[str, Any] = await method(**params)
            return response

        return await call_with_retry(
            attempt,
            operation=f"{service}.{operation}",
            policy=self.config.retry,
            classify=classify_aws_error,
            provider=self.provider,
        )

    async def pages(
        self,
        service: str,
        operation: str,
        *,
        token_in: str = "NextToken",
        token_out: str = "NextToken",
        **params: Any,
    ) -> AsyncIterator[Mapping[str, Any]]:
        """Yield every page of a paginated operation, each page retried on its own.

        Written here rather than with botocore paginators so a throttled third page is retried
        alone instead of restarting the listing.
        """
        token: str | None = None
        seen: set[str] = set()
        while True:
            request = dict(params)
            if token:
                request[token_in] = token
            page = await self.call(service, operation, **request)
            yield page
            token = page.get(token_out)
            if not token:
                return
            if token in seen:
                raise ProviderError(
                    "InvalidResponse",
                    f"pagination token {token!r} repeated",
                    retryable=True,
                    operation=f"{service}.{operation}",
                )
            seen.add(token)

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            self._clients.clear()
            await self._stack.aclose()
