"""Wiring: the detacher's informers, controller and provider on a manager.

Nodes wake it when they change in more than a heartbeat (`node_changed`); its records when
their spec changes or they are deleted (its own status writes are not news); ingress DaemonSet
pods wake their node.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.controllers import SetupContext, SetupError
from nodeops.controllers.detacher.attachment import ATTACHMENTS
from nodeops.controllers.detacher.ingress import daemonset_of
from nodeops.controllers.detacher.reconciler import CONTROLLER, DetacherReconciler
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.controllers.kit import Drainers, clock_of, node_changed
from nodeops.kube import Controller, Manager, Request, generation_changed
from nodeops.kube import objects as o
from nodeops.kube.informer import index_pods_by_node
from nodeops.kube.resources import NODES, PODS, SERVICES
from nodeops.providers.base import LoadBalancers, Provider, ProviderConfigError

__all__ = ["detacher_controller", "setup"]

Obj = dict[str, Any]


def detacher_controller(
    manager: Manager,
    provider: LoadBalancers,
    settings: DetacherSettings,
    *,
    namespace: str,
) -> Controller:
    """The detacher's controller on `manager`'s shared informers (added by the caller)."""
    informers = manager.informers
    nodes = informers.informer(NODES)
    attachments = informers.informer(ATTACHMENTS, namespace=namespace)
    pods = None
    ingress = settings.ingress_daemonsets
    if ingress:
        pods = informers.informer(
            PODS,
            metadata_only=("spec.nodeName", "status.phase", "status.conditions"),
            indexers={"node": index_pods_by_node},
        )
    services = informers.informer(SERVICES) if settings.discovery == "services" else None
    reconciler = DetacherReconciler(
        client=manager.client,
        events=manager.events,
        provider=provider,
        settings=settings,
        namespace=namespace,
        nodes=nodes,
        attachments=attachments,
        pods=pods,
        services=services,
        drainers=Drainers.for_manager(manager, CONTROLLER),
        clock=clock_of(manager),
    )
    controller = Controller(
        CONTROLLER, reconciler, max_concurrent_reconciles=settings.max_concurrent_reconciles
    )
    controller.for_(nodes, update_predicate=node_changed)
    controller.watches(
        attachments, lambda obj: [Request(o.name(obj))], update_predicate=generation_changed
    )
    if pods is not None:

        def ingress_pod(obj: Obj) -> list[Request]:
            node = (obj.get("spec") or {}).get("nodeName")
            if node and daemonset_of(obj) in ingress:
                return [Request(node)]
            return []

        controller.watches(pods, ingress_pod)
    if services is not None:
        controller.watches(services, lambda _obj: [])
    return controller


async def setup(ctx: SetupContext, settings: DetacherSettings) -> None:
    try:
        provider: Provider = ctx.create_provider(settings.provider)
    except ProviderConfigError as exc:
        raise SetupError(f"detacher: {exc}") from exc
    if not isinstance(provider, LoadBalancers):
        await provider.close()
        raise SetupError(
            f"detacher: provider {type(provider).name!r} has no load balancers to detach from"
        )
    ctx.manager.add(detacher_controller(ctx.manager, provider, settings, namespace=ctx.namespace))

    async def close_provider(stop: asyncio.Event) -> None:
        await stop.wait()
        await provider.close()

    ctx.manager.add_runnable(close_provider, name="detacher-provider", needs_leader=False)
