"""maintenance.yaml: the reference's examples load unchanged; every problem names FILE:LINE."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeops.controllers.maintenance.config import (
    ConfigError,
    default_registry,
    load_file,
    load_text,
)
from nodeops.controllers.maintenance.state import State

EXAMPLES = Path(__file__).parents[3] / "examples" / "maintenance"


@pytest.mark.parametrize("name", ["flatcar.yaml", "kubernikus.yaml", "basic.yaml"])
def test_reference_examples_load(name: str) -> None:
    config = load_file(EXAMPLES / name, env={})
    assert "default" in config.profiles
    for w in config.warnings:
        assert re.match(rf".*{name}:\d+: ", str(w))


def test_flatcar_example_compiles_to_the_documented_machine() -> None:
    config = load_file(EXAMPLES / "flatcar.yaml", env={})
    assert config.requeue == 60
    flatcar = config.profiles["flatcar"]
    required = flatcar.state(State.REQUIRED)
    assert required.notify == ["approval_required"]
    [t] = required.transitions
    assert t.triggers == ["remove_approval", "reboot-ok"] and t.next == State.IN_MAINTENANCE
    [back] = flatcar.state(State.IN_MAINTENANCE).transitions
    assert back.check_text == "!reboot_needed" and back.next == State.OPERATIONAL
    assert config.notifications["approval_required"].schedule_type == "periodic"
    assert [str(w).split(": ", 1)[1] for w in config.warnings] == [
        "intervals.notify: legacy key ignored: each notify instance has its own schedule"
    ]


BASE = """\
instances:
  check:
  - type: hasLabel
    name: a
    config: {key: a}
  trigger:
  - type: alterLabel
    name: t
    config: {key: t, value: x}
profiles:
- name: p
  operational:
    transitions:
    - check: CHECK
      trigger: TRIGGER
      next: NEXT
