"""The typed verbs of the client: get, list, create, patch, create_or_patch, delete, evict.

They hold the Kubernetes semantics (scope checks, resourceVersion-guarded patches, dry runs,
eviction API discovery) on top of the request core, which stays free of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

from nodeops.kube import errors
from nodeops.kube.requestcore import PATCH_CONTENT_TYPES, _params
from nodeops.kube.resources import PODS, Resource
from nodeops.kube.watchstream import WatchStreaming

#: What `create_or_patch` did, in controller-runtime's words.
OperationResult = Literal["created", "updated", "unchanged"]


class Client(WatchStreaming):
    """Raw-JSON Kubernetes client; construct with `Client.from_kubeconfig` or directly."""

    # ------------------------------------------------------------------ verbs

    async def get(
        self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", res.path(namespace, name, subresource))
        return result

    async def get_or_none(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return await self.get(res, name, namespace)
        except errors.NotFound:
            return None

    async def list_page(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """One page of a list, undecoded, for callers that decode it their own way."""
        params = _params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=str(limit) if limit else None,
            resourceVersion=resource_version,
        )
        if continue_token:
            params["continue"] = continue_token
        payload: bytes = await self.request(
            "GET", res.path(namespace), params=params, raw=True, timeout=timeout
        )
        return payload

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        resource_version: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All matching objects, paginated, and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            payload = await self.list_page(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
                resource_version=resource_version if token is None else None,
            )
            page = orjson.loads(payload)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion", rv)
            token = meta.get("continue")
            if not token:
                return items, rv

    async def create(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        _check_scope(res, ns)
        params = _params(dryRun="All" if dry_run else None, fieldManager=field_manager)
        result: dict[str, Any] = await self.request("POST", res.path(ns), params=params, body=body)
        if not dry_run:
            await self._written(res, ns, result)
        return result

    async def replace(
        self,
        res: Resource,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PUT: an update guarded by the body's resourceVersion (409 Conflict when stale)."""
        meta = body.get("metadata") or {}
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        params = _params(fieldManager=field_manager)
        result: dict[str, Any] = await self.request("PUT", path, params=params, body=body)
        await self._written(res, meta.get("namespace"), result)
        return result

    async def patch(
        self,
        res: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Patch an object; with `resource_version`, only if it is still that version.

        The guard is the object's own optimistic concurrency: the resourceVersion travels in
        the patched object (merge and strategic patches carry it in `metadata`, a JSON patch
        replaces it), so the server answers 409 Conflict when someone wrote in between.
        """
        _check_scope(res, namespace)
        if resource_version is not None:
            body = _guarded(body, resource_version)
        params = _params(fieldManager=field_manager, dryRun="All" if dry_run else None)
        result: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            params=params,
            body=body,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )
        if not dry_run:
            await self._written(res, namespace, result)
        return result

    async def patch_status(
        self,
        res: Resource,
        name: str,
        status: Mapping[str, Any],
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch of `status`, guarded by resourceVersion when one is given."""
        return await self.patch(
            res,
            name,
            {"status": status},
            namespace,
            subresource="status",
            resource_version=resource_version,
        )

    async def create_or_patch(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> tuple[dict[str, Any], OperationResult]:
        """Make the object hold what `body` says: create it, or merge-patch what differs.

        Reads first, so an object that already says everything is left alone ("unchanged", no
        write and no new resourceVersion). The patch is guarded by the resourceVersion read and
        redone on a conflict, so nobody's concurrent write is undone by a stale decision.
        """
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            raise ValueError("create_or_patch needs metadata.name in the body")
        ns = namespace or meta.get("namespace")
        _check_scope(res, ns)
        for _ in range(5):
            try:
                current = await self.get(res, name, ns)
            except errors.NotFound:
                try:
                    return await self.create(res, body, ns, field_manager=field_manager), "created"
                except errors.AlreadyExists:
                    continue  # created meanwhile: patch it
            if not _patch_changes(current, body):
                return current, "unchanged"
            try:
                patched = await self.patch(
                    res,
                    name,
                    dict(body),
                    ns,
                    field_manager=field_manager,
                    resource_version=(current.get("metadata") or {}).get("resourceVersion"),
                )
            except errors.Conflict:
                continue
            except errors.NotFound:
                continue  # deleted meanwhile: create it
            return patched, "updated"
        raise errors.Conflict(
            409,
            {"reason": "Conflict", "message": f"{res.key} {name!r} kept changing"},
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
        propagation: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any] | None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if propagation:
            body["propagationPolicy"] = propagation
        if preconditions:
            body["preconditions"] = dict(preconditions)
        if dry_run:
            body["dryRun"] = ["All"]
        _check_scope(res, namespace)
        result: dict[str, Any] | None = await self.request(
            "DELETE", res.path(namespace, name), body=body
        )
        if not dry_run:
            await self._written(res, namespace, result)
        return result

    async def eviction_version(self) -> str:
        """`policy/v1` when the server serves it, else `policy/v1beta1` (from discovery)."""
        async with self._discovery_lock:  # one discovery for many concurrent evictions
            if self._eviction_version is None:
                doc = await self.request("GET", "/api/v1")
                version = "v1"
                for r in doc.get("resources") or []:
                    if r.get("name") == "pods/eviction":
                        version = r.get("version") or "v1"
                self._eviction_version = version
            return self._eviction_version

    async def evict(
        self,
        name: str,
        namespace: str,
        *,
        grace_period: int | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> None:
        version = await self.eviction_version()
        options: dict[str, Any] = {}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if dry_run:
            options["dryRun"] = ["All"]
        body: dict[str, Any] = {
            "apiVersion": f"policy/{version}",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        params = {"dryRun": "All"} if dry_run else None
        await self.request("POST", PODS.path(namespace, name, "eviction"), params=params, body=body)

    async def discover(self, group_version: str) -> dict[str, Any]:
        path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        result: dict[str, Any] = await self.request("GET", path)
        return result


def _check_scope(res: Resource, namespace: str | None) -> None:
    if namespace and not res.namespaced:
        raise ValueError(f"{res.key} are cluster-scoped; no namespace ({namespace!r}) applies")


def _guarded(body: Any, resource_version: str) -> Any:
    if isinstance(body, list):
        return [
            *body,
            {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version},
        ]
    if isinstance(body, Mapping):
        meta = dict(body.get("metadata") or {})
        meta["resourceVersion"] = resource_version
        return {**body, "metadata": meta}
    raise TypeError(f"a patch body is a mapping or a list of operations, not {type(body)}")


def _patch_changes(current: Any, patch: Any) -> bool:
    """Whether merge-patching `current` with `patch` would change it (RFC 7386 semantics)."""
    if not isinstance(patch, Mapping):
        return bool(current != patch)
    if not isinstance(current, Mapping):
        return True
    for key, value in patch.items():
        if value is None:
            if key in current:
                return True
        elif key not in current:
            return True
        elif _patch_changes(current[key], value):
            return True
    return False
