"""The label and annotation keys the controller reads and writes, under one prefix.

`nodeops.dev/` by default, or another `key_prefix`. `compat: sapcc` selects `cloud.sap/`, the keys
of SAP's maintenance-controller, so a cluster whose nodes and maintenance profiles already use
`cloud.sap/kubelet-needs-update` and `cloud.sap/delete-node` carries over as it is.
"""

from __future__ import annotations

from nodeops.controllers.kit.keys import COMPAT_PREFIXES, DEFAULT_PREFIX, Compat, PrefixedKeys

__all__ = ["COMPAT_PREFIXES", "DEFAULT_PREFIX", "Compat", "Keys", "keys_for"]


class Keys(PrefixedKeys):
    __slots__ = ()

    @property
    def needs_update(self) -> str:
        """Label: `true` while the node's kubelet differs from the API server's version."""
        return f"{self.prefix}kubelet-needs-update"

    @property
    def delete_node(self) -> str:
        """Label: `true` asks for the node to be cordoned, drained and its VM deleted."""
        return f"{self.prefix}delete-node"

    @property
    def delete_progress(self) -> str:
        """Annotation: how far the deletion got, written before each step."""
        return f"{self.prefix}delete-node-progress"


def keys_for(compat: Compat | None = None, prefix: str | None = None) -> Keys:
    """The keys of a compatibility mode, else under `prefix` (the maintenance controller's
    rule, so both controllers given the same settings use the same keys)."""
    return Keys.for_settings(compat, prefix)
