"""maintenance.yaml: loaded, validated and compiled once, with every problem's FILE:LINE.

The file is accepted as the reference reads it (intervals, dashboard, instances of check,
trigger and notify plugins, profiles with operational / maintenance-required / in-maintenance
states), `${ENV}` included. Everything is checked at load: plugin types and their configs, chain
names, durations and times, expression syntax, message templates. Keys the reference accepted
but ignores (`intervals.notify`, state-level `check`/`trigger` of the old format, ...) are
tolerated with a warning. The result is a `MaintenanceConfig` whose plugin instances are built
and whose expressions are parsed, ready for the controller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from nodeops.common.yamlfile import (
    ConfigFileError,
    Marked,
    load_yaml,
    read_config_text,
)
from nodeops.controllers.maintenance import expression
from nodeops.controllers.maintenance.durations import parse_duration
from nodeops.controllers.maintenance.expression import ExpressionError
from nodeops.controllers.maintenance.plugins.base import PluginType, Registry
from nodeops.controllers.maintenance.state import STATES, State
from nodeops.controllers.maintenance.templating import TemplateError

Duration = Annotated[float, BeforeValidator(parse_duration)]
KINDS = ("check", "trigger", "notify")
DEFAULT_PROFILE = "default"


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem (or warning) at a line of the file; no line when the file itself is at fault
    (it cannot be read)."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


class ConfigError(ValueError):
    """The configuration cannot be used; `problems` lists each with its FILE:LINE."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.file, p.line or 0))
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def from_file_error(cls, exc: ConfigFileError) -> ConfigError:
        """The problems of reading the file as YAML, in this module's terms."""
        return cls(
            [
                Problem(exc.source, p.line, f"{p.field}: {p.message}" if p.field else p.message)
                for p in exc.problems
            ]
        )


# ---------------------------------------------------------------------- raw shape


class _Raw(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class RawSchedule(_Raw):
    type: str
    config: dict[str, Any] | None = None


class RawInstance(_Raw):
    type: str
    name: str = Field(min_length=1)
    config: dict[str, Any] | None = None


class RawNotifyInstance(RawInstance):
    schedule: RawSchedule | None = None


class RawTransition(_Raw):
    # Required, but checked by the loader so a missing one does not hide the other problems.
    check: str | None = None
    trigger: str | None = None
    next: str | None = None


class RawState(_Raw):
    enter: str | None = None
    notify: str | None = None
    transitions: Any = None  # each validated on its own (RawTransition)
    # The format before configurable transitions: one check/trigger, implied next state.
    check: str | None = None
    trigger: str | None = None


class RawProfile(_Raw):
    """The states are validated one by one (RawState), so one bad part hides nothing else."""

    name: str | None = None  # required, checked by the loader
    operational: Any = None
    maintenance_required: Any = Field(None, alias="maintenance-required")
    in_maintenance: Any = Field(None, alias="in-maintenance")


class RawIntervals(_Raw):
    requeue: Duration = 60.0
    notify: Any = None  # legacy, ignored


class RawDashboard(_Raw):
    labelFilter: list[str] = Field(default_factory=list)


class RawInstances(_Raw):
    check: list[RawInstance] | None = None
    trigger: list[RawInstance] | None = None
    notify: list[RawNotifyInstance] | None = None


class RawConfig(_Raw):
    intervals: RawIntervals = Field(default_factory=RawIntervals)
    dashboard: RawDashboard = Field(default_factory=RawDashboard)
    instances: RawInstances = Field(default_factory=RawInstances)
    profiles: list[RawProfile] | None = None


_LEGACY_TOP = {"keys": "the keys section is not used (key names come from --compat/--key-prefix)"}
_IMPLIED_NEXT = {
    State.OPERATIONAL: State.REQUIRED,
    State.REQUIRED: State.IN_MAINTENANCE,
    State.IN_MAINTENANCE: State.OPERATIONAL,
}


# ---------------------------------------------------------------------- compiled shape


@dataclass
class Instance:
    kind: str
    name: str
    type: str
    plugin: Any
    plugin_type: PluginType
    line: int
    schedule: Any = None
    schedule_type: str = ""


@dataclass
class Transition:
    index: int
    check: expression.Expr
    check_text: str
    triggers: list[str]
    next: State
    line: int


@dataclass
class StateConfig:
    enter: list[str] = field(default_factory=list)
    notify: list[str] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)


@dataclass
class Profile:
    name: str
    states: dict[State, StateConfig]

    def state(self, state: State) -> StateConfig:
        return self.states[state]


