"""The prefix a controller's label and annotation keys live under, one rule for every controller.

`nodeops.dev/` by default, or another prefix; `compat: sapcc` selects `cloud.sap/`, the prefix of
SAP's maintenance-controller, so a cluster whose nodes and maintenance profiles already carry
those keys keeps them. Controllers that share a node (Kubernikus's delete-node label is set by a
maintenance profile; the ESX reboot-ok label too) must agree on the keys given the same settings,
which is why the rule is written once.

A controller subclasses `PrefixedKeys` with its keys as properties:

    class Keys(PrefixedKeys):
        __slots__ = ()

        @property
        def delete_node(self) -> str:
            return f"{self.prefix}delete-node"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, Self

__all__ = ["COMPAT_PREFIXES", "DEFAULT_PREFIX", "Compat", "PrefixedKeys"]

Compat = Literal["sapcc"]

DEFAULT_PREFIX: Final = "nodeops.dev/"
COMPAT_PREFIXES: Final[dict[str, str]] = {"sapcc": "cloud.sap/"}

_PREFIX: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/$")


@dataclass(frozen=True, slots=True)
class PrefixedKeys:
    prefix: str

    def __post_init__(self) -> None:
        if len(self.prefix) > 254 or not _PREFIX.match(self.prefix):
            raise ValueError(
                f"prefix {self.prefix!r} must be a DNS subdomain followed by '/', "
                'like "nodeops.dev/"'
            )

    @classmethod
    def for_settings(cls, compat: Compat | None = None, prefix: str | None = None) -> Self:
        """The keys of a compatibility mode, else under `prefix` (default `nodeops.dev/`)."""
        if compat:
            return cls(COMPAT_PREFIXES[compat])
        return cls(prefix or DEFAULT_PREFIX)
