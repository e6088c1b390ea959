"""OpenStack SDK and keystoneauth failures as `ProviderError`s the retry loop understands.

openstacksdk and keystoneauth raise their own exception trees; the retry loop decides on codes
and a retryable flag, so the mapping lives here, once, beside nothing else.
"""

from __future__ import annotations

from nodeops.common.extras import optional_dependencies

with optional_dependencies("openstack"):
    import openstack.exceptions as os_exc
    from keystoneauth1 import exceptions as ksa_exc

from nodeops.providers.base import ProviderError
from nodeops.providers.openstack.config import KEY

__all__ = ["classify_openstack_error", "is_not_found"]


def classify_openstack_error(exc: BaseException) -> ProviderError | None:
    """A `ProviderError` for a cloud or transport failure, None for anything else.

    HTTP failures carry the status as code (Nova and Keystone have no finer error codes: their
    bodies name a fault class per status) and the request ID in the message, which is what an
    OpenStack operator greps their logs for. 409 is retryable because Nova answers it while a
    server is in a transitional task state (migrating, resizing) that ends by itself.
    """
    if isinstance(exc, os_exc.HttpException):
        return _http_error(exc.status_code, exc.details or exc.message, exc.request_id)
    if isinstance(exc, ksa_exc.HttpError):
        return _http_error(exc.http_status, exc.message, exc.request_id)
    if isinstance(exc, ksa_exc.ConnectTimeout):
        return ProviderError("Timeout", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.SSLError):
        # A certificate problem does not go away by asking again.
        return ProviderError("SSLError", str(exc), retryable=False)
    if isinstance(exc, ksa_exc.ConnectionError):
        return ProviderError("ConnectionError", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.EndpointNotFound | os_exc.ServiceDisabledException):
        return ProviderError(
            "EndpointNotFound",
            f"{exc}; check the region ({KEY}.region) and the project of the credentials",
            retryable=False,
        )
    if isinstance(exc, ksa_exc.DiscoveryFailure):
        # Raised when every version document was unreachable, typically a 5xx in front of
        # Keystone; a wrong auth URL also lands here, but then the retry budget just runs out.
        return ProviderError("DiscoveryFailure", str(exc), retryable=True)
    if isinstance(exc, ksa_exc.AuthPluginException | os_exc.ConfigException):
        return ProviderError("InvalidConfiguration", str(exc), retryable=False)
    if isinstance(exc, ksa_exc.ClientException | os_exc.SDKException):
        return ProviderError(type(exc).__name__, str(exc), retryable=False)
    return None


def _http_error(status: int | None, message: str | None, request_id: str | None) -> ProviderError:
    code = str(status) if status else "HttpError"
    text = (message or "").strip() or f"HTTP {code}"
    if request_id:
        text = f"{text} (request {request_id})"
    retryable = status is not None and (
        status in (409, 429) or (status >= 500 and status not in (501, 505))
    )
    return ProviderError(code, text, retryable=retryable)


def is_not_found(exc: ProviderError) -> bool:
    return exc.code == "404"
