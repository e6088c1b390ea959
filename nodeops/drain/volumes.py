"""Waiting for a drained node's volumes to detach, before the machine behind it goes away.

Attached volumes are read from the node (`status.volumesAttached`) and from VolumeAttachments
naming the node; volumes that belong to pods the drain skipped (DaemonSets, static pods, Skip
rules) stay attached by design and are not waited for. The drain waits by watching its sources
(`nodeops drain`) or looks once per pass (`Drainer.step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeops.drain.sources import DrainSources
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.resources import PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES

Obj = dict[str, Any]


def _pv_ids(pv: Obj) -> set[str]:
    """The names a PV can appear under in `volumesAttached` (PV name, CSI unique name)."""
    ids = {o.name(pv)}
    csi = (pv.get("spec") or {}).get("csi") or {}
    if csi.get("driver") and csi.get("volumeHandle"):
        ids.add(f"kubernetes.io/csi/{csi['driver']}^{csi['volumeHandle']}")
    return ids


async def skipped_volume_ids(client: Client, skipped: Sequence[Obj]) -> set[str]:
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


async def pending_volumes(
    sources: DrainSources, node: str, *, skipped: Sequence[Obj], ignore: set[str] | None = None
) -> list[str]:
    """The volumes still attached to `node`, leaving out those of pods the drain skipped."""
    if ignore is None:
        ignore = await skipped_volume_ids(sources.client, skipped)
    node_obj, attachments = await sources.volume_state(node)
    return attached(node_obj, attachments, ignore)


def volume_report(started_at: str, pending: Sequence[str]) -> str:
    """Cluster API's words for a node whose volumes are still attached."""
    return f"Waiting for Node volumes to be detached (started at {started_at})\n* " + ", ".join(
        pending
    )
