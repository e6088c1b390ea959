"""A vCenter session over pyVmomi, with the few calls the esx controller makes.

pyVmomi is synchronous, so every call runs in a worker thread (`asyncio.to_thread`) and is
bounded by a timeout; the event loop never waits on vCenter. One session is kept and logged in
again when vCenter forgets it. Every failure surfaces as `VCenterError` whose message names the
cause a person can fix (the URL, the credentials, the CA), and whose `retryable` says whether
asking again can help.
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import structlog

from nodeops.providers.base import ProviderError
from nodeops.providers.vsphere.inventory import (
    HOST_PROPERTIES,
    TASK_PROPERTIES,
    VM_PROPERTIES,
    Inventory,
    PowerState,
    inventory_from,
)

__all__ = ["Credentials", "GuestShutdown", "VCenter", "VCenterError", "load_credentials"]

log = structlog.get_logger(__name__)

T = TypeVar("T")


class GuestShutdown(StrEnum):
    """What asking a guest to shut down came to."""

    ASKED = "asked"
    REFUSED = "refused"
    """No VMware Tools running, or the call is disabled on the VM: power it off instead."""
    ALREADY_OFF = "off"
    """Nothing was asked: the VM was off already (an earlier pass powered it off)."""


class VCenterError(ProviderError):
    """A vCenter call that failed; `code` says how (Unreachable, TLS, Login, Fault, Timeout)."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str


