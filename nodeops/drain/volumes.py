"""Waiting for a drained node's volumes to detach, before the machine behind it goes away.

Attached volumes are read from the node (`status.volumesAttached`) and from VolumeAttachments
naming the node; volumes that belong to pods the drain skipped (DaemonSets, static pods, Skip
rules) stay attached by design and are not waited for. Progress is watched, not polled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from nodeops.drain.errors import VolumeDetachTimeout
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.informer import Informer
from nodeops.kube.resources import (
    NODES,
    PERSISTENTVOLUMECLAIMS,
    PERSISTENTVOLUMES,
    VOLUMEATTACHMENTS,
)

Obj = dict[str, Any]


def _pv_ids(pv: Obj) -> set[str]:
    """The names a PV can appear under in `volumesAttached` (PV name, CSI unique name)."""
    ids = {o.name(pv)}
    csi = (pv.get("spec") or {}).get("csi") or {}
    if csi.get("driver") and csi.get("volumeHandle"):
        ids.add(f"kubernetes.io/csi/{csi['driver']}^{csi['volumeHandle']}")
    return ids


async def _skipped_volume_ids(client: Client, skipped: Sequence[Obj]) -> set[str]:
    claims = {
        (o.namespace(p), v["persistentVolumeClaim"]["claimName"])
        for p in skipped
        for v in (p.get("spec") or {}).get("volumes") or ()
        if v.get("persistentVolumeClaim", {}).get("claimName")
    }
    if not claims:
        return set()
    ids: set[str] = set()
    for ns, claim in claims:
        pvc = await client.get_or_none(PERSISTENTVOLUMECLAIMS, claim, ns)
        volume = ((pvc or {}).get("spec") or {}).get("volumeName")
        if not volume:
            continue
        pv = await client.get_or_none(PERSISTENTVOLUMES, volume)
        ids |= _pv_ids(pv) if pv is not None else {volume}
    return ids


def attached(node: Obj | None, attachments: Sequence[Obj], ignore: set[str]) -> list[str]:
    names: list[str] = []
    if node is not None:
        for vol in (node.get("status") or {}).get("volumesAttached") or ():
            if vol.get("name") and vol["name"] not in ignore:
                names.append(vol["name"])
    for va in attachments:
        if not (va.get("status") or {}).get("attached"):
            continue
        pv = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
        if pv and pv not in ignore:
            names.append(f"VolumeAttachment {o.name(va)} (PersistentVolume {pv})")
    return sorted(set(names))


async def wait_for_volumes(
    client: Client, node_name: str, *, skipped: Sequence[Obj], timeout: float | None
) -> None:
    ignore = await _skipped_volume_ids(client, skipped)
    nodes = Informer(client, NODES, field_selector=f"metadata.name={node_name}")
    attachments = Informer(client, VOLUMEATTACHMENTS)
    changed = asyncio.Event()
    for inf in (nodes, attachments):
        inf.add_handler(
            on_add=lambda _: changed.set(),
            on_update=lambda _a, _b: changed.set(),
            on_delete=lambda _: changed.set(),
        )
        inf.start()
    loop = asyncio.get_running_loop()
    deadline = None if not timeout else loop.time() + timeout
    try:
        await nodes.wait_synced()
        await attachments.wait_synced()
        while True:
            changed.clear()
            mine = [
                va
                for va in attachments.objects()
                if (va.get("spec") or {}).get("nodeName") == node_name
            ]
            pending = attached(nodes.get(node_name), mine, ignore)
            if not pending:
                return
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise VolumeDetachTimeout(
                    f"Waiting for Node volumes to be detached timed out: {', '.join(pending)}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)
    finally:
        await nodes.stop()
        await attachments.stop()
