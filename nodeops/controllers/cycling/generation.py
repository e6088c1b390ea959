"""NodeGroup -> CycleNodeRequest, and the checks a request must pass before it is created.

`nodeops cycle` and the observer both make requests from NodeGroup templates; doing it in one
place keeps what each produces identical, and lets both refuse a bad request before anything is
written, with the field at fault named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodeops.api import CycleNodeRequest, InvalidResource, NodeGroup
from nodeops.controllers.cycling.keys import REASON_ANNOTATION
from nodeops.kube import objects as o

__all__ = [
    "GenerationOptions",
    "nodegroup_problems",
    "request_from_nodegroup",
    "validate_request",
]

_DNS_1123: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class GenerationOptions:
    """What a request may override of its NodeGroup (None: the NodeGroup's value)."""

    name: str | None = None
    """The request's name; without it, `generate_name` (a prefix the API server completes)."""
    generate_name: str | None = None
    node_names: Sequence[str] | None = None
    concurrency: int | None = None
    method: str | None = None
    cycling_timeout: str | None = None
    skip_initial_health_checks: bool | None = None
    skip_pre_termination_checks: bool | None = None
    reason: str = "cli"
    labels: Mapping[str, str] | None = None


def request_from_nodegroup(
    group: NodeGroup, namespace: str, options: GenerationOptions
) -> dict[str, Any]:
    """The CycleNodeRequest a NodeGroup makes, as a manifest (not yet validated)."""
    spec = group.spec
    settings = spec.cycle_settings.to_dict()
    if options.concurrency is not None:
        settings["concurrency"] = options.concurrency
    if options.method is not None:
        settings["method"] = options.method
    if options.cycling_timeout is not None:
        settings["cyclingTimeout"] = options.cycling_timeout
    body: dict[str, Any] = {
        "nodeGroupName": spec.node_group_name,
        "selector": spec.node_selector.to_dict(),
        "cycleSettings": settings,
    }
    if spec.node_groups_list:
        body["nodeGroupsList"] = list(spec.node_groups_list)
    if options.node_names:
        body["nodeNames"] = list(options.node_names)
    for key, value in (
        ("validationOptions", spec.validation_options),
        ("healthChecks", spec.health_checks),
        ("preTerminationChecks", spec.pre_termination_checks),
    ):
        if value:
            body[key] = [v.to_dict() for v in value] if isinstance(value, list) else value.to_dict()
    skip_initial = options.skip_initial_health_checks
    skip_pre = options.skip_pre_termination_checks
    if skip_initial if skip_initial is not None else spec.skip_initial_health_checks:
        body["skipInitialHealthChecks"] = True
    if skip_pre if skip_pre is not None else spec.skip_pre_termination_checks:
        body["skipPreTerminationChecks"] = True
    if spec.provider:
        body["provider"] = spec.provider
    metadata: dict[str, Any] = {
        "namespace": namespace,
        "labels": {"name": options.name or (options.generate_name or group.name).rstrip("-")},
        "annotations": {REASON_ANNOTATION: options.reason},
    }
    if options.labels:
        metadata["labels"].update(options.labels)
    if options.name:
        metadata["name"] = options.name
    else:
        metadata["generateName"] = options.generate_name or f"{group.name}-"
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": metadata,
        "spec": body,
    }


def validate_request(body: Mapping[str, Any]) -> CycleNodeRequest:
    """The request as its controller would parse it; raises InvalidResource naming the field.

    A request with only a `generateName` is checked with the longest name it may get, so a
    prefix too long for the 63 characters a request name may have is refused here too.
    """
    meta = dict(body.get("metadata") or {})
    if not meta.get("name"):
        prefix = str(meta.get("generateName") or "")
        meta["name"] = prefix + "x" * 5
        if len(meta["name"]) > 63:
            raise InvalidResource(
                "metadata.generateName",
                f"Invalid value: {prefix!r}: too long to leave room for a unique suffix "
                "in a 63-character name",
            )
    # The model refuses what the API server's schema and rules refuse (a negative concurrency
    # or cyclingTimeout, no node group), so the CLI, the observer and the controller agree.
    return CycleNodeRequest.parse_spec({**body, "metadata": meta})


def nodegroup_problems(group: NodeGroup, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why a NodeGroup cannot make a request now (Cyclops's ValidateNodeGroup), or []."""
    problems = []
    if len(group.name) > 253 or not _DNS_1123.match(group.name):
        problems.append(f"metadata.name: {group.name!r} is not a DNS-1123 subdomain")
    if group.spec.cycle_settings.concurrency == 0:
        # Cyclops's convention: a NodeGroup with concurrency 0 is not cycled.
        problems.append("spec.cycleSettings.concurrency: 0 switches cycling of this group off")
    if not any(group.spec.node_selector.matches(o.labels(n)) for n in nodes):
        problems.append("spec.nodeSelector: selects no node")
    return problems
