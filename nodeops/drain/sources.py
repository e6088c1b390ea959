"""Where a drain reads the cluster: its own watches, one list per pass, or a manager's informers.

The drain engine is one algorithm; what differs between `nodeops drain` and a reconciler is only
how it learns what is on the node, what the budgets allow and which rules apply:

- `WatchedCluster`: the drain's own watches of the node's pods and of the budgets, and one list
  of the rules, for a drain run to completion (`Drainer.drain`, `nodeops drain`). Several nodes
  drained through one `WatchedCluster` share its budget watch and its budget tokens. Its
  watches are started `unattended`: with a one-shot client, a permanent error of theirs ends
  the command instead of being retried in the background forever.
- `SharedInformers`: a manager's informers (`manager.informers`), for reconcilers that call
  `Drainer.step` on every pass: nothing is listed per pass, and the budget tokens persist from
  pass to pass and across every node the controller drains.
- `ClusterSnapshot`: one list of each per pass, for a single `Drainer.step` without informers.

Every source feeds the pod and budget events it sees to its `BudgetGate`, and tells listeners
(the drain waiting for a change) what changed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nodeops.api.drainrule import parse as parse_rule
from nodeops.api.errors import InvalidResource
from nodeops.drain.budgets import BudgetGate, PdbSnapshot
from nodeops.drain.classify import Behavior, RuleView
from nodeops.drain.errors import DrainError
from nodeops.drain.options import DrainOptions
from nodeops.kube import errors
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.informer import Informer, index_pods_by_node
from nodeops.kube.manager import Manager
from nodeops.kube.oneshot import unattended
from nodeops.kube.resources import (
    DAEMONSETS,
    NAMESPACES,
    NODEDRAINRULES,
    NODES,
    PDBS,
    PODS,
    VOLUMEATTACHMENTS,
)

Obj = dict[str, Any]
Listener = Callable[[str, Obj], None]
"""Called with ("pod", pod), ("pod-deleted", pod), ("budget", pdb) or ("volumes", obj)."""

NODE_INDEX = "spec.nodeName"
POD_FIELDS = ("spec.nodeName", "spec.volumes", "status.phase")
"""All the drain reads of a pod besides its metadata: a shared pod informer keeps only these
(`metadata_only`), a fraction of each pod, which matters at 150,000 pods."""
RULES_RECHECK_SECONDS = 60.0


class InvalidRule(DrainError):
    """A NodeDrainRule does not validate: the drain stops rather than guess an order."""


class SourcesNotReady(DrainError):
    """The informers a pass reads have not synced yet: try the pass again later."""


def rule_view(item: Obj) -> RuleView:
    name = o.name(item)
    try:
        rule = parse_rule(item)
    except InvalidResource as exc:
        raise InvalidRule(f'NodeDrainRule "{name}" is invalid: {exc}') from exc
    return RuleView(
        name=name,
        behavior=Behavior(rule.behavior),
        order=rule.order,
        applies_to_node=rule.applies_to_node,
        applies_to_pod=rule.applies_to_pod,
        needs_namespace_labels=any(p.namespace_selector is not None for p in rule.spec.pods or ()),
    )


class DrainSources:
    """What the drain engine reads; subclasses say where from."""

    budgets: BudgetGate

    def __init__(self, client: Client, options: DrainOptions | None = None) -> None:
        """`options` narrow what a source fetches for one drain (its pod selector); a source
        shared by drains with different options (`SharedInformers`) takes none, and each drain
        filters what it reads by its own options."""
        self.client = client
        self.options = options or DrainOptions()
        self._listeners: list[Listener] = []

    # ------------------------------------------------------------------ lifecycle

    async def prepare(self, node: str) -> None:
        """Make what the drain of `node` reads ready (started and synced)."""

    async def done(self, node: str) -> None:
        """The drain of `node` is over: stop what was started for it alone."""

    async def close(self) -> None:
        """Stop everything this source started."""

    async def watch_volumes(self, node: str) -> None:
        """Make `volume_state(node)` ready; called once the node's pods are gone."""

    # ------------------------------------------------------------------ reads

    def pods_on(self, node: str) -> list[Obj]:
        raise NotImplementedError

    def pod(self, namespace: str, name: str) -> Obj | None:
        raise NotImplementedError

    async def node(self, name: str) -> Obj:
        """The node as it is now (NotFound when it does not exist)."""
        return await self.client.get(NODES, name)

    async def rule_items(self) -> list[Obj]:
        """Every NodeDrainRule; none when the definition is not installed."""
        try:
            items, _ = await self.client.list(NODEDRAINRULES)
        except errors.NotFound:
            return []
        return items

    async def namespace_items(self) -> list[Obj]:
        items, _ = await self.client.list(NAMESPACES)
        return items

    async def daemonset_error(self, namespace: str, name: str) -> str | None:
        """None when the DaemonSet exists, else the message of looking it up."""
        try:
            await self.client.get(DAEMONSETS, name, namespace)
        except errors.NotFound as exc:
            return exc.message
        return None

    async def volume_state(self, node: str) -> tuple[Obj | None, list[Obj]]:
        """The node and the VolumeAttachments naming it."""
        items, _ = await self.client.list(VOLUMEATTACHMENTS)
        return await self.client.get_or_none(NODES, node), _attachments_of(items, node)

    async def rules(self) -> list[RuleView]:
        return [rule_view(item) for item in await self.rule_items()]

    # ------------------------------------------------------------------ events

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` on every change; returns the function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _emit(self, kind: str, obj: Obj) -> None:
        for listener in list(self._listeners):
            listener(kind, obj)

    def _pod_handlers(self) -> dict[str, Any]:
        def changed(pod: Obj) -> None:
            self.budgets.observe_pod(pod)
            self._emit("pod", pod)

        def deleted(pod: Obj) -> None:
            self.budgets.observe_pod(pod, deleted=True)
            self._emit("pod-deleted", pod)

        return {
            "on_add": changed,
            "on_update": lambda _old, new: changed(new),
            "on_delete": deleted,
        }

    def _budget_handlers(self) -> dict[str, Any]:
        def changed(pdb: Obj) -> None:
            self.budgets.observe_budget(pdb)
            self._emit("budget", pdb)

        def deleted(pdb: Obj) -> None:
            self.budgets.forget_budget(pdb)
            self._emit("budget", pdb)

        return {
            "on_add": changed,
            "on_update": lambda _old, new: changed(new),
            "on_delete": deleted,
        }

    def _volume_handlers(self) -> dict[str, Any]:
        return {
            "on_add": lambda obj: self._emit("volumes", obj),
            "on_update": lambda _old, new: self._emit("volumes", new),
            "on_delete": lambda obj: self._emit("volumes", obj),
        }


def _attachments_of(items: list[Obj], node: str) -> list[Obj]:
    return [va for va in items if (va.get("spec") or {}).get("nodeName") == node]


class ClusterSnapshot(DrainSources):
    """One list of the node's pods and of the budgets, for one pass that does not watch."""

    def __init__(self, client: Client, options: DrainOptions) -> None:
        super().__init__(client, options)
        self.budgets = BudgetGate(PdbSnapshot([]))
        self._pods: dict[str, list[Obj]] = {}

    async def prepare(self, node: str) -> None:
        pods, _ = await self.client.list(
            PODS,
            field_selector=f"spec.nodeName={node}",
            label_selector=self.options.pod_selector or None,
        )
        self._pods[node] = pods
        if not self.options.disable_eviction:
            pdbs, _ = await self.client.list(PDBS)
            self.budgets = BudgetGate(PdbSnapshot(pdbs))

    def pods_on(self, node: str) -> list[Obj]:
        return list(self._pods.get(node, ()))

    def pod(self, namespace: str, name: str) -> Obj | None:
        for pods in self._pods.values():
            for p in pods:
                if o.name(p) == name and o.namespace(p) == namespace:
                    return p
        return None


class WatchedCluster(DrainSources):
    """The drain's own watches: the pods of each node being drained, and every budget."""

    def __init__(self, client: Client, options: DrainOptions) -> None:
        super().__init__(client, options)
        self._pdbs = Informer(client, PDBS)
        self.budgets = BudgetGate(self._pdbs)
        self._pdbs.add_handler(**self._budget_handlers())
        self._pods: dict[str, Informer] = {}
        self._volumes: dict[str, list[Informer]] = {}
        self._rules: list[Obj] | None = None
        self._namespaces: list[Obj] | None = None
        self._daemonsets: dict[tuple[str, str], str | None] = {}
        self._lock = asyncio.Lock()

    async def prepare(self, node: str) -> None:
        pods = self._pods.get(node)
        if pods is None:
            pods = self._pods[node] = Informer(
                self.client,
                PODS,
                field_selector=f"spec.nodeName={node}",
                label_selector=self.options.pod_selector or None,
            )
            pods.add_handler(**self._pod_handlers())
            with unattended():
                pods.start()
        with unattended():
            self._pdbs.start()
        await pods.wait_synced()
        await self._pdbs.wait_synced()

    async def done(self, node: str) -> None:
        pods = self._pods.pop(node, None)
        if pods is not None:
            await pods.stop()
        for inf in self._volumes.pop(node, ()):
            await inf.stop()

    async def close(self) -> None:
        for node in list(self._pods) + list(self._volumes):
            await self.done(node)
        await self._pdbs.stop()

    def pods_on(self, node: str) -> list[Obj]:
        pods = self._pods.get(node)
        return pods.objects() if pods is not None else []

    def pod(self, namespace: str, name: str) -> Obj | None:
        for pods in self._pods.values():
            found = pods.get(name, namespace)
            if found is not None:
                return found
        return None

    async def rule_items(self) -> list[Obj]:
        async with self._lock:  # one list for every node drained through this source
            if self._rules is None:
                self._rules = await super().rule_items()
            return self._rules

    async def namespace_items(self) -> list[Obj]:
        async with self._lock:
            if self._namespaces is None:
                self._namespaces = await super().namespace_items()
            return self._namespaces

    async def daemonset_error(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        if key not in self._daemonsets:
            self._daemonsets[key] = await super().daemonset_error(namespace, name)
        return self._daemonsets[key]

    async def watch_volumes(self, node: str) -> None:
        if node in self._volumes:
            return
        informers = [
            Informer(self.client, NODES, field_selector=f"metadata.name={node}"),
            Informer(self.client, VOLUMEATTACHMENTS),
        ]
        self._volumes[node] = informers
        for inf in informers:
            inf.add_handler(**self._volume_handlers())
            with unattended():
                inf.start()
        for inf in informers:
            await inf.wait_synced()

    async def volume_state(self, node: str) -> tuple[Obj | None, list[Obj]]:
        informers = self._volumes.get(node)
        if informers is None:
            return await super().volume_state(node)
        nodes, attachments = informers
        return nodes.get(node), _attachments_of(attachments.objects(), node)


class SharedInformers(DrainSources):
    """A manager's shared informers (`manager.informers`), for reconcilers.

    One per manager, not per reconcile or per controller (`SharedInformers.for_manager(manager)`
    returns it): it registers its handlers on the shared informers once, and its budget tokens
    must outlive a pass, and be shared by every drain under the same budgets, to be worth
    anything. Drains with different options may share it: each filters by its own. Pods are read from the
    shared pod informer kept to `POD_FIELDS` and indexed by node; ask for the same view to share
    it. Informers it needs only sometimes (namespaces for rules that select them, nodes and
    VolumeAttachments for the volume wait, NodeDrainRules once the kind is served) are made on
    first use; the manager starts them.
    """

    def __init__(self, informers: Any, client: Client, *, sync_timeout: float = 30.0) -> None:
        super().__init__(client)
        self.informers = informers
        self.sync_timeout = sync_timeout
        self._pods: Informer = informers.informer(
            PODS, indexers={NODE_INDEX: index_pods_by_node}, metadata_only=POD_FIELDS
        )
        self._pdbs: Informer = informers.informer(PDBS)
        self._daemonsets: Informer = informers.informer(DAEMONSETS)
        self._rules: Informer | None = None
        self._rules_checked = -RULES_RECHECK_SECONDS
        self._namespaces: Informer | None = None
        self._nodes: Informer | None = None
        self._attachments: Informer | None = None
        self.budgets = BudgetGate(self._pdbs)
        self._pods.add_handler(**self._pod_handlers())
        self._pdbs.add_handler(**self._budget_handlers())

    @classmethod
    def for_manager(cls, manager: Manager) -> SharedInformers:
        """The sources of every controller running in `manager` (its informers and its client):
        the same object on every call, so all drains in the process, whatever their options and
        whichever controller runs them, take their evictions from one set of budget tokens."""
        return manager.shared(SharedInformers, lambda: cls(manager.informers, manager.client))

    async def _synced(self, *informers: Informer) -> None:
        waits = [inf.wait_synced() for inf in informers if not inf.has_synced]
        if not waits:
            return
        try:
            async with asyncio.timeout(self.sync_timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            names = ", ".join(inf.resource.key for inf in informers if not inf.has_synced)
            raise SourcesNotReady(f"informers not synced yet: {names}") from None

    async def prepare(self, node: str) -> None:
        await self._synced(self._pods, self._pdbs, self._daemonsets)

    def pods_on(self, node: str) -> list[Obj]:
        return self._pods.by_index(NODE_INDEX, node)

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self._pods.get(name, namespace)

    async def node(self, name: str) -> Obj:
        if self._nodes is None:
            self._nodes = self.informers.informer(NODES)
        if self._nodes.has_synced:
            found = self._nodes.get(name)
            if found is not None:
                return found
        return await super().node(name)

    async def rule_items(self) -> list[Obj]:
        if self._rules is None:
            # An informer of a kind the server does not serve never syncs: ask discovery first,
            # and again now and then, since the definition may be installed later.
            loop = asyncio.get_running_loop()
            if loop.time() - self._rules_checked < RULES_RECHECK_SECONDS:
                return []
            self._rules_checked = loop.time()
            try:
                served = await self.client.discover(NODEDRAINRULES.api_version)
            except errors.NotFound:
                return []
            if not any(
                r.get("name") == NODEDRAINRULES.plural for r in served.get("resources") or ()
            ):
                return []
            self._rules = self.informers.informer(NODEDRAINRULES)
        await self._synced(self._rules)
        return self._rules.objects()

    async def namespace_items(self) -> list[Obj]:
        if self._namespaces is None:
            self._namespaces = self.informers.informer(NAMESPACES)
        await self._synced(self._namespaces)
        return self._namespaces.objects()

    async def daemonset_error(self, namespace: str, name: str) -> str | None:
        if self._daemonsets.get(name, namespace) is not None:
            return None
        return f'daemonsets.apps "{name}" not found'

    async def watch_volumes(self, node: str) -> None:
        if self._nodes is None:
            self._nodes = self.informers.informer(NODES)
        if self._attachments is None:
            self._attachments = self.informers.informer(VOLUMEATTACHMENTS)
            for inf in (self._nodes, self._attachments):
                inf.add_handler(**self._volume_handlers())
        await self._synced(self._nodes, self._attachments)

    async def volume_state(self, node: str) -> tuple[Obj | None, list[Obj]]:
        await self.watch_volumes(node)
        assert self._nodes is not None and self._attachments is not None
        return self._nodes.get(node), _attachments_of(self._attachments.objects(), node)