def load_credentials(path: Path) -> Credentials:
    """`username` and `password` from a file mounted from a Secret: YAML or JSON with those two
    keys. Raises `ValueError` naming the file and what is missing."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the credentials file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping with username and password")
    missing = [k for k in ("username", "password") if not isinstance(raw.get(k), str) or not raw[k]]
    if missing:
        raise ValueError(f"{path}: {', '.join(missing)}: required, a non-empty string")
    return Credentials(raw["username"], raw["password"])


class VCenter:
    """One vCenter: a session, an inventory snapshot per call, and power operations."""

    def __init__(
        self,
        url: str,
        credentials: Callable[[], Credentials],
        *,
        ca_file: Path | None = None,
        insecure: bool = False,
        timeout: float = 30.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"vCenter URL {url!r} must look like https://vcenter.example.com")
        self.url = url
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._path = parts.path.rstrip("/") or "/sdk"
        self._credentials = credentials
        self._ca_file = ca_file
        self._insecure = insecure
        self.timeout = timeout
        self._si: Any = None
        self._lock = threading.Lock()  # one login at a time; pyVmomi calls share the session

    # ------------------------------------------------------------------ calls

    async def inventory(self) -> Inventory:
        """Every host and VM with the properties decisions need: one property-collector call."""
        return await self._call("RetrieveProperties", self._inventory)

    async def power_state(self, vm_ref: str) -> str:
        """The VM's power state read now (not from the last inventory), before acting on it."""
        return await self._call(
            "PowerState", lambda si: str(self._vm(si, vm_ref).runtime.powerState)
        )

    async def shutdown_guest(self, vm_ref: str) -> GuestShutdown:
        """Ask the guest OS to shut down, unless the VM is off already."""
        return await self._call("ShutdownGuest", lambda si: self._shutdown_guest(si, vm_ref))

    async def power_off(self, vm_ref: str) -> None:
        await self._call("PowerOffVM_Task", lambda si: self._power(si, vm_ref, PowerState.OFF))

    async def power_on(self, vm_ref: str) -> None:
        await self._call("PowerOnVM_Task", lambda si: self._power(si, vm_ref, PowerState.ON))

    async def close(self) -> None:
        si = self._si
        self._si = None
        if si is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(si.content.sessionManager.Logout), 5)
            except Exception as exc:  # the session expires on its own
                log.debug("vCenter logout failed", error=str(exc))

    # ------------------------------------------------------------------ plumbing

    async def _call(self, operation: str, fn: Callable[[Any], T]) -> T:
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.to_thread(self._with_session, fn)
        except TimeoutError:
            raise VCenterError(
                "Timeout",
                f"{self.url} did not answer within {self.timeout:g}s",
                retryable=True,
                operation=operation,
            ) from None
        except VCenterError as exc:
            raise VCenterError(
                exc.code, exc.message, retryable=exc.retryable, operation=operation
            ) from exc.__cause__

    def _with_session(self, fn: Callable[[Any], T]) -> T:
        from pyVmomi import vim, vmodl

        si = self._session()
        try:
            try:
                return fn(si)
            except vim.fault.NotAuthenticated:
                self._si = None  # the session expired: log in again, once
                return fn(self._session())
        except vmodl.MethodFault as exc:
            raise VCenterError("Fault", _fault_text(exc), retryable=True) from exc
        except (OSError, http.client.HTTPException) as exc:
            self._si = None
            raise VCenterError("Unreachable", f"{self.url}: {exc}", retryable=True) from exc

    def _session(self) -> Any:
        with self._lock:
            if self._si is None:
                self._si = self._login()
            return self._si

    def _login(self) -> Any:
        from pyVim.connect import SmartConnect
        from pyVmomi import vim, vmodl

        creds = self._credentials()
        context: ssl.SSLContext | None = None
        if self._scheme == "https":
            context = ssl.create_default_context(
                cafile=str(self._ca_file) if self._ca_file else None
            )
            if self._insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            return SmartConnect(
                protocol=self._scheme,
                host=self._host,
                port=self._port,
                path=self._path,
                user=creds.username,
                pwd=creds.password,
                sslContext=context,
                httpConnectionTimeout=self.timeout,
            )
        except vim.fault.InvalidLogin:
            raise VCenterError(
                "Login",
                f"{self.url} refused the login of {creds.username!r}: wrong user name or password",
            ) from None
        except ssl.SSLCertVerificationError as exc:
            where = f"the CA in {self._ca_file}" if self._ca_file else "the system's CAs"
            raise VCenterError(
                "TLS",
                f"{self.url}: its certificate is not trusted by {where}: {exc.verify_message}",
            ) from None
        except ssl.SSLError as exc:
            raise VCenterError("TLS", f"{self.url}: TLS failed: {exc}", retryable=True) from None
        except (TimeoutError, OSError) as exc:
            raise VCenterError(
                "Unreachable", f"cannot connect to {self.url}: {exc}", retryable=True
            ) from None
        except http.client.HTTPException as exc:
            raise VCenterError(
                "Unreachable", f"{self.url}: not a vCenter answer: {exc}", retryable=True
            ) from None
        except vmodl.MethodFault as exc:
            raise VCenterError("Login", f"{self.url}: {_fault_text(exc)}", retryable=True) from exc

    def _inventory(self, si: Any) -> Inventory:
        from pyVmomi import vim, vmodl

        pc = vmodl.query.PropertyCollector
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(
            content.rootFolder, [vim.HostSystem, vim.VirtualMachine], True
        )
        try:
            spec = pc.FilterSpec(
                objectSet=[
                    pc.ObjectSpec(
                        obj=view,
                        skip=True,
                        selectSet=[
                            pc.TraversalSpec(
                                name="view",
                                path="view",
                                skip=False,
                                type=vim.view.ContainerView,
                                selectSet=[pc.SelectionSpec(name="tasks")],
                            ),
                            pc.TraversalSpec(
                                name="tasks", path="recentTask", skip=False, type=vim.HostSystem
                            ),
                        ],
                    )
                ],
                propSet=[
                    pc.PropertySpec(type=vim.HostSystem, pathSet=list(HOST_PROPERTIES)),
                    pc.PropertySpec(type=vim.VirtualMachine, pathSet=list(VM_PROPERTIES)),
                    pc.PropertySpec(type=vim.Task, pathSet=list(TASK_PROPERTIES)),
                ],
            )
            triples: list[tuple[str, str, dict[str, Any]]] = []
            result = content.propertyCollector.RetrievePropertiesEx([spec], pc.RetrieveOptions())
            while result is not None:
                for item in result.objects:
                    props = {p.name: _plain(p.val) for p in item.propSet or []}
                    triples.append((item.obj._wsdlName, item.obj._moId, props))
                if not result.token:
                    break
                result = content.propertyCollector.ContinueRetrievePropertiesEx(result.token)
        finally:
            view.Destroy()
        return inventory_from(triples)

    @staticmethod
    def _vm(si: Any, ref: str) -> Any:
        from pyVmomi import vim

        return vim.VirtualMachine(ref, si._stub)

    def _shutdown_guest(self, si: Any, ref: str) -> GuestShutdown:
        from pyVmomi import vim

        vm = self._vm(si, ref)
        if str(vm.runtime.powerState) != PowerState.ON:
            return GuestShutdown.ALREADY_OFF
        try:
            vm.ShutdownGuest()
        except (vim.fault.ToolsUnavailable, vim.fault.InvalidState, vim.fault.MethodDisabled):
            return GuestShutdown.REFUSED
        return GuestShutdown.ASKED

    def _power(self, si: Any, ref: str, wanted: PowerState) -> None:
        """Power the VM on or off unless it already is, and wait for the task's end."""
        vm = self._vm(si, ref)
        if str(vm.runtime.powerState) == wanted:
            return
        task = vm.PowerOnVM_Task() if wanted is PowerState.ON else vm.PowerOffVM_Task()
        _wait(task, self.timeout)
        if str(vm.runtime.powerState) != wanted:
            raise VCenterError(
                "IncorrectInstanceState",
                f"VM {ref} is {vm.runtime.powerState} after its power task",
                retryable=True,
            )


def _wait(task: Any, timeout: float) -> None:
    """Wait for a vCenter task in the worker thread (short polls: tasks of power operations
    end in seconds); raise its fault."""
    import time

    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        info = task.info
        if info.state == "success":
            return
        if info.state == "error":
            raise VCenterError("Fault", _fault_text(info.error), retryable=True)
        if time.monotonic() > deadline:
            raise VCenterError("Timeout", f"task {task._moId} still {info.state}", retryable=True)
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _plain(value: Any) -> Any:
    """Managed object references become their ids; everything else stays as it is."""
    moid = getattr(value, "_moId", None)
    return moid if moid is not None else value


def _fault_text(fault: Any) -> str:
    message = getattr(fault, "msg", None) or getattr(fault, "localizedMessage", None)
    return f"{type(fault).__name__}: {message}" if message else type(fault).__name__
