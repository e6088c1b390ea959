"""Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`, `/version`).

Built from the registry on every request, so a CRD's resources show up the moment it is
established, and kubectl's RESTMapper and client-go's eviction-support check find what they
look for (`pods/eviction` in policy/v1, `deployments/scale` as autoscaling/v1 Scale).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from nodeops.sim.server.resources import PREFERRED_VERSIONS, ResourceType

KUBE_VERSION = {
    "major": "1",
    "minor": "31",
    "emulationMajor": "1",
    "emulationMinor": "31",
    "gitVersion": "v1.31.4",
    "gitCommit": "a78aa47129b8539636eb86a9d00e31b2720fe06b",
    "gitTreeState": "clean",
    "buildDate": "2024-12-10T18:44:49Z",
    "goVersion": "go1.22.9",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_GIT_VERSION = re.compile(r"^v([0-9]+)\.([0-9]+)\.[0-9]+([-+][0-9A-Za-z.+-]*)?$")


def kube_version(git_version: str) -> dict[str, str]:
    """`/version` of a server running `git_version` (`v1.32.0`), consistent in every field."""
    match = _GIT_VERSION.match(git_version)
    if match is None:
        raise ValueError(f'{git_version!r} is not a Kubernetes version like "v1.31.4"')
    major, minor = match.group(1), match.group(2)
    return {
        **KUBE_VERSION,
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "gitVersion": git_version,
    }


# Subresource -> (group, version, kind, verbs) as kube-apiserver advertises them; a None group
# means "same as the parent".
_SUBRESOURCES: dict[str, tuple[str | None, str | None, str | None, tuple[str, ...]]] = {
    "status": (None, None, None, ("get", "patch", "update")),
    "eviction": ("policy", "v1", "Eviction", ("create",)),
    "binding": (None, None, "Binding", ("create",)),
    "log": (None, None, "Pod", ("get",)),
    "proxy": (None, None, "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
    "scale": ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ("create",)),
    "finalize": (None, None, "Namespace", ("update",)),
}


def _hash(rt: ResourceType) -> str:
    digest = hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_versions(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in types:
        if not rt.group:
            continue
        versions = groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return groups


def _group_doc(group: str, versions: list[str]) -> dict[str, Any]:
    preferred = PREFERRED_VERSIONS.get(group) or sorted(versions, key=_version_priority)[0]
    ordered = sorted(versions, key=_version_priority)
    return {
        "name": group,
        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered],
        "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred},
    }


def _version_priority(version: str) -> tuple[int, int, int]:
    """kube's version ordering: GA > beta > alpha, higher numbers first."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)


def api_group_list(types: Iterable[ResourceType]) -> dict[str, Any]:
    groups = _group_versions(types)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, v) for g, v in groups.items()],
    }


def api_group(types: Iterable[ResourceType], group: str) -> dict[str, Any] | None:
    versions = _group_versions(types).get(group)
    if not versions:
        return None
    doc = _group_doc(group, versions)
    doc.update({"kind": "APIGroup", "apiVersion": "v1"})
    return doc


def resource_list(types: Iterable[ResourceType], group: str, version: str) -> dict[str, Any] | None:
    resources: list[dict[str, Any]] = []
    for rt in types:
        if rt.group != group or rt.version != version:
            continue
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
            "storageVersionHash": _hash(rt),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in sorted(rt.subresources):
            sgroup, sversion, skind, verbs = _SUBRESOURCES.get(sub, (None, None, None, ("get",)))
            sub_entry: dict[str, Any] = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": skind or rt.kind,
                "verbs": list(verbs),
            }
            if sgroup is not None:
                sub_entry["group"] = sgroup
                sub_entry["version"] = sversion
            resources.append(sub_entry)
    if not resources:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
