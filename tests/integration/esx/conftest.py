"""A vCenter simulator (govmomi's, built from tests/integration/esx/vcsim) beside a simulated
Kubernetes cluster whose nodes run on its VMs, and the esx controller run by a real manager.

The test drives vCenter with pyVmomi (maintenance mode in and out) and plays the kubelet: a
node's kubelet reports NotReady while its VM is off and Ready once it is on again, as a real
kubelet on that VM would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeops.controllers import SetupContext
from nodeops.controllers.esx import PLUGIN, EsxSettings
from nodeops.kube import Client, Manager
from nodeops.kube.resources import EVENTS, NODES, PODS
from nodeops.sim.cluster.sim_annotations import KUBELET_NOT_READY, KUBELET_RUNNING, KUBELET_STATE
from nodeops.sim.serve import SimCluster, SimOptions
from tests.vcsim import PASSWORD, USER, VCSIM, Vcsim, Vm, start_vcsim
from tests.waiting import until

TIME_SCALE = 20.0

pytest.importorskip("pyVmomi", reason="pyVmomi (the vsphere extra)")


@dataclass
class Running:
    manager: Manager
    task: asyncio.Task[int]
    client: Client

    async def stop(self) -> None:
        self.manager.stop()
        try:
            await asyncio.wait_for(self.task, 30)
        finally:
            await self.client.close()

    async def crash(self) -> None:
        """End the operator at once, as kill -9 would: every reconcile is cut off wherever it
        is, nothing is finished or cleaned up."""
        for controller in self.manager.controllers:
            controller.cancel()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        for controller in self.manager.controllers:
            with contextlib.suppress(BaseException):
                await controller.stop(0)
        await self.client.close()


@dataclass
class Env:
    sim: SimCluster
    client: Client
    tmp: Path
    vcsim: Vcsim
    host: str
    """The host whose two VMs carry the nodes esx-a and esx-b."""
    vm_of: dict[str, Vm]
    running: list[Running] = field(default_factory=list)

    def credentials(self, password: str = PASSWORD) -> Path:
        path = self.tmp / f"credentials-{password}.yaml"
        path.write_text(f"username: {USER}\npassword: {password}\n")
        return path

    async def start(self, **settings: Any) -> Running:
        settings.setdefault("vcenter_url", self.vcsim.url)
        settings.setdefault("credentials_file", self.credentials())
        settings.setdefault("ca_file", self.vcsim.ca_file)
        settings.setdefault("check_interval", 0.2)
        settings.setdefault("shutdown_timeout", 5.0)
        settings.setdefault("eviction_period", 0.2)
        client = Client(self.sim.server.url, token=self.sim.server.admin_token, qps=0)
        manager = Manager(client, metrics_addr="0", health_addr="0")
        await PLUGIN.setup(
            SetupContext(manager=manager, namespace="nodeops-system"), EsxSettings(**settings)
        )
        task = asyncio.create_task(manager.run())
        run = Running(manager, task, client)
        self.running.append(run)
        return run

    async def nodes(self) -> dict[str, dict[str, Any]]:
        items, _ = await self.client.list(NODES)
        return {n["metadata"]["name"]: n for n in items}

    async def label(self, name: str, key: str, value: str | None) -> None:
        await self.client.patch(NODES, name, {"metadata": {"labels": {key: value}}})

    async def events(self, node: str) -> list[str]:
        items, _ = await self.client.list(EVENTS, "default")
        return [
            f"{e.get('reason')}: {e.get('note')}"
            for e in items
            if (e.get("regarding") or {}).get("name") == node
        ]

    async def pods_on(self, node: str) -> list[str]:
        items, _ = await self.client.list(PODS)
        return [
            p["metadata"]["name"]
            for p in items
            if (p.get("spec") or {}).get("nodeName") == node
            and not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    async def wait(
        self, check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60.0
    ) -> Any:
        return await until(check, timeout=timeout, what=what)

    async def play_kubelets(self, stop: asyncio.Event) -> None:
        """The kubelets of esx-a and esx-b: NotReady while their VM is off, Ready when on."""
        while not stop.is_set():
            power = await self.vcsim.power()
            nodes = await self.nodes()
            for name, vm in self.vm_of.items():
                want = KUBELET_RUNNING if power.get(vm.ref) == "poweredOn" else KUBELET_NOT_READY
                have = (nodes[name]["metadata"].get("annotations") or {}).get(KUBELET_STATE)
                if (have or KUBELET_RUNNING) != want:
                    await self.client.patch(
                        NODES, name, {"metadata": {"annotations": {KUBELET_STATE: want}}}
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


SCENARIO = """\
nodes:
  - name: esx-a
    providerID: vsphere://{a}
  - name: esx-b
    providerID: vsphere://{b}
  - name: spare
    providerID: vsphere://4211d0c5-0000-0000-0000-000000000000
workloads:
  - kind: Deployment
    name: web
    replicas: 6
    terminationGracePeriodSeconds: 2
    pdb:
      maxUnavailable: 1
"""


@pytest.fixture
def vcsim_args() -> tuple[str, ...]:
    """Extra flags of the simulator (tests/integration/esx/vcsim/main.go); a module overrides
    this fixture to change them."""
    return ()


@pytest.fixture
async def env(tmp_path: Path, vcsim_args: tuple[str, ...]) -> AsyncIterator[Env]:
    if VCSIM is None:
        pytest.skip("no vcsim binary (.ci/run builds it into .venv/bin)")
    vcsim = await start_vcsim(tmp_path, args=vcsim_args)
    sim: SimCluster | None = None
    client: Client | None = None
    environment: Env | None = None
    kubelets_stop = asyncio.Event()
    kubelets: asyncio.Task[None] | None = None
    try:
        vms = await vcsim.vms()
        by_host: dict[str, list[Vm]] = {}
        for vm in vms:
            by_host.setdefault(vm.host, []).append(vm)
        host, on_host = max(by_host.items(), key=lambda item: len(item[1]))
        assert len(on_host) >= 2, f"vcsim placed no two VMs on one host: {by_host}"
        a, b = sorted(on_host, key=lambda v: v.name)[:2]
        path = tmp_path / "cluster.yaml"
        path.write_text(SCENARIO.format(a=a.uuid, b=b.uuid))
        sim = SimCluster(SimOptions(scenario=str(path), instant=True, time_scale=TIME_SCALE))
        await sim.start()
        client = Client(sim.server.url, token=sim.server.admin_token, qps=0, user_agent="test/1")
        environment = Env(sim, client, tmp_path, vcsim, host, {"esx-a": a, "esx-b": b})
        kubelets = asyncio.create_task(environment.play_kubelets(kubelets_stop))

        async def placed() -> bool:
            return bool(await environment.pods_on("esx-a") and await environment.pods_on("esx-b"))

        await environment.wait(placed, "web's pods on esx-a and esx-b")
        yield environment
    finally:
        kubelets_stop.set()
        if kubelets is not None:
            with contextlib.suppress(BaseException):
                await kubelets
        if environment is not None:
            for run in environment.running:
                if not run.task.done():
                    await run.crash()
        if client is not None:
            await client.close()
        if sim is not None:
            await sim.stop()
        vcsim.proc.terminate()
        await vcsim.proc.wait()