"""


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_text(text, "m.yaml", env=env or {})
    return [str(p) for p in err.value.problems]


def base(check: str = "a", trigger: str = "t", next_: str = "maintenance-required") -> str:
    return BASE.replace("CHECK", check).replace("TRIGGER", trigger).replace("NEXT", next_)


def test_unknown_plugin_type() -> None:
    text = base().replace("type: hasLabel", "type: hasLable")
    [p] = problems(text)
    assert p.startswith("m.yaml:3: instances.check[0].type: unknown check plugin type 'hasLable'")


def test_missing_required_field() -> None:
    [p] = problems(base().replace("config: {key: a}", "config: {}"))
    assert p == "m.yaml:5: instances.check[0].config.key: required field is missing"
    [p] = problems(base().replace("      next: maintenance-required\n", ""))
    assert p == "m.yaml:14: profiles[0].operational.transitions[0].next: required field is missing"


def test_every_problem_is_reported_in_one_run() -> None:
    text = (
        base(check='"a && nope"', trigger="zz").replace("      next: maintenance-required\n", "")
        + "  maintenance-required:\n    enter: gone\n    transitions:\n"
        + "    - {check: 'a && (b', next: in-maintenance}\n    - {trigger: t}\n"
        + "- operational: {transitions: [{check: nope2, next: in-maintenance}]}\n"
    )
    assert problems(text) == [
        "m.yaml:14: profiles[0].operational.transitions[0].check: unknown check instance "
        "'nope' (column 6)",
        "m.yaml:14: profiles[0].operational.transitions[0].next: required field is missing",
        "m.yaml:15: profiles[0].operational.transitions[0].trigger: unknown trigger instance "
        "'zz' (column 1)",
        "m.yaml:17: profiles[0].maintenance-required.enter: unknown trigger instance 'gone' "
        "(column 1)",
        "m.yaml:19: profiles[0].maintenance-required.transitions[0].check: "
        "missing ) for this \"(\" (column 6) in 'a && (b'",
        "m.yaml:20: profiles[0].maintenance-required.transitions[1].check: "
        "required field is missing",
        "m.yaml:20: profiles[0].maintenance-required.transitions[1].next: "
        "required field is missing",
        "m.yaml:21: profiles[1].name: required field is missing",
        "m.yaml:21: profiles[1].operational.transitions[0].check: unknown check instance "
        "'nope2' (column 1)",
    ]


def test_prometheus_instant_with_only_a_url_loads_with_warnings() -> None:
    """As the reference loads it (its own test suite has one); it fails when it runs."""
    text = (
        "instances:\n  notify: null\n  check:\n  - type: prometheusInstant\n    name: fail\n"
        "    config:\n      url: bananabread\n"
        "profiles:\n- name: broken\n  operational:\n    transitions:\n"
        "    - {check: fail, next: maintenance-required}\n"
    )
    config = load_text(text, "m.yaml", env={})
    assert "fail" in config.checks
    assert [str(w) for w in config.warnings] == [
        "m.yaml:6: instances.check[0].config.query: not set: the check fails with an error "
        "every time it runs",
        "m.yaml:6: instances.check[0].config.expr: not set: the check fails with an error "
        "every time it runs",
    ]
    [p] = problems(text.replace("url: bananabread", "url: u\n      query: q\n      expr: x >"))
    assert p.startswith("m.yaml:9: instances.check[0].config.expr: ")


def test_slack_needs_a_channel_as_in_the_reference() -> None:
    text = (
        "instances:\n  notify:\n  - type: slack\n    name: n\n    config:\n      hook: h\n"
        "      message: m\n    schedule: {type: periodic}\n"
    )
    [p] = problems(text)
    assert p == "m.yaml:5: instances.notify[0].config.channel: required field is missing"


def test_chain_naming_an_undefined_instance() -> None:
    [p] = problems(base(check='"a && nope"'))
    assert p == (
        "m.yaml:14: profiles[0].operational.transitions[0].check: unknown check instance "
        "'nope' (column 6)"
    )
    [p] = problems(base(trigger="t && zz"))
    assert p.startswith("m.yaml:15: profiles[0].operational.transitions[0].trigger: unknown")


def test_bad_duration_and_time() -> None:
    [p] = problems("intervals: {requeue: 10 minutes}\n")
    assert p.startswith("m.yaml:1: intervals.requeue: invalid duration")
    text = base().replace(
        "  trigger:\n",
        "  - type: timeWindow\n    name: w\n    config: {start: '9:00', end: '7:00', weekdays: [mon]}\n"
        "  trigger:\n",
    )
    [p] = problems(text)
    assert p.startswith("m.yaml:8: instances.check[1].config: start must be before end")


def test_expression_syntax_error() -> None:
    [p] = problems(base(check='"a &&"'))
    assert p.startswith("m.yaml:14: profiles[0].operational.transitions[0].check: expression ends")
    assert "(column 5)" in p


def test_yaml_syntax_error_and_unset_environment() -> None:
    [p] = problems("profiles:\n- name: [\n")
    assert p.startswith("m.yaml:3: invalid YAML:")
    [p] = problems("intervals:\n  requeue: ${REQUEUE}\n")
    assert p.startswith("m.yaml:2: intervals.requeue: environment variable REQUEUE is not set")


def test_hostile_yaml_is_an_error_not_a_crash() -> None:
    [p] = problems("[" * 5000 + "]" * 5000)
    assert p == "m.yaml:1: invalid YAML: nested too deeply"
    [p] = problems("a: &a [*a]\n")
    assert p.startswith("m.yaml:1: invalid YAML")  # a recursive alias
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6)
    )
    [p] = problems(bomb)
    assert "too large" in p


def test_environment_interpolation() -> None:
    text = base().replace("config: {key: t, value: x}", "config: {key: t, value: '${VALUE}'}")
    config = load_text(text.replace("{key: a}", "{key: '${KEY:fallback}'}"), env={"VALUE": "v"})
    assert config.triggers["t"].plugin.config.value == "v"
    assert config.checks["a"].plugin.config.key == "fallback"


def test_legacy_keys_warn() -> None:
    text = "keys: {state: x}\nintervals: {requeue: 1m, notify: 5h}\n" + base().replace(
        "    transitions:\n", "    check: a\n    transitions:\n"
    )
    config = load_text(text, "m.yaml", env={})
    lines = [str(w) for w in config.warnings]
    assert any(w.startswith("m.yaml:1: keys: legacy key ignored") for w in lines)
    assert any(w.startswith("m.yaml:2: intervals.notify: legacy key ignored") for w in lines)
    assert any("legacy check/trigger on the state" in w for w in lines)
    assert len(config.profiles["p"].state(State.OPERATIONAL).transitions) == 2


def test_unknown_keys_warn_with_line() -> None:
    text = base().replace("config: {key: a}", "config: {key: a, valeu: x}")
    config = load_text(text, "m.yaml", env={})
    assert [str(w) for w in config.warnings] == [
        "m.yaml:5: instances.check[0].config.valeu: unknown key for hasLabel, ignored"
    ]


def test_affinity_only_in_maintenance_required() -> None:
    text = base().replace("  trigger:\n", "  - {type: affinity, name: aff}\n  trigger:\n")
    [p] = problems(text.replace("check: a\n", "check: aff\n"))
    assert "can only be used in: maintenance-required" in p


def test_bad_template_has_a_line() -> None:
    text = (
        "instances:\n  notify:\n  - type: slack\n    name: n\n    config:\n      hook: h\n"
        "      channel: c\n      message: '{{ .Node.Name '\n    schedule: {type: periodic}\n"
    )
    [p] = problems(text)
    assert p.startswith("m.yaml:8: instances.notify[0].config.message: template line 1")


# ---------------------------------------------------------------------- property tests

REGISTRY = default_registry()  # once: looking up installed plugin packages takes a while

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from(["a", "t", "", "5m", "x y", "!a", "a && b", "(", "${X}", "in-maintenance"]),
)
KEYS = st.sampled_from(
    ["intervals", "requeue", "instances", "check", "trigger", "notify", "profiles", "name",
     "type", "config", "key", "value", "transitions", "next", "operational", "schedule",
     "in-maintenance", "maintenance-required", "hasLabel", "slack", "max", "duration"]
)  # fmt: skip


def _containers(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4)


VALUES = st.recursive(SCALARS, _containers, max_leaves=25)


def _yaml(value: object, indent: int = 0) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_random_configs_never_crash(data: dict[str, object]) -> None:
    text = _yaml(data)
    try:
        config = load_text(text, "r.yaml", env={}, registry=REGISTRY)
    except ConfigError as err:
        assert err.problems
        for p in err.problems:
            assert p.file == "r.yaml" and p.line >= 1, p
            assert str(p).startswith(f"r.yaml:{p.line}: ")
    else:
        assert "default" in config.profiles


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes(text: str) -> None:
    try:
        load_text(text, "t.yaml", env={}, registry=REGISTRY)
    except ConfigError as err:
        assert err.problems and all(p.line >= 1 for p in err.problems)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["check", "trigger"]),
    st.text(alphabet="ab t-_&|!()x", max_size=20),
)
def test_random_chains_fail_at_their_line(field: str, chain: str) -> None:
    text = base(check='"a"', trigger='"t"').replace(
        f'{field}: "{"a" if field == "check" else "t"}"', f"{field}: {chain!r}"
    )
    try:
        load_text(text, "c.yaml", env={}, registry=REGISTRY)
    except ConfigError as err:
        line = 14 if field == "check" else 15
        assert all(str(p).startswith(f"c.yaml:{line}: ") for p in err.problems), err
