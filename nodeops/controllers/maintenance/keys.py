"""Where the controller keeps its state on a Node: label and annotation keys.

By default the keys live under `nodeops.dev/`; `--compat sapcc` uses the reference's
`cloud.sap/` keys (same JSON in the data annotation), so a cluster that ran the reference keeps
its state when it switches.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPAT_PREFIXES = {"sapcc": "cloud.sap/"}
DEFAULT_PREFIX = "nodeops.dev/"


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = DEFAULT_PREFIX

    @classmethod
    def for_compat(cls, compat: str | None, prefix: str | None = None) -> Keys:
        if compat:
            if compat not in COMPAT_PREFIXES:
                raise ValueError(
                    f"unknown compat mode {compat!r} (known: {', '.join(COMPAT_PREFIXES)})"
                )
            return cls(COMPAT_PREFIXES[compat])
        return cls(prefix or DEFAULT_PREFIX)

    def __post_init__(self) -> None:
        if not self.prefix.endswith("/") or self.prefix.count("/") != 1 or len(self.prefix) < 2:
            raise ValueError(f"key prefix {self.prefix!r} must be a DNS name followed by '/'")

    @property
    def profile(self) -> str:
        """Label: the node's profiles, joined by `--`."""
        return f"{self.prefix}maintenance-profile"

    @property
    def state(self) -> str:
        """Label: the aggregate state (informational; maxMaintenance and affinity read it)."""
        return f"{self.prefix}maintenance-state"

    @property
    def data(self) -> str:
        """Annotation: the authoritative per-profile state JSON."""
        return f"{self.prefix}maintenance-data"

    @property
    def log_details(self) -> str:
        """Label: `"true"` logs every check result of this node."""
        return f"{self.prefix}maintenance-log-details"
