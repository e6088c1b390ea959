"""What vCenter knows about hosts and virtual machines, as plain data.

One property-collector answer (hosts and VMs of the whole inventory, a handful of properties
each) becomes an `Inventory`; everything the esx controller decides is decided from it, so a
poll costs one call however many nodes there are, and the decisions are testable without a
vCenter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "HOST_PROPERTIES",
    "TASK_PROPERTIES",
    "VM_PROPERTIES",
    "HostState",
    "Inventory",
    "MaintenanceState",
    "PowerState",
    "VirtualMachine",
    "inventory_from",
    "is_entering_maintenance",
    "vm_uuid_of_provider_id",
]

#: Properties read of each HostSystem: maintenance is a flag once entered and a running task
#: while entering (the task waits for the host's VMs to be off or gone).
HOST_PROPERTIES = (
    "name",
    "runtime.inMaintenanceMode",
    "recentTask",
    "summary.config.product.version",
)
#: Properties read of each VirtualMachine.
VM_PROPERTIES = ("name", "config.uuid", "runtime.host", "runtime.powerState")
#: Properties read of each of a host's recent tasks.
TASK_PROPERTIES = ("info.name", "info.descriptionId", "info.state", "info.entity")

ENTER_MAINTENANCE_TASK = "EnterMaintenanceMode_Task"


class MaintenanceState(StrEnum):
    """A host's maintenance state, spelt as the `esx-in-maintenance` label values."""

    NONE = "false"
    IN_MAINTENANCE = "true"
    """In maintenance mode, or entering it (its EnterMaintenanceMode task is running)."""


class PowerState(StrEnum):
    ON = "poweredOn"
    OFF = "poweredOff"
    SUSPENDED = "suspended"


@dataclass(frozen=True, slots=True)
class HostState:
    ref: str
    name: str
    in_maintenance_mode: bool
    entering_maintenance: bool
    version: str = ""

    @property
    def maintenance(self) -> MaintenanceState:
        if self.in_maintenance_mode or self.entering_maintenance:
            return MaintenanceState.IN_MAINTENANCE
        return MaintenanceState.NONE


@dataclass(frozen=True, slots=True)
class VirtualMachine:
    ref: str
    name: str
    uuid: str
    host: str | None
    power: str


@dataclass(frozen=True)
class Inventory:
    hosts: Mapping[str, HostState] = field(default_factory=dict)
    vms: tuple[VirtualMachine, ...] = ()

    def __post_init__(self) -> None:
        by_uuid: dict[str, VirtualMachine] = {}
        by_name: dict[str, list[VirtualMachine]] = {}
        for vm in self.vms:
            if vm.uuid:
                by_uuid[vm.uuid.lower()] = vm
            by_name.setdefault(vm.name, []).append(vm)
        object.__setattr__(self, "_by_uuid", by_uuid)
        object.__setattr__(self, "_by_name", by_name)

    def vm_by_uuid(self, uuid: str) -> VirtualMachine | None:
        by_uuid: dict[str, VirtualMachine] = self._by_uuid  # type: ignore[attr-defined]
        return by_uuid.get(uuid.lower())

    def vm_by_name(self, name: str) -> VirtualMachine | None:
        """The VM of that name; None when there is none or several (names are not unique
        across datacenters, and acting on the wrong machine is worse than not acting)."""
        by_name: dict[str, list[VirtualMachine]] = self._by_name  # type: ignore[attr-defined]
        found = by_name.get(name) or []
        return found[0] if len(found) == 1 else None

    def host_of(self, vm: VirtualMachine) -> HostState | None:
        return self.hosts.get(vm.host) if vm.host else None


def vm_uuid_of_provider_id(provider_id: str) -> str | None:
    """The VM's BIOS UUID in a vSphere cloud provider's `vsphere://<uuid>`, else None."""
    prefix = "vsphere://"
    if not provider_id.startswith(prefix):
        return None
    uuid = provider_id[len(prefix) :].strip("/")
    return uuid or None


def is_entering_maintenance(task: Mapping[str, Any]) -> bool:
    """A recent task that is a host entering maintenance and still running (queued, failed and
    finished ones say nothing about now: recent tasks stay listed for a while)."""
    name = str(task.get("info.name") or "")
    description = str(task.get("info.descriptionId") or "")
    entering = name == ENTER_MAINTENANCE_TASK or description.endswith(".enterMaintenanceMode")
    return entering and task.get("info.state") == "running"


def inventory_from(objects: Iterable[tuple[str, str, Mapping[str, Any]]]) -> Inventory:
    """An inventory from `(kind, ref, properties)` triples of hosts, VMs and the hosts' recent
    tasks (whose `info.entity` names their host)."""
    hosts: dict[str, HostState] = {}
    vms: list[VirtualMachine] = []
    entering: set[str] = set()
    pending: list[tuple[str, Mapping[str, Any]]] = []
    for kind, ref, props in objects:
        if kind == "Task":
            if is_entering_maintenance(props) and props.get("info.entity"):
                entering.add(str(props["info.entity"]))
        elif kind == "HostSystem":
            pending.append((ref, props))
        elif kind == "VirtualMachine":
            host = props.get("runtime.host")
            vms.append(
                VirtualMachine(
                    ref=ref,
                    name=str(props.get("name") or ""),
                    uuid=str(props.get("config.uuid") or ""),
                    host=str(host) if host else None,
                    power=str(props.get("runtime.powerState") or ""),
                )
            )
    for ref, props in pending:
        hosts[ref] = HostState(
            ref=ref,
            name=str(props.get("name") or ref),
            in_maintenance_mode=bool(props.get("runtime.inMaintenanceMode")),
            entering_maintenance=ref in entering,
            version=str(props.get("summary.config.product.version") or ""),
        )
    return Inventory(hosts=hosts, vms=tuple(vms))
