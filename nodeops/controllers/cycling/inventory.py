"""Matching Kubernetes nodes with the instances of cloud node groups.

Nodes and instances meet through the node's `spec.providerID`: equal strings first, then the
instance ID parsed out of it (a node registered before its cloud controller filled the field in
is matched once it is). Everything cycling decides about "which node is which instance, in
which group" goes through here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeops.providers.base import (
    Instance,
    Lifecycle,
    NodeGroup,
    ProviderIdError,
    node_provider_id,
    parse_provider_id,
)

__all__ = ["Inventory", "Member", "instance_id", "node_ip", "provider_id"]

_GONE = frozenset({Lifecycle.TERMINATED, Lifecycle.TERMINATING})


def provider_id(node: Mapping[str, Any]) -> str:
    return str((node.get("spec") or {}).get("providerID") or "")


def instance_id(node: Mapping[str, Any] | str) -> str | None:
    """The instance ID in a node's provider ID (or in a provider ID string)."""
    try:
        if isinstance(node, str):
            return parse_provider_id(node).id if node else None
        parsed = node_provider_id(node)
    except ProviderIdError:
        return None
    return None if parsed is None else parsed.id


def node_ip(node: Mapping[str, Any]) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or ():
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return None


@dataclass(frozen=True)
class Member:
    group: str
    instance: Instance


@dataclass
class Inventory:
    """The instances of some node groups, indexed for matching nodes."""

    groups: dict[str, NodeGroup]
    by_id: dict[str, Member] = field(default_factory=dict)
    by_provider_id: dict[str, Member] = field(default_factory=dict)
    _by_groups: dict[frozenset[str], dict[str, Member]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for name, group in self.groups.items():
            for instance in group.instances:
                if instance.lifecycle_state in _GONE:
                    continue
                member = Member(name, instance)
                self.by_id[instance.id] = member
                self.by_provider_id[instance.provider_id] = member

    def member(self, node: Mapping[str, Any]) -> Member | None:
        """The group member behind a node, or None when the node is in none of the groups."""
        found = self.by_provider_id.get(provider_id(node))
        if found is not None:
            return found
        iid = instance_id(node)
        return None if iid is None else self.by_id.get(iid)

    def member_by_instance(self, iid: str | None) -> Member | None:
        return None if iid is None else self.by_id.get(iid)

    def instances(self, groups: Iterable[str] | None = None) -> list[Member]:
        wanted = set(self.groups) if groups is None else set(groups)
        return [m for m in self.by_id.values() if m.group in wanted]

    def by_provider_id_in(self, groups: Iterable[str]) -> dict[str, Member]:
        """The members of `groups` by provider ID; built once per set of groups, since an
        inventory is kept for as long as the cloud's answer does not change."""
        wanted = frozenset(groups)
        found = self._by_groups.get(wanted)
        if found is None:
            found = self._by_groups[wanted] = {
                pid: m for pid, m in self.by_provider_id.items() if m.group in wanted
            }
        return found

    def describe_member(self, member: Member) -> str:
        return (
            f"{member.instance.id} ({member.instance.raw_state or member.instance.lifecycle_state})"
        )
