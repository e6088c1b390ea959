"""One node, one reconcile: every assigned profile's state machine, decided and applied in memory.

For each profile of the node (label `<prefix>maintenance-profile`, `a--b--c`), in order:

1. If the current state's `enter` chain has not completed (`Previous != Current` in the record),
   run it; `Retry` (a drain under way) ends this profile's turn.
2. Notifications of the current state whose schedule is due are queued.
3. The state's transitions are evaluated in order; the first whose check expression holds
   fires, unless it leads to in-maintenance while another profile of the node is there
   (judged on the states as they stand at that moment in this reconcile, so two profiles can
   never both enter maintenance). Checks that reserve something (stagger) reserve only now.
4. The fired transition's own triggers run; then the new state is recorded and its `enter`
   chain and notifications run at once, so a transition costs one write.

Nothing is written here: the caller commits `NodeOutcome.patch` (labels, annotations, spec and
the state record together) with one resourceVersion-guarded patch, releases `reservations` if
that fails, and hands `notifications` to the sender only after it succeeded.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from nodeops.controllers.maintenance import expression
from nodeops.controllers.maintenance.config import (
    DEFAULT_PROFILE,
    Instance,
    MaintenanceConfig,
    Profile,
    Transition,
)
from nodeops.controllers.maintenance.keys import Keys
from nodeops.controllers.maintenance.plugins.base import (
    ClusterView,
    Message,
    PluginContext,
    Reservation,
    Reserving,
    Retry,
    ScheduleContext,
)
from nodeops.controllers.maintenance.state import (
    DataError,
    NodeData,
    ProfileData,
    State,
    aggregate,
)
from nodeops.controllers.maintenance.templating import message_data

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
BLOCKED_BY_PROFILE = "another profile of this node is in maintenance"


@dataclass
class CheckOutcome:
    instance: str
    type: str
    passed: bool
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.type, "passed": self.passed, "info": dict(self.info)}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class TransitionOutcome:
    index: int
    next: State
    expression: str
    passed: bool  # the check expression holds
    checks: dict[str, CheckOutcome]
    blocked: str | None = None  # why it cannot fire although (or because) ...
    error: str | None = None
    fired: bool = False

    @property
    def reasons(self) -> list[str]:
        """Why it does not fire, in words: errors, the block, and what each check said."""
        if self.fired:
            return []
        out = [r for r in (self.error, self.blocked) if r]
        if not self.passed and not self.error:
            parts = []
            for name, c in self.checks.items():
                reason = c.info.get("reason")
                word = "passed" if c.passed else "failed"
                parts.append(f"{name} {word}" + (f" ({reason})" if reason else ""))
            out.append(f"{self.expression} is false: " + "; ".join(parts))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.next.value,
            "passed": self.fired,
            "error": self.error or self.blocked or "",
            "chain": {
                "passed": self.passed,
                "expression": self.expression,
                "info": {k: v.to_json() for k, v in self.checks.items()},
            },
            "reasons": self.reasons,
        }


@dataclass
class ProfileOutcome:
    name: str
    state: State  # at the start of the reconcile
    current: State  # after it
    transitions: list[TransitionOutcome] = field(default_factory=list)
    enter: str = ""  # "", "done", "retry: ...", "error: ..."
    error: str | None = None
    known: bool = True

    def to_json(self) -> dict[str, Any]:
        fired = next((t for t in self.transitions if t.fired), None)
        return {
            "name": self.name,
            "state": self.state.value,
            "current": self.current.value,
            "enter": self.enter,
            "applied": {
                "next": (fired.next if fired else self.current).value,
                "error": self.error or "",
                "transitions": [t.to_json() for t in self.transitions],
            },
        }


@dataclass
class NodeOutcome:
    node: str
    profiles: list[ProfileOutcome] = field(default_factory=list)
    work: Obj = field(default_factory=dict)
    patch: Obj | None = None
    data_error: str | None = None
    notifications: list[tuple[Instance, Message]] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # type, reason, note
    failures: list[str] = field(default_factory=list)  # profiles with a plugin failure
    entered_maintenance: list[str] = field(default_factory=list)
    retry: bool = False  # long work under way: look again soon
    state: State = State.OPERATIONAL


class _Chain(Exception):
    def __init__(self, instance: str, cause: BaseException) -> None:
        super().__init__(f"{instance}: {cause}")
        self.instance = instance
        self.cause = cause


def profiles_of(node: Obj, keys: Keys) -> list[str]:
    labels = (node.get("metadata") or {}).get("labels") or {}
    names: list[str] = []
    for name in str(labels.get(keys.profile, "")).split("--"):
        if name and name not in names:
            names.append(name)
    return names or [DEFAULT_PROFILE]


def _working_copy(node: Obj) -> Obj:
    work = dict(node)
    meta = dict(node.get("metadata") or {})
    meta["labels"] = dict(meta.get("labels") or {})
    meta["annotations"] = dict(meta.get("annotations") or {})
    if meta.get("finalizers") is not None:
        meta["finalizers"] = list(meta["finalizers"])
    work["metadata"] = meta
    work["spec"] = copy.deepcopy(node.get("spec") or {})
    return work


def node_patch(original: Obj, work: Obj) -> Obj | None:
    """The merge patch from `original` to `work`, guarded by the original's resourceVersion."""
    om, wm = original.get("metadata") or {}, work.get("metadata") or {}
    meta: Obj = {}
    for key in ("labels", "annotations"):
        before, after = om.get(key) or {}, wm.get(key) or {}
        diff = {k: v for k, v in after.items() if before.get(k) != v}
        diff.update({k: None for k in before if k not in after})
        if diff:
            meta[key] = diff
    if list(om.get("finalizers") or []) != list(wm.get("finalizers") or []):
        meta["finalizers"] = list(wm.get("finalizers") or [])
    spec: Obj = {}
    before_u = bool((original.get("spec") or {}).get("unschedulable"))
    after_u = bool((work.get("spec") or {}).get("unschedulable"))
    if before_u != after_u:
        spec["unschedulable"] = True if after_u else None
    if not meta and not spec:
        return None
    meta["resourceVersion"] = om.get("resourceVersion")
    patch: Obj = {"metadata": meta}
    if spec:
        patch["spec"] = spec
    return patch


