"""Checks made before attach creates anything: reachable, permitted, names free.

Each failure is an `AttachError` with one line naming the first problem, raised before the first
write, so a refused attach leaves the cluster as it found it. Permissions are asked of the API
server itself (SelfSubjectAccessReview, what `kubectl auth can-i` asks), verb by verb, in the
order attach would need them, so the message names what is missing rather than a 403 that
surfaces minutes later from a loop.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aiohttp

from nodeops.sim.attach.kubeconfig import AttachError
from nodeops.sim.attach.labels import ATTACH_LABEL
from nodeops.sim.cluster.apiclient import (
    ApiClient,
    ApiError,
    NotFound,
    Obj,
    Resource,
    Unauthorized,
)

__all__ = ["Access", "check_access", "check_names", "check_reachable"]


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str = ""

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            what = f"{what}.{self.group}"
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{where}"


async def check_reachable(client: ApiClient) -> None:
    try:
        await asyncio.wait_for(client.request("GET", "/version"), 15)
    except Unauthorized as exc:
        raise AttachError(f"{client.base_url} refused the credentials: {exc}") from None
    except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError) as exc:
        reason = str(exc) or type(exc).__name__
        raise AttachError(f"cannot reach {client.base_url}: {reason}") from None
    except ApiError as exc:
        raise AttachError(f"{client.base_url} answered /version with an error: {exc}") from None


async def check_access(client: ApiClient, needs: Iterable[Access]) -> None:
    """Raise naming the first of `needs` the credentials do not have."""
    for need in dict.fromkeys(needs):
        attributes: dict[str, str] = {"verb": need.verb, "resource": need.resource}
        for key, value in (
            ("group", need.group),
            ("subresource", need.subresource),
            ("namespace", need.namespace),
        ):
            if value:
                attributes[key] = value
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            answer = await client.request(
                "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review
            )
        except ApiError as exc:
            raise AttachError(f"cannot ask whether it may {need}: {exc}") from None
        status = answer.get("status") or {}
        if not status.get("allowed") or status.get("denied"):
            reason = status.get("reason") or status.get("evaluationError") or "not allowed"
            raise AttachError(f"cannot {need}: {reason}")


async def check_names(
    client: ApiClient, instance: str, objects: Sequence[tuple[Resource, Obj]]
) -> list[tuple[Resource, Obj]]:
    """Refuse when an object to create exists and is not this attach's own; return the
    objects still to create (a namespace that exists already is used, not created)."""
    todo = []
    for resource, obj in objects:
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace")
        try:
            existing = await client.get(resource, name, namespace)
        except NotFound:
            todo.append((resource, obj))
            continue
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(ATTACH_LABEL) == instance:
            todo.append((resource, obj))
            continue
        if resource.plural == "namespaces":
            continue
        where = f"{namespace}/" if namespace else ""
        owner = labels.get(ATTACH_LABEL)
        whose = f"attach {owner!r}'s" if owner else f"not labelled {ATTACH_LABEL}={instance}"
        raise AttachError(
            f"{resource.kind} {where}{name} exists and is {whose}; "
            "attach creates only objects of its own"
        )
    return todo
