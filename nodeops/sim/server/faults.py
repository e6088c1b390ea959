"""Reproducible fault injection for the simulated API server.

Clients of a real apiserver must survive 500s, 429s with Retry-After, optimistic-concurrency
409s, slow responses, watch streams that end early and watch resumes answered with 410 Expired.
This module decides *when* such faults happen; the HTTP layer decides *how* they look on the
wire, by asking the `FaultInjector` on each request.

Every random decision comes from one `random.Random(seed)`, so a run with the same seed and the
same request sequence injects the same faults, and a failure found in CI can be replayed.

Text grammar (the `--faults SPEC` flag; whitespace around any token is ignored)::

    spec         = [clause] *( (";" | newline) [clause] )
    clause       = error | latency | watch-cut | watch-expire | watch-delay
    error        = "error=" CODE [":" RATE] ["@" request] [":retry-after=" SECONDS]
    latency      = "latency=" DURATION [":" RATE] ["@" request]
    watch-cut    = "watch-cut=" ("events:" COUNT | "seconds:" NUMBER) ["@" resource]
    watch-expire = "watch-expire=" RATE ["@" resource]
    watch-delay  = "watch-delay=" DURATION ["@" resource]
    request      = VERBS "/" resource | "*"
    VERBS        = "*" | VERB *("," VERB)
    VERB         = get | list | watch | create | update | patch | delete | deletecollection
    resource     = glob over the plural, optionally "/subresource" (pods, pods/eviction, *)
    CODE         = 500 | 429 | 409
    RATE         = probability in [0, 1]; 1 when left out
    DURATION     = NUMBER ("ms" | "s")

Options (`NAME=VALUE`) may follow the arguments or the target. A request target of `*` means
`*/*`; a left-out target means every request (or every watched resource). In resource globs `*`
matches any run of characters including `/`, so `*` covers subresources and `pods/*` covers only
the subresources of pods.

Example::

    error=500:0.05@patch/pods; error=429:0.1@*/*:retry-after=1; error=409:0.02@update/leases;
    latency=50ms@list/*; watch-cut=events:100@pods; watch-cut=seconds:5@*; watch-expire=0.5@pods;
    watch-delay=500ms@configmaps

`watch-delay` holds every event of a watch stream back for at least DURATION before sending it
(a slow watch cache, a congested apiserver): writes are answered at once, but watchers learn of
them late, which is what read-your-writes has to survive. Bookmarks never overtake held events.

The dict form, for tests and YAML scenario files, is a list whose items are either text clauses
or mappings with exactly one kind key plus `rate`, `at` (the target) and options::

    - {error: 500, rate: 0.05, at: patch/pods}
    - {error: 429, rate: 0.1, retry-after: 1}
    - {latency: 50ms, at: "list/*"}          # a bare number is seconds
    - {watch-cut: {events: 100}, at: pods}
    - {watch-expire: 0.5, at: pods}
    - {watch-delay: 500ms, at: configmaps}  # a bare number is seconds
    - error=409:0.02@update/leases

The target key is `at`, after the `@` of the text form; YAML 1.1 would read `on` as a boolean.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final, TypeAlias

import yaml

from nodeops.sim.server.errors import ApiError, internal, stale_conflict, too_many_requests

VERBS: Final = (
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
)
ERROR_CODES: Final = (409, 429, 500)
KINDS: Final = ("error", "latency", "watch-cut", "watch-expire", "watch-delay")
COUNT_KEYS: Final = (
    "error-409",
    "error-429",
    "error-500",
    "latency",
    "watch-cut",
    "watch-expire",
    "watch-delay",
)

DEFAULT_RETRY_AFTER: Final = 1

# Lookups are cached per (verb, resource); the bound only matters if a client invents names.
_CACHE_LIMIT: Final = 4096
_NO_LIMITS: Final[tuple[int | None, float | None]] = (None, None)

_RESOURCE_RE: Final = re.compile(r"[a-z0-9*][a-z0-9.*-]*(?:/[a-z0-9*][a-z0-9.*-]*)?")
_CLAUSE_SPLIT_RE: Final = re.compile(r"[;\n]")
_DURATION_RE: Final = re.compile(r"(.+?)(ms|s)")


class FaultSpecError(ValueError):
    """A spec that cannot be parsed; names the clause so a long `--faults` value is debuggable."""

    def __init__(self, clause: str, problem: str) -> None:
        super().__init__(f"bad fault clause `{clause}`: {problem}")
        self.clause = clause
        self.problem = problem


def _num(x: float) -> str:
    """Shortest text that parses back to the same float, without a pointless `.0`."""
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """Which requests a clause applies to: a set of verbs (None for any) and a resource glob."""

    verbs: tuple[str, ...] | None
    resource: str

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verbs is None or verb in self.verbs) and fnmatchcase(resource, self.resource)

    def __str__(self) -> str:
        verbs = "*" if self.verbs is None else ",".join(self.verbs)
        return f"{verbs}/{self.resource}"


@dataclass(frozen=True, slots=True)
class ErrorFault:
    """Answer a matching request with `code` instead of serving it."""

    code: int
    rate: float
    target: RequestTarget
    retry_after: int | None = None

    def __str__(self) -> str:
        text = f"error={self.code}{_rate_suffix(self.rate)}@{self.target}"
        if self.retry_after is not None:
            text += f":retry-after={self.retry_after}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"error": self.code, "rate": self.rate, "at": str(self.target)}
        if self.retry_after is not None:
            d["retry-after"] = self.retry_after
        return d


class _Duration:
    """For faults holding a duration in milliseconds (so `50ms` round-trips exactly)."""

    __slots__ = ()
    millis: float

    @property
    def seconds(self) -> float:
        return self.millis / 1000.0

    def duration(self) -> str:
        """`2s` or `50ms`: whole seconds in seconds, anything else in milliseconds."""
        if self.millis >= 1000 and self.millis % 1000 == 0:
            return f"{_num(self.millis / 1000)}s"
        return f"{_num(self.millis)}ms"


@dataclass(frozen=True, slots=True)
class LatencyFault(_Duration):
    """Delay a matching request; kept in milliseconds so `50ms` round-trips exactly."""

    millis: float
    rate: float
    target: RequestTarget

    def __str__(self) -> str:
        return f"latency={self.duration()}{_rate_suffix(self.rate)}@{self.target}"

    def to_dict(self) -> dict[str, Any]:
        return {"latency": self.duration(), "rate": self.rate, "at": str(self.target)}


@dataclass(frozen=True, slots=True)
class WatchCutFault:
    """End a watch stream after `events` events or `seconds` seconds (exactly one is set)."""

    events: int | None
    seconds: float | None
    resource: str

    def _limit(self) -> tuple[str, str]:
        if self.events is not None:
            return "events", str(self.events)
        assert self.seconds is not None
        return "seconds", _num(self.seconds)

    def __str__(self) -> str:
        unit, amount = self._limit()
        return f"watch-cut={unit}:{amount}@{self.resource}"

    def to_dict(self) -> dict[str, Any]:
        amount: float | None = self.events if self.events is not None else self.seconds
        unit = "events" if self.events is not None else "seconds"
        return {"watch-cut": {unit: amount}, "at": self.resource}


@dataclass(frozen=True, slots=True)
class WatchExpireFault:
    """Answer a watch resume (one with a resourceVersion) as if that version were compacted."""

    rate: float
    resource: str

    def __str__(self) -> str:
        return f"watch-expire={_num(self.rate)}@{self.resource}"

    def to_dict(self) -> dict[str, Any]:
        return {"watch-expire": self.rate, "at": self.resource}


@dataclass(frozen=True, slots=True)
class WatchDelayFault(_Duration):
    """Hold each event of a watch on `resource` back for at least `millis` milliseconds."""

    millis: float
    resource: str

    def __str__(self) -> str:
        return f"watch-delay={self.duration()}@{self.resource}"

    def to_dict(self) -> dict[str, Any]:
        return {"watch-delay": self.duration(), "at": self.resource}


Fault: TypeAlias = ErrorFault | LatencyFault | WatchCutFault | WatchExpireFault | WatchDelayFault


def _rate_suffix(rate: float) -> str:
    return "" if rate == 1.0 else f":{_num(rate)}"


# ---------------------------------------------------------------------------------------------
# Parsing. The text and dict forms share the per-kind parsers so they validate identically.


def _rate(clause: str, text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise FaultSpecError(clause, f"rate {text!r} is not a number") from None
    if not (0.0 <= rate <= 1.0):
        raise FaultSpecError(clause, f"rate must be between 0 and 1, got {text}")
    return rate


def _integer(clause: str, text: str, what: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise FaultSpecError(clause, f"{what} {text!r} is not an integer") from None
    if value < minimum:
        raise FaultSpecError(clause, f"{what} must be at least {minimum}, got {value}")
    return value


def _positive(clause: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultSpecError(clause, f"{what} {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise FaultSpecError(clause, f"{what} must be a positive number, got {text}")
    return value


def _duration_millis(clause: str, text: str) -> float:
    m = _DURATION_RE.fullmatch(text)
    if m is None:
        raise FaultSpecError(
            clause, f"duration {text!r} needs a unit: ms or s (for example 50ms or 1.5s)"
        )
    try:
        amount = float(m.group(1))
    except ValueError:
        raise FaultSpecError(clause, f"duration {text!r} is not a number") from None
    if not math.isfinite(amount):
        raise FaultSpecError(clause, f"duration {text!r} is not a finite number")
    if amount < 0:
        raise FaultSpecError(clause, f"duration must be zero or more, got {text}")
    return amount if m.group(2) == "ms" else amount * 1000.0


def _resource_glob(clause: str, text: str) -> str:
    if not _RESOURCE_RE.fullmatch(text):
        raise FaultSpecError(
            clause,
            f"bad resource pattern {text!r}: use a lowercase plural such as pods or "
            "pods/eviction, with * as a wildcard",
        )
    return text


def _request_target(clause: str, text: str | None) -> RequestTarget:
    if text is None or text == "*":
        return RequestTarget(None, "*")
    verbs_text, slash, resource = text.partition("/")
    if not slash:
        raise FaultSpecError(
            clause, f"target {text!r} must be VERB/RESOURCE (such as patch/pods or */pods) or *"
        )
    verbs: list[str] = []
    for verb in (v.strip() for v in verbs_text.split(",")):
        if verb == "*":
            return RequestTarget(None, _resource_glob(clause, resource.strip()))
        if verb not in VERBS:
            raise FaultSpecError(
                clause, f"unknown verb {verb!r}; expected * or one of {', '.join(VERBS)}"
            )
        if verb not in verbs:
            verbs.append(verb)
    return RequestTarget(tuple(verbs), _resource_glob(clause, resource.strip()))


def _watch_resource(clause: str, text: str | None) -> str:
    if text is None:
        return "*"
    if "/" in text:
        raise FaultSpecError(
            clause, f"watch faults take a RESOURCE target such as pods or *, not {text!r}"
        )
    return _resource_glob(clause, text)


def _no_options(clause: str, kind: str, options: Mapping[str, str]) -> None:
    if options:
        name = next(iter(options))
        raise FaultSpecError(clause, f"unknown option {name!r} for {kind}")


def _parse_error(
    clause: str, args: Sequence[str], target: str | None, options: Mapping[str, str]
) -> ErrorFault:
    if not 1 <= len(args) <= 2:
        raise FaultSpecError(clause, "expected error=CODE[:RATE]")
    code = _integer(clause, args[0], "error code", 0)
    if code not in ERROR_CODES:
        raise FaultSpecError(
            clause,
            f"unsupported error code {code}; expected one of {', '.join(map(str, ERROR_CODES))}",
        )
    rate = _rate(clause, args[1]) if len(args) == 2 else 1.0
    retry_after: int | None = DEFAULT_RETRY_AFTER if code == 429 else None
    for name, value in options.items():
        if name != "retry-after":
            raise FaultSpecError(clause, f"unknown option {name!r} for error")
        if code != 429:
            raise FaultSpecError(clause, "retry-after applies only to error=429")
        retry_after = _integer(clause, value, "retry-after", 0)
    return ErrorFault(code, rate, _request_target(clause, target), retry_after)


def _parse_latency(
    clause: str, args: Sequence[str], target: str | None, options: Mapping[str, str]
) -> LatencyFault:
    if not 1 <= len(args) <= 2:
        raise FaultSpecError(clause, "expected latency=DURATION[:RATE]")
    _no_options(clause, "latency", options)
    millis = _duration_millis(clause, args[0])
    rate = _rate(clause, args[1]) if len(args) == 2 else 1.0
    return LatencyFault(millis, rate, _request_target(clause, target))


def _parse_watch_cut(
    clause: str, args: Sequence[str], target: str | None, options: Mapping[str, str]
) -> WatchCutFault:
    if len(args) != 2 or args[0] not in ("events", "seconds"):
        raise FaultSpecError(clause, "expected watch-cut=events:COUNT or watch-cut=seconds:NUMBER")
    _no_options(clause, "watch-cut", options)
    resource = _watch_resource(clause, target)
    if args[0] == "events":
        return WatchCutFault(_integer(clause, args[1], "event count", 1), None, resource)
    return WatchCutFault(None, _positive(clause, args[1], "seconds"), resource)


def _parse_watch_expire(
    clause: str, args: Sequence[str], target: str | None, options: Mapping[str, str]
) -> WatchExpireFault:
    if len(args) != 1:
        raise FaultSpecError(clause, "expected watch-expire=RATE")
    _no_options(clause, "watch-expire", options)
    return WatchExpireFault(_rate(clause, args[0]), _watch_resource(clause, target))


def _parse_watch_delay(
    clause: str, args: Sequence[str], target: str | None, options: Mapping[str, str]
) -> WatchDelayFault:
    if len(args) != 1:
        raise FaultSpecError(clause, "expected watch-delay=DURATION")
    _no_options(clause, "watch-delay", options)
    return WatchDelayFault(_duration_millis(clause, args[0]), _watch_resource(clause, target))


_Parser: TypeAlias = Callable[[str, Sequence[str], str | None, Mapping[str, str]], Fault]

_PARSERS: Final[dict[str, _Parser]] = {
    "error": _parse_error,
    "latency": _parse_latency,
    "watch-cut": _parse_watch_cut,
    "watch-expire": _parse_watch_expire,
    "watch-delay": _parse_watch_delay,
}


def _add_option(clause: str, options: dict[str, str], part: str) -> None:
    name, _, value = part.partition("=")
    name, value = name.strip(), value.strip()
    if not name or not value:
        raise FaultSpecError(clause, f"option {part!r} must be NAME=VALUE")
    if name in options:
        raise FaultSpecError(clause, f"option {name!r} given twice")
    options[name] = value


def _parse_clause(clause: str) -> Fault:
    kind, eq, body = clause.partition("=")
    kind = kind.strip()
    if kind not in _PARSERS:
        raise FaultSpecError(
            clause, f"unknown fault kind {kind!r}; expected one of {', '.join(KINDS)}"
        )
    if not eq or not body.strip():
        raise FaultSpecError(clause, f"{kind} needs a value after '='")
    head, at, tail = body.partition("@")
    if "@" in tail:
        raise FaultSpecError(clause, "more than one '@'")
    args: list[str] = []
    options: dict[str, str] = {}
    for part in (p.strip() for p in head.split(":")):
        if not part:
            raise FaultSpecError(clause, "empty field (stray ':')")
        if "=" in part:
            _add_option(clause, options, part)
        elif options:
            raise FaultSpecError(clause, f"argument {part!r} after an option")
        else:
            args.append(part)
    target: str | None = None
    if at:
        target_text, *rest = (p.strip() for p in tail.split(":"))
        if not target_text or "=" in target_text:
            raise FaultSpecError(clause, "expected a target after '@'")
        target = target_text
        for part in rest:
            if "=" not in part:
                raise FaultSpecError(clause, f"expected NAME=VALUE after the target, got {part!r}")
            _add_option(clause, options, part)
    return _PARSERS[kind](clause, args, target, options)


def _parse_text(text: str) -> list[Fault]:
    return [_parse_clause(c.strip()) for c in _CLAUSE_SPLIT_RE.split(text) if c.strip()]


def _parse_mapping(item: Mapping[str, Any]) -> Fault:
    label = repr(dict(item))
    kinds = [k for k in KINDS if k in item]
    if len(kinds) != 1:
        raise FaultSpecError(label, f"expected exactly one of {', '.join(KINDS)}")
    kind = kinds[0]
    value = item[kind]
    target = item.get("at")
    if target is not None and not isinstance(target, str):
        raise FaultSpecError(label, f"'at' must be a string, got {target!r}")
    args: list[str]
    if kind == "watch-cut":
        if isinstance(value, Mapping) and len(value) == 1:
            ((unit, amount),) = value.items()
            args = [str(unit), str(amount)]
        elif isinstance(value, str):
            args = [p.strip() for p in value.split(":")]
        else:
            raise FaultSpecError(label, "watch-cut must be {events: COUNT} or {seconds: NUMBER}")
    elif (
        kind in ("latency", "watch-delay")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        args = [f"{_num(float(value) * 1000.0)}ms"]
    else:
        args = [str(value)]
    if "rate" in item:
        args.append(str(item["rate"]))
    options = {k: str(v) for k, v in item.items() if k not in (kind, "at", "rate")}
    return _PARSERS[kind](label, args, target, options)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """A parsed, validated set of fault clauses; `str()` gives text that parses back to it."""

    clauses: tuple[Fault, ...] = ()

    @classmethod
    def parse(cls, spec: FaultSpecLike) -> FaultSpec:
        """Accept every form a caller might hold: text, dict form, a parsed spec or nothing."""
        if spec is None:
            return cls()
        if isinstance(spec, FaultSpec):
            return spec
        if isinstance(spec, str):
            return cls(tuple(_parse_text(spec)))
        if isinstance(spec, Mapping):
            return cls((_parse_mapping(spec),))
        clauses: list[Fault] = []
        for item in spec:
            if isinstance(item, str):
                clauses.extend(_parse_text(item))
            elif isinstance(item, Mapping):
                clauses.append(_parse_mapping(item))
            else:
                raise FaultSpecError(repr(item), "expected a text clause or a mapping")
        return cls(tuple(clauses))

    @classmethod
    def from_yaml(cls, text: str) -> FaultSpec:
        """Parse a YAML document holding the dict form (or a text spec as a YAML string)."""
        data = yaml.safe_load(text)
        if data is not None and not isinstance(data, str | list | dict):
            raise FaultSpecError(text.strip(), "YAML must hold a list of clauses or a string")
        return cls.parse(data)

    def to_data(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.clauses]

    def __str__(self) -> str:
        return "; ".join(str(c) for c in self.clauses)

    def __bool__(self) -> bool:
        return bool(self.clauses)


FaultSpecLike: TypeAlias = (
    str | FaultSpec | Sequence[str | Mapping[str, Any]] | Mapping[str, Any] | None
)


# ---------------------------------------------------------------------------------------------
# Injection.


class FaultInjector:
    """Decides, per request, which configured faults fire.

    Each `update` restarts the random sequence from the seed, so what happens after a test switches
    faults on does not depend on how much background traffic came before. Counts also restart,
    so they always describe the spec currently installed.

    The hot path is every request of every benchmark: with no clause of a kind configured, the
    corresponding method is one attribute load and a truth test, and never touches the RNG.
    """

    def __init__(self, spec: FaultSpecLike = None, seed: int = 0) -> None:
        self.seed = seed
        self._rng = random.Random(seed)
        self.spec = FaultSpec()
        self.enabled = False
        self._errors: tuple[ErrorFault, ...] = ()
        self._latencies: tuple[LatencyFault, ...] = ()
        self._cuts: tuple[WatchCutFault, ...] = ()
        self._expiries: tuple[WatchExpireFault, ...] = ()
        self._delays: tuple[WatchDelayFault, ...] = ()
        self._error_hits: dict[tuple[str, str], tuple[ErrorFault, ...]] = {}
        self._latency_hits: dict[tuple[str, str], tuple[LatencyFault, ...]] = {}
        self._cut_hits: dict[str, tuple[int | None, float | None]] = {}
        self._expire_hits: dict[str, float] = {}
        self._delay_hits: dict[str, float] = {}
        self._counts: dict[str, int] = dict.fromkeys(COUNT_KEYS, 0)
        self.update(spec)

    def update(self, spec: FaultSpecLike, seed: int | None = None) -> FaultSpec:
        """Install a new spec; a bad spec raises `FaultSpecError` and leaves the old one active."""
        parsed = FaultSpec.parse(spec)
        if seed is not None:
            self.seed = seed
        self._rng.seed(self.seed)
        self.spec = parsed
        clauses = parsed.clauses
        self._errors = tuple(c for c in clauses if isinstance(c, ErrorFault))
        self._latencies = tuple(c for c in clauses if isinstance(c, LatencyFault))
        self._cuts = tuple(c for c in clauses if isinstance(c, WatchCutFault))
        self._expiries = tuple(c for c in clauses if isinstance(c, WatchExpireFault))
        self._delays = tuple(c for c in clauses if isinstance(c, WatchDelayFault))
        self._error_hits = {}
        self._latency_hits = {}
        self._cut_hits = {}
        self._expire_hits = {}
        self._delay_hits = {}
        self._counts = dict.fromkeys(COUNT_KEYS, 0)
        self.enabled = bool(clauses)
        return parsed

    def maybe_error(
        self, verb: str, resource: str, *, name: str = "", group: str = ""
    ) -> ApiError | None:
        """The error to answer instead of serving the request, if one fires.

        One uniform draw per matching request; matching clauses take consecutive slices of [0, 1)
        in spec order, so the overall error rate is the sum of their rates. `name` and `group`
        only make a 409 read like kube's own message.
        """
        if not self._errors:
            return None
        key = (verb, resource)
        hits = self._error_hits.get(key)
        if hits is None:
            hits = tuple(c for c in self._errors if c.target.matches(verb, resource))
            _remember(self._error_hits, key, hits)
        if not hits:
            return None
        draw = self._rng.random()
        for clause in hits:
            draw -= clause.rate
            if draw < 0:
                self._counts[f"error-{clause.code}"] += 1
                return _make_error(clause, resource, name, group)
        return None

    def latency(self, verb: str, resource: str) -> float:
        """Seconds to delay this request: the sum of every matching latency clause that fires."""
        if not self._latencies:
            return 0.0
        key = (verb, resource)
        hits = self._latency_hits.get(key)
        if hits is None:
            hits = tuple(c for c in self._latencies if c.target.matches(verb, resource))
            _remember(self._latency_hits, key, hits)
        delay = 0.0
        for clause in hits:
            if clause.rate >= 1.0 or self._rng.random() < clause.rate:
                delay += clause.seconds
        if delay > 0.0:
            self._counts["latency"] += 1
        return delay

    def watch_limits(self, resource: str) -> tuple[int | None, float | None]:
        """(events, seconds) after which to end a new watch on `resource`; the tightest wins.

        Counted as `watch-cut` when the watch is armed with a limit, since ending the stream is
        the server's doing and may not happen if the client leaves first.
        """
        if not self._cuts:
            return _NO_LIMITS
        limits = self._cut_hits.get(resource)
        if limits is None:
            events = [
                c.events
                for c in self._cuts
                if c.events is not None and fnmatchcase(resource, c.resource)
            ]
            seconds = [
                c.seconds
                for c in self._cuts
                if c.seconds is not None and fnmatchcase(resource, c.resource)
            ]
            limits = (min(events, default=None), min(seconds, default=None))
            _remember(self._cut_hits, resource, limits)
        if limits != _NO_LIMITS:
            self._counts["watch-cut"] += 1
        return limits

    def force_expired(self, resource: str) -> bool:
        """Whether to answer this watch resume with 410 Expired; matching rates add up."""
        if not self._expiries:
            return False
        rate = self._expire_hits.get(resource)
        if rate is None:
            rate = sum(c.rate for c in self._expiries if fnmatchcase(resource, c.resource))
            _remember(self._expire_hits, resource, rate)
        if rate <= 0.0 or self._rng.random() >= rate:
            return False
        self._counts["watch-expire"] += 1
        return True

    def watch_delay(self, resource: str) -> float:
        """Seconds to hold each event of a new watch on `resource` back; the longest wins.

        Counted as `watch-delay` when a watch is armed with a delay. Draws nothing from the RNG.
        """
        if not self._delays:
            return 0.0
        delay = self._delay_hits.get(resource)
        if delay is None:
            delay = max(
                (c.seconds for c in self._delays if fnmatchcase(resource, c.resource)),
                default=0.0,
            )
            _remember(self._delay_hits, resource, delay)
        if delay > 0.0:
            self._counts["watch-delay"] += 1
        return delay

    def counts(self) -> dict[str, int]:
        """Faults injected since the current spec was installed, with every kind present."""
        return dict(self._counts)

    def describe(self) -> dict[str, Any]:
        return {
            "spec": str(self.spec),
            "clauses": self.spec.to_data(),
            "seed": self.seed,
            "enabled": self.enabled,
            "counts": self.counts(),
        }


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def _make_error(clause: ErrorFault, resource: str, name: str, group: str) -> ApiError:
    if clause.code == 429:
        return too_many_requests(
            "Too many requests, please try again later.",
            retry_after=DEFAULT_RETRY_AFTER if clause.retry_after is None else clause.retry_after,
        )
    if clause.code == 409:
        return stale_conflict(group, resource.partition("/")[0], name)
    return internal(f"Internal error occurred: injected fault {clause}")
