"""govmomi's vCenter simulator (tests/integration/esx/vcsim, built by .ci/run into .venv/bin)
run on loopback with a TLS certificate of its own CA, and driven with pyVmomi the way a person
drives a vCenter: maintenance mode in and out, VMs renamed, power states read.

pyVmomi is imported when the simulator is started, so a module importing this one loads without
the vsphere extra.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeops.sim.server.tls import self_signed

VCSIM = os.environ.get("NODEOPS_VCSIM") or shutil.which("vcsim")
needs_vcsim = pytest.mark.skipif(
    VCSIM is None,
    reason="no vcsim binary (.ci/run builds it from Debian's govmomi source into .venv/bin)",
)

USER, PASSWORD = "operator", "s3cret"


@dataclass(frozen=True)
class Vm:
    ref: str
    name: str
    uuid: str
    host: str


class Vcsim:
    """The simulator process and a pyVmomi session to drive it the way a person would."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, ca_file: Path) -> None:
        self.proc = proc
        self.url = url
        self.ca_file = ca_file
        self._si: Any = None

    def _session(self) -> Any:
        from pyVim.connect import SmartConnect

        if self._si is None:
            host, port = self.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
            context = ssl.create_default_context(cafile=str(self.ca_file))
            self._si = SmartConnect(
                host=host, port=int(port), user=USER, pwd=PASSWORD, sslContext=context
            )
        return self._si

    def _objects(self, kind: str) -> list[Any]:
        from pyVmomi import vim

        content = self._session().RetrieveContent()
        view = content.viewManager.CreateContainerView(
            content.rootFolder, [getattr(vim, kind)], True
        )
        try:
            return list(view.view)
        finally:
            view.Destroy()

    def _vms(self) -> list[Vm]:
        return [
            Vm(vm._moId, vm.name, vm.config.uuid, vm.runtime.host._moId)
            for vm in self._objects("VirtualMachine")
        ]

    async def vms(self) -> list[Vm]:
        return await asyncio.to_thread(self._vms)

    def _power(self) -> dict[str, str]:
        return {vm._moId: str(vm.runtime.powerState) for vm in self._objects("VirtualMachine")}

    async def power(self) -> dict[str, str]:
        """Each VM's power state, by its reference."""
        return await asyncio.to_thread(self._power)

    def _maintenance(self, host_ref: str, enter: bool) -> None:
        from pyVim.task import WaitForTask

        host = next(h for h in self._objects("HostSystem") if h._moId == host_ref)
        task = (
            host.EnterMaintenanceMode_Task(timeout=0)
            if enter
            else host.ExitMaintenanceMode_Task(timeout=0)
        )
        assert WaitForTask(task) == "success"

    async def enter_maintenance(self, host_ref: str) -> None:
        await asyncio.to_thread(self._maintenance, host_ref, True)

    async def exit_maintenance(self, host_ref: str) -> None:
        await asyncio.to_thread(self._maintenance, host_ref, False)

    async def in_maintenance(self, host_ref: str) -> bool:
        def read() -> bool:
            host = next(h for h in self._objects("HostSystem") if h._moId == host_ref)
            return bool(host.runtime.inMaintenanceMode)

        return await asyncio.to_thread(read)

    def _power_off(self, vm_ref: str) -> None:
        from pyVim.task import WaitForTask

        vm = next(v for v in self._objects("VirtualMachine") if v._moId == vm_ref)
        assert WaitForTask(vm.PowerOffVM_Task()) == "success"

    async def power_off(self, vm_ref: str) -> None:
        """Power a VM off as a person in vCenter's client would."""
        await asyncio.to_thread(self._power_off, vm_ref)

    def _rename(self, vm_ref: str, name: str) -> None:
        from pyVim.task import WaitForTask

        vm = next(v for v in self._objects("VirtualMachine") if v._moId == vm_ref)
        assert WaitForTask(vm.Rename_Task(newName=name)) == "success"

    async def rename(self, vm_ref: str, name: str) -> None:
        await asyncio.to_thread(self._rename, vm_ref, name)


async def start_vcsim(tmp: Path, *, vms: int = 3, args: tuple[str, ...] = ()) -> Vcsim:
    assert VCSIM is not None
    cert, key = self_signed("127.0.0.1")
    (tmp / "vcsim.crt").write_bytes(cert)
    (tmp / "vcsim.key").write_bytes(key)
    proc = await asyncio.create_subprocess_exec(
        VCSIM, "-username", USER, "-password", PASSWORD, "-hosts", "2", "-vms", str(vms),
        "-tls-cert", str(tmp / "vcsim.crt"), "-tls-key", str(tmp / "vcsim.key"), *args,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    url = line.decode().strip()
    assert url.startswith("https://"), f"vcsim printed {line!r}"
    return Vcsim(proc, url, tmp / "vcsim.crt")
