from __future__ import annotations

import random
from typing import Any

import pytest

from nodeops.sim.server.faults import (
    COUNT_KEYS,
    ErrorFault,
    FaultInjector,
    FaultSpec,
    FaultSpecError,
    LatencyFault,
    RequestTarget,
    WatchCutFault,
    WatchDelayFault,
    WatchExpireFault,
)

EXAMPLE = (
    "error=500:0.05@patch/pods; error=429:0.1@*/*:retry-after=1; error=409:0.02@update/leases; "
    "latency=50ms@list/*; watch-cut=events:100@pods; watch-cut=seconds:5@*; watch-expire=0.5@pods"
)


class UntouchableRandom(random.Random):
    """Fails the test on any draw, to prove a code path leaves the sequence alone."""

    def random(self) -> float:
        raise AssertionError("the RNG was used")

    def seed(self, *args: Any, **kwargs: Any) -> None:
        if hasattr(self, "_armed"):
            raise AssertionError("the RNG was reseeded")
        super().seed(*args, **kwargs)
        self._armed = True


# --- grammar -------------------------------------------------------------------------------


def test_example_spec_parses_to_the_expected_clauses() -> None:
    spec = FaultSpec.parse(EXAMPLE)
    assert spec.clauses == (
        ErrorFault(500, 0.05, RequestTarget(("patch",), "pods")),
        ErrorFault(429, 0.1, RequestTarget(None, "*"), retry_after=1),
        ErrorFault(409, 0.02, RequestTarget(("update",), "leases")),
        LatencyFault(50.0, 1.0, RequestTarget(("list",), "*")),
        WatchCutFault(100, None, "pods"),
        WatchCutFault(None, 5.0, "*"),
        WatchExpireFault(0.5, "pods"),
    )


def test_defaults_rate_one_any_target_and_retry_after_one() -> None:
    spec = FaultSpec.parse("error=429; latency=1.5s; watch-cut=events:3; watch-expire=1")
    assert spec.clauses == (
        ErrorFault(429, 1.0, RequestTarget(None, "*"), retry_after=1),
        LatencyFault(1500.0, 1.0, RequestTarget(None, "*")),
        WatchCutFault(3, None, "*"),
        WatchExpireFault(1.0, "*"),
    )


def test_whitespace_newlines_verb_lists_and_subresources() -> None:
    spec = FaultSpec.parse(
        "  error = 500 : 0.5 @ update,patch/pods/status ;\n\n latency=20ms:0.25@create/pods/eviction;;"
    )
    assert spec.clauses == (
        ErrorFault(500, 0.5, RequestTarget(("update", "patch"), "pods/status")),
        LatencyFault(20.0, 0.25, RequestTarget(("create",), "pods/eviction")),
    )


@pytest.mark.parametrize("text", ["", "   ", ";", " ; \n ;"])
def test_empty_spec_has_no_clauses(text: str) -> None:
    spec = FaultSpec.parse(text)
    assert spec.clauses == ()
    assert not spec


def test_text_form_round_trips() -> None:
    spec = FaultSpec.parse(EXAMPLE + "; latency=2s:0.5@get,watch/nodes; error=500@*")
    assert FaultSpec.parse(str(spec)) == spec
    assert str(spec).startswith("error=500:0.05@patch/pods; error=429:0.1@*/*:retry-after=1; ")
    assert "latency=2s:0.5@get,watch/nodes" in str(spec)


def test_dict_form_round_trips() -> None:
    spec = FaultSpec.parse(EXAMPLE)
    assert FaultSpec.parse(spec.to_data()) == spec


def test_dict_form_matches_text_form() -> None:
    data: list[Any] = [
        {"error": 500, "rate": 0.05, "at": "patch/pods"},
        {"error": 429, "rate": 0.1, "at": "*/*", "retry-after": 1},
        "error=409:0.02@update/leases",
        {"latency": 0.05, "at": "list/*"},
        {"watch-cut": {"events": 100}, "at": "pods"},
        {"watch-cut": "seconds:5"},
        {"watch-expire": 0.5, "at": "pods"},
    ]
    assert FaultSpec.parse(data) == FaultSpec.parse(EXAMPLE)


