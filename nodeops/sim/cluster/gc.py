"""The garbage collector: ownerReferences, cascading deletion, foreground and orphan finalizers.

Deleting a ReplicaSet, a node, or a namespace's workloads is only half a deletion without it:
dependents must follow (background), the owner must wait for them (foreground), or they must be
cut loose (orphan). Decisions are made from the shared caches; a live GET confirms an owner is
really gone before anything is deleted, because a dependent's event can arrive before its
owner's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import (
    ApiClient,
    Conflict,
    NotFound,
    Obj,
    Resource,
    resource_for,
)
from nodeops.sim.cluster.indexes import BY_OWNER, BY_UID, owner_uids, uid
from nodeops.sim.cluster.informer import Handler, Informer, key_of
from nodeops.sim.cluster.runtime import Controller
from nodeops.sim.cluster.scheduling import is_deleting

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"

Role = Literal["dependent", "owner"]
GCKey = tuple[Role, str, str, str]
"""(role, plural, namespace, name)."""


@dataclass(frozen=True, slots=True)
class OwnerState:
    """What the collector knows about one owner reference's target."""

    ref: Mapping[str, Any]
    exists: bool
    waiting: bool = False  # being deleted in the foreground: its dependents must go first


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
    name = "gc"

    def __init__(
        self,
        clock: Clock,
        client: ApiClient,
        informers: Sequence[Informer],
        *,
        workers: int = 4,
    ) -> None:
        super().__init__(clock, workers=workers)
        self.client = client
        self.informers = list(informers)
        self._by_plural: dict[str, Informer] = {}
        for inf in self.informers:
            self._by_plural[inf.resource.plural] = inf
            inf.add_index(BY_OWNER, owner_uids)
            inf.add_index(BY_UID, uid)
            inf.add_handler(self._handler(inf))
        # Deciding before every cache is full would mean a live GET per "missing" owner.
        self.needs(*self.informers)

    # -- events ---------------------------------------------------------------------------------

    def _handler(self, inf: Informer) -> Handler:
        plural = inf.resource.plural

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
                self.queue.add(("dependent", plural, ns, name))
            if old_refs and old_refs != refs:
                # A reference dropped (orphaning): the owner may be waiting for exactly that.
                kept = {r.get("uid") for r in refs or []}
                self._owners_changed([r for r in old_refs if r.get("uid") not in kept])
            if meta.get("deletionTimestamp"):
                finalizers = meta.get("finalizers") or []
                if FOREGROUND in finalizers or ORPHAN in finalizers:
                    self.queue.add(("owner", plural, ns, name))
                if not old_meta.get("deletionTimestamp"):
                    self._owners_changed(refs or [])

        return handle

    def _on_gone(self, obj: Obj) -> None:
        gone_uid = (obj.get("metadata") or {}).get("uid") or ""
        for d_plural, d in self._dependents(gone_uid):
            ns, name = key_of(d)
            self.queue.add(("dependent", d_plural, ns, name))
        self._owners_changed((obj.get("metadata") or {}).get("ownerReferences") or [])

    def _owners_changed(self, refs: Sequence[Mapping[str, Any]]) -> None:
        """A dependent went, started going or let go: owners waiting on it may be done."""
        for ref in refs:
            found = self._find_uid(str(ref.get("uid") or ""))
            if found is None:
                continue
            plural, owner = found
            if is_deleting(owner):
                ns, name = key_of(owner)
                self.queue.add(("owner", plural, ns, name))

    def _dependents(self, owner_uid: str) -> list[tuple[str, Obj]]:
        out: list[tuple[str, Obj]] = []
        for inf in self.informers:
            for d in inf.by_index(BY_OWNER, owner_uid):
                out.append((inf.resource.plural, d))
        return out

    def _find_uid(self, target: str) -> tuple[str, Obj] | None:
        if not target:
            return None
        for inf in self.informers:
            found = inf.by_index(BY_UID, target)
            if found:
                return inf.resource.plural, found[0]
        return None

    # -- work -----------------------------------------------------------------------------------

    async def reconcile(self, key: GCKey) -> float | None:
        role, plural, ns, name = key
        inf = self._by_plural.get(plural)
        if inf is None:
            return None
        obj = inf.store.get((ns, name))
        if obj is None:
            return None
        if role == "owner":
            await self._process_deleting_owner(inf.resource, obj)
        else:
            await self._attempt_to_delete(inf.resource, obj)
        return None

    async def _owner_state(self, dependent: Obj, ref: Mapping[str, Any]) -> OwnerState:
        found = self._find_uid(str(ref.get("uid") or ""))
        if found is not None:
            owner = found[1]
            finalizers = (owner.get("metadata") or {}).get("finalizers") or []
            waiting = is_deleting(owner) and FOREGROUND in finalizers
            return OwnerState(ref, True, waiting)
        res = resource_for(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
        if res is None:
            return OwnerState(ref, True)  # a kind we cannot look up is never assumed gone
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
        return OwnerState(ref, True, waiting)

    async def _attempt_to_delete(self, resource: Resource, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        if not refs:
            return
        if is_deleting(obj) and FOREGROUND not in (meta.get("finalizers") or []):
            return  # already on its way out
        states = [await self._owner_state(obj, r) for r in refs]
        has_dependents = bool(self._dependents(meta.get("uid") or ""))
        decision = decide_dependent(refs, states, has_dependents)
        if decision.action == "delete":
            if is_deleting(obj):
                return
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
        elif decision.action == "patch":
            await self._set_owner_refs(resource, obj, decision.owner_references or [])

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
            for plural, d in dependents:
                d_refs = (d.get("metadata") or {}).get("ownerReferences") or []
                try:
                    await self._set_owner_refs(
                        self._by_plural[plural].resource, d, without_owner(d_refs, owner_uid)
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
            for plural, d in dependents:
                if not is_deleting(d):
                    ns, name = key_of(d)
                    self.queue.add(("dependent", plural, ns, name))
            if not blocking_dependents([d for _, d in dependents], owner_uid):
                await self._remove_finalizer(resource, owner, FOREGROUND)
