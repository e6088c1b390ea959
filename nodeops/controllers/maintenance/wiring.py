"""How the maintenance controller is put together on a manager (what `setup` does).

Nodes wake it when they change in more than a heartbeat (`node_changed`); a reloaded
configuration wakes it for every node, through a channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodeops.controllers import SetupError
from nodeops.controllers.kit import Channel, Drainers, clock_of, every_object, node_changed
from nodeops.controllers.maintenance.api import build_app, serve
from nodeops.controllers.maintenance.cluster import CacheView
from nodeops.controllers.maintenance.config import ConfigError, MaintenanceConfig
from nodeops.controllers.maintenance.info import InfoStore
from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.reconciler import MaintenanceReconciler
from nodeops.controllers.maintenance.sender import NotificationSender
from nodeops.controllers.maintenance.settings import MaintenanceSettings
from nodeops.controllers.maintenance.source import ConfigSource
from nodeops.kube.controller import Controller
from nodeops.kube.informer import Informer, default_transform
from nodeops.kube.manager import Manager, parse_addr
from nodeops.kube.resources import NODES, PODS

Obj = dict[str, Any]
NAME = "maintenance"


def slim_pod(pod: Obj) -> Obj:
    """What the pod checks and shuffle metrics read: metadata, node, affinity, phase."""
    pod = default_transform(pod)
    spec = pod.get("spec") or {}
    return {
        "apiVersion": pod.get("apiVersion"),
        "kind": pod.get("kind"),
        "metadata": pod.get("metadata") or {},
        "spec": {k: spec[k] for k in ("nodeName", "affinity") if k in spec},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


@dataclass
class Parts:
    source: ConfigSource
    keys: Keys
    nodes: Informer
    pods: Informer | None
    view: CacheView
    sender: NotificationSender
    info: InfoStore
    reconciler: MaintenanceReconciler
    controller: Controller


def build(manager: Manager, settings: MaintenanceSettings, **reconciler_args: Any) -> Parts:
    """Wire the controller onto `manager`; a bad config raises SetupError (FILE:LINE lines)."""
    try:
        keys = Keys.for_compat(settings.compat, settings.key_prefix)
    except ValueError as exc:
        raise SetupError(f"--maintenance-key-prefix: {exc}") from None
    source = ConfigSource(settings.config)
    try:
        config: MaintenanceConfig = source.load()
    except ConfigError as exc:
        raise SetupError(str(exc)) from None
    nodes = manager.informers.informer(NODES)
    pods = (
        manager.informers.informer(PODS, transform=slim_pod) if "pods" in config.needs() else None
    )
    view = CacheView(
        manager.client,
        nodes,
        keys,
        pods=pods,
        events=manager.events,
        drainers=Drainers.for_manager(manager, NAME),
    )
    sender = NotificationSender(view)
    info = InfoStore()
    reconciler_args.setdefault("clock", clock_of(manager))
    reconciler = MaintenanceReconciler(source, keys, view, sender, info, **reconciler_args)
    # One worker: cluster-wide checks decide one node at a time on up-to-date caches.
    controller = Controller(NAME, reconciler, max_concurrent_reconciles=1).for_(
        nodes, update_predicate=node_changed
    )
    manager.add(controller)
    source.listeners.append(Channel(controller, every_object(nodes)).send)

    async def watch_config(stop: Any) -> None:
        await source.watch(stop, settings.reload_interval)

    manager.add_runnable(sender.run, name=f"{NAME}-notifications", needs_leader=True)
    manager.add_runnable(watch_config, name=f"{NAME}-config", needs_leader=False)
    addr = parse_addr(settings.api_addr)
    if addr is not None:
        app = build_app(info, source)

        async def api(stop: Any) -> None:
            await serve(app, addr[0], addr[1], stop)

        manager.add_runnable(api, name=f"{NAME}-api", needs_leader=True)

    async def close_http(stop: Any) -> None:
        await stop.wait()
        await view.close()

    manager.add_runnable(close_http, name=f"{NAME}-http-client", needs_leader=False)
    return Parts(source, keys, nodes, pods, view, sender, info, reconciler, controller)
