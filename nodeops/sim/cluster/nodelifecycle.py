"""The node lifecycle controller: cordon and health taints, and nodes that stop heart-beating.

Drains and node operations key off these taints (a cordon is visible to the scheduler through the
`unschedulable` taint; a dead node through `unreachable`), so they must appear and disappear the
way kube-controller-manager makes them. Heartbeat expiry is timer-driven per node on the
simulated clock: a lease renewal only records when it was seen, it never costs an API call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import NODES, ApiClient, Obj
from nodeops.sim.cluster.informer import Informer, key_of
from nodeops.sim.cluster.kubelet import NODE_LEASE_NAMESPACE
from nodeops.sim.cluster.runtime import Controller
from nodeops.sim.cluster.scheduling import (
    NO_EXECUTE,
    NO_SCHEDULE,
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_NOT_READY,
    TAINT_PID_PRESSURE,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
    node_condition,
)

# Taints this controller owns; any other taint on a node is left alone.
MANAGED_TAINT_KEYS = frozenset(
    {
        TAINT_UNSCHEDULABLE,
        TAINT_NOT_READY,
        TAINT_UNREACHABLE,
        TAINT_MEMORY_PRESSURE,
        TAINT_DISK_PRESSURE,
        TAINT_PID_PRESSURE,
    }
)
_PRESSURE_TAINTS = (
    ("MemoryPressure", TAINT_MEMORY_PRESSURE),
    ("DiskPressure", TAINT_DISK_PRESSURE),
    ("PIDPressure", TAINT_PID_PRESSURE),
)
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def desired_taints(node: Mapping[str, Any], now_text: str) -> list[Obj]:
    """The node's taints with the managed ones made to match spec and conditions.

    Managed taints that should stay are kept as they are (with their timeAdded), so an
    unchanged node produces an identical list and no write.
    """
    spec = node.get("spec") or {}
    current: Sequence[Mapping[str, Any]] = spec.get("taints") or []
    want: set[tuple[str, str]] = set()
    if spec.get("unschedulable"):
        want.add((TAINT_UNSCHEDULABLE, NO_SCHEDULE))
    ready = node_condition(node, "Ready")
    ready_status = (ready or {}).get("status")
    if ready_status == "False":
        want |= {(TAINT_NOT_READY, NO_SCHEDULE), (TAINT_NOT_READY, NO_EXECUTE)}
    elif ready_status == "Unknown":
        want |= {(TAINT_UNREACHABLE, NO_SCHEDULE), (TAINT_UNREACHABLE, NO_EXECUTE)}
    for ctype, key in _PRESSURE_TAINTS:
        if (node_condition(node, ctype) or {}).get("status") == "True":
            want.add((key, NO_SCHEDULE))
    out: list[Obj] = []
    have: set[tuple[str, str]] = set()
    for t in current:
        ident = (str(t.get("key")), str(t.get("effect")))
        if t.get("key") in MANAGED_TAINT_KEYS and ident not in want:
            continue
        if ident in have:
            continue
        have.add(ident)
        out.append(dict(t))
    for key, effect in sorted(want - have):
        taint: Obj = {"key": key, "effect": effect}
        if effect == NO_EXECUTE:
            taint["timeAdded"] = now_text
        out.append(taint)
    return out


def heartbeat_of(node: Mapping[str, Any]) -> str | None:
    value = (node_condition(node, "Ready") or {}).get("lastHeartbeatTime")
    return str(value) if value else None


def unknown_conditions_patch(node: Mapping[str, Any], now_text: str) -> Obj:
    """Ready and the pressure conditions set to Unknown, heartbeats left as they were."""
    conditions = []
    for ctype in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready"):
        old = node_condition(node, ctype) or {}
        c: Obj = {
            "type": ctype,
            "status": "Unknown",
            "reason": UNKNOWN_REASON,
            "message": UNKNOWN_MESSAGE,
            "lastTransitionTime": now_text,
        }
        if old.get("lastHeartbeatTime"):
            c["lastHeartbeatTime"] = old["lastHeartbeatTime"]
        conditions.append(c)
    meta = node.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": conditions},
    }


class NodeLifecycle(Controller[str]):
    name = "nodelifecycle"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        nodes: Informer,
        leases: Informer,
        *,
        grace_seconds: float = 40.0,
        startup_grace_seconds: float = 60.0,
        workers: int = 4,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.nodes = nodes
        self.leases = leases
        self.needs(nodes, leases)
        self.grace_seconds = grace_seconds
        self.startup_grace_seconds = startup_grace_seconds
        # When this controller last saw a sign of life from each node, on its own clock: like
        # kube's probeTimestamp, so a controller (re)started late gives every node a full grace
        # period instead of judging heartbeats written before it was watching.
        self._seen: dict[str, float] = {}
        nodes.add_handler(self._on_node)
        leases.add_handler(self._on_lease)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            assert old is not None
            self._seen.pop(key_of(old)[1], None)
            return
        name = key_of(new)[1]
        if old is None or heartbeat_of(old) != heartbeat_of(new):
            self._seen[name] = self._now()
        self.queue.add(name)

    def _on_lease(self, old: Obj | None, new: Obj | None) -> None:
        """A renewal only records when it was seen, unless the node was marked as silent."""
        if new is None or key_of(new)[0] != NODE_LEASE_NAMESPACE:
            return  # only node heartbeats (the cache holds every lease in the cluster)
        renew = (new.get("spec") or {}).get("renewTime")
        if old is not None and (old.get("spec") or {}).get("renewTime") == renew:
            return
        name = key_of(new)[1]
        self._seen[name] = self._now()
        node = self.nodes.store.get(("", name))
        if node is not None and (node_condition(node, "Ready") or {}).get("status") == "Unknown":
            self.queue.add(name)

    def _now(self) -> float:
        return self.clock.now().timestamp()

    async def reconcile(self, name: str) -> float | None:
        node = self.nodes.store.get(("", name))
        if node is None:
            return None
        now_text = self.clock.timestamp()
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        taints = desired_taints(node, now_text)
        if taints != list(spec.get("taints") or []):
            patch: Obj = {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"taints": taints or None},
            }
            await self.client.patch(NODES, name, patch, patch_type="merge")
            return None  # the update's event brings the node back
        now = self._now()
        seen = self._seen.setdefault(name, now)
        ready = node_condition(node, "Ready")
        grace = self.grace_seconds if ready is not None else self.startup_grace_seconds
        overdue = now - seen - grace
        if overdue < 0:
            return -overdue + 0.5
        if (ready or {}).get("status") != "Unknown":
            await self.client.patch(
                NODES,
                name,
                unknown_conditions_patch(node, now_text),
                patch_type="strategic",
                subresource="status",
            )
        # While the node stays silent there is nothing to wait for; a renewal re-queues it.
        return None