def test_single_mapping_is_one_clause() -> None:
    assert FaultSpec.parse({"error": 500}).clauses == (
        ErrorFault(500, 1.0, RequestTarget(None, "*")),
    )


def test_yaml_form() -> None:
    spec = FaultSpec.from_yaml(
        """
        - {error: 500, rate: 0.05, at: patch/pods}
        - error: 429
          rate: 0.1
          retry-after: 1
        - {error: 409, rate: 0.02, at: update/leases}
        - {latency: 50ms, at: "list/*"}
        - {watch-cut: {events: 100}, at: pods}
        - {watch-cut: {seconds: 5}}
        - watch-expire=0.5@pods
        """
    )
    assert spec == FaultSpec.parse(EXAMPLE)
    assert FaultSpec.from_yaml("error=500; latency=1s") == FaultSpec.parse("error=500;latency=1s")
    assert FaultSpec.from_yaml("") == FaultSpec()


@pytest.mark.parametrize(
    ("text", "clause", "problem"),
    [
        ("boom=1", "boom=1", "unknown fault kind 'boom'"),
        ("error", "error", "error needs a value after '='"),
        ("error=", "error=", "error needs a value after '='"),
        ("error=600", "error=600", "unsupported error code 600; expected one of 409, 429, 500"),
        ("error=abc", "error=abc", "error code 'abc' is not an integer"),
        ("error=500:1.5", "error=500:1.5", "rate must be between 0 and 1, got 1.5"),
        ("error=500:-0.1", "error=500:-0.1", "rate must be between 0 and 1"),
        ("error=500:nan", "error=500:nan", "rate must be between 0 and 1"),
        ("error=500:often", "error=500:often", "rate 'often' is not a number"),
        ("error=500:0.1:0.2", "error=500:0.1:0.2", "expected error=CODE[:RATE]"),
        ("error=500::0.1", "error=500::0.1", "empty field (stray ':')"),
        ("error=500@pods", "error=500@pods", "target 'pods' must be VERB/RESOURCE"),
        ("error=500@frob/pods", "error=500@frob/pods", "unknown verb 'frob'"),
        ("error=500@patch/Pods", "error=500@patch/Pods", "bad resource pattern 'Pods'"),
        ("error=500@patch/", "error=500@patch/", "bad resource pattern ''"),
        ("error=500@", "error=500@", "expected a target after '@'"),
        ("error=500@a/b@c/d", "error=500@a/b@c/d", "more than one '@'"),
        ("error=500:retry-after=1", "error=500:retry-after=1", "applies only to error=429"),
        ("error=429@*:retry=1", "error=429@*:retry=1", "unknown option 'retry' for error"),
        ("error=429@*:retry-after=x", "error=429@*:retry-after=x", "'x' is not an integer"),
        ("error=429@*:retry-after=-1", "error=429@*:retry-after=-1", "at least 0, got -1"),
        ("error=429@*:5", "error=429@*:5", "expected NAME=VALUE after the target, got '5'"),
        ("error=429:retry-after=1:0.1", "error=429:retry-after=1:0.1", "after an option"),
        (
            "error=429:retry-after=1@*:retry-after=2",
            "error=429:retry-after=1@*:retry-after=2",
            "option 'retry-after' given twice",
        ),
        ("latency=50", "latency=50", "duration '50' needs a unit: ms or s"),
        ("latency=fastms", "latency=fastms", "duration 'fastms' is not a number"),
        ("latency=infs", "latency=infs", "is not a finite number"),
        ("latency=-5ms", "latency=-5ms", "duration must be zero or more"),
        ("latency=5ms:x=1", "latency=5ms:x=1", "unknown option 'x' for latency"),
        ("watch-cut=100", "watch-cut=100", "expected watch-cut=events:COUNT or"),
        ("watch-cut=events:0", "watch-cut=events:0", "event count must be at least 1"),
        ("watch-cut=seconds:0", "watch-cut=seconds:0", "seconds must be a positive number"),
        ("watch-cut=seconds:1@watch/pods", "watch-cut=seconds:1@watch/pods", "RESOURCE target"),
        ("watch-expire=2", "watch-expire=2", "rate must be between 0 and 1, got 2"),
        ("watch-expire=0.1:0.2", "watch-expire=0.1:0.2", "expected watch-expire=RATE"),
    ],
)
def test_bad_text_specs_name_the_clause_and_the_problem(
    text: str, clause: str, problem: str
) -> None:
    with pytest.raises(FaultSpecError) as info:
        FaultSpec.parse(text)
    assert info.value.clause == clause
    assert problem in info.value.problem
    assert str(info.value) == f"bad fault clause `{clause}`: {info.value.problem}"


