"""The node reconciler: host maintenance labels, and the shutdown/power-on flow.

Per node, level-based, from the last vCenter inventory (never a call per node to find out):

1. The node's VM, by providerID (`vsphere://<uuid>`) or by name, and its host. A node without a
   VM, or no inventory (vCenter failing), is left alone.
2. Labels `<prefix>esx-in-maintenance` (`true`/`false`) and `<prefix>esx-version`, written when
   they change, guarded by the node's resourceVersion.
3. The flow (see `transitions`): when the host is in maintenance and every node on it carries
   `<prefix>esx-reboot-ok=true`, cordon, drain with the drain engine (one non-blocking pass per
   reconcile), shut the guest down, power off after the timeout, keep it off, power it on when
   the host left, and once the node is Ready again uncordon it and remove the marks. Each step
   is recorded before it is taken; `ctx.ensure_may_act` guards every power operation.

vCenter and drain problems are Warning events on the node and retried; they never stop other
nodes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal

import structlog

from nodeops.controllers.esx.inventory import InventoryPoller
from nodeops.controllers.esx.keys import Keys
from nodeops.controllers.esx.metrics import FAILURES, POWER_ACTIONS
from nodeops.controllers.esx.transitions import (
    Action,
    Facts,
    Progress,
    ProgressError,
    Step,
    next_action,
)
from nodeops.controllers.kit import (
    DrainOutcome,
    EventSink,
    events_or_null,
    patch_node,
    record_step,
)
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.controller import ReconcileContext, Request, Result
from nodeops.kube.events import NORMAL, WARNING
from nodeops.kube.informer import Informer
from nodeops.providers.base import ProviderError
from nodeops.providers.vsphere.inventory import (
    HostState,
    Inventory,
    MaintenanceState,
    PowerState,
    VirtualMachine,
    vm_uuid_of_provider_id,
)
from nodeops.providers.vsphere.vcenter import GuestShutdown, VCenter

__all__ = ["DrainStep", "EsxReconciler", "MatchBy", "vm_of"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
DrainStep = Callable[[str, datetime], Awaitable[DrainOutcome]]
"""One non-blocking drain pass of a node (the kit's `drain_pass` bound to a Drainer)."""
MatchBy = Literal["providerID", "name"]

_ACTION = "EsxMaintenance"
_MAX_STEPS_PER_RECONCILE = 8


def vm_of(node: Obj, inventory: Inventory, match_by: MatchBy) -> VirtualMachine | None:
    """The node's VM: by the UUID in a `vsphere://` providerID, or by the node's name."""
    if match_by == "name":
        return inventory.vm_by_name(o.name(node))
    uuid = vm_uuid_of_provider_id(str((node.get("spec") or {}).get("providerID") or ""))
    return inventory.vm_by_uuid(uuid) if uuid else None


def ready_since(node: Obj, since: datetime) -> bool:
    """Ready=True in a status the kubelet posted after `since` (not the one it left behind
    when its VM went off)."""
    cond = o.condition(node, "Ready")
    if cond is None or cond.get("status") != "True":
        return False
    posted = o.parse_time(cond.get("lastHeartbeatTime")) or o.parse_time(
        cond.get("lastTransitionTime")
    )
    return posted is not None and posted >= since


class EsxReconciler:
    def __init__(
        self,
        *,
        client: Client,
        nodes: Informer,
        keys: Keys,
        poller: InventoryPoller,
        vcenter: VCenter,
        drain: DrainStep,
        match_by: MatchBy = "providerID",
        shutdown_timeout: float = 120.0,
        check_interval: float = 60.0,
        eviction_period: float = 5.0,
        drain_stopped: Callable[[str], None] | None = None,
        events: EventSink | None = None,
        clock: Callable[[], datetime] = o.now,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.keys = keys
        self.poller = poller
        self.vcenter = vcenter
        self.drain = drain
        self.match_by = match_by
        self.shutdown_timeout = shutdown_timeout
        self.check_interval = check_interval
        self.eviction_period = eviction_period
        self.drain_stopped = drain_stopped
        self.events = events_or_null(events)
        self.clock = clock
        # Guest shutdowns asked for by this process, by (node uid, step start): a resumed flow
        # asks again once, since a crash may have come between the record and the request.
        self._asked: set[tuple[str, str]] = set()
        self._warned: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------------------------------

    def nodes_on_host(self, host: str, inventory: Inventory) -> list[Obj]:
        out = []
        for node in self.nodes.objects():
            vm = vm_of(node, inventory, self.match_by)
            if vm is not None and vm.host == host:
                out.append(node)
        return out

    def host_mates(self, node: Obj) -> list[Request]:
        """The requests of every node on the same host (a reboot-ok label on one node can
        complete its host's set)."""
        inventory = self.poller.current
        if inventory is None or not self.nodes.has_synced:
            return []
        vm = vm_of(node, inventory, self.match_by)
        if vm is None or vm.host is None:
            return []
        return [Request.for_object(n) for n in self.nodes_on_host(vm.host, inventory)]

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        node = self.nodes.get(request.name)
        if node is None:
            return None
        inventory = self.poller.current
        if inventory is None:
            return None  # vCenter fails: the poller enqueues every node once it answers again
        vm = vm_of(node, inventory, self.match_by)
        host = inventory.host_of(vm) if vm is not None else None
        if vm is None or host is None:
            if self.keys.progress in o.annotations_of(node):
                # Mid-flow and its VM is gone from the inventory (deleted, renamed, moved to
                # another vCenter): nothing is done on a guess; a person decides.
                self._warn_once(node, "VMNotFound", "the node's VM is no longer in the vCenter")
                return Result(requeue_after=self.check_interval)
            return None  # not a VM of this vCenter: none of our business
        try:
            return await self._reconcile(node, vm, host, inventory, ctx)
        except errors.Conflict:
            log.debug("node changed meanwhile; looking again", node=request.name)
            return Result(requeue=True)

    async def _reconcile(
        self,
        node: Obj,
        vm: VirtualMachine,
        host: HostState,
        inventory: Inventory,
        ctx: ReconcileContext,
    ) -> Result:
        node = await self._label_host(node, host)
        try:
            progress = self._progress(node)
        except ProgressError as exc:
            self._warn_once(node, "InvalidProgress", f"{self.keys.progress}: {exc}; left as it is")
            return Result(requeue_after=self.check_interval)
        if progress is None and o.annotations_of(node).get(self.keys.reboot_initiated) == "true":
            node, progress = await self._adopt(node, host)
        power = vm.power
        for _ in range(_MAX_STEPS_PER_RECONCILE):
            facts = self._facts(node, host, inventory, power, progress)
            action = next_action(facts, progress)
            match action:
                case Action.NONE | Action.STAY_OFF:
                    return Result(requeue_after=self.check_interval)
                case Action.START:
                    node, progress = await self._start(node, host)
                case Action.CANCEL:
                    assert progress is not None
                    await self._finish(node, progress, cancelled=True)
                    return Result(requeue_after=self.check_interval)
                case Action.DRAIN:
                    assert progress is not None
                    after = await self._drain(node, progress)
                    if after is not None:
                        return Result(requeue_after=after)
                    node, progress = await self._record(node, progress, Step.SHUTTING_DOWN)
                    power = await self._shutdown_guest(node, vm, progress, ctx)
                case Action.WAIT_FOR_SHUTDOWN:
                    assert progress is not None
                    if self._ask_key(node, progress) not in self._asked:
                        power = await self._shutdown_guest(node, vm, progress, ctx)
                        continue
                    power = await self.vcenter.power_state(vm.ref)
                    if power == PowerState.ON:
                        waited = (self.clock() - progress.since).total_seconds()
                        left = max(0.0, self.shutdown_timeout - waited)
                        return Result(requeue_after=min(left + 0.05, 5.0))
                case Action.POWER_OFF:
                    assert progress is not None
                    if progress.step is not Step.POWERING_OFF:
                        self._event(
                            node,
                            NORMAL,
                            "PoweringOff",
                            f"the guest did not shut down within {self.shutdown_timeout:g}s; "
                            f"powering VM {vm.name} off",
                        )
                        node, progress = await self._record(node, progress, Step.POWERING_OFF)
                    power = await self._power(node, vm, PowerState.OFF, ctx)
                case Action.RECORD_OFF:
                    assert progress is not None
                    node, progress = await self._record(node, progress, Step.OFF)
                    self._event(
                        node,
                        NORMAL,
                        "PoweredOff",
                        f"VM {vm.name} is off until host {host.name} leaves maintenance",
                    )
                case Action.POWER_ON:
                    assert progress is not None
                    if progress.step is not Step.POWERING_ON:
                        node, progress = await self._record(node, progress, Step.POWERING_ON)
                    power = await self._power(node, vm, PowerState.ON, ctx)
                    self._event(
                        node,
                        NORMAL,
                        "PoweredOn",
                        f"host {host.name} left maintenance; VM {vm.name} is on, waiting for "
                        "the node to be Ready",
                    )
                case Action.WAIT_FOR_READY:
                    return Result(requeue_after=self.check_interval)
                case Action.FINISH:
                    assert progress is not None
                    await self._finish(node, progress, cancelled=False)
                    return Result(requeue_after=self.check_interval)
        return Result(requeue=True)

    def _facts(
        self,
        node: Obj,
        host: HostState,
        inventory: Inventory,
        power: str,
        progress: Progress | None,
    ) -> Facts:
        in_maintenance = host.maintenance is MaintenanceState.IN_MAINTENANCE
        all_ok = in_maintenance and progress is None and self._all_reboot_ok(host, inventory)
        since = progress.since if progress is not None else self.clock()
        overdue = (self.clock() - since).total_seconds() >= self.shutdown_timeout
        return Facts(
            host_in_maintenance=in_maintenance,
            all_reboot_ok=all_ok,
            vm_on=power == PowerState.ON,
            node_ready=progress is not None and ready_since(node, progress.since),
            shutdown_overdue=overdue,
        )

    def _all_reboot_ok(self, host: HostState, inventory: Inventory) -> bool:
        mates = self.nodes_on_host(host.ref, inventory)
        return bool(mates) and all(o.labels(n).get(self.keys.reboot_ok) == "true" for n in mates)

    def _progress(self, node: Obj) -> Progress | None:
        return Progress.of_node(node, self.keys.progress)

    # ------------------------------------------------------------------ labels

    async def _label_host(self, node: Obj, host: HostState) -> Obj:
        labels = o.labels(node)
        wanted: dict[str, str] = {self.keys.in_maintenance: host.maintenance.value}
        if host.version:
            wanted[self.keys.version] = host.version
        changes = {k: v for k, v in wanted.items() if labels.get(k) != v}
        if not changes:
            return node
        if self.keys.in_maintenance in changes:
            log.info(
                "ESX host maintenance state", node=o.name(node), host=host.name,
                in_maintenance=host.maintenance.value,
            )  # fmt: skip
        return await self._patch(node, {"metadata": {"labels": changes}})

    # ------------------------------------------------------------------ steps

    async def _start(self, node: Obj, host: HostState) -> tuple[Obj, Progress]:
        already = bool((node.get("spec") or {}).get("unschedulable"))
        progress = Progress.begin(self.clock(), cordoned=not already)
        body: Obj = {
            "metadata": {
                "annotations": {
                    self.keys.progress: progress.to_annotation(),
                    self.keys.reboot_initiated: "true",
                }
            }
        }
        if not already:
            body["spec"] = {"unschedulable": True}
        node = await self._patch(node, body)
        log.info("ESX maintenance: cordoned, draining", node=o.name(node), host=host.name)
        self._event(
            node,
            NORMAL,
            "Draining",
            f"host {host.name} is in maintenance and every node on it is "
            f"{self.keys.reboot_ok}=true: cordoned; draining before its VM is shut down",
        )
        return node, progress

    async def _adopt(self, node: Obj, host: HostState) -> tuple[Obj, Progress]:
        """A node marked `esx-reboot-initiated` without a progress record (the reference
        controller's, or a record removed by hand): carried on from what its host says, the
        drain and shutdown while it is in maintenance, the power-on once it is not."""
        now = self.clock()
        in_maintenance = host.maintenance is MaintenanceState.IN_MAINTENANCE
        step = Step.DRAINING if in_maintenance else Step.POWERING_ON
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        progress = Progress(step, now, now, cordoned=cordoned)
        body: Obj = {"metadata": {"annotations": {self.keys.progress: progress.to_annotation()}}}
        if in_maintenance and not cordoned:
            body["spec"] = {"unschedulable": True}
            progress = Progress(step, now, now, cordoned=True)
            body["metadata"]["annotations"][self.keys.progress] = progress.to_annotation()
        node = await self._patch(node, body)
        self._event(
            node,
            NORMAL,
            "Adopted",
            f"{self.keys.reboot_initiated}=true without a progress record: carried on at "
            f"{step.value}",
        )
        return node, progress

    async def _drain(self, node: Obj, progress: Progress) -> float | None:
        """One drain pass; None once drained, else when to look again."""
        outcome = await self.drain(o.name(node), progress.started)
        if outcome.done:
            self._event(node, NORMAL, "Drained", "node drained; shutting its VM down")
            return None
        if outcome.failed:
            self._warn(node, "DrainFailed", outcome.message)
            return self.eviction_period
        failures = outcome.progress.failures if outcome.progress is not None else {}
        # Refused evictions are asked again after a while; deletions under way end sooner.
        return self.eviction_period if failures else min(self.eviction_period, 0.25)

    async def _shutdown_guest(
        self, node: Obj, vm: VirtualMachine, progress: Progress, ctx: ReconcileContext
    ) -> str:
        """Ask the guest to shut down; the VM's power state afterwards."""
        ctx.ensure_may_act(f"shut down VM {vm.name} of node {o.name(node)}")
        self._asked.add(self._ask_key(node, progress))
        try:
            outcome = await self.vcenter.shutdown_guest(vm.ref)
        except ProviderError as exc:
            self._warn(node, "ShutdownFailed", str(exc))
            raise
        if outcome is GuestShutdown.ALREADY_OFF:
            # An earlier pass powered it off and the inventory has not seen it yet: nothing
            # was asked, so nothing is counted or told.
            self.poller.poll_soon()
            return str(PowerState.OFF)
        if outcome is GuestShutdown.REFUSED:
            # No VMware Tools to ask: straight to power off (the timeout would change nothing).
            self._asked.discard(self._ask_key(node, progress))
            self.poller.poll_soon()
            return await self._power(node, vm, PowerState.OFF, ctx)
        POWER_ACTIONS.labels("shutdown_guest").inc()
        self._event(node, NORMAL, "ShuttingDown", f"guest OS of VM {vm.name} asked to shut down")
        self.poller.poll_soon()
        return await self.vcenter.power_state(vm.ref)

    async def _power(
        self, node: Obj, vm: VirtualMachine, wanted: PowerState, ctx: ReconcileContext
    ) -> str:
        """Power the VM on or off unless it already is (read now, not from the inventory)."""
        verb = "on" if wanted is PowerState.ON else "off"
        current = await self.vcenter.power_state(vm.ref)
        if current == wanted:
            return current
        ctx.ensure_may_act(f"power VM {vm.name} of node {o.name(node)} {verb}")
        try:
            if wanted is PowerState.ON:
                await self.vcenter.power_on(vm.ref)
            else:
                await self.vcenter.power_off(vm.ref)
        except ProviderError as exc:
            self._warn(node, f"Power{verb.capitalize()}Failed", str(exc))
            raise
        POWER_ACTIONS.labels(f"power_{verb}").inc()
        log.info(f"VM powered {verb}", node=o.name(node), vm=vm.name)
        self.poller.poll_soon()
        return str(wanted)

    async def _finish(self, node: Obj, progress: Progress, *, cancelled: bool) -> None:
        body: Obj = {
            "metadata": {
                "annotations": {self.keys.progress: None, self.keys.reboot_initiated: None},
                "labels": {self.keys.reboot_ok: None},
            }
        }
        if progress.cordoned:
            body["spec"] = {"unschedulable": None}
        await self._patch(node, body)
        if cancelled and self.drain_stopped is not None:
            self.drain_stopped(o.name(node))
        uncordoned = "; uncordoned" if progress.cordoned else ""
        if cancelled:
            note = "the host left maintenance before the VM was shut down" + uncordoned
            self._event(node, NORMAL, "MaintenanceCancelled", note)
        else:
            self._event(node, NORMAL, "MaintenanceDone", "the node is Ready again" + uncordoned)
        log.info("ESX maintenance flow ended", node=o.name(node), cancelled=cancelled)

    # ------------------------------------------------------------------ writes

    def _ask_key(self, node: Obj, progress: Progress) -> tuple[str, str]:
        return (o.uid(node), o.format_time(progress.since))

    async def _record(self, node: Obj, progress: Progress, step: Step) -> tuple[Obj, Progress]:
        return await record_step(
            self.client, node, self.keys.progress, progress, step, self.clock()
        )

    async def _patch(self, node: Obj, body: Obj) -> Obj:
        return await patch_node(self.client, node, body)

    def _warn_once(self, node: Obj, reason: str, note: str) -> None:
        key = (o.uid(node), reason)
        if key not in self._warned:
            if len(self._warned) > 10_000:
                self._warned.clear()
            self._warned.add(key)
            self._warn(node, reason, note)

    def _warn(self, node: Obj, reason: str, note: str) -> None:
        FAILURES.labels(reason).inc()
        self._event(node, WARNING, reason, note)

    def _event(self, node: Obj, type_: str, reason: str, note: str) -> None:
        self.events.event(node, type_, reason, _ACTION, note)
