"""Pod status as kubelet reports it: container statuses, conditions, IPs.

Pure functions of the pod and the moment, so what a "running, ready pod" looks like is decided in
one place and can be unit-tested without a server.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any

from nodeops.sim.cluster.apiclient import Obj

_UNKNOWN_EXIT_CODE = 137
"""What kubelet reports for a container it cannot find when the pod terminates."""

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def image_id(image: str) -> str:
    """A digest that depends only on the image, as a registry's would, so replicas agree."""
    last = image.rsplit("/", 1)[-1]
    repo = image.rsplit(":", 1)[0] if ":" in last else image
    return f"{repo}@sha256:{_digest(image)}"


def container_id(pod_uid: str, name: str, restarts: int = 0) -> str:
    return "containerd://" + _digest(f"{pod_uid}/{name}/{restarts}")


def condition(ctype: str, status: bool, at: str, reason: str = "", message: str = "") -> Obj:
    c: Obj = {"type": ctype, "status": "True" if status else "False", "lastProbeTime": None}
    c["lastTransitionTime"] = at
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def _keep_transition(old: Mapping[str, Any] | None, new: Obj) -> Obj:
    """A condition whose status did not change keeps its lastTransitionTime, as kubelet does."""
    if old is not None and old.get("status") == new["status"] and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    return new


def _conditions_by_type(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def running_status(
    pod: Mapping[str, Any],
    *,
    now: str,
    started_at: str,
    ready: bool,
    host_ip: str,
    pod_ip: str,
) -> Obj:
    """The status of a running pod; `ready` covers every container (all pass or none do)."""
    spec = pod.get("spec") or {}
    uid = (pod.get("metadata") or {}).get("uid") or ""
    old = _conditions_by_type(pod)
    names = [c.get("name", "") for c in spec.get("containers") or []]
    statuses = [
        {
            "containerID": container_id(uid, c.get("name", "")),
            "image": c.get("image", ""),
            "imageID": image_id(c.get("image", "")),
            "lastState": {},
            "name": c.get("name", ""),
            "ready": ready,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": started_at}},
        }
        for c in spec.get("containers") or []
    ]
    reason, message = "", ""
    if not ready:
        reason = "ContainersNotReady"
        message = f"containers with unready status: [{' '.join(names)}]"
    conditions = [
        _keep_transition(old.get(t), c)
        for t, c in (
            ("PodReadyToStartContainers", condition("PodReadyToStartContainers", True, now)),
            ("Initialized", condition("Initialized", True, now)),
            ("Ready", condition("Ready", ready, now, reason, message)),
            ("ContainersReady", condition("ContainersReady", ready, now, reason, message)),
        )
    ]
    status: Obj = {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": statuses,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": (pod.get("status") or {}).get("startTime") or started_at,
    }
    init = spec.get("initContainers") or []
    if init:
        status["initContainerStatuses"] = [
            {
                "containerID": container_id(uid, c.get("name", "")),
                "image": c.get("image", ""),
                "imageID": image_id(c.get("image", "")),
                "lastState": {},
                "name": c.get("name", ""),
                "ready": True,
                "restartCount": 0,
                "started": c.get("restartPolicy") == "Always",
                "state": (
                    {"running": {"startedAt": started_at}}
                    if c.get("restartPolicy") == "Always"
                    else {
                        "terminated": {
                            "containerID": container_id(uid, c.get("name", "")),
                            "exitCode": 0,
                            "finishedAt": started_at,
                            "reason": "Completed",
                            "startedAt": started_at,
                        }
                    }
                ),
            }
            for c in init
        ]
    return status


def completed_status(pod: Mapping[str, Any], *, now: str, exit_code: int = 0) -> Obj:
    """The status of a pod whose containers all exited: Succeeded, or Failed on non-zero.

    Also what kubelet reports for a deleted pod once its containers have stopped (the terminal
    phase comes before the pod object is removed). A container that never ran is reported as
    kubelet does when it finds nothing to stop: terminated, 137, ContainerStatusUnknown, which
    makes the pod Failed.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    uid = (pod.get("metadata") or {}).get("uid") or ""
    old = _conditions_by_type(pod)
    by_name = {c.get("name"): c for c in status.get("containerStatuses") or []}
    statuses = []
    codes = []
    for c in spec.get("containers") or []:
        name = c.get("name", "")
        prev = by_name.get(name) or {}
        started = ((prev.get("state") or {}).get("running") or {}).get("startedAt")
        terminated: Obj
        if started is None:
            code = _UNKNOWN_EXIT_CODE
            terminated = {
                "exitCode": code,
                "finishedAt": None,
                "message": "The container could not be located when the pod was terminated",
                "reason": "ContainerStatusUnknown",
                "startedAt": None,
            }
        else:
            code = exit_code
            terminated = {
                "containerID": container_id(uid, name),
                "exitCode": code,
                "finishedAt": now,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
            }
        codes.append(code)
        entry: Obj = {
            "image": c.get("image", ""),
            "imageID": image_id(c.get("image", "")) if started is not None else "",
            "lastState": {},
            "name": name,
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"terminated": terminated},
        }
        if started is not None:
            entry["containerID"] = container_id(uid, name)
        statuses.append(entry)
    conditions = [
        _keep_transition(old.get(t), c)
        for t, c in (
            ("PodReadyToStartContainers", condition("PodReadyToStartContainers", False, now)),
            ("Initialized", condition("Initialized", True, now, "PodCompleted")),
            ("Ready", condition("Ready", False, now, "PodCompleted")),
            ("ContainersReady", condition("ContainersReady", False, now, "PodCompleted")),
        )
    ]
    return {
        "phase": "Succeeded" if all(code == 0 for code in codes) else "Failed",
        "conditions": conditions,
        "containerStatuses": statuses,
    }


def pod_ready(pod: Mapping[str, Any]) -> bool:
    c = _conditions_by_type(pod).get("Ready")
    return c is not None and c.get("status") == "True"


class IPAllocator:
    """Hands out pod IPs from a node's podCIDR, cycling, like a host-local IPAM."""

    def __init__(self, cidr: str | None, fallback_index: int) -> None:
        net: ipaddress.IPv4Network | ipaddress.IPv6Network
        try:
            net = ipaddress.ip_network(cidr or "", strict=False)
        except ValueError:
            idx = fallback_index % (256 * 64)
            net = ipaddress.ip_network(f"10.{64 + idx // 256}.{idx % 256}.0/24")
        self._base = int(net.network_address)
        self._size = max(1, min(net.num_addresses - 3, 65_000))
        self._version = net.version
        self._next = 0

    def allocate(self) -> str:
        n = self._next % self._size
        self._next += 1
        return str(ipaddress.ip_address(self._base + 2 + n))
