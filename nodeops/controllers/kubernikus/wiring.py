"""Wiring: the controller, its informer, the version poller and the cloud, added to a manager.

Node updates wake the controller only when they are news (`node_changed`: not a kubelet
heartbeat); a new API server version wakes it for every node, through a channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from nodeops.api.configfile import ConfigFileError
from nodeops.controllers import SetupContext, SetupError
from nodeops.controllers.kit import (
    Channel,
    Drainers,
    clock_of,
    every_object,
    going_away,
    node_changed,
)
from nodeops.controllers.kubernikus.config import KubernikusConfig, load_kubernikus_config
from nodeops.controllers.kubernikus.keys import keys_for
from nodeops.controllers.kubernikus.metrics import NODE_GAUGES
from nodeops.controllers.kubernikus.reconciler import KubernikusReconciler
from nodeops.controllers.kubernikus.servers import ServersSource
from nodeops.controllers.kubernikus.serverversion import ServerVersion
from nodeops.drain.options import DrainOptions
from nodeops.kube import Controller
from nodeops.kube.resources import NODES
from nodeops.providers.base import Provider, ProviderConfigError
from nodeops.providers.openstack import OpenStackConfig, OpenStackProvider

if TYPE_CHECKING:
    from nodeops.controllers.kubernikus.settings import KubernikusSettings

__all__ = ["drain_options", "setup"]

log = structlog.get_logger(__name__)

NAME = "kubernikus"


def drain_options(config: KubernikusConfig) -> DrainOptions:
    """The reference's drain: the node goes away with its VM (every pod but mirror and DaemonSet
    pods, bare pods and emptyDir data included); PDBs always hold."""
    intervals = config.intervals
    return going_away(
        force_delete_stuck=intervals.pod_eviction.force,
        stuck_slack_seconds=intervals.pod_deletion.timeout,
    )


async def setup(ctx: SetupContext, settings: KubernikusSettings) -> None:
    try:
        keys = keys_for(settings.compat, settings.key_prefix)
    except ValueError as exc:
        raise SetupError(f"--kubernikus-key-prefix: {exc}") from None
    try:
        config = load_kubernikus_config(settings.config)
    except ConfigFileError as exc:
        raise SetupError(str(exc)) from None
    manager = ctx.manager
    fallback = _fallback_provider(ctx, settings)
    servers = ServersSource(
        manager.client,
        config.cloud_provider_secret,
        fallback=fallback,
        openstack_settings=_openstack_block(ctx.provider_config),
    )
    if not config.cloud_provider_secret.configured and fallback is None:
        log.warning(
            "no cloud credentials configured; nodes labelled for deletion will wait",
            delete_label=keys.delete_node,
        )
    nodes = manager.informers.informer(NODES)
    drainers = Drainers.for_manager(manager, NAME)
    version = ServerVersion(manager.client, interval=config.intervals.requeue)
    reconciler = KubernikusReconciler(
        client=manager.client,
        nodes=nodes,
        keys=keys,
        config=config,
        server_version=lambda: version.current,
        servers=servers,
        drainer=drainers.get(drain_options(config)),
        drain_stopped=drainers.stopped,
        events=manager.events,
        clock=clock_of(manager),
    )
    controller = Controller(NAME, reconciler, max_concurrent_reconciles=settings.workers).for_(
        nodes, update_predicate=node_changed
    )
    await version.refresh()
    version.on_change = Channel(controller, every_object(nodes)).send
    manager.add(controller)
    NODE_GAUGES.watch(nodes.objects, keys)
    manager.add_runnable(version.run, name=f"{NAME}-server-version", needs_leader=False)

    async def close_cloud(stop: asyncio.Event) -> None:
        await stop.wait()
        await servers.close()
        if fallback is not None:
            await fallback.close()

    manager.add_runnable(close_cloud, name=f"{NAME}-cloud", needs_leader=False)
    log.info(
        "kubernikus controller set up",
        config=str(settings.config),
        prefix=keys.prefix,
        credentials="secret" if config.cloud_provider_secret.configured else "provider",
    )


def _fallback_provider(ctx: SetupContext, settings: KubernikusSettings) -> Provider | None:
    try:
        if ctx.provider:
            return ctx.create_provider()
        if settings.cloudprovider_conf.is_file():
            return OpenStackProvider(
                OpenStackConfig(
                    cloudprovider_conf=settings.cloudprovider_conf,
                    **_openstack_block(ctx.provider_config),
                )
            )
    except (ProviderConfigError, ValueError) as exc:
        raise SetupError(str(exc)) from None
    return None


def _openstack_block(provider_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Settings of the `openstack` block other than its credential source (retries, region)."""
    providers = (provider_config or {}).get("providers") or {}
    block = providers.get("openstack") if isinstance(providers, Mapping) else None
    if not isinstance(block, Mapping):
        return {}
    return {
        k: v for k, v in block.items() if k not in ("cloud", "clouds_yaml", "cloudprovider_conf")
    }