def test_bad_clause_is_named_among_good_ones() -> None:
    with pytest.raises(FaultSpecError) as info:
        FaultSpec.parse("latency=5ms@list/*; error=503:0.1@get/pods; watch-expire=0.1")
    assert info.value.clause == "error=503:0.1@get/pods"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"error": 600}, "unsupported error code 600"),
        ({"error": 500, "latency": "5ms"}, "expected exactly one of error, latency"),
        ({"rate": 0.5}, "expected exactly one of error, latency"),
        ({"error": 500, "at": True}, "'at' must be a string"),
        ({"error": 500, "on": "get/pods"}, "unknown option 'on' for error"),
        ({"watch-cut": 5}, "watch-cut must be {events: COUNT} or {seconds: NUMBER}"),
        ({"watch-cut": {"minutes": 5}}, "expected watch-cut=events:COUNT"),
        ({"latency": "5"}, "needs a unit"),
    ],
)
def test_bad_dict_specs_name_the_mapping(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        FaultSpec.parse([data])
    assert info.value.clause == repr(data)
    assert problem in info.value.problem


def test_non_clause_items_are_rejected() -> None:
    with pytest.raises(FaultSpecError, match="expected a text clause or a mapping"):
        FaultSpec.parse([42])  # type: ignore[list-item]


def test_yaml_scalar_is_rejected() -> None:
    with pytest.raises(FaultSpecError, match="YAML must hold"):
        FaultSpec.from_yaml("42")


# --- matching ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "verb", "resource", "expected"),
    [
        ("*", "get", "pods", True),
        ("*", "create", "pods/eviction", True),
        ("*/pods", "delete", "pods", True),
        ("*/pods", "create", "pods/eviction", False),
        ("create/pods/*", "create", "pods/eviction", True),
        ("create/pods/*", "create", "pods", False),
        ("patch/pods", "update", "pods", False),
        ("update,patch/pods", "update", "pods", True),
        ("update,patch/pods", "get", "pods", False),
        ("list/*", "list", "nodes", True),
        ("*/leases*", "update", "leases.coordination.k8s.io", True),
        ("*/leases", "update", "nodes", False),
    ],
)
def test_request_targets(target: str, verb: str, resource: str, expected: bool) -> None:
    injector = FaultInjector(f"error=500@{target}")
    assert (injector.maybe_error(verb, resource) is not None) is expected


# --- each fault kind -----------------------------------------------------------------------


def test_injected_500_is_an_internal_error() -> None:
    error = FaultInjector("error=500@patch/pods").maybe_error("patch", "pods")
    assert error is not None
    status = error.status()
    assert (error.code, status["reason"], status["code"]) == (500, "InternalError", 500)
    assert status["message"].startswith("Internal error occurred: ")
    assert status["details"]["causes"][0]["message"] == status["message"]


def test_injected_429_carries_retry_after() -> None:
    error = FaultInjector("error=429@*:retry-after=7").maybe_error("list", "pods")
    assert error is not None
    assert (error.code, error.reason) == (429, "TooManyRequests")
    assert error.headers == {"Retry-After": "7"}
    assert error.status()["details"]["retryAfterSeconds"] == 7


