"""The garbage collector: ownerReferences, cascading deletion, foreground and orphan finalizers.

Deleting a ReplicaSet, a node, or a namespace's workloads is only half a deletion without it:
dependents must follow (background), the owner must wait for them (foreground), or they must be
cut loose (orphan). Decisions are made from the shared caches; a live GET confirms an owner is
really gone before anything is deleted, because a dependent's event can arrive before its
owner's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    CRDS,
    ApiClient,
    ApiError,
    Conflict,
    NotFound,
    Obj,
    Resource,
    resource_for,
)
from nodeops.sim.cluster.discovery import deletable_resources, group_of
from nodeops.sim.cluster.indexes import BY_OWNER, BY_UID, owner_uids, uid
from nodeops.sim.cluster.informer import Handler, Informer, InformerSet, key_of
from nodeops.sim.cluster.runtime import Controller
from nodeops.sim.cluster.scheduling import is_deleting

_UNOBSERVED_RECHECK_SECONDS = 1.0

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"

Role = Literal["dependent", "owner"]
GCKey = tuple[Role, str, str, str]
"""(role, resource key as in `Resource.key`, namespace, name)."""


@dataclass(frozen=True, slots=True)
class OwnerState:
    """What the collector knows about one owner reference's target."""

    ref: Mapping[str, Any]
    exists: bool
    waiting: bool = False  # being deleted in the foreground: its dependents must go first
    unobserved: bool = False  # alive by a live GET (or of a kind not known yet), in no cache


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["none", "delete", "patch"]
    propagation: str | None = None
    owner_references: list[Obj] | None = None


def decide_dependent(
    owner_refs: Sequence[Mapping[str, Any]], states: Sequence[OwnerState], has_dependents: bool
) -> Decision:
    """`attemptToDeleteItem` for one object whose owners have been looked up.

    No live owner left: delete the object, in the foreground if an owner waits for it and it has
    dependents of its own (so the wait covers the whole subtree), else in the background. Some
    owners live: drop references to vanished owners and stop blocking owners being deleted.
    """
    if not owner_refs:
        return Decision("none")
    solid = [s for s in states if s.exists and not s.waiting]
    dangling = [s for s in states if not s.exists]
    waiting = [s for s in states if s.waiting]
    if not solid:
        if waiting and has_dependents:
            return Decision("delete", propagation="Foreground")
        return Decision("delete", propagation="Background")
    if not dangling and not any(s.ref.get("blockOwnerDeletion") for s in waiting):
        return Decision("none")
    gone = {s.ref.get("uid") for s in dangling}
    unblock = {s.ref.get("uid") for s in waiting}
    refs: list[Obj] = []
    for ref in owner_refs:
        if ref.get("uid") in gone:
            continue
        new = dict(ref)
        if ref.get("uid") in unblock and new.get("blockOwnerDeletion"):
            new["blockOwnerDeletion"] = False
        refs.append(new)
    return Decision("patch", owner_references=refs)


