"""The one reader of hand-written YAML files: data with the line of every path, `${ENV}`,
and `FILE:LINE: reason` for every mistake (kubernikus.yaml and maintenance.yaml both use it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeops.common.yamlfile import (
    ConfigFileError,
    ConfigProblem,
    load_yaml,
    read_config_text,
    render_path,
)

TEXT = """\
intervals:
  requeue: 30s
profiles:
- name: a
  states:
    - x
    - y
- name: b
"""


def test_every_key_and_item_has_its_line() -> None:
    marked = load_yaml(TEXT, source="m.yaml")
    assert marked.data["profiles"][0]["states"] == ["x", "y"]
    assert marked.line_of(("intervals", "requeue")) == 2
    assert marked.line_of(("profiles", 0)) == 4
    assert marked.line_of(("profiles", 0, "states", 1)) == 7
    assert marked.line_of(("profiles", 1, "name")) == 8
    # A path that is not in the file (a missing field) points at its nearest ancestor.
    assert marked.line_of(("profiles", 1, "states")) == 8
    assert marked.line_of(("dashboard",)) == 1
    assert render_path(("profiles", 0, "states", 1)) == "profiles[0].states[1]"


def test_an_empty_file_is_an_empty_mapping() -> None:
    assert load_yaml("", source="m.yaml").data == {}
    assert load_yaml("# nothing\n", source="m.yaml").empty
    assert not load_yaml("{}\n", source="m.yaml").empty


def _lines(text: str, **kwargs: object) -> list[str]:
    with pytest.raises(ConfigFileError) as err:
        load_yaml(text, source="m.yaml", **kwargs)  # type: ignore[arg-type]
    return str(err.value).splitlines()


def test_mistakes_name_the_file_and_line() -> None:
    assert _lines("a: 1\nb: [1,\n")[0].startswith("m.yaml:3: invalid YAML:")
    assert _lines("a: 1\nb:\n  c: 1\n  c: 2\n") == [
        "m.yaml:4: b.c: duplicate key (first at line 3)"
    ]
    assert _lines("a: 1\n[x]: 2\n") == ["m.yaml:2: keys must be plain scalars"]
    assert _lines("a: 1\n---\nb: 2\n")[0].startswith("m.yaml:2: invalid YAML:")
    assert _lines("a: !!python/name:os.system x\n")[0].startswith("m.yaml:1: invalid YAML:")


def test_environment_references() -> None:
    env = {"FORCE": "true", "COUNT": "3", "NAME": "x"}
    text = "name: pre-${NAME}-${MISSING:dflt}\nforce: ${FORCE}\ncount: '${COUNT}'\nq: '${NAME}'\n"
    data = load_yaml(text, environ=env).data
    # A whole-value reference takes the type of what it expands to, as in go-ucfg.
    assert data == {"name": "pre-x-dflt", "force": True, "count": 3, "q": "x"}
    # Files that are data rather than settings keep `${...}` as written.
    assert load_yaml("a: ${NOPE}\n", environ={}, expand=False).data == {"a": "${NOPE}"}
    lines = _lines("a: 1\nb:\n  c: ${NOPE}\n  d: x-${ALSO}\n", environ={})
    assert lines == [
        "m.yaml:3: b.c: environment variable NOPE is not set (write ${NOPE:default})",
        "m.yaml:4: b.d: environment variable ALSO is not set (write ${ALSO:default})",
    ]


def test_hostile_input_is_an_error_not_a_crash() -> None:
    assert _lines("[" * 5000 + "]" * 5000) == ["m.yaml:1: invalid YAML: nested too deeply"]
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)
    )
    [line] = _lines(bomb)
    assert line.startswith("m.yaml:") and "too large" in line


def test_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as err:
        read_config_text(tmp_path / "absent.yaml")
    assert str(err.value) == f"{tmp_path / 'absent.yaml'}: cannot read: no such file"
    assert err.value.problems == [ConfigProblem(None, "", "cannot read: no such file")]
    (tmp_path / "bad.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigFileError, match="cannot read"):
        read_config_text(tmp_path / "bad.yaml")
    (tmp_path / "m.yaml").write_text(TEXT)
    assert read_config_text(tmp_path / "m.yaml") == TEXT


_LOCATED = re.compile(r"^m\.yaml(:\d+)?: \S")


@given(st.text(max_size=200))
def test_any_text_loads_or_fails_with_located_lines(text: str) -> None:
    try:
        load_yaml(text, source="m.yaml", environ={})
    except ConfigFileError as exc:
        assert exc.problems
        for line in str(exc).splitlines()[: len(exc.problems)]:
            assert _LOCATED.match(line), line
