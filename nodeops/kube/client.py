"""The Kubernetes API client of the runtime.

Configuration (kubeconfig, contexts, in-cluster service account, exec plugins and token refresh)
comes from kubernetes-asyncio, which already does it right. Requests go through one aiohttp
session on a raw JSON path decoded with orjson: objects stay plain dicts, lists are never turned
into generated models (10x slower, 8x the memory), and every call carries a deadline, so nothing
hangs silently. Failures become typed exceptions carrying the server's `Status`.

The implementation is split by concern: `clientconfig` (server, credentials, TLS, session),
`requestcore` (rate limit, deadlines, retries, errors), `watchstream` (watches) and
`resourcecalls` (the typed verbs and `Client` itself). This module is the public face:
everything is imported from here.
"""

from __future__ import annotations

from nodeops.kube.clientconfig import (
    USER_AGENT,
    ClientConnection,
    RetryHook,
    RetryNotice,
    TokenSource,
    WriteObserver,
)
from nodeops.kube.requestcore import PATCH_CONTENT_TYPES, RequestCore
from nodeops.kube.resourcecalls import Client, OperationResult
from nodeops.kube.watchstream import EventLines, WatchEvent, WatchStreaming

__all__ = [
    "PATCH_CONTENT_TYPES",
    "USER_AGENT",
    "Client",
    "ClientConnection",
    "EventLines",
    "OperationResult",
    "RequestCore",
    "RetryHook",
    "RetryNotice",
    "TokenSource",
    "WatchEvent",
    "WatchStreaming",
    "WriteObserver",
]
