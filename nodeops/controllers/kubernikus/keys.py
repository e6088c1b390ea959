"""The label and annotation keys the controller reads and writes, under one prefix.

`nodeops.dev/` by default, or another `key_prefix`. `compat: sapcc` selects `cloud.sap/`, the keys
of SAP's maintenance-controller, so a cluster whose nodes and maintenance profiles already use
`cloud.sap/kubelet-needs-update` and `cloud.sap/delete-node` carries over as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["COMPAT_PREFIXES", "DEFAULT_PREFIX", "Compat", "Keys", "keys_for"]

Compat = Literal["sapcc"]

DEFAULT_PREFIX: Final = "nodeops.dev/"
COMPAT_PREFIXES: Final[dict[str, str]] = {"sapcc": "cloud.sap/"}

_PREFIX: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/$")


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str

    def __post_init__(self) -> None:
        if len(self.prefix) > 254 or not _PREFIX.match(self.prefix):
            raise ValueError(
                f"prefix {self.prefix!r} must be a DNS subdomain followed by '/', "
                'like "nodeops.dev/"'
            )

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
    if compat:
        return Keys(COMPAT_PREFIXES[compat])
    return Keys(prefix or DEFAULT_PREFIX)
