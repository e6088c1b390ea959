"""The plugin protocol: checks, triggers, notifications and notification schedules.

A plugin *type* (`hasLabel`, `slack`, ...) is a `PluginType`: its kind, its name, a pydantic model
of its `config` block and a factory that builds an *instance* from a validated config. Instances
are built once per configuration load and shared by every reconcile, so they hold no per-node
state: everything a run needs comes in its `PluginContext`.

- A check answers `CheckResult(passed, info)`; it must not change anything. A check that reserves
  something (stagger's Lease) also implements `reserve`, called only after the whole transition
  was chosen, and returns a `Reservation` the controller releases if the node's write fails.
- A trigger changes the in-memory node (`ctx.node`); the controller commits all changes with the
  new state in one guarded write. Long idempotent work (a drain) raises `Retry` until done.
- A notification sends one message; failures raise and are retried with backoff by the
  controller's sender, never inside a reconcile. A schedule decides when one is due.

Third-party packages add types through the entry point group `nodeops.maintenance.plugins`: each
entry names a `PluginType` or a list of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import structlog
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import httpx

    from nodeops.controllers.maintenance.keys import Keys
    from nodeops.drain.engine import Drainer
    from nodeops.drain.options import DrainOptions
    from nodeops.kube.client import Client
    from nodeops.kube.events import EventRecorder

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
Kind = Literal["check", "trigger", "notify", "schedule"]
ENTRY_POINT_GROUP = "nodeops.maintenance.plugins"


class PluginConfig(BaseModel):
    """Base of every plugin's config model: unknown keys are kept so the loader can warn."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    def load_warnings(self) -> list[tuple[str, str]]:
        """(field, message) for a config the reference loads but that cannot work as written:
        it loads here too, and `nodeops maintenance validate` says why it will fail."""
        return []


class NoConfig(PluginConfig):
    pass


class Retry(Exception):
    """Long-running idempotent work is under way; commit what changed and look again soon."""


class PluginError(Exception):
    """A plugin could not do its work (API unreachable, bad answer); the message says why."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    passed: bool
    info: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, **info: Any) -> CheckResult:
        return cls(True, info)

    @classmethod
    def blocked(cls, reason: str, **info: Any) -> CheckResult:
        return cls(False, {"reason": reason, **info})


class ClusterView(Protocol):
    """What plugins may read of the cluster, served from the controller's caches."""

    @property
    def client(self) -> Client: ...

    @property
    def events(self) -> EventRecorder | None: ...

    @property
    def http(self) -> httpx.AsyncClient: ...

    def nodes(self) -> list[Obj]: ...

    def nodes_in_state(self, state: str) -> list[Obj]: ...

    def node_count(self) -> int: ...

    async def pods_on_node(self, node_name: str) -> list[Obj]: ...

    def drainer(self, options: DrainOptions) -> Drainer: ...


@dataclass
class PluginContext:
    """One profile of one node in one reconcile."""

    node: Obj  # the working copy: triggers change it, the controller commits it
    original: Obj  # the node as read
    profile: str
    state: str
    transition: datetime  # the profile's last transition
    in_maintenance: bool  # another profile of this node is in maintenance
    now: datetime
    keys: Keys
    cluster: ClusterView
    log: Any = None

    @property
    def node_name(self) -> str:
        return str((self.node.get("metadata") or {}).get("name", ""))

    def labels(self) -> dict[str, str]:
        meta = self.node.setdefault("metadata", {})
        if meta.get("labels") is None:
            meta["labels"] = {}
        labels: dict[str, str] = meta["labels"]
        return labels

    def annotations(self) -> dict[str, str]:
        meta = self.node.setdefault("metadata", {})
        if meta.get("annotations") is None:
            meta["annotations"] = {}
        annotations: dict[str, str] = meta["annotations"]
        return annotations

    def profile_label(self) -> list[str]:
        labels = (self.node.get("metadata") or {}).get("labels") or {}
        return [p for p in str(labels.get(self.keys.profile, "")).split("--") if p]


class Reservation(Protocol):
    async def release(self) -> None: ...


@runtime_checkable
class Check(Protocol):
    async def check(self, ctx: PluginContext) -> CheckResult: ...


@runtime_checkable
class Reserving(Protocol):
    async def reserve(self, ctx: PluginContext) -> Reservation | None: ...


@runtime_checkable
class Trigger(Protocol):
    async def trigger(self, ctx: PluginContext) -> None: ...


@dataclass(frozen=True, slots=True)
class Message:
    """A rendered notification, ready to send (no cluster access needed any more)."""

    instance: str
    node: str
    profile: str
    state: str
    data: Mapping[str, Any]  # template data, for plugins that render more than one text
    period_key: str = ""


@runtime_checkable
class Notifier(Protocol):
    def validate_templates(self) -> None: ...

    async def send(self, message: Message, cluster: ClusterView) -> None: ...


@dataclass(frozen=True, slots=True)
class ScheduleContext:
    now: datetime
    last_sent: datetime | None
    state: str
    state_changed: bool  # the state was entered in this reconcile
    transition: datetime


@runtime_checkable
class Schedule(Protocol):
    def due(self, ctx: ScheduleContext) -> bool: ...


@dataclass(frozen=True)
class PluginType:
    kind: Kind
    name: str
    config: type[PluginConfig]
    factory: Callable[[Any], Any]
    description: str = ""
    # States whose transitions may use this check (None: any).
    states: frozenset[str] | None = None
    # Which caches the controller should keep for it ("pods").
    needs: frozenset[str] = frozenset()
    # Config keys the reference accepted but that mean nothing any more.
    legacy_keys: frozenset[str] = frozenset()


class Registry:
    def __init__(self, types: Iterable[PluginType] = ()) -> None:
        self._types: dict[tuple[str, str], PluginType] = {}
        for t in types:
            self.register(t)

    def register(self, plugin_type: PluginType) -> None:
        key = (plugin_type.kind, plugin_type.name)
        if key in self._types and self._types[key] is not plugin_type:
            raise ValueError(
                f"{plugin_type.kind} plugin type {plugin_type.name!r} registered twice"
            )
        self._types[key] = plugin_type

    def get(self, kind: str, name: str) -> PluginType | None:
        return self._types.get((kind, name))

    def names(self, kind: str) -> list[str]:
        return sorted(n for k, n in self._types if k == kind)

    def types(self) -> list[PluginType]:
        return list(self._types.values())

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register the types third-party packages declare; returns problems, one a line."""
        problems = []
        for ep in entry_points(group=group):
            try:
                loaded = ep.load()
                items = loaded if isinstance(loaded, list | tuple) else [loaded]
                for item in items:
                    if not isinstance(item, PluginType):
                        raise TypeError(f"{item!r} is not a PluginType")
                    self.register(item)
            except Exception as exc:
                problems.append(f"plugin entry point {ep.name} ({ep.value}): {exc}")
                log.warning("maintenance plugin not loaded", entry_point=ep.name, error=str(exc))
        return problems
