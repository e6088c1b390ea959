"""Drain options: kubectl drain's switches (same names, same defaults) plus nodeops' own."""

from __future__ import annotations

from dataclasses import dataclass

from nodeops.common.selectors import SelectorError, parse_label_selector

DRAIN_LABEL = "nodeops.dev/drain"
DELETION_PRIORITY_ANNOTATION = "node-detacher.variant.run/deletion-priority"
DAEMONSET_DRAIN_TAINT = "nodeops.dev/draining"


@dataclass(frozen=True)
class DrainOptions:
    # --- kubectl drain's switches
    force: bool = False
    ignore_daemonsets: bool = False
    delete_emptydir_data: bool = False
    grace_period: int = -1  # negative: each pod's own terminationGracePeriodSeconds
    timeout: float = 0.0  # 0: no limit
    pod_selector: str = ""
    disable_eviction: bool = False
    skip_wait_for_delete_timeout: int = 0
    dry_run: str = "none"  # none | client | server
    # --- nodeops
    respect_rules: bool = True
    evict_daemonsets: bool = False  # stop DaemonSet pods too, in their order (node-detacher)
    wait_for_volumes: bool = False
    volume_timeout: float = 0.0
    max_in_flight: int = 64  # evictions outstanding at once
    force_delete_stuck: bool = False  # force-delete pods still terminating past their grace
    stuck_slack_seconds: float = 30.0  # ...and past this much beyond it
    retry_initial: float = 0.25  # backoff of a refused eviction when no PDB change arrives first
    retry_max: float = 5.0
    pass_seconds: float = 10.0  # how long one `step` pass may spend evicting (Cluster API's)

    def __post_init__(self) -> None:
        if self.dry_run not in ("none", "client", "server"):
            raise ValueError(
                f'--dry-run must be "none", "client" or "server", not {self.dry_run!r}'
            )
        if self.timeout < 0:
            raise ValueError("--timeout must not be negative")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if self.volume_timeout < 0:
            raise ValueError("--volume-timeout must not be negative")
        if self.pass_seconds <= 0:
            raise ValueError("pass_seconds must be positive")
        if self.pod_selector:
            try:
                parse_label_selector(self.pod_selector)
            except SelectorError:
                raise ValueError(
                    "--pod-selector=<pod_selector> must be a valid label selector"
                ) from None
