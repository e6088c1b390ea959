"""The error policy of one-shot commands: final errors end the command, passing ones are retried.

A controller retries everything forever, because the cluster will change and it runs until told
to stop. A command (`nodeops drain`, `cordon`, `uncordon`, and every command built the same way)
has a person or a script waiting for it, so:

- permanent errors (400, 401, 403, 404 on what the command acts on, 405, 406, 415, 422) end it
  with one line, kubectl's line for that error, and exit code 1. This includes errors of the
  watches the command started and does not await itself (an informer's list answered 403 would
  otherwise be retried forever in the background while the command waits): requests made by
  tasks started inside `unattended()` report those to `OneShotClient.failed`, and `run`
  ends the command with them;
- transient errors (429, 5xx, a reset or refused connection) of requests that can be repeated
  (GET, PUT, DELETE, PATCH but a JSON patch without a test) are retried with backoff, honouring
  Retry-After, for about half a minute, and each retry is announced through `on_retry` (the
  commands print it on a terminal). POSTs are never repeated here: whoever sent one decides (the
  drain retries refused evictions itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from enum import Enum
from typing import Any, TypeVar
from urllib.parse import urlsplit

from nodeops.kube import errors
from nodeops.kube.client import Client, RetryNotice, WatchEvent
from nodeops.kube.resources import Resource

T = TypeVar("T")

PERMANENT_CODES = frozenset({400, 401, 403, 404, 405, 406, 415, 422})
_UNATTENDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "nodeops_unattended", default=False
)


class Kind(Enum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    OTHER = "other"  # e.g. 409 Conflict, 410 Gone: the caller's logic decides


def classify(exc: BaseException) -> Kind:
    if isinstance(exc, errors.ApiError):
        if exc.code in PERMANENT_CODES:
            return Kind.PERMANENT
        if exc.code == 429 or exc.code >= 500:
            return Kind.TRANSIENT
        return Kind.OTHER
    if isinstance(exc, errors.RequestTimeout | errors.ConnectionFailed):
        return Kind.TRANSIENT
    return Kind.OTHER


def describe(exc: BaseException, server: str = "") -> str:
    """The one line kubectl prints for an error (cmdutil's `StandardErrorMessage`)."""
    if isinstance(exc, errors.ApiError):
        if exc.reason == "Unauthorized" or exc.code == 401:
            return f"error: You must be logged in to the server ({exc.message})"
        if exc.reason:
            return f"Error from server ({exc.reason}): {exc.message}"
        return f"Error from server: {exc.message}"
    if isinstance(exc, errors.ConnectionFailed):
        host = urlsplit(server).netloc or server
        if "refused" in str(exc).lower() or "connect call failed" in str(exc).lower():
            return (
                f"The connection to the server {host} was refused - did you specify the right "
                "host or port?"
            )
        return f"Unable to connect to the server: {exc}"
    if isinstance(exc, errors.RequestTimeout):
        return f"Unable to connect to the server: {exc}"
    text = str(exc)
    return text if text.startswith("error: ") else f"error: {text}"


@contextlib.contextmanager
def unattended() -> Iterator[None]:
    """Requests of tasks created inside (informers started here) have no caller waiting on
    their errors: a `OneShotClient` makes their permanent errors end the command."""
    token = _UNATTENDED.set(True)
    try:
        yield
    finally:
        _UNATTENDED.reset(token)


class OneShotClient(Client):
    """A `Client` with the one-shot error policy; see the module's description.

    Retries are the runtime client's own (idempotent requests only, Retry-After honoured, a
    jittered backoff doubling to 5 s), only more of them (`max_retries`, about half a minute),
    each told to `on_retry` as the line a person reads (kubectl's words for the error, and when
    the request goes again).
    """

    def __init__(
        self,
        *args: Any,
        on_retry: Callable[[str], None] | None = None,
        max_retries: int = 10,
        **kwargs: Any,
    ) -> None:
        def announce(notice: RetryNotice) -> None:
            if on_retry is not None:
                on_retry(
                    f"{describe(notice.error, self.base_url)}; retrying in {notice.delay:.1f}s"
                )

        super().__init__(*args, max_retries=max_retries, on_retry=announce, **kwargs)
        self._failed: asyncio.Future[errors.KubeError] | None = None

    @property
    def failed(self) -> asyncio.Future[errors.KubeError]:
        """Done with the first permanent error of an unattended request."""
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
        return self._failed

    def _report(self, exc: errors.KubeError) -> None:
        if _UNATTENDED.get() and classify(exc) is Kind.PERMANENT and not self.failed.done():
            self.failed.set_result(exc)

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return await super().request(method, path, **kwargs)
        except errors.KubeError as exc:
            self._report(exc)
            raise

    async def watch(self, res: Resource, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        try:
            async for event in super().watch(res, *args, **kwargs):
                yield event
        except errors.KubeError as exc:
            self._report(exc)
            raise

    async def run(self, work: Awaitable[T]) -> T:
        """Await `work`, or end it with the first permanent error of an unattended request."""
        task: asyncio.Future[T] = asyncio.ensure_future(work)
        failed = self.failed
        waits: set[asyncio.Future[Any]] = {task, failed}
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise failed.result()


class KubeconfigError(errors.KubeError):
    """The cluster configuration cannot be loaded; the message is one line for a person."""


def check_kubeconfig(path: str | None) -> None:
    """kubectl's check of `--kubeconfig PATH`: the file must exist (`stat PATH: ...`).

    Without a path, `$KUBECONFIG` and `~/.kube/config` are tried in turn as kubectl does, and
    in a pod the in-cluster configuration needs no file at all.
    """
    if path is not None:
        try:
            os.stat(path)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise KubeconfigError(f"stat {path}: {reason}") from None
        return
    if "KUBERNETES_SERVICE_HOST" in os.environ:
        return
    candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = candidates or [os.path.expanduser("~/.kube/config")]
    if not any(os.path.exists(p) for p in candidates):
        raise KubeconfigError(
            "no cluster configuration: pass --kubeconfig, set $KUBECONFIG, or create ~/.kube/config"
        )


def say_retry_on_terminal(text: str) -> None:
    """A passing API error being retried: a person waiting at a terminal is told; a script's log
    is not filled with lines about errors that went away."""
    if sys.stderr.isatty():
        print(f"Retrying: {text}", file=sys.stderr)


async def load_client(
    kubeconfig: str | None, context: str | None, *, cls: type[Client] = Client, **kwargs: Any
) -> Client:
    """`cls.from_kubeconfig`, with every way the configuration can be wrong as one
    `KubeconfigError` line instead of the loader's exceptions and log noise."""
    check_kubeconfig(kubeconfig)
    try:
        client = await cls.from_kubeconfig(kubeconfig, context, **kwargs)
    except errors.KubeError as exc:
        raise KubeconfigError(str(exc)) from None
    except Exception as exc:  # the loader raises its own kinds for every malformed file
        raise KubeconfigError(_config_problem(str(exc), context)) from None
    return client


def _config_problem(text: str, context: str | None) -> str:
    """kubectl's words for what the kubeconfig loader found wrong."""
    if context and f"name {context} in" in text and "contexts" in text:
        return f'context "{context}" does not exist'
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not first or "NoneType" in first:
        return "invalid configuration: no configuration has been provided"
    return f"invalid configuration: {first}"
