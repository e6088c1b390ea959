"""Wiring: the vCenter, its inventory poller, the node controller and its drains, added to a
manager."""

from __future__ import annotations

import asyncio
import importlib.util
from datetime import datetime
from pathlib import Path

import structlog

from nodeops.controllers import SetupContext, SetupError
from nodeops.controllers.esx.inventory import InventoryPoller
from nodeops.controllers.esx.keys import keys_for
from nodeops.controllers.esx.reconciler import EsxReconciler
from nodeops.controllers.esx.settings import EsxSettings
from nodeops.controllers.kit import (
    GOING_AWAY,
    Channel,
    Drainers,
    DrainOutcome,
    drain_pass,
    every_object,
    node_changed,
)
from nodeops.kube import Controller
from nodeops.kube.controller import labels_changed
from nodeops.kube.resources import NODES

__all__ = ["setup"]

log = structlog.get_logger(__name__)

NAME = "esx"


async def setup(ctx: SetupContext, settings: EsxSettings) -> None:
    try:
        keys = keys_for(settings.compat, settings.key_prefix)
    except ValueError as exc:
        raise SetupError(f"--esx-key-prefix: {exc}") from None
    if not settings.vcenter_url:
        raise SetupError("--esx-vcenter-url: required (https://vcenter.example.com)")
    if settings.ca_file is not None and not settings.ca_file.is_file():
        raise SetupError(f"--esx-ca-file: {settings.ca_file} is not a readable file")
    if importlib.util.find_spec("pyVmomi") is None:
        raise SetupError(
            "--controllers esx needs pyVmomi, the vsphere extra: pip install 'nodeops[vsphere]'"
        )
    from nodeops.providers.vsphere.vcenter import VCenter, load_credentials

    credentials_file: Path = settings.credentials_file
    try:
        load_credentials(credentials_file)  # a missing or malformed file stops the start
    except ValueError as exc:
        raise SetupError(f"--esx-credentials-file: {exc}") from None
    try:
        vcenter = VCenter(
            settings.vcenter_url,
            lambda: load_credentials(credentials_file),
            ca_file=settings.ca_file,
            insecure=settings.insecure,
            timeout=settings.timeout,
        )
    except ValueError as exc:
        raise SetupError(f"--esx-vcenter-url: {exc}") from None

    manager = ctx.manager
    poller = InventoryPoller(vcenter, interval=settings.check_interval)
    nodes = manager.informers.informer(NODES)
    drainers = Drainers.for_manager(manager, NAME)

    async def drain(node: str, started: datetime) -> DrainOutcome:
        return await drain_pass(drainers.get(GOING_AWAY), node, started)

    reconciler = EsxReconciler(
        client=manager.client,
        nodes=nodes,
        keys=keys,
        poller=poller,
        vcenter=vcenter,
        drain=drain,
        match_by=settings.match_by,
        shutdown_timeout=settings.shutdown_timeout,
        check_interval=settings.check_interval,
        eviction_period=settings.eviction_period,
        drain_stopped=drainers.stopped,
        events=manager.events,
    )
    controller = (
        Controller(NAME, reconciler, max_concurrent_reconciles=settings.workers)
        .for_(nodes, update_predicate=node_changed)
        .watches(
            nodes,
            reconciler.host_mates,
            update_predicate=labels_changed,
            on_create=False,
            on_delete=False,
        )
    )
    everything_again = Channel(controller, every_object(nodes))
    poller.on_change = everything_again.send
    manager.add(controller)
    manager.add_readiness_check("esx-vcenter", poller.readiness)
    manager.add_runnable(poller.run, name=f"{NAME}-vcenter-poller", needs_leader=False)

    async def close_vcenter(stop: asyncio.Event) -> None:
        await stop.wait()
        await vcenter.close()

    manager.add_runnable(close_vcenter, name=f"{NAME}-vcenter", needs_leader=False)
    log.info(
        "esx controller set up",
        vcenter=settings.vcenter_url,
        match_by=settings.match_by,
        prefix=keys.prefix,
    )
