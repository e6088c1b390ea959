"""The inventory read from one property-collector answer, and how nodes find their VMs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers.esx.keys import keys_for
from nodeops.controllers.esx.reconciler import ready_since, vm_of
from nodeops.providers.vsphere.inventory import (
    MaintenanceState,
    inventory_from,
    vm_uuid_of_provider_id,
)
from nodeops.providers.vsphere.vcenter import load_credentials

UUID = "4211D0C5-1234-5678-9ABC-DEF012345678"

OBJECTS: list[tuple[str, str, dict[str, Any]]] = [
    ("HostSystem", "host-1", {"name": "esx-1", "runtime.inMaintenanceMode": False,
                              "summary.config.product.version": "8.0.2"}),
    ("HostSystem", "host-2", {"name": "esx-2", "runtime.inMaintenanceMode": True}),
    ("HostSystem", "host-3", {"name": "esx-3", "runtime.inMaintenanceMode": False}),
    ("Task", "task-1", {"info.name": "EnterMaintenanceMode_Task", "info.state": "running",
                        "info.entity": "host-1"}),
    ("Task", "task-2", {"info.descriptionId": "HostSystem.enterMaintenanceMode",
                        "info.state": "success", "info.entity": "host-3"}),
    ("VirtualMachine", "vm-1", {"name": "node-a", "config.uuid": UUID.lower(),
                                "runtime.host": "host-1", "runtime.powerState": "poweredOn"}),
    ("VirtualMachine", "vm-2", {"name": "twin", "config.uuid": "u2", "runtime.host": "host-2"}),
    ("VirtualMachine", "vm-3", {"name": "twin", "config.uuid": "u3", "runtime.host": "host-2"}),
]  # fmt: skip


def node(name: str, provider_id: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"providerID": provider_id}}


def test_maintenance_is_the_flag_or_a_running_enter_task() -> None:
    inventory = inventory_from(OBJECTS)
    states = {ref: h.maintenance for ref, h in inventory.hosts.items()}
    assert states == {
        "host-1": MaintenanceState.IN_MAINTENANCE,  # entering: its task runs
        "host-2": MaintenanceState.IN_MAINTENANCE,
        "host-3": MaintenanceState.NONE,  # the task finished long ago; the flag says no
    }
    assert inventory.hosts["host-1"].version == "8.0.2"


def test_nodes_find_their_vm_by_provider_id_or_by_unique_name() -> None:
    inventory = inventory_from(OBJECTS)
    found = vm_of(node("x", f"vsphere://{UUID}"), inventory, "providerID")
    assert found is not None and found.ref == "vm-1"
    assert inventory.host_of(found) is inventory.hosts["host-1"]
    assert vm_of(node("node-a"), inventory, "name") is not None
    assert vm_of(node("twin"), inventory, "name") is None  # two VMs of that name: neither
    assert vm_of(node("node-a", "aws:///eu-west-1a/i-1"), inventory, "providerID") is None
    assert vm_uuid_of_provider_id("vsphere://") is None


def test_ready_counts_only_a_status_posted_after_the_step_began() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def with_ready(status: str, heartbeat: datetime) -> dict[str, Any]:
        stamp = heartbeat.strftime("%Y-%m-%dT%H:%M:%SZ")
        cond = {"type": "Ready", "status": status, "lastHeartbeatTime": stamp}
        return {"metadata": {"name": "n"}, "status": {"conditions": [cond]}}

    assert ready_since(with_ready("True", t0 + timedelta(seconds=1)), t0)
    assert not ready_since(with_ready("True", t0 - timedelta(seconds=1)), t0)
    assert not ready_since(with_ready("Unknown", t0 + timedelta(seconds=1)), t0)


def test_compat_keys_are_the_references() -> None:
    keys = keys_for("sapcc")
    assert keys.in_maintenance == "cloud.sap/esx-in-maintenance"
    assert keys.reboot_ok == "cloud.sap/esx-reboot-ok"
    assert keys.version == "cloud.sap/esx-version"
    assert keys.reboot_initiated == "cloud.sap/esx-reboot-initiated"
    assert keys_for(None, "example.com/").reboot_ok == "example.com/esx-reboot-ok"
    with pytest.raises(ValueError, match="DNS subdomain"):
        keys_for(None, "Not A Prefix")


def test_credentials_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "creds.yaml"
    path.write_text("username: u\n")
    with pytest.raises(ValueError, match=f"{path}: password: required"):
        load_credentials(path)
    path.write_text("- a\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_credentials(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_credentials(tmp_path / "missing.yaml")
    path.write_text("username: u\npassword: p\n")
    assert load_credentials(path).password == "p"