@dataclass
class MaintenanceConfig:
    source: str
    requeue: float
    label_filter: list[str]
    checks: dict[str, Instance]
    triggers: dict[str, Instance]
    notifications: dict[str, Instance]
    profiles: dict[str, Profile]
    warnings: list[Problem] = field(default_factory=list)

    def instances(self, kind: str) -> dict[str, Instance]:
        return {"check": self.checks, "trigger": self.triggers, "notify": self.notifications}[kind]

    def needs(self) -> frozenset[str]:
        out: set[str] = set()
        for group in (self.checks, self.triggers, self.notifications):
            for inst in group.values():
                out |= inst.plugin_type.needs
        return frozenset(out)


def empty_profile(name: str = DEFAULT_PROFILE) -> Profile:
    return Profile(name, {s: StateConfig() for s in STATES})


# ---------------------------------------------------------------------- loading


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top)"


class _Loader:
    def __init__(self, file: str, marked: Marked, registry: Registry) -> None:
        self.file = file
        self.marked = marked
        self.registry = registry
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.broken: set[tuple[str, str]] = set()  # (kind, name) defined but invalid

    def line(self, path: tuple[str | int, ...]) -> int:
        return self.marked.line_of(path)

    def error(self, path: tuple[str | int, ...], message: str, line: int | None = None) -> None:
        where = _dotted(path)
        self.problems.append(
            Problem(self.file, line or self.line(path), f"{where}: {message}" if path else message)
        )

    def warn(self, path: tuple[str | int, ...], message: str) -> None:
        self.warnings.append(Problem(self.file, self.line(path), f"{_dotted(path)}: {message}"))

    def validation(self, exc: ValidationError, base: tuple[str | int, ...] = ()) -> None:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
            path = (*base, *loc)
            msg = err["msg"]
            if err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "literal_error":
                msg = f"{msg} (got {err.get('input')!r})"
            elif msg.startswith("Value error, "):
                msg = msg.removeprefix("Value error, ")
            self.error(path, msg)

    def extras(self, model: BaseModel, path: tuple[str | int, ...]) -> None:
        for key in model.model_extra or {}:
            self.warn((*path, key), "unknown key, ignored")

    # ------------------------------------------------------------------ instances

    def instance(
        self, kind: str, index: int, raw: RawInstance, seen: dict[str, Instance]
    ) -> Instance | None:
        path: tuple[str | int, ...] = ("instances", kind, index)
        self.extras(raw, path)
        ptype = self.registry.get(kind, raw.type)
        if ptype is None:
            known = ", ".join(self.registry.names(kind))
            self.error((*path, "type"), f"unknown {kind} plugin type {raw.type!r} (known: {known})")
            return None
        config = dict(raw.config or {})
        for key in sorted(ptype.legacy_keys & set(config)):
            self.warn((*path, "config", key), "legacy key, ignored")
            config.pop(key)
        try:
            cfg = ptype.config.model_validate(config)
        except ValidationError as exc:
            self.validation(exc, (*path, "config"))
            return None
        for key in cfg.model_extra or {}:
            self.warn((*path, "config", key), f"unknown key for {raw.type}, ignored")
        for key, message in cfg.load_warnings():
            self.warn((*path, "config", key), message)
        try:
            plugin = ptype.factory(cfg)
        except TemplateError as exc:
            where = f"template line {exc.line}, column {exc.column}: " if exc.line else ""
            self.error((*path, "config", exc.field), f"{where}{exc.reason}")
            return None
        except (ValueError, TypeError) as exc:
            self.error((*path, "config"), str(exc))
            return None
        inst = Instance(kind, raw.name, raw.type, plugin, ptype, self.line(path))
        if isinstance(raw, RawNotifyInstance):
            if raw.schedule is None:
                self.error((*path, "schedule"), "required field is missing")
                return None
            spath = (*path, "schedule")
            self.extras(raw.schedule, spath)
            stype = self.registry.get("schedule", raw.schedule.type)
            if stype is None:
                known = ", ".join(self.registry.names("schedule"))
                self.error(
                    (*spath, "type"),
                    f"unknown schedule type {raw.schedule.type!r} (known: {known})",
                )
                return None
            try:
                scfg = stype.config.model_validate(raw.schedule.config or {})
                inst.schedule = stype.factory(scfg)
                inst.schedule_type = raw.schedule.type
            except ValidationError as exc:
                self.validation(exc, (*spath, "config"))
                return None
            except ValueError as exc:
                self.error((*spath, "config"), str(exc))
                return None
        if raw.name in seen:
            self.warn(path, f"{kind} instance {raw.name!r} defined twice; this one wins")
        seen[raw.name] = inst
        return inst

    # ------------------------------------------------------------------ profiles

    def chain(
        self, kind: str, text: str | None, path: tuple[str | int, ...], known: Mapping[str, Any]
    ) -> list[str]:
        try:
            items = expression.parse_chain(text)
        except ExpressionError as exc:
            self.error(path, f"{exc.reason} (column {exc.column})")
            return []
        out = []
        for item in items:
            if (kind, item.name) in self.broken:
                continue  # its definition was reported already
            if item.name not in known:
                self.error(path, f"unknown {kind} instance {item.name!r} (column {item.column})")
            else:
                out.append(item.name)
        return out

    def check_expr(
        self,
        text: str,
        path: tuple[str | int, ...],
        checks: Mapping[str, Instance],
        state: State,
    ) -> expression.Expr | None:
        try:
            expr = expression.parse(text)
        except ExpressionError as exc:
            self.error(path, f"{exc.reason} (column {exc.column}) in {text!r}")
            return None
        ok = True
        for name in expression.names(expr):
            inst = checks.get(name.name)
            if inst is None and ("check", name.name) in self.broken:
                ok = False
            elif inst is None:
                self.error(path, f"unknown check instance {name.name!r} (column {name.column})")
                ok = False
            elif inst.plugin_type.states is not None and state not in inst.plugin_type.states:
                allowed = ", ".join(sorted(inst.plugin_type.states))
                self.error(
                    path,
                    f"check {name.name!r} ({inst.type}) can only be used in: {allowed}",
                )
                ok = False
        return expr if ok else None

    def state(
        self,
        value: Any,
        state: State,
        path: tuple[str | int, ...],
        checks: Mapping[str, Instance],
        triggers: Mapping[str, Instance],
        notifications: Mapping[str, Instance],
    ) -> StateConfig:
        if value is None:
            return StateConfig()
        raw = self.section(RawState, value, path)
        if raw is None:
            return StateConfig()
        out = StateConfig(
            enter=self.chain("trigger", raw.enter, (*path, "enter"), triggers),
            notify=self.chain("notify", raw.notify, (*path, "notify"), notifications),
        )
        listed = self.items(raw.transitions, (*path, "transitions"))
        transitions: list[tuple[tuple[str | int, ...], RawTransition]] = []
        for i, item in enumerate(listed):
            t = self.section(RawTransition, item, (*path, "transitions", i))
            if t is not None:
                transitions.append(((*path, "transitions", i), t))
        if raw.check is not None or raw.trigger is not None:
            self.warn(
                path,
                "legacy check/trigger on the state: read as one transition to "
                f"{_IMPLIED_NEXT[state].value} (write transitions: [{{check, trigger, next}}])",
            )
            if raw.check:
                legacy = RawTransition(
                    check=raw.check, trigger=raw.trigger, next=_IMPLIED_NEXT[state]
                )
                transitions.append(((*path, "check"), legacy))
        for i, (tpath, t) in enumerate(transitions):
            expr = None
            if t.check is None:
                self.error((*tpath, "check"), "required field is missing")
            elif not t.check.strip():
                self.error((*tpath, "check"), "must not be empty")
            else:
                expr = self.check_expr(t.check, (*tpath, "check"), checks, state)
            trig = self.chain("trigger", t.trigger, (*tpath, "trigger"), triggers)
            if t.next is None:
                self.error((*tpath, "next"), "required field is missing")
                continue
            if t.next not in {s.value for s in STATES}:
                allowed = ", ".join(s.value for s in STATES)
                self.error((*tpath, "next"), f"unknown state {t.next!r} (one of {allowed})")
                continue
            nxt = State(t.next)
            if nxt == state:
                self.warn((*tpath, "next"), "transition to the same state never changes anything")
            if expr is not None:
                out.transitions.append(
                    Transition(i, expr, t.check or "", trig, nxt, self.line(tpath))
                )
        return out

    def section(self, model: type[_Raw], value: Any, path: tuple[str | int, ...]) -> Any:
        """Validate one part on its own, so one bad part does not hide problems in the rest."""
        try:
            out = model.model_validate({} if value is None else value)
        except ValidationError as exc:
            self.validation(exc, path)
            return None
        self.extras(out, path)
        return out

    def items(self, value: Any, path: tuple[str | int, ...]) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(path, f"expected a list, got {type(value).__name__}")
            return []
        return value

    def load(self) -> MaintenanceConfig:
        data = self.marked.data
        if not isinstance(data, dict):
            self.error((), "the configuration must be a mapping (intervals, instances, profiles)")
            raise ConfigError(self.problems)
        for key in data:
            if key in _LEGACY_TOP:
                self.warn((key,), f"legacy key ignored: {_LEGACY_TOP[key]}")
            elif key not in ("intervals", "dashboard", "instances", "profiles"):
                self.warn((key,), "unknown key, ignored")
        intervals = self.section(RawIntervals, data.get("intervals"), ("intervals",))
        if intervals is not None and intervals.notify is not None:
            self.warn(
                ("intervals", "notify"),
                "legacy key ignored: each notify instance has its own schedule",
            )
        dashboard = self.section(RawDashboard, data.get("dashboard"), ("dashboard",))
        raw_instances = data.get("instances")
        if raw_instances is not None and not isinstance(raw_instances, dict):
            self.error(("instances",), "expected a mapping with check, trigger and notify")
            raw_instances = {}
        raw_instances = raw_instances or {}
        for key in raw_instances:
            if key not in KINDS:
                self.warn(("instances", key), "unknown key, ignored (check, trigger, notify)")
        built: dict[str, dict[str, Instance]] = {k: {} for k in KINDS}
        for kind in KINDS:
            model = RawNotifyInstance if kind == "notify" else RawInstance
            for i, item in enumerate(self.items(raw_instances.get(kind), ("instances", kind))):
                raw = self.section(model, item, ("instances", kind, i))
                if raw is not None and self.instance(kind, i, raw, built[kind]) is None:
                    self.broken.add((kind, raw.name))
                elif raw is None and isinstance(item, dict) and isinstance(item.get("name"), str):
                    self.broken.add((kind, item["name"]))
        profiles: dict[str, Profile] = {DEFAULT_PROFILE: empty_profile()}
        names_seen: set[str] = set()
        for i, item in enumerate(self.items(data.get("profiles"), ("profiles",))):
            path: tuple[str | int, ...] = ("profiles", i)
            rp = self.section(RawProfile, item, path)
            if rp is None:
                continue
            named = True
            if not rp.name:
                self.error((*path, "name"), "required field is missing")
                named = False
            elif "--" in rp.name:
                self.error((*path, "name"), f"profile name {rp.name!r} must not contain '--'")
                named = False
            if named and rp.name in names_seen:
                self.warn(path, f"profile {rp.name!r} defined twice; this one wins")
            if rp.name:
                names_seen.add(rp.name)
            states = {}
            for state, attr in (
                (State.OPERATIONAL, "operational"),
                (State.REQUIRED, "maintenance_required"),
                (State.IN_MAINTENANCE, "in_maintenance"),
            ):
                states[state] = self.state(
                    getattr(rp, attr),
                    state,
                    (*path, state.value),
                    built["check"],
                    built["trigger"],
                    built["notify"],
                )
            if named and rp.name:
                profiles[rp.name] = Profile(rp.name, states)
        if self.problems or intervals is None or dashboard is None:
            raise ConfigError(self.problems)
        return MaintenanceConfig(
            source=self.file,
            requeue=intervals.requeue,
            label_filter=list(dashboard.labelFilter),
            checks=built["check"],
            triggers=built["trigger"],
            notifications=built["notify"],
            profiles=profiles,
            warnings=self.warnings,
        )


def default_registry() -> Registry:
    from nodeops.controllers.maintenance.plugins import builtin_types

    registry = Registry(builtin_types())
    registry.load_entry_points()
    return registry


def load_text(
    text: str,
    file: str = "maintenance.yaml",
    *,
    registry: Registry | None = None,
    env: Mapping[str, str] | None = None,
) -> MaintenanceConfig:
    try:
        marked = load_yaml(text, source=file, environ=os.environ if env is None else env)
    except ConfigFileError as exc:
        raise ConfigError.from_file_error(exc) from None
    return _Loader(file, marked, registry or default_registry()).load()


def load_file(
    path: str | Path, *, registry: Registry | None = None, env: Mapping[str, str] | None = None
) -> MaintenanceConfig:
    try:
        text = read_config_text(path)
    except ConfigFileError as exc:
        raise ConfigError.from_file_error(exc) from None
    return load_text(text, str(path), registry=registry, env=env)
