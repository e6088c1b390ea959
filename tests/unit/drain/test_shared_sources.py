"""Every controller of one manager drains through the same sources, hence the same budget tokens.

What sharing buys is shown against the simulator (tests/integration/drain/test_reconciler.py:
two controllers under one budget never ask for two disruptions at once); this checks that the
controllers that drain are wired to it, as `nodeops run` sets them up.
"""

from __future__ import annotations

from pathlib import Path

from nodeops.controllers.detacher.reconciler import DetacherReconciler
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.controllers.detacher.wiring import detacher_controller
from nodeops.controllers.maintenance import MaintenanceSettings
from nodeops.controllers.maintenance.wiring import build
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import SharedInformers
from nodeops.kube import Client, Manager
from nodeops.kube.resources import PODS
from nodeops.providers.registry import create_provider
from nodeops.providers.sim import SimProvider

CONFIG = """\
instances:
  check:
  - {type: hasLabel, name: go, config: {key: go}}
  trigger:
  - {type: eviction, name: drain, config: {action: drain}}
profiles:
- name: p
  operational:
    transitions: [{check: go, next: in-maintenance}]
  in-maintenance:
    enter: drain
    transitions: [{check: "!go", next: operational}]
"""


async def test_the_detacher_and_maintenance_drain_through_the_managers_sources(
    tmp_path: Path,
) -> None:
    client = Client("http://127.0.0.1:9", qps=0)
    provider = create_provider("sim", {"url": "http://127.0.0.1:9"})
    assert isinstance(provider, SimProvider)
    try:
        manager = Manager(client, metrics_addr="0", health_addr="0")
        detacher = detacher_controller(
            manager, provider, DetacherSettings(stop_pods=True), namespace="nodeops-system"
        )
        path = tmp_path / "maintenance.yaml"
        path.write_text(CONFIG)
        maintenance = build(manager, MaintenanceSettings(config=str(path), api_addr="0"))
        # Nothing has drained yet, so nothing watches pods: the sources are made on first use.
        assert not any(inf.resource == PODS for inf in manager.informers.informers())

        shared = SharedInformers.for_manager(manager)
        assert SharedInformers.for_manager(manager) is shared
        reconciler = detacher.reconciler
        assert isinstance(reconciler, DetacherReconciler)
        assert reconciler.drainer(daemonsets=False).sources is shared
        assert reconciler.drainer(daemonsets=True).sources is shared
        assert maintenance.view.drainer(DrainOptions()).sources is shared
        # Their drains are labelled with their controllers' names in the drain metrics.
        assert reconciler.drainer(daemonsets=False).label() == "detacher"
        assert maintenance.view.drainer(DrainOptions()).label() == "maintenance"

        other = Manager(client, metrics_addr="0", health_addr="0")
        assert SharedInformers.for_manager(other) is not shared
    finally:
        await provider.close()
        await client.close()
