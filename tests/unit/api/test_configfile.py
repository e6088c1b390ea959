"""Configuration files: YAML with FILE:LINE errors, Go durations, ${ENV} expansion."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from nodeops.api.configfile import (
    ConfigFileError,
    GoDuration,
    format_go_duration,
    load_config_file,
    parse_config_text,
    parse_go_duration,
)


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    period: GoDuration
    force: bool = False


class Root(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    inner: Inner
    items: list[Inner] = []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("2h45m30.5s", 9930.5),
        ("-1m", -60.0),
        ("0", 0.0),
        ("10us", 1e-5),
        ("100ns", 1e-7),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "1x", "5 m", "1h-5m", "."])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


@given(st.floats(min_value=0.001, max_value=1e6))
def test_formatting_round_trips(seconds: float) -> None:
    assert parse_go_duration(format_go_duration(seconds)) == pytest.approx(seconds, rel=1e-6)


@given(st.text(max_size=12))
def test_duration_parser_never_crashes(text: str) -> None:
    try:
        parse_go_duration(text)
    except ValueError:
        pass


def test_a_bare_number_is_seconds_as_in_go_ucfg() -> None:
    cfg = parse_config_text("name: a\ninner: {period: 45}\n", Root)
    assert cfg.inner.period == 45.0


def test_errors_name_file_line_and_field() -> None:
    text = "name: a\ninner:\n  period: 10\n  force: maybe\nitems:\n  - period: soon\n"
    with pytest.raises(ConfigFileError) as err:
        parse_config_text(text, Root, source="k.yaml")
    lines = str(err.value).splitlines()
    assert lines[0].startswith("k.yaml:4: inner.force: ")
    assert lines[1].startswith("k.yaml:6: items[0].period: ")
    assert 'invalid duration "soon": use a number and a unit' in lines[1]


def test_missing_and_unknown_keys() -> None:
    text = "name: a\ninner:\n  forse: true\n"
    with pytest.raises(ConfigFileError) as err:
        parse_config_text(text, Root, source="k.yaml")
    problems = {(p.line, p.field): p.message for p in err.value.problems}
    assert problems[(2, "inner.period")] == "required, but not set"
    assert "did you mean 'force'?" in problems[(3, "inner.forse")]


def test_yaml_syntax_and_shape_errors() -> None:
    with pytest.raises(ConfigFileError, match=r"^k.yaml:2: invalid YAML"):
        parse_config_text("name: a\ninner: {period: [1, }\n", Root, source="k.yaml")
    with pytest.raises(ConfigFileError, match=r"^k.yaml:1: expected a mapping"):
        parse_config_text("- a\n", Root, source="k.yaml")
    with pytest.raises(
        ConfigFileError, match=r"^k.yaml:3: inner: duplicate key \(first at line 2\)"
    ):
        parse_config_text(
            "name: a\ninner: {period: 1s}\ninner: {period: 2s}\n", Root, source="k.yaml"
        )


def test_environment_expansion() -> None:
    env = {"PERIOD": "20s", "FORCE": "true", "NAME": "x"}
    text = "name: pre-${NAME}-${MISSING:dflt}\ninner: {period: '${PERIOD}', force: '${FORCE}'}\n"
    cfg = parse_config_text(text, Root, environ=env)
    assert (cfg.name, cfg.inner.period, cfg.inner.force) == ("pre-x-dflt", 20.0, True)
    with pytest.raises(ConfigFileError, match=r"^k.yaml:2: inner.period: environment variable"):
        parse_config_text(
            "name: a\ninner: {period: '${NOPE}'}\n", Root, source="k.yaml", environ={}
        )


def test_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="no such file"):
        load_config_file(tmp_path / "absent.yaml", Root)
    path = tmp_path / "k.yaml"
    path.write_text("name: a\ninner: {period: 1m}\n")
    assert load_config_file(path, Root).inner.period == 60.0


@given(st.text(max_size=200))
def test_any_text_loads_or_fails_with_a_located_error(text: str) -> None:
    try:
        parse_config_text(text, Root, source="f.yaml", environ={})
    except ConfigFileError as exc:
        assert all(line.startswith("f.yaml") for line in str(exc).splitlines())
