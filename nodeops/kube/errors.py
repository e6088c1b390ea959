"""Typed errors of the runtime: the API's (carrying the server's `Status`, shared with the
simulator's client in `nodeops.common.apierrors`) and the runtime's own (deadlines, broken
connections, caches that are not synced or lag behind), so callers branch on kind, not on codes.
"""

from __future__ import annotations

from nodeops.common.apierrors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    MethodNotAllowed,
    NotFound,
    ServerError,
    ServerTimeout,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
    error_for,
    retry_after_header,
    status_of,
)

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "CacheLagging",
    "CacheSyncTimeout",
    "Conflict",
    "ConnectionFailed",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "MethodNotAllowed",
    "NotFound",
    "NotSynced",
    "RequestTimeout",
    "ServerError",
    "ServerTimeout",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
    "error_for",
    "is_retryable",
    "retry_after_header",
    "status_of",
]


class RequestTimeout(KubeError):
    """The client's own deadline for a call passed."""


class ConnectionFailed(KubeError):
    """The API server could not be reached, or the connection broke during the answer."""


class NotSynced(KubeError):
    """An informer was read before its first list completed.

    An unsynced cache is not an empty one: answering "not found" from it would let a controller
    act on objects it simply has not seen yet (a node "gone" that is alive).
    """


class CacheSyncTimeout(KubeError):
    """A controller's sources did not sync within the allowed time; it cannot start."""


class CacheLagging(KubeError):
    """A write succeeded, but the manager's informers did not show it within the allowed time.

    Raised by the manager's client instead of returning, so the caller never reads its own
    write's older version from the cache; the reconcile is retried and finds the write done.
    """


def is_retryable(exc: BaseException) -> bool:
    """Errors worth retrying with backoff: throttling, server errors, lost connections."""
    if isinstance(exc, TooManyRequests | ServerError | RequestTimeout | ConnectionFailed):
        return True
    return isinstance(exc, Conflict) and not isinstance(exc, AlreadyExists)
