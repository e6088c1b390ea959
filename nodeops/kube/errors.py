"""Typed API errors carrying the server's `Status`, so callers branch on kind, not on codes."""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """Anything that went wrong talking to the API server."""


class ApiError(KubeError):
    """The API server answered with a failure `Status`."""

    def __init__(
        self,
        code: int,
        status: dict[str, Any] | None,
        method: str = "",
        url: str = "",
        *,
        retry_after_header: float | None = None,
    ):
        self.code = code
        self.retry_after_header = retry_after_header
        self.status: dict[str, Any] = status or {}
        self.reason: str = self.status.get("reason", "") or ""
        self.message: str = self.status.get("message", "") or f"HTTP {code}"
        self.details: dict[str, Any] = self.status.get("details") or {}
        self.method = method
        self.url = url
        super().__init__(f"{self.message} ({code} {self.reason})".strip())

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait: the `Retry-After` header, else the Status's."""
        if self.retry_after_header is not None:
            return self.retry_after_header
        value = self.details.get("retryAfterSeconds")
        return float(value) if value is not None else None

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list(self.details.get("causes") or [])


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class MethodNotAllowed(ApiError):
    pass


class Conflict(ApiError):
    """409: a stale resourceVersion or a failed precondition."""


class AlreadyExists(Conflict):
    pass


class Gone(ApiError):
    """410: the resourceVersion asked for is older than the server keeps (`Expired`)."""


class UnsupportedMediaType(ApiError):
    pass


class Invalid(ApiError):
    """422: the object failed validation; `causes` name the fields."""


class TooManyRequests(ApiError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget."""


class ServerError(ApiError):
    """5xx."""


class ServerTimeout(ServerError):
    pass


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


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def error_for(
    code: int,
    status: dict[str, Any] | None,
    method: str = "",
    url: str = "",
    *,
    retry_after_header: float | None = None,
) -> ApiError:
    if code == 409 and (status or {}).get("reason") == "AlreadyExists":
        return AlreadyExists(code, status, method, url)
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = ServerError if code >= 500 else ApiError
    return cls(code, status, method, url, retry_after_header=retry_after_header)


def is_retryable(exc: BaseException) -> bool:
    """Errors worth retrying with backoff: throttling, server errors, lost connections."""
    if isinstance(exc, TooManyRequests | ServerError | RequestTimeout | ConnectionFailed):
        return True
    return isinstance(exc, Conflict) and not isinstance(exc, AlreadyExists)