class Engine:
    def __init__(self, config: MaintenanceConfig, keys: Keys, cluster: ClusterView) -> None:
        self.config = config
        self.keys = keys
        self.cluster = cluster

    # ------------------------------------------------------------------ helpers

    def _default_is_empty(self) -> bool:
        profile = self.config.profiles.get(DEFAULT_PROFILE)
        if profile is None:
            return True
        return not any(s.enter or s.notify or s.transitions for s in profile.states.values())

    def _ctx(
        self, work: Obj, original: Obj, profile: str, pd: ProfileData, data: NodeData, now: datetime
    ) -> PluginContext:
        others = any(
            p.current == State.IN_MAINTENANCE for n, p in data.profiles.items() if n != profile
        )
        return PluginContext(
            node=work,
            original=original,
            profile=profile,
            state=pd.current.value,
            transition=pd.transition,
            in_maintenance=others,
            now=now,
            keys=self.keys,
            cluster=self.cluster,
        )

    async def _run_triggers(self, names: list[str], ctx: PluginContext) -> None:
        for name in names:
            inst = self.config.triggers[name]
            try:
                await inst.plugin.trigger(ctx)
            except Retry:
                raise
            except Exception as exc:
                raise _Chain(name, exc) from exc

    async def _check(
        self, name: str, ctx: PluginContext, cache: dict[str, CheckOutcome]
    ) -> CheckOutcome:
        hit = cache.get(name)
        if hit is not None:
            return hit
        inst = self.config.checks[name]
        try:
            result = await inst.plugin.check(ctx)
            outcome = CheckOutcome(name, inst.type, bool(result.passed), dict(result.info))
        except Exception as exc:
            outcome = CheckOutcome(name, inst.type, False, {}, f"{type(exc).__name__}: {exc}")
        cache[name] = outcome
        return outcome

    async def _evaluate(
        self, t: Transition, ctx: PluginContext, cache: dict[str, CheckOutcome]
    ) -> TransitionOutcome:
        checks: dict[str, CheckOutcome] = {}
        for n in expression.names(t.check):
            if n.name not in checks:
                checks[n.name] = await self._check(n.name, ctx, cache)
        errors = [c for c in checks.values() if c.error]
        passed = expression.evaluate(t.check, lambda n: checks[n].passed)
        out = TransitionOutcome(t.index, t.next, t.check_text, passed and not errors, checks)
        if errors:
            out.error = "failed check instances: " + ", ".join(c.instance for c in errors)
        return out

    def _notify(
        self,
        out: NodeOutcome,
        work: Obj,
        profile: Profile,
        pd: ProfileData,
        data: NodeData,
        now: datetime,
        changed: bool,
        in_maintenance: bool,
    ) -> None:
        for name in profile.state(pd.current).notify:
            inst = self.config.notifications[name]
            sched = ScheduleContext(
                now=now,
                last_sent=data.notifications.get(name),
                state=pd.current.value,
                state_changed=changed,
                transition=pd.transition,
            )
            if not inst.schedule.due(sched):
                continue
            data.notifications[name] = now
            payload = message_data(
                work,
                state=pd.current.value,
                profile=profile.name,
                in_maintenance=in_maintenance,
                last_transition=pd.transition,
            )
            out.notifications.append(
                (inst, Message(name, out.node, profile.name, pd.current.value, payload))
            )

    async def _enter(
        self, out: NodeOutcome, po: ProfileOutcome, profile: Profile, ctx: PluginContext
    ) -> bool:
        """Run the current state's enter chain; True when it completed."""
        try:
            await self._run_triggers(profile.state(State(ctx.state)).enter, ctx)
        except Retry as exc:
            po.enter = f"retry: {exc}"
            out.retry = True
            return False
        except _Chain as exc:
            po.enter = f"error: {exc}"
            po.error = f"enter chain: {exc}"
            out.failures.append(po.name)
            return False
        po.enter = "done"
        return True

    # ------------------------------------------------------------------ the pass

    async def evaluate(self, node: Obj, now: datetime, *, act: bool = True) -> NodeOutcome:
        """Decide (and with `act`, apply in memory) every profile's next step for `node`."""
        name = str((node.get("metadata") or {}).get("name", ""))
        out = NodeOutcome(name)
        work = _working_copy(node)
        out.work = work
        annotations = work["metadata"]["annotations"]
        raw = annotations.get(self.keys.data)
        try:
            data = NodeData.parse(raw)
        except DataError as exc:
            out.data_error = f"annotation {self.keys.data}: {exc}"
            return out
        before = data.to_json()
        names = profiles_of(node, self.keys)
        if raw is None and names == [DEFAULT_PROFILE] and self._default_is_empty():
            # No profile, no record: nothing to track (and no write for every plain node).
            labels = work["metadata"]["labels"]
            if self.keys.state not in labels:
                out.profiles.append(
                    ProfileOutcome(DEFAULT_PROFILE, State.OPERATIONAL, State.OPERATIONAL)
                )
                return out
        known = [n for n in names if n in self.config.profiles]
        for n in names:
            if n not in self.config.profiles:
                out.profiles.append(
                    ProfileOutcome(
                        n,
                        State.OPERATIONAL,
                        State.OPERATIONAL,
                        known=False,
                        error=f"profile {n!r} is not configured",
                    )
                )
        for n in known:
            if n not in data.profiles:
                data.profiles[n] = ProfileData(State.OPERATIONAL, State.OPERATIONAL, now)
        for n in [n for n in data.profiles if n not in known]:
            del data.profiles[n]

        for pname in known:
            profile = self.config.profiles[pname]
            pd = data.profiles[pname]
            po = ProfileOutcome(pname, pd.current, pd.current)
            out.profiles.append(po)
            ctx = self._ctx(work, node, pname, pd, data, now)
            changed = False
            if not pd.entered:
                if not act:
                    po.enter = "pending"
                elif not await self._enter(out, po, profile, ctx):
                    continue
                else:
                    pd.previous = pd.current
                    changed = True
            if act:
                self._notify(out, work, profile, pd, data, now, changed, ctx.in_maintenance)
            cache: dict[str, CheckOutcome] = {}
            chosen: tuple[Transition, TransitionOutcome] | None = None
            for t in profile.state(pd.current).transitions:
                to = await self._evaluate(t, ctx, cache)
                po.transitions.append(to)
                if to.passed and t.next == State.IN_MAINTENANCE and ctx.in_maintenance:
                    to.blocked = BLOCKED_BY_PROFILE
                if to.passed and not to.blocked and chosen is None:
                    chosen = (t, to)
            if any(t.error for t in po.transitions):
                out.failures.append(pname)
            if chosen is None or not act:
                if chosen is not None:
                    chosen[1].fired = True  # explain: it would fire
                continue
            t, to = chosen
            taken: list[Reservation] = []
            try:
                for check_name in dict.fromkeys(n.name for n in expression.names(t.check)):
                    plugin = self.config.checks[check_name].plugin
                    if isinstance(plugin, Reserving) and to.checks[check_name].passed:
                        r = await plugin.reserve(ctx)
                        if r is not None:
                            taken.append(r)
                await self._run_triggers(t.triggers, ctx)
            except Retry as exc:
                to.blocked = f"trigger retry: {exc}"
                out.retry = True
                for r in taken:
                    await r.release()
                continue
            except Exception as exc:
                to.error = f"transition failed: {exc}"
                po.error = to.error
                out.failures.append(pname)
                out.events.append(
                    ("Normal", "ChangeMaintenanceStateFailed", f"profile {pname}: {exc}")
                )
                for r in taken:
                    await r.release()
                continue
            out.reservations.extend(taken)
            to.fired = True
            pd.previous = pd.current
            pd.current = t.next
            pd.transition = now
            po.current = t.next
            out.events.append(
                (
                    "Normal",
                    "ChangedMaintenanceState",
                    f"The node is now in the {t.next.value} state caused by profile {pname}",
                )
            )
            if t.next == State.IN_MAINTENANCE:
                out.entered_maintenance.append(pname)
            ctx = self._ctx(work, node, pname, pd, data, now)
            if await self._enter(out, po, profile, ctx):
                pd.previous = pd.current
                self._notify(out, work, profile, pd, data, now, True, ctx.in_maintenance)

        out.state = aggregate([p.current for p in data.profiles.values()])
        if not act:
            return out
        labels = work["metadata"]["labels"]
        labels[self.keys.state] = out.state.value
        if data.to_json() != before or raw is None:
            annotations[self.keys.data] = data.dumps()
        out.patch = node_patch(node, work)
        return out