def test_injected_429_defaults_to_retry_after_one() -> None:
    error = FaultInjector("error=429").maybe_error("get", "nodes")
    assert error is not None
    assert error.headers["Retry-After"] == "1"
    assert error.status()["details"]["retryAfterSeconds"] == 1


def test_injected_409_reads_like_kube() -> None:
    injector = FaultInjector("error=409@update/leases;error=409@update/pods/status")
    error = injector.maybe_error("update", "leases", name="node-1", group="coordination.k8s.io")
    assert error is not None
    assert (error.code, error.reason) == (409, "Conflict")
    assert error.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "node-1": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    error = injector.maybe_error("update", "pods/status", name="web-0")
    assert error is not None
    assert error.message.startswith('Operation cannot be fulfilled on pods "web-0": ')


def test_latency_adds_matching_clauses_only() -> None:
    injector = FaultInjector("latency=50ms@list/*; latency=1s@list/pods; latency=5ms@get/*")
    assert injector.latency("list", "pods") == pytest.approx(1.05)
    assert injector.latency("list", "nodes") == pytest.approx(0.05)
    assert injector.latency("get", "nodes") == pytest.approx(0.005)
    assert injector.latency("patch", "nodes") == 0.0
    assert injector.counts()["latency"] == 3


def test_latency_with_a_rate_fires_at_that_rate() -> None:
    injector = FaultInjector("latency=10ms:0.25@*", seed=3)
    delays = [injector.latency("get", "pods") for _ in range(10_000)]
    assert set(delays) == {0.0, 0.01}
    assert 0.23 < sum(1 for d in delays if d) / len(delays) < 0.27


def test_watch_limits_take_the_tightest_matching_clause() -> None:
    injector = FaultInjector(
        "watch-cut=events:100@pods; watch-cut=events:10@*; watch-cut=seconds:5@pods;"
        "watch-cut=seconds:30@*; watch-cut=events:1@nodes"
    )
    assert injector.watch_limits("pods") == (10, 5.0)
    assert injector.watch_limits("nodes") == (1, 30.0)
    assert injector.watch_limits("leases") == (10, 30.0)
    assert injector.counts()["watch-cut"] == 3


def test_watch_limits_without_a_matching_clause() -> None:
    injector = FaultInjector("watch-cut=events:5@pods")
    assert injector.watch_limits("nodes") == (None, None)
    assert injector.watch_limits("pods") == (5, None)
    assert injector.counts()["watch-cut"] == 1


def test_force_expired_follows_its_rate_per_resource() -> None:
    injector = FaultInjector("watch-expire=0.5@pods; watch-expire=1@nodes", seed=11)
    expired = [injector.force_expired("pods") for _ in range(10_000)]
    assert 0.47 < sum(expired) / len(expired) < 0.53
    assert all(injector.force_expired("nodes") for _ in range(100))
    assert not any(injector.force_expired("leases") for _ in range(100))
    assert injector.counts()["watch-expire"] == sum(expired) + 100


def test_counts_report_every_kind() -> None:
    injector = FaultInjector(
        "error=500@get/pods; error=429@list/pods; error=409@update/pods; latency=1ms@get/*;"
        "watch-cut=events:1@pods; watch-expire=1@pods"
    )
    assert injector.counts() == dict.fromkeys(COUNT_KEYS, 0)
    injector.maybe_error("get", "pods")
    injector.maybe_error("get", "pods")
    injector.maybe_error("list", "pods")
    injector.maybe_error("update", "pods")
    injector.maybe_error("delete", "pods")
    injector.latency("get", "nodes")
    injector.watch_limits("pods")
    injector.force_expired("pods")
    assert injector.counts() == {
        "error-409": 1,
        "error-429": 1,
        "error-500": 2,
        "latency": 1,
        "watch-cut": 1,
        "watch-expire": 1,
        "watch-delay": 0,
    }


# --- watch-delay ---------------------------------------------------------------------------


