"""The simulated cloud's state and every operation on it, without I/O.

Calls from the HTTP API change the state at once and are validated the way AWS validates them
(all instances of a call checked before any is changed, capacity kept within min and max).
What takes time is recorded as a deadline (`SimInstance.due`, `Registration.draining_until`);
`advance()` moves everything whose deadline has passed, and the loop asks which Node objects
need creating, signalling or deleting in the API server. Keeping the API server out of here
makes every rule testable without a cluster and keeps one place that decides.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodeops.sim.cloud.model import (
    CLASSIC,
    DETACHED,
    DETACHING,
    IN_SERVICE,
    LEAVING,
    PENDING,
    TERMINATED,
    TERMINATING,
    CloudError,
    CloudSettings,
    LoadBalancerKind,
    Registration,
    SimInstance,
    SimLoadBalancer,
    SimNodeGroup,
)
from nodeops.sim.cluster.sim_annotations import KUBELET_NOT_READY, KUBELET_STOPPED
from nodeops.sim.objects import aws_node_name
from nodeops.sim.scenario import NodeGroup as NodeGroupSpec

__all__ = ["CloudState", "zone_ip"]

Obj = dict[str, Any]


def zone_ip(zone: str, rng: random.Random) -> str:
    """A private address in the zone's block, so a node's name hints at its zone as on EC2."""
    block = (ord(zone[-1]) - ord("a")) % 16 * 16
    return f"10.{block + rng.randrange(16)}.{rng.randrange(256)}.{rng.randrange(4, 255)}"


def _node_ip(node: Mapping[str, Any]) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return None


class CloudState:
    """Node groups, instances and load balancers of one simulated cloud."""

    def __init__(
        self,
        settings: CloudSettings,
        now: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.settings = settings
        self.now = now
        self.rng = rng
        self.groups: dict[str, SimNodeGroup] = {}
        self.instances: dict[str, SimInstance] = {}
        self.load_balancers: dict[str, SimLoadBalancer] = {}
        self.used_ips: set[str] = set()
        self._listeners: list[Callable[[], None]] = []
        self.health_checks: Callable[[str, str, int], str | None] | None = None
        """What a load balancer's health checks say of a registration (load balancer, instance,
        port): "initial", "healthy" or "unhealthy", or None when nothing checks it. Set by the
        traffic simulator, whose flows run the checks."""

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change made through the API (the loop's wake-up)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # -- building ------------------------------------------------------------------------------

    def add_group(
        self,
        spec: NodeGroupSpec,
        *,
        desired: int | None = None,
        min_size: int = 0,
        max_size: int | None = None,
    ) -> SimNodeGroup:
        """A group starting with no instances; `adopt` or `initial_nodes` fill it.

        The maximum defaults to twice the size, so surge-by-detach and a later attach (which
        raises the desired capacity) fit without configuration.
        """
        if spec.name in self.groups:
            raise ValueError(f"node group {spec.name!r} exists already")
        desired = spec.size if desired is None else desired
        max_size = max(2 * desired, desired + 1) if max_size is None else max_size
        _check_capacity(spec.name, desired, min_size, max_size)
        group = SimNodeGroup(
            spec=spec,
            desired=desired,
            min_size=min_size,
            max_size=max_size,
            launch_version=spec.launch_version,
        )
        self.groups[spec.name] = group
        return group

    def add_load_balancer(
        self,
        name: str,
        kind: LoadBalancerKind,
        port: int,
        node_groups: Sequence[str],
        *,
        deregistration_delay: float | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> SimLoadBalancer:
        if name in self.load_balancers:
            raise ValueError(f"load balancer {name!r} exists already")
        unknown = [g for g in node_groups if g not in self.groups]
        if unknown:
            raise ValueError(f"load balancer {name!r}: no node groups {unknown}")
        lb = SimLoadBalancer(
            name=name,
            kind=kind,
            port=port,
            node_groups=list(node_groups),
            deregistration_delay=self.settings.deregistration_delay_seconds
            if deregistration_delay is None
            else deregistration_delay,
            tags=dict(tags or {}),
        )
        self.load_balancers[name] = lb
        for group in node_groups:
            for iid in self.groups[group].members:
                if self.instances[iid].lifecycle == IN_SERVICE:
                    self._register(lb, iid, lb.port)
        return lb

    def reserve_ip(self, ip: str) -> None:
        """Keep an address other nodes use (standalone scenario nodes) out of launches."""
        self.used_ips.add(ip)

    def adopt(self, group_name: str, node: Mapping[str, Any]) -> Obj:
        """Take a node that exists from the start as an InService instance of the group.

        Returns the node with the instance's provider ID, to be created as it is.
        """
        group = self.group(group_name)
        labels = (node.get("metadata") or {}).get("labels") or {}
        zone = str(labels.get("topology.kubernetes.io/zone") or group.spec.zone_list[0])
        name = str(node["metadata"]["name"])
        ip = _node_ip(node) or self._new_ip(zone)
        instance = self._new_instance(group, zone, ip, name, IN_SERVICE)
        instance.node_created = True
        out = dict(node)
        out["spec"] = {**(node.get("spec") or {}), "providerID": instance.provider_id}
        self._join(group, instance)
        return out

    def initial_nodes(self, group_name: str, count: int, *, now_text: str) -> list[Obj]:
        """Launch `count` InService instances at once; their nodes, to be created as they are."""
        group = self.group(group_name)
        nodes = []
        for _ in range(count):
            zone = self._zone_for(group)
            instance = self._new_instance(group, zone, self._new_ip(zone), None, IN_SERVICE)
            instance.node_created = True
            self._join(group, instance)
            nodes.append(self.node_object(instance, now_text=now_text))
        return nodes

    def node_object(self, instance: SimInstance, *, now_text: str) -> Obj:
        """The Node its kubelet registers, made by the group's own node factory."""
        spec = self.groups[instance.origin].spec
        node = spec.make_node(
            zone=instance.zone,
            ip=instance.private_ip,
            provider_id=instance.provider_id,
            rng=self.rng,
            now=now_text,
        )
        node["metadata"]["name"] = instance.node_name
        return node

    # -- lookups -------------------------------------------------------------------------------

    def group(self, name: str) -> SimNodeGroup:
        group = self.groups.get(name)
        if group is None:
            raise CloudError(404, "NodeGroupNotFound", f"node group {name} does not exist")
        return group

    def instance(self, iid: str) -> SimInstance:
        instance = self.instances.get(iid)
        if instance is None:
            raise CloudError(404, "InstanceNotFound", f"instance {iid} does not exist")
        return instance

    def load_balancer(self, name: str) -> SimLoadBalancer:
        lb = self.load_balancers.get(name)
        if lb is None:
            raise CloudError(404, "LoadBalancerNotFound", f"load balancer {name} does not exist")
        return lb

    def out_of_date(self, instance: SimInstance) -> bool:
        group = self.groups.get(instance.group or "")
        return group is not None and instance.launch_version != group.launch_version

    # -- node groups ---------------------------------------------------------------------------

    def update_group(
        self,
        name: str,
        *,
        desired: int | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        launch_version: str | None = None,
        protect_new: bool | None = None,
    ) -> SimNodeGroup:
        """Change capacity or what new instances launch with; existing instances keep theirs."""
        group = self.group(name)
        new_desired = group.desired if desired is None else desired
        new_min = group.min_size if min_size is None else min_size
        new_max = group.max_size if max_size is None else max_size
        _check_capacity(name, new_desired, new_min, new_max)
        if launch_version is not None and not launch_version:
            raise CloudError(400, "ValidationError", "launchVersion must not be empty")
        group.desired, group.min_size, group.max_size = new_desired, new_min, new_max
        if launch_version is not None:
            group.launch_version = launch_version
        if protect_new is not None:
            group.protect_new = protect_new
        self._changed()
        return group

    def detach(self, name: str, ids: Sequence[str], *, decrement: bool) -> list[SimInstance]:
        """Take InService instances out of the group, deregistering them from its load
        balancers; without `decrement` the group launches replacements."""
        group = self.group(name)
        instances = []
        for iid in dict.fromkeys(ids):
            instance = self.instances.get(iid)
            if instance is None or instance.group != name:
                raise CloudError(
                    400, "ValidationError", f"instance {iid} is not part of node group {name}"
                )
            if instance.lifecycle == PENDING:
                raise CloudError(
                    409,
                    "IncorrectInstanceState",
                    f"instance {iid} is Pending in node group {name}; it can be detached once "
                    "it is InService",
                )
            if instance.lifecycle != IN_SERVICE:
                raise CloudError(
                    400,
                    "ValidationError",
                    f"instance {iid} is {instance.lifecycle} in node group {name}, not InService",
                )
            instances.append(instance)
        if decrement and group.desired - len(instances) < group.min_size:
            raise CloudError(
                400,
                "ValidationError",
                f"detaching {len(instances)} instances with decrement would take node group "
                f"{name} below its minimum size {group.min_size}",
            )
        now = self.now()
        for instance in instances:
            instance.lifecycle = DETACHING
            instance.due = now + self.settings.detach_seconds
            for lb in self._balancers_of(name):
                self._drain_instance(lb, instance.id)
        if decrement:
            group.desired -= len(instances)
        self._changed()
        return instances

    def attach(self, name: str, ids: Sequence[str]) -> list[SimInstance]:
        """Put running instances into the group, raising its desired capacity by as many."""
        group = self.group(name)
        joining = []
        for iid in dict.fromkeys(ids):
            instance = self.instance(iid)
            if instance.group == name and instance.lifecycle not in LEAVING:
                continue
            if instance.group is not None and instance.lifecycle == DETACHING:
                raise CloudError(
                    409,
                    "IncorrectInstanceState",
                    f"instance {iid} is still detaching from node group {instance.group}",
                )
            if instance.group is not None and instance.group != name:
                raise CloudError(
                    400,
                    "InstanceInOtherGroup",
                    f"instance {iid} is part of node group {instance.group}",
                )
            if instance.lifecycle != DETACHED:
                raise CloudError(
                    400,
                    "ValidationError",
                    f"instance {iid} is {instance.machine_state}; only running instances can "
                    "be attached",
                )
            joining.append(instance)
        if group.desired + len(joining) > group.max_size:
            raise CloudError(
                400,
                "ValidationError",
                f"attaching {len(joining)} instances would take node group {name} above its "
                f"maximum size {group.max_size}",
            )
        for instance in joining:
            instance.lifecycle = IN_SERVICE
            instance.due = None
            self._join(group, instance)
        group.desired += len(joining)
        self._changed()
        return joining

    # -- instances -----------------------------------------------------------------------------

    def terminate(self, iid: str) -> SimInstance:
        """Shut the machine down; a group it belongs to replaces it (desired is unchanged)."""
        instance = self.instance(iid)
        if instance.lifecycle in (TERMINATING, TERMINATED):
            return instance
        if instance.termination_protected:
            raise CloudError(
                400,
                "OperationNotPermitted",
                f"the instance {iid} may not be terminated: its termination protection is on",
            )
        self._terminate(instance)
        self._changed()
        return instance

    def set_protection(self, iid: str, protected: bool) -> SimInstance:
        instance = self.instance(iid)
        instance.protected = protected
        self._changed()
        return instance

    # -- load balancers ------------------------------------------------------------------------

    def update_load_balancer(
        self,
        name: str,
        *,
        deregistration_delay: float | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> SimLoadBalancer:
        lb = self.load_balancer(name)
        if deregistration_delay is not None:
            if deregistration_delay < 0:
                raise CloudError(400, "ValidationError", "deregistrationDelaySeconds must be >= 0")
            lb.deregistration_delay = deregistration_delay
        if tags is not None:
            lb.tags = dict(tags)
        self._changed()
        return lb

    def register(self, name: str, iid: str, port: int | None) -> Registration:
        lb = self.load_balancer(name)
        instance = self.instances.get(iid)
        if instance is None or not instance.running:
            state = "unknown" if instance is None else instance.machine_state
            raise CloudError(
                400,
                "InvalidTarget",
                f"instance {iid} is {state}; only running instances can be registered",
            )
        if lb.kind == CLASSIC and port not in (None, lb.port):
            raise CloudError(
                400,
                "ValidationError",
                f"classic load balancer {name} registers instances on port {lb.port} only",
            )
        registration = self._register(lb, iid, lb.port if port is None else port)
        self._changed()
        return registration

    def deregister(self, name: str, iid: str, port: int | None) -> list[Registration]:
        """Start draining the registrations (on `port`, or on every port); draining ones stay
        as they are, and an instance with none at all is a `TargetNotFound`."""
        lb = self.load_balancer(name)
        matching = [r for r in lb.of(iid) if port is None or r.port == port]
        if not matching:
            where = "" if port is None else f" on port {port}"
            raise CloudError(
                404, "TargetNotFound", f"instance {iid} is not registered in {name}{where}"
            )
        changed = [r for r in matching if not r.draining]
        for registration in changed:
            self._drain(lb, registration)
        self._changed()
        return changed

    # -- time ----------------------------------------------------------------------------------

    def advance(self) -> None:
        """Finish every transition whose deadline has passed and keep groups at capacity."""
        now = self.now()
        for instance in list(self.instances.values()):
            if instance.due is None or instance.due > now:
                continue
            if instance.lifecycle == DETACHING:
                self._leave_group(instance)
                instance.lifecycle = DETACHED
                instance.due = None
            elif instance.lifecycle == TERMINATING:
                self._leave_group(instance)
                instance.lifecycle = TERMINATED
                instance.terminated_at = now
                instance.due = self._node_delete_due(instance, now)
            elif instance.lifecycle == PENDING and instance.node_created:
                self._enter_service(instance)
        for lb in self.load_balancers.values():
            for key, registration in list(lb.registrations.items()):
                if registration.draining_until is not None and registration.draining_until <= now:
                    del lb.registrations[key]
        for instance in list(self.instances.values()):
            purge_at = self._purge_at(instance)
            if purge_at is not None and purge_at <= now:
                del self.instances[instance.id]
        for group in self.groups.values():
            self._keep_capacity(group, now)

    def boots_due(self) -> list[SimInstance]:
        """Pending instances whose boot is over: their kubelet registers the node now."""
        now = self.now()
        return [
            i
            for i in self.instances.values()
            if i.lifecycle == PENDING and not i.node_created and i.due is not None and i.due <= now
        ]

    def booted(self, iid: str) -> None:
        """The instance's Node exists: a Pending instance enters service."""
        instance = self.instances.get(iid)
        if instance is None:
            return
        instance.node_created = True
        if instance.lifecycle == PENDING:
            group = self.groups.get(instance.group) if instance.group is not None else None
            delay = group.spec.in_service_seconds if group is not None else 0.0
            if delay > 0:
                instance.due = self.now() + delay  # `advance` puts it in service then
            else:
                self._enter_service(instance)
        elif instance.lifecycle == TERMINATED and instance.due is None:
            instance.due = self._node_delete_due(instance, self.now())

    def _enter_service(self, instance: SimInstance) -> None:
        instance.lifecycle = IN_SERVICE
        instance.due = None
        for lb in self._balancers_of(instance.group):
            self._register(lb, instance.id, lb.port)

    def readdress(self, iid: str) -> None:
        """Another node took the instance's name before it registered: give it a new address."""
        instance = self.instances.get(iid)
        if instance is None or instance.node_created:
            return
        instance.private_ip = self._new_ip(instance.zone)
        instance.node_name = aws_node_name(instance.private_ip, instance.zone)

    def signals_due(self) -> list[tuple[SimInstance, str]]:
        """(instance, kubelet state) for nodes whose kubelet must learn its machine is going.

        A shutting-down machine's kubelet reports NotReady (graceful node shutdown); a
        terminated one says nothing at all.
        """
        due = []
        for instance in self.instances.values():
            if not instance.node_created or instance.node_gone:
                continue
            wanted = {TERMINATING: KUBELET_NOT_READY, TERMINATED: KUBELET_STOPPED}.get(
                instance.lifecycle
            )
            if wanted is not None and instance.kubelet_signalled != wanted:
                due.append((instance, wanted))
        return due

    def deletions_due(self) -> list[SimInstance]:
        """Terminated instances whose Node the cloud node lifecycle controller removes now."""
        now = self.now()
        return [
            i
            for i in self.instances.values()
            if i.lifecycle == TERMINATED
            and i.node_created
            and not i.node_gone
            and i.due is not None
            and i.due <= now
        ]

    def next_due(self) -> float | None:
        """The earliest future deadline, for the loop's sleep."""
        deadlines: list[float] = [i.due for i in self.instances.values() if i.due is not None]
        deadlines += [p for i in self.instances.values() if (p := self._purge_at(i)) is not None]
        for lb in self.load_balancers.values():
            deadlines += [
                r.draining_until for r in lb.registrations.values() if r.draining_until is not None
            ]
        return min(deadlines, default=None)

    # -- internals -----------------------------------------------------------------------------

    def _purge_at(self, instance: SimInstance) -> float | None:
        """When a terminated instance stops being listed (EC2 lists them for about an hour)."""
        if instance.terminated_at is None or (instance.node_created and not instance.node_gone):
            return None
        return instance.terminated_at + self.settings.terminated_retention_seconds

    def _node_delete_due(self, instance: SimInstance, now: float) -> float | None:
        if instance.node_created and not instance.node_gone:
            return now + self.settings.node_delete_seconds
        return None

    def _balancers_of(self, group: str | None) -> Iterable[SimLoadBalancer]:
        if group is None:
            return []
        return [lb for lb in self.load_balancers.values() if group in lb.node_groups]

    def _register(self, lb: SimLoadBalancer, iid: str, port: int) -> Registration:
        key = (iid, port)
        registration = lb.registrations.get(key)
        if registration is None:
            registration = lb.registrations[key] = Registration(iid, port, self.now())
        else:
            registration.draining_until = None
        return registration

    def _drain(self, lb: SimLoadBalancer, registration: Registration) -> None:
        if lb.deregistration_delay <= 0:
            lb.registrations.pop((registration.instance_id, registration.port), None)
        else:
            registration.draining_until = self.now() + lb.deregistration_delay

    def _drain_instance(self, lb: SimLoadBalancer, iid: str) -> None:
        for registration in lb.of(iid):
            if not registration.draining:
                self._drain(lb, registration)

    def _terminate(self, instance: SimInstance) -> None:
        instance.lifecycle = TERMINATING
        instance.due = self.now() + self.settings.shutdown_seconds
        for lb in self.load_balancers.values():
            self._drain_instance(lb, instance.id)

    def _leave_group(self, instance: SimInstance) -> None:
        group = self.groups.get(instance.group or "")
        if group is not None and instance.id in group.members:
            group.members.remove(instance.id)
        instance.group = None

    def _join(self, group: SimNodeGroup, instance: SimInstance) -> None:
        instance.group = group.name
        if instance.id not in group.members:
            group.members.append(instance.id)
        if instance.lifecycle == IN_SERVICE:
            for lb in self._balancers_of(group.name):
                self._register(lb, instance.id, lb.port)

    def _active(self, group: SimNodeGroup) -> list[SimInstance]:
        members = (self.instances[iid] for iid in group.members)
        return [i for i in members if i.lifecycle in (PENDING, IN_SERVICE)]

    def _keep_capacity(self, group: SimNodeGroup, now: float) -> None:
        active = self._active(group)
        missing = group.desired - len(active)
        for _ in range(missing):
            zone = self._zone_for(group)
            instance = self._new_instance(group, zone, self._new_ip(zone), None, PENDING)
            instance.due = now + group.spec.boot_seconds
            self._join(group, instance)
        if missing >= 0:
            return
        # Scale in like AWS's default policy: out-of-date instances first, then the most
        # crowded zone, then the oldest; instances protected from scale-in never.
        zones = Counter(i.zone for i in active)
        victims = sorted(
            (i for i in active if not i.protected),
            key=lambda i: (not self.out_of_date(i), -zones[i.zone], i.launched_at, i.id),
        )
        for instance in victims[:-missing]:
            self._terminate(instance)

    def _zone_for(self, group: SimNodeGroup) -> str:
        counts = Counter(i.zone for i in self._active(group))
        return min(group.spec.zone_list, key=lambda z: counts[z])

    def _new_ip(self, zone: str) -> str:
        while True:
            ip = zone_ip(zone, self.rng)
            if ip not in self.used_ips:
                self.used_ips.add(ip)
                return ip

    def _new_instance(
        self,
        group: SimNodeGroup,
        zone: str,
        ip: str,
        node_name: str | None,
        lifecycle: str,
    ) -> SimInstance:
        while True:
            iid = f"sim-{group.name}-{group.launched}"
            group.launched += 1
            if iid not in self.instances:
                break
        self.used_ips.add(ip)
        instance = SimInstance(
            id=iid,
            origin=group.name,
            zone=zone,
            launch_version=group.launch_version,
            private_ip=ip,
            node_name=node_name or aws_node_name(ip, zone),
            launched_at=self.now(),
            group=group.name,
            lifecycle=lifecycle,
            protected=group.protect_new,
        )
        self.instances[iid] = instance
        return instance


def _check_capacity(name: str, desired: int, min_size: int, max_size: int) -> None:
    if min(desired, min_size, max_size) < 0:
        raise CloudError(400, "ValidationError", f"node group {name}: capacities must be >= 0")
    if not min_size <= desired <= max_size:
        raise CloudError(
            400,
            "ValidationError",
            f"node group {name}: desired capacity {desired} must be between the minimum "
            f"{min_size} and the maximum {max_size}",
        )
