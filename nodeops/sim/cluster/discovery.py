"""What the API server serves, from its discovery documents, as the garbage collector needs it.

kube-controller-manager's garbage collector does not know kinds in advance: it watches every
resource discovery lists with the list, watch and delete verbs (one version per group, the
preferred one), and resolves an ownerReference's apiVersion/kind the same way. Custom resources
are collected, and own, like any built-in kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeops.sim.cluster.apiclient import ApiClient, Resource

GC_VERBS = frozenset({"list", "watch", "delete"})

IGNORED = frozenset({("", "events"), ("events.k8s.io", "events")})
"""kube-controller-manager's default --gc-ignored-resources."""


def _resources(group: str, version: str, doc: Mapping[str, Any]) -> Iterable[Resource]:
    for r in doc.get("resources") or []:
        name = str(r.get("name") or "")
        if not name or "/" in name:
            continue  # a subresource
        if not GC_VERBS <= set(r.get("verbs") or ()):
            continue
        yield Resource(group, version, name, str(r.get("kind") or ""), bool(r.get("namespaced")))


async def deletable_resources(client: ApiClient) -> list[Resource]:
    """Every resource the collector watches: preferred versions, list+watch+delete, no events."""
    found: list[Resource] = []
    core = await client.request("GET", "/api/v1")
    found.extend(_resources("", "v1", core))
    groups = await client.request("GET", "/apis")
    for g in groups.get("groups") or []:
        name = str(g.get("name") or "")
        preferred = (g.get("preferredVersion") or {}).get("version")
        if not name or not preferred:
            continue
        doc = await client.request("GET", f"/apis/{name}/{preferred}")
        found.extend(_resources(name, str(preferred), doc))
    return [r for r in found if (r.group, r.plural) not in IGNORED]


def group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""