def test_watch_delay_text_dict_and_yaml_forms_agree() -> None:
    text = FaultSpec.parse("watch-delay=500ms@configmaps; watch-delay=2s")
    assert text.clauses == (WatchDelayFault(500.0, "configmaps"), WatchDelayFault(2000.0, "*"))
    assert str(text) == "watch-delay=500ms@configmaps; watch-delay=2s@*"
    assert FaultSpec.parse(str(text)) == text
    assert FaultSpec.parse(text.to_data()) == text
    assert (
        FaultSpec.parse([{"watch-delay": 0.5, "at": "configmaps"}, {"watch-delay": "2s"}]) == text
    )
    assert FaultSpec.from_yaml("- {watch-delay: 500ms, at: configmaps}\n- watch-delay=2s") == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("watch-delay=5", "needs a unit"),
        ("watch-delay=5ms:0.5", "expected watch-delay=DURATION"),
        ("watch-delay=5ms@get/pods", "watch faults take a RESOURCE target"),
        ("watch-delay=-1s", "zero or more"),
        ("watch-delay=5ms:hold=1", "unknown option 'hold' for watch-delay"),
    ],
)
def test_bad_watch_delay_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(FaultSpecError, match=problem):
        FaultSpec.parse(text)


def test_watch_delay_takes_the_longest_matching_clause_and_counts_armed_watches() -> None:
    injector = FaultInjector("watch-delay=100ms@pods; watch-delay=1s@pod*; watch-delay=50ms@*")
    injector._rng = UntouchableRandom()  # delays are not random: the sequence stays untouched
    assert injector.watch_delay("pods") == 1.0
    assert injector.watch_delay("nodes") == 0.05
    assert injector.counts()["watch-delay"] == 2
    assert FaultInjector("error=500").watch_delay("pods") == 0.0


# --- reproducibility and rates -------------------------------------------------------------

CALLS = [
    (verb, resource)
    for verb in ("get", "list", "update", "patch", "create")
    for resource in ("pods", "leases", "nodes", "pods/eviction")
]


MIXED = "error=500:0.2@patch/*; error=429:0.1@*; error=409:0.3@update/*"


def _run(injector: FaultInjector, n: int) -> list[int | None]:
    out: list[int | None] = []
    for i in range(n):
        verb, resource = CALLS[i % len(CALLS)]
        error = injector.maybe_error(verb, resource)
        out.append(None if error is None else error.code)
    return out


def test_same_seed_same_faults() -> None:
    first = _run(FaultInjector(MIXED, seed=42), 1000)
    second = _run(FaultInjector(MIXED, seed=42), 1000)
    assert first == second
    assert {500, 429, 409} <= set(first)


def test_different_seed_different_faults() -> None:
    assert _run(FaultInjector(MIXED, seed=1), 1000) != _run(FaultInjector(MIXED, seed=2), 1000)


def test_error_rate_within_tolerance() -> None:
    injector = FaultInjector("error=500:0.05@patch/pods; error=429:0.1@*", seed=7)
    n = 20_000
    patch = [injector.maybe_error("patch", "pods") for _ in range(n)]
    other = [injector.maybe_error("get", "nodes") for _ in range(n)]
    # Matching clauses share one draw, so their rates add up: 0.15 on patch/pods, 0.1 elsewhere.
    assert 0.14 < sum(e is not None for e in patch) / n < 0.16
    assert 0.045 < sum(e is not None and e.code == 500 for e in patch) / n < 0.055
    assert 0.09 < sum(e is not None for e in other) / n < 0.11
    assert all(e is None or e.code == 429 for e in other)
    counts = injector.counts()
    assert counts["error-500"] + counts["error-429"] == sum(e is not None for e in patch + other)


def test_rate_zero_never_fires_and_rate_one_always_does() -> None:
    injector = FaultInjector("error=500:0@get/*; error=429:1@list/*")
    assert all(injector.maybe_error("get", "pods") is None for _ in range(1000))
    assert all(injector.maybe_error("list", "pods") is not None for _ in range(1000))


