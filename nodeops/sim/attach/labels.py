"""What marks an object as an attach's own: one label, set at creation and never later.

Every object the attached simulator creates goes through `LabellingClient`, so an object is
labelled in the same request that creates it; a `kill -9` between two requests can leave only
labelled objects behind, and `detach` finds them all by that label alone.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Final

from nodeops.sim.cluster.apiclient import ApiClient, Obj, Resource, TokenSource

__all__ = ["ATTACH_LABEL", "LabellingClient", "labelled", "owned_by", "selector"]

ATTACH_LABEL: Final = "nodeops.dev/sim-attach"
"""Its value is the attach's instance id (`--id`)."""


def selector(instance: str | None) -> str:
    """The label selector of one attach's objects, or of every attach's when None."""
    return ATTACH_LABEL if instance is None else f"{ATTACH_LABEL}={instance}"


def owned_by(instance: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate: does this object carry the label of `instance`?"""

    def owns(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(ATTACH_LABEL) == instance)

    return owns


def labelled(obj: Mapping[str, Any], instance: str, *, templates: bool = False) -> Obj:
    """`obj` with the attach label; `templates` labels a workload's pod template too, so the
    pods a controller (ours or the cluster's) makes from it are found by detach as well."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), ATTACH_LABEL: instance}
    template = (out.get("spec") or {}).get("template")
    if templates and isinstance(template, dict):
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), ATTACH_LABEL: instance}
    return out


class LabellingClient(ApiClient):
    """The loops' client, labelling every object it creates with the attach's instance.

    Posts to subresources (bindings, evictions) create no object and pass through unchanged.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        instance: str,
        component: str,
        ssl_context: ssl.SSLContext | None = None,
        token_source: TokenSource | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            component=component,
            ssl_context=ssl_context,
            token_source=token_source,
        )
        self.instance = instance

    async def create(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        if name is None and subresource is None:
            body = labelled(body, self.instance)
        return await super().create(resource, body, namespace, name=name, subresource=subresource)
