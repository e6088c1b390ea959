"""The node status kubelet posts, and when it needs posting.

Like kubelet, the simulated one writes node status only when a condition changes or the last
report is older than `nodeStatusReportFrequency`; liveness in between is carried by the lease.
That keeps a 5,000-node cluster from turning every heartbeat into a node update.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nodeops.sim.cluster.apiclient import Obj
from nodeops.sim.cluster.sim_annotations import KUBELET_RUNNING
from nodeops.sim.cluster.timeutil import epoch

_PRESSURE = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
READY_MESSAGE = "kubelet is posting ready status"
NOT_READY_MESSAGE = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)

DEFAULT_CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
DEFAULT_ALLOCATABLE = {"cpu": "3920m", "memory": "15Gi", "pods": "110", "ephemeral-storage": "95Gi"}


def _desired(state: str) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) for each condition kubelet owns."""
    out = [(t, "False", reason, msg) for t, reason, msg in _PRESSURE]
    if state == KUBELET_RUNNING:
        out.append(("Ready", "True", "KubeletReady", READY_MESSAGE))
    else:
        out.append(("Ready", "False", "KubeletNotReady", NOT_READY_MESSAGE))
    return out


def node_status_patch(
    node: Mapping[str, Any],
    *,
    state: str,
    now: datetime,
    now_text: str,
    report_seconds: float,
    node_ip: str,
) -> Obj | None:
    """A strategic-merge patch for the node's status, or None when nothing is due."""
    status = node.get("status") or {}
    existing = {c.get("type"): c for c in status.get("conditions") or []}
    desired = _desired(state)
    due = any(
        (existing.get(t) or {}).get("status") != s or (existing.get(t) or {}).get("reason") != r
        for t, s, r, _ in desired
    )
    if not due:
        beat = (existing.get("Ready") or {}).get("lastHeartbeatTime")
        due = beat is None or now.timestamp() - epoch(beat) >= report_seconds
    missing_basics = not status.get("capacity") or not status.get("nodeInfo")
    if not due and not missing_basics:
        return None
    conditions = []
    for ctype, cstatus, reason, message in desired:
        old = existing.get(ctype) or {}
        transition = old.get("lastTransitionTime") if old.get("status") == cstatus else None
        conditions.append(
            {
                "type": ctype,
                "status": cstatus,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now_text,
                "lastTransitionTime": transition or now_text,
            }
        )
    patch: Obj = {"conditions": conditions}
    if not status.get("capacity"):
        patch["capacity"] = dict(DEFAULT_CAPACITY)
        patch["allocatable"] = dict(status.get("allocatable") or DEFAULT_ALLOCATABLE)
    if not status.get("nodeInfo"):
        patch["nodeInfo"] = {
            "architecture": "amd64",
            "bootID": "",
            "containerRuntimeVersion": "containerd://1.7.23",
            "kernelVersion": "6.1.0",
            "kubeProxyVersion": "v1.31.4",
            "kubeletVersion": "v1.31.4",
            "machineID": "",
            "operatingSystem": "linux",
            "osImage": "Simulated Linux",
            "systemUUID": "",
        }
    if not status.get("addresses"):
        name = (node.get("metadata") or {}).get("name") or ""
        patch["addresses"] = [
            {"type": "InternalIP", "address": node_ip},
            {"type": "Hostname", "address": name},
        ]
        patch["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    return {"status": patch}


def node_internal_ip(node: Mapping[str, Any]) -> str | None:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP" and a.get("address"):
            return str(a["address"])
    return None
