"""API errors as kube-apiserver reports them: a `Status` body with reason, code and details.

Every failure the simulated server returns goes through `ApiError`, so the wire format of errors is
decided in one place and matches what clients (kubectl, client-go, kubernetes-asyncio) parse.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as a `metav1.Status` with the given HTTP code and reason."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(group: str, plural: str) -> str:
    """`pods` for the core group, `deployments.apps` otherwise, as in kube's messages."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, group: str, plural: str, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        d["group"] = group
    d.update(extra)
    return d


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(group, plural)} "{name}" not found',
        _details(name, group, plural),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, plural)} "{name}" already exists',
        _details(name, group, plural),
    )


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, plural)} "{name}": {why}',
        _details(name, group, plural),
    )


def stale_conflict(group: str, plural: str, name: str) -> ApiError:
    return conflict(
        group,
        plural,
        name,
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; `causes` are (reason, field, message) like `FieldValueRequired`.

    The message lists them as kube's error aggregate prints a list: one alone as it is, several
    deduplicated inside brackets.
    """
    lines = list(dict.fromkeys(f"{field}: {msg}" for _, field, msg in causes))
    text = ": " + lines[0] if len(lines) == 1 else ": [" + ", ".join(lines) + "]"
    qual = f"{kind}.{group}" if group else kind
    # StatusDetails fields are omitempty.
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{qual} "{name}" is invalid{text if lines else ""}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json",
    )


def unsupported_body_media_type(content_type: str) -> ApiError:
    """415 for a create/update body whose media type the resource cannot decode."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml",
        {"causes": [{"reason": "UnsupportedMediaType", "message": content_type}]},
    )


def too_many_requests(
    message: str, retry_after: int | None = None, causes: list[dict[str, str]] | None = None
) -> ApiError:
    details: dict[str, Any] | None = None
    headers: dict[str, str] = {}
    if retry_after is not None or causes:
        details = {}
        if causes:
            details["causes"] = causes
        if retry_after is not None:
            details["retryAfterSeconds"] = retry_after
            headers["Retry-After"] = str(retry_after)
    return ApiError(429, "TooManyRequests", message, details, headers)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message, {"causes": [{"message": message}]})


def forbidden(message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(403, "Forbidden", message, details)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")