def blocking_dependents(
    dependents: Sequence[Mapping[str, Any]], owner_uid: str
) -> list[Mapping[str, Any]]:
    """Dependents whose reference to the owner has blockOwnerDeletion: they hold a foreground
    deletion until they are gone (being deleted is not gone)."""
    out = []
    for d in dependents:
        for ref in (d.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("uid") == owner_uid and ref.get("blockOwnerDeletion"):
                out.append(d)
                break
    return out


def without_owner(refs: Sequence[Mapping[str, Any]], owner_uid: str) -> list[Obj]:
    return [dict(r) for r in refs if r.get("uid") != owner_uid]


class GarbageCollector(Controller[GCKey]):
    """kube-controller-manager's garbage collector over the simulator's shared caches.

    Given an `InformerSet`, it watches every resource discovery lists as deletable (custom
    resources included, ConfigMaps and Secrets alike) and rediscovers whenever a
    CustomResourceDefinition changes, as the real collector's monitors follow discovery. The
    `informers` given are watched from the start and must sync before the first decision.
    """

    name = "gc"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        informers: Sequence[Informer],
        *,
        workers: int = 4,
        discover: InformerSet | None = None,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.informers: list[Informer] = []
        self._by_key: dict[str, Informer] = {}
        self._kinds: dict[tuple[str, str], Resource] = {}
        self._discovered: dict[str, Informer] = {}
        for inf in informers:
            self._track(inf)
        # Deciding before every cache is full would mean a live GET per "missing" owner.
        self.needs(*self.informers)
        self._set = discover
        self._rediscover = asyncio.Event()
        self._discovering = asyncio.Lock()  # a stale answer must not undo a newer one
        if discover is not None:
            crds = discover.get(CRDS)
            self.needs(crds)
            crds.add_handler(lambda old, new: self._rediscover.set(), replay=False)

    def _track(self, inf: Informer) -> None:
        res = inf.resource
        if res.key in self._by_key:
            return
        self._by_key[res.key] = inf
        self._kinds[(res.group, res.kind)] = res
        self.informers.append(inf)
        inf.add_index(BY_OWNER, owner_uids)
        inf.add_index(BY_UID, uid)
        inf.add_handler(self._handler(inf))

    async def run(self) -> None:
        if self._set is None:
            await super().run()
            return
        await self.sync_resources()
        await asyncio.gather(super().run(), self._follow_discovery())

    async def sync_resources(self) -> None:
        """Watch what discovery newly lists; stop watching what it no longer does."""
        async with self._discovering:
            await self._sync_resources()

    async def _sync_resources(self) -> None:
        assert self._set is not None
        wanted = await deletable_resources(self.client)
        keys = {r.key for r in wanted}
        for res in wanted:
            if res.key not in self._by_key:
                inf = self._set.get(res)
                self._discovered[res.key] = inf
                self._track(inf)
        for key, inf in list(self._discovered.items()):
            if key in keys:
                continue
            del self._discovered[key]
            del self._by_key[key]
            self._kinds.pop((inf.resource.group, inf.resource.kind), None)
            self.informers.remove(inf)
            await self._set.discard(inf.resource)

    async def _follow_discovery(self) -> None:
        while True:
            await self._rediscover.wait()
            self._rediscover.clear()
            try:
                await self.sync_resources()
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                self.log.warning("discovery: %s; retrying", exc)
                await asyncio.sleep(1.0)
                self._rediscover.set()

    def _synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def _resource_of(self, ref: Mapping[str, Any]) -> Resource | None:
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        return self._kinds.get((group_of(api_version), kind)) or resource_for(api_version, kind)

    # -- events ---------------------------------------------------------------------------------

    def _handler(self, inf: Informer) -> Handler:
        res_key = inf.resource.key

        def handle(old: Obj | None, new: Obj | None) -> None:
            if new is None:
                assert old is not None
                self._on_gone(old)
                return
            meta = new.get("metadata") or {}
            ns, name = key_of(new)
            refs = meta.get("ownerReferences")
            old_meta = (old or {}).get("metadata") or {}
            old_refs = old_meta.get("ownerReferences") or []
            if refs and (old is None or old_refs != refs):
                self.queue.add(("dependent", res_key, ns, name))
            if old_refs and old_refs != refs:
                # A reference dropped (orphaning): the owner may be waiting for exactly that.
                kept = {r.get("uid") for r in refs or []}
                self._owners_changed([r for r in old_refs if r.get("uid") not in kept])
            if meta.get("deletionTimestamp"):
                finalizers = meta.get("finalizers") or []
                if FOREGROUND in finalizers or ORPHAN in finalizers:
                    self.queue.add(("owner", res_key, ns, name))
                if not old_meta.get("deletionTimestamp"):
                    self._owners_changed(refs or [])

        return handle

    def _on_gone(self, obj: Obj) -> None:
        gone_uid = (obj.get("metadata") or {}).get("uid") or ""
        for d_key, d in self._dependents(gone_uid):
            ns, name = key_of(d)
            self.queue.add(("dependent", d_key, ns, name))
        self._owners_changed((obj.get("metadata") or {}).get("ownerReferences") or [])

    def _owners_changed(self, refs: Sequence[Mapping[str, Any]]) -> None:
        """A dependent went, started going or let go: owners waiting on it may be done."""
        for ref in refs:
            found = self._find_uid(str(ref.get("uid") or ""))
            if found is None:
                continue
            res_key, owner = found
            if is_deleting(owner):
                ns, name = key_of(owner)
                self.queue.add(("owner", res_key, ns, name))

    def _dependents(self, owner_uid: str) -> list[tuple[str, Obj]]:
        out: list[tuple[str, Obj]] = []
        for inf in self.informers:
            for d in inf.by_index(BY_OWNER, owner_uid):
                out.append((inf.resource.key, d))
        return out

    def _find_uid(self, target: str) -> tuple[str, Obj] | None:
        if not target:
            return None
        for inf in self.informers:
            found = inf.by_index(BY_UID, target)
            if found:
                return inf.resource.key, found[0]
        return None

    # -- work -----------------------------------------------------------------------------------

    async def reconcile(self, key: GCKey) -> float | None:
        role, res_key, ns, name = key
        inf = self._by_key.get(res_key)
        if inf is None:
            return None
        obj = inf.store.get((ns, name))
        if obj is None:
            return None
        if role == "owner":
            if not self._synced():
                return 0.5  # a dependent may sit in a cache still filling
            await self._process_deleting_owner(inf.resource, obj)
        else:
            return await self._attempt_to_delete(inf.resource, obj)
        return None

    async def _owner_state(self, dependent: Obj, ref: Mapping[str, Any]) -> OwnerState:
        """Look the owner up in the caches, else live; `unobserved` says a live owner was found
        in no cache, so the dependent must be looked at again once a cache has seen it."""
        found = self._find_uid(str(ref.get("uid") or ""))
        if found is not None:
            owner = found[1]
            finalizers = (owner.get("metadata") or {}).get("finalizers") or []
            waiting = is_deleting(owner) and FOREGROUND in finalizers
            return OwnerState(ref, True, waiting)
        res = self._resource_of(ref)
        if res is None:
            # A kind discovery does not list (yet: a definition just added) is never assumed
            # gone; as kube's collector does on a REST mapping error, look again later.
            return OwnerState(ref, True, unobserved=True)
        ns = (dependent.get("metadata") or {}).get("namespace") if res.namespaced else None
        try:
            live = await self.client.get(res, str(ref.get("name")), ns)
        except NotFound:
            return OwnerState(ref, False)
        meta = live.get("metadata") or {}
        if meta.get("uid") != ref.get("uid"):
            return OwnerState(ref, False)  # same name, different object: the owner is gone
        waiting = bool(meta.get("deletionTimestamp")) and FOREGROUND in (
            meta.get("finalizers") or []
        )
        return OwnerState(ref, True, waiting, unobserved=res.key in self._by_key)

    async def _attempt_to_delete(self, resource: Resource, obj: Obj) -> float | None:
        meta = obj.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        if not refs:
            return None
        if is_deleting(obj) and FOREGROUND not in (meta.get("finalizers") or []):
            return None  # already on its way out
        states = [await self._owner_state(obj, r) for r in refs]
        has_dependents = bool(self._dependents(meta.get("uid") or ""))
        decision = decide_dependent(refs, states, has_dependents)
        if decision.action == "delete":
            if is_deleting(obj):
                return None
            try:
                await self.client.delete(
                    resource,
                    meta["name"],
                    meta.get("namespace"),
                    propagation_policy=decision.propagation,
                    uid=meta.get("uid"),
                )
            except NotFound:
                pass
            return None
        if decision.action == "patch":
            await self._set_owner_refs(resource, obj, decision.owner_references or [])
        if any(s.unobserved for s in states):
            # As kube's collector requeues a "virtual" owner until an informer observes it: an
            # owner deleted before its cache listed it would otherwise never be noticed gone.
            return _UNOBSERVED_RECHECK_SECONDS
        return None

    async def _set_owner_refs(self, resource: Resource, obj: Obj, refs: list[Obj]) -> None:
        meta = obj.get("metadata") or {}
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "ownerReferences": refs or None,
            }
        }
        try:
            await self.client.patch(resource, meta["name"], patch, meta.get("namespace"))
        except NotFound:
            pass

    async def _remove_finalizer(self, resource: Resource, obj: Obj, finalizer: str) -> None:
        meta = obj.get("metadata") or {}
        remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "finalizers": remaining or None,
            }
        }
        try:
            await self.client.patch(resource, meta["name"], patch, meta.get("namespace"))
        except NotFound:
            pass

    async def _process_deleting_owner(self, resource: Resource, owner: Obj) -> None:
        meta = owner.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            return
        owner_uid = meta.get("uid") or ""
        finalizers = meta.get("finalizers") or []
        dependents = self._dependents(owner_uid)
        if ORPHAN in finalizers:
            conflict: Conflict | None = None
            for d_key, d in dependents:
                d_refs = (d.get("metadata") or {}).get("ownerReferences") or []
                try:
                    await self._set_owner_refs(
                        self._by_key[d_key].resource, d, without_owner(d_refs, owner_uid)
                    )
                except Conflict as exc:
                    conflict = conflict or exc  # a stale cache entry: retry once it is fresh
            if conflict is not None:
                raise conflict
            if not dependents:
                await self._remove_finalizer(resource, owner, ORPHAN)
            # Otherwise the dependents' update events bring the owner back once they are free.
            return
        if FOREGROUND in finalizers:
            for d_key, d in dependents:
                if not is_deleting(d):
                    ns, name = key_of(d)
                    self.queue.add(("dependent", d_key, ns, name))
            if not blocking_dependents([d for _, d in dependents], owner_uid):
                await self._remove_finalizer(resource, owner, FOREGROUND)
