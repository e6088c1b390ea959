"""API errors as clients see them: typed exceptions carrying the server's `Status`.

Plain data and parsing shared by the runtime's client and the simulator's own client: a failed
answer becomes an `ApiError` subclass chosen by its code (and reason, for AlreadyExists), so
callers branch on kind, not on numbers. What to do about an error (retry, relist, give up) is
each client's own business and stays with it.
"""

from __future__ import annotations

from typing import Any

import orjson


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
        self.status: dict[str, Any] = dict(status or {})
        self.reason: str = str(self.status.get("reason", "") or "")
        self.message: str = str(self.status.get("message", "") or f"HTTP {code}")
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
    """409 AlreadyExists: a Conflict, because both are the same HTTP code."""


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
    """The typed error for a failed answer with HTTP `code` and `Status` body `status`."""
    if code == 409 and (status or {}).get("reason") == "AlreadyExists":
        return AlreadyExists(code, status, method, url, retry_after_header=retry_after_header)
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = ServerError if code >= 500 else ApiError
    return cls(code, status, method, url, retry_after_header=retry_after_header)


def status_of(payload: bytes) -> dict[str, Any] | None:
    """Decode a failure's body into a `Status`; a body that is not JSON becomes its message."""
    if not payload:
        return None
    try:
        decoded = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {"message": payload.decode(errors="replace")[:500]}
    return decoded if isinstance(decoded, dict) else None


def retry_after_header(value: str | None) -> float | None:
    """A `Retry-After` header in seconds; None when absent or an HTTP date (kube sends seconds)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
