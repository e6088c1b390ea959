"""Turning botocore and transport exceptions into `ProviderError` with the right `retryable`.

Retryability is decided by the AWS error code and HTTP status, never by message text: the codes
are documented and stable, messages are not.
"""

from __future__ import annotations

from typing import Final

import aiohttp

from nodeops.common.extras import optional_dependencies

with optional_dependencies("aws"):
    from botocore import exceptions as boto_exc
    from botocore.parsers import ResponseParserError

from nodeops.providers.base import ProviderError

__all__ = ["THROTTLING_CODES", "TRANSIENT_CODES", "classify_aws_error"]

THROTTLING_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
"""Codes AWS uses for "slow down" across the query-protocol services we call."""

TRANSIENT_CODES: Final = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        # Auto Scaling: "You already have a pending update to an Auto Scaling resource".
        "ResourceContention",
        "IDPCommunicationError",
    }
)


def classify_aws_error(exc: BaseException) -> ProviderError | None:
    """A `ProviderError` for a cloud or transport failure, None for anything else."""
    if isinstance(exc, boto_exc.ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0)
        code = str(error.get("Code") or status or "Unknown")
        message = str(error.get("Message") or exc)
        retryable = (
            code in THROTTLING_CODES or code in TRANSIENT_CODES or status >= 500 or status == 429
        )
        return ProviderError(code, message, retryable=retryable)
    if isinstance(exc, boto_exc.ConnectTimeoutError | boto_exc.ReadTimeoutError):
        return ProviderError("Timeout", str(exc), retryable=True)
    if isinstance(exc, boto_exc.HTTPClientError | boto_exc.EndpointConnectionError):
        return ProviderError("ConnectionError", str(exc), retryable=True)
    if isinstance(exc, ResponseParserError):
        # A truncated or proxy-mangled body; the next answer is usually whole.
        return ProviderError("InvalidResponse", str(exc), retryable=True)
    if isinstance(exc, boto_exc.NoCredentialsError | boto_exc.PartialCredentialsError):
        return ProviderError("NoCredentials", str(exc), retryable=False)
    if isinstance(exc, boto_exc.CredentialRetrievalError):
        # IMDS or the web-identity endpoint did not answer; that passes.
        return ProviderError("CredentialRetrievalError", str(exc), retryable=True)
    if isinstance(exc, boto_exc.NoRegionError):
        return ProviderError("NoRegion", f"{exc}; set providers.aws.region", retryable=False)
    if isinstance(exc, boto_exc.ParamValidationError):
        return ProviderError("InvalidParameter", str(exc), retryable=False)
    if isinstance(exc, boto_exc.BotoCoreError):
        return ProviderError(type(exc).__name__, str(exc), retryable=False)
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return ProviderError("ConnectionError", str(exc) or type(exc).__name__, retryable=True)
    return None