# --- the disabled path ---------------------------------------------------------------------


def test_disabled_injector_never_touches_the_rng() -> None:
    injector = FaultInjector()
    injector._rng = UntouchableRandom(0)
    assert injector.enabled is False
    for verb, resource in CALLS:
        assert injector.maybe_error(verb, resource) is None
        assert injector.latency(verb, resource) == 0.0
        assert injector.watch_limits(resource) == (None, None)
        assert injector.force_expired(resource) is False
    assert injector.counts() == dict.fromkeys(COUNT_KEYS, 0)


def test_non_matching_requests_never_touch_the_rng() -> None:
    injector = FaultInjector(
        "error=500:0.5@patch/pods; latency=5ms:0.5@patch/pods; watch-expire=0.5@pods"
    )
    injector._rng = UntouchableRandom(0)
    assert injector.enabled is True
    for _ in range(3):
        assert injector.maybe_error("get", "pods") is None
        assert injector.maybe_error("patch", "nodes") is None
        assert injector.latency("list", "pods") == 0.0
        assert injector.force_expired("nodes") is False


def test_rng_state_is_unchanged_by_disabled_calls() -> None:
    injector = FaultInjector(seed=5)
    before = injector._rng.getstate()
    for verb, resource in CALLS:
        injector.maybe_error(verb, resource)
        injector.latency(verb, resource)
        injector.force_expired(resource)
    assert injector._rng.getstate() == before


# --- run-time updates ----------------------------------------------------------------------


def test_update_switches_faults_on_and_off() -> None:
    injector = FaultInjector()
    assert injector.maybe_error("get", "pods") is None
    injector.update("error=500@get/pods")
    assert injector.enabled
    error = injector.maybe_error("get", "pods")
    assert error is not None and error.code == 500
    injector.update("")
    assert not injector.enabled
    assert injector.maybe_error("get", "pods") is None
    assert injector.counts()["error-500"] == 0


def test_bad_update_keeps_the_old_spec() -> None:
    injector = FaultInjector("error=500@get/pods")
    with pytest.raises(FaultSpecError):
        injector.update("error=500@get/pods; error=999")
    assert str(injector.spec) == "error=500@get/pods"
    assert injector.maybe_error("get", "pods") is not None


def test_update_restarts_the_sequence_from_the_seed() -> None:
    fresh = _run(FaultInjector(EXAMPLE, seed=9), 300)
    injector = FaultInjector(EXAMPLE, seed=9)
    _run(injector, 123)
    injector.update(EXAMPLE)
    assert _run(injector, 300) == fresh


def test_update_with_a_new_seed() -> None:
    expected = _run(FaultInjector(EXAMPLE, seed=77), 300)
    injector = FaultInjector(EXAMPLE, seed=1)
    injector.update(EXAMPLE, seed=77)
    assert injector.seed == 77
    assert _run(injector, 300) == expected


def test_update_invalidates_cached_matches() -> None:
    injector = FaultInjector("error=500@get/pods; latency=1s@get/pods; watch-cut=events:1@pods")
    assert injector.maybe_error("get", "pods") is not None
    assert injector.latency("get", "pods") == 1.0
    assert injector.watch_limits("pods") == (1, None)
    injector.update("error=500@get/nodes; latency=1s@get/nodes; watch-cut=events:1@nodes")
    assert injector.maybe_error("get", "pods") is None
    assert injector.latency("get", "pods") == 0.0
    assert injector.watch_limits("pods") == (None, None)


def test_describe() -> None:
    injector = FaultInjector("error=429:0.5@list/pods", seed=3)
    assert injector.describe() == {
        "spec": "error=429:0.5@list/pods:retry-after=1",
        "clauses": [{"error": 429, "rate": 0.5, "at": "list/pods", "retry-after": 1}],
        "seed": 3,
        "enabled": True,
        "counts": dict.fromkeys(COUNT_KEYS, 0),
    }
