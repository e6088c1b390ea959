"""Which AWS failures are worth retrying: decided by code and status, never by message text."""

from __future__ import annotations

import aiohttp
import pytest
from botocore import exceptions as boto_exc
from botocore.parsers import ResponseParserError

from nodeops.providers.aws.errors import classify_aws_error
from nodeops.providers.aws.launch import TemplateInfo


def client_error(code: str, status: int, message: str = "m") -> boto_exc.ClientError:
    return boto_exc.ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "SomeOperation",
    )


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        ("Throttling", 400, True),
        ("RequestLimitExceeded", 503, True),
        ("ResourceContention", 500, True),
        ("ServiceUnavailable", 503, True),
        ("SomethingNew", 502, True),
        ("TooManyRequestsException", 429, True),
        ("ValidationError", 400, False),
        ("InvalidInstanceID.NotFound", 400, False),
        ("AccessDenied", 403, False),
        ("UnauthorizedOperation", 403, False),
    ],
)
def test_client_errors(code: str, status: int, retryable: bool) -> None:
    error = classify_aws_error(client_error(code, status, "why"))
    assert error is not None
    assert (error.code, error.message, error.retryable) == (code, "why", retryable)


def test_transport_and_sdk_errors() -> None:
    cases: list[tuple[BaseException, str, bool]] = [
        (boto_exc.ReadTimeoutError(endpoint_url="http://x"), "Timeout", True),
        (boto_exc.ConnectTimeoutError(endpoint_url="http://x"), "Timeout", True),
        (boto_exc.EndpointConnectionError(endpoint_url="http://x"), "ConnectionError", True),
        (boto_exc.ConnectionClosedError(endpoint_url="http://x"), "ConnectionError", True),
        (aiohttp.ServerDisconnectedError(), "ConnectionError", True),
        (ResponseParserError("truncated"), "InvalidResponse", True),
        (boto_exc.NoCredentialsError(), "NoCredentials", False),
        (boto_exc.NoRegionError(), "NoRegion", False),
        (boto_exc.ParamValidationError(report="bad"), "InvalidParameter", False),
    ]
    for exc, code, retryable in cases:
        error = classify_aws_error(exc)
        assert error is not None, exc
        assert (error.code, error.retryable) == (code, retryable), exc


def test_programming_errors_are_not_classified() -> None:
    assert classify_aws_error(KeyError("x")) is None
    assert classify_aws_error(TypeError("x")) is None


@pytest.mark.parametrize(
    ("version", "resolved"),
    [("$Latest", "7"), ("$Default", "3"), (None, "3"), ("", "3"), ("5", "5"), (5, "5")],
)
def test_template_versions_resolve(version: str | int | None, resolved: str) -> None:
    info = TemplateInfo(id="lt-1", name="t", default_version=3, latest_version=7)
    assert info.resolve(version) == resolved
