"""The label and annotation keys the esx controller reads and writes, under one prefix.

`nodeops.dev/` by default, or another `key_prefix`; `compat: sapcc` selects `cloud.sap/`, the
keys of SAP's maintenance-controller (`cloud.sap/esx-in-maintenance`, `cloud.sap/esx-reboot-ok`,
`cloud.sap/esx-version`, `cloud.sap/esx-reboot-initiated`), so a cluster whose maintenance
profiles already use those keys carries over as it is. The prefix rule is the maintenance
controller's, so both controllers given the same settings agree on the keys.
"""

from __future__ import annotations

from nodeops.controllers.kit.keys import COMPAT_PREFIXES, DEFAULT_PREFIX, Compat, PrefixedKeys

__all__ = ["COMPAT_PREFIXES", "DEFAULT_PREFIX", "Compat", "Keys", "keys_for"]


class Keys(PrefixedKeys):
    __slots__ = ()

    @property
    def in_maintenance(self) -> str:
        """Label: `true` while the node's ESX host is in or entering maintenance, else `false`."""
        return f"{self.prefix}esx-in-maintenance"

    @property
    def reboot_ok(self) -> str:
        """Label (set by people or a maintenance profile): `true` allows the node's VM to be
        shut down for its host's maintenance."""
        return f"{self.prefix}esx-reboot-ok"

    @property
    def version(self) -> str:
        """Label: the ESX version of the node's host."""
        return f"{self.prefix}esx-version"

    @property
    def reboot_initiated(self) -> str:
        """Annotation: `true` while this controller has the node's VM down for maintenance."""
        return f"{self.prefix}esx-reboot-initiated"

    @property
    def progress(self) -> str:
        """Annotation: the step of the shutdown/power-on flow, written before each step."""
        return f"{self.prefix}esx-maintenance-progress"


def keys_for(compat: Compat | None = None, prefix: str | None = None) -> Keys:
    return Keys.for_settings(compat, prefix)
