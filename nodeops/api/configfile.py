"""Configuration files people write by hand: YAML validated into a pydantic model.

Controllers read files such as `kubernikus.yaml` at startup. A mistake in one must stop startup
with a message that points at the line to fix (`kubernikus.yaml:4: intervals.requeue: ...`),
never at a traceback, so the YAML is composed into nodes first (which keep their line numbers)
and every validation error is mapped back onto them.

As in the Go tools whose files these are (go-ucfg with variable expansion), `${NAME}` in a string
value is replaced by the environment variable `NAME`, and `${NAME:default}` falls back to
`default` when it is unset; an unset variable without a default is an error at its line. A
value that is only a reference (`force: ${FORCE}`) is read as YAML again after expansion, so it
can stand for a boolean or a number, as it does there.

Durations are written as Go writes them (`30s`, `5m`, `1h30m`, `250ms`) or, as go-ucfg also
accepts, as a bare number of seconds; `GoDuration` reads them into seconds.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ValidationError

__all__ = [
    "ConfigFileError",
    "ConfigProblem",
    "GoDuration",
    "format_go_duration",
    "load_config_file",
    "parse_config_text",
    "parse_go_duration",
]

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake: the 1-based line (None when the file itself is at fault), field, message."""

    line: int | None
    field: str
    message: str


class ConfigFileError(ValueError):
    """A configuration file that cannot be used; one `FILE:LINE: field: message` line each."""

    def __init__(self, source: str, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(self.format(p) for p in self.problems))

    def format(self, problem: ConfigProblem) -> str:
        where = self.source if problem.line is None else f"{self.source}:{problem.line}"
        field = f" {problem.field}:" if problem.field else ""
        return f"{where}:{field} {problem.message}"


# --------------------------------------------------------------------------------------------
# Go durations
# --------------------------------------------------------------------------------------------

_UNITS: typing.Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART: typing.Final = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration string, with Go's `time.ParseDuration` grammar.

    `"0"` alone needs no unit; every other number in a string does (`"30"` is refused, as in Go).
    """
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    sign = 1.0
    if value[0] in "+-":
        sign = -1.0 if value[0] == "-" else 1.0
        value = value[1:]
    if value == "0":
        return 0.0
    total = 0.0
    pos = 0
    while pos < len(value):
        match = _PART.match(value, pos)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(
                f"{text!r} is not a duration; write a number with a unit "
                '(ns, us, ms, s, m, h), e.g. "30s", "5m" or "1h30m"'
            )
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """A short Go-style rendering (`1h30m`, `20s`, `250ms`) for messages."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out = ""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    frac = seconds - whole
    if secs or frac or not out:
        out += f"{secs + frac:g}s"
    return out


def _duration(value: Any) -> Any:
    if isinstance(value, bool):
        return value  # let the float validation refuse it with its own words
    if isinstance(value, str):
        return parse_go_duration(value)
    # go-ucfg reads a bare number as seconds (`requeue: 30`); a quoted "30" is refused as in Go.
    return value


GoDuration = Annotated[float, BeforeValidator(_duration)]
"""Seconds, written as a Go duration string (`"30s"`, `"5m"`, `"1h30m"`) or a number of seconds."""


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_config_file(
    path: str | Path,
    model: type[M],
    *,
    environ: Mapping[str, str] | None = None,
) -> M:
    """Read and validate the file at `path`; any problem raises `ConfigFileError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(source, [ConfigProblem(None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigFileError(source, [ConfigProblem(None, "", f"cannot read: {reason}")]) from None
    return parse_config_text(text, model, source=source, environ=environ)


def parse_config_text(
    text: str,
    model: type[M],
    *,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
) -> M:
    """Validate YAML `text` into `model`; `source` names the file in errors."""
    env = os.environ if environ is None else environ
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        duplicates = _duplicate_keys(root) if root is not None else []
        if duplicates:
            raise ConfigFileError(source, duplicates)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        message = f"invalid YAML: {exc.problem or exc.context}"
        raise ConfigFileError(source, [ConfigProblem(line, "", message)]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        message = f"invalid YAML: character #x{exc.character:04x} is not allowed"
        raise ConfigFileError(source, [ConfigProblem(line, "", message)]) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(source, [ConfigProblem(None, "", f"invalid YAML: {exc}")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        data = {}
    elif not isinstance(root, yaml.MappingNode):
        raise ConfigFileError(
            source, [ConfigProblem(root.start_mark.line + 1, "", "expected a mapping of keys")]
        )
    problems: list[ConfigProblem] = []
    data = _expand(data, (), env, root, problems)
    if problems:
        raise ConfigFileError(source, problems)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(source, _problems(exc, root, model)) from None


# --------------------------------------------------------------------------------------------
# Environment variables
# --------------------------------------------------------------------------------------------

_VAR: typing.Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _expand(
    value: Any,
    loc: Loc,
    env: Mapping[str, str],
    root: yaml.Node | None,
    problems: list[ConfigProblem],
) -> Any:
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), env, root, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), env, root, problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found is not None:
            return found
        if default is not None:
            return default
        line = _line_of(root, loc) if root is not None else None
        problems.append(
            ConfigProblem(line, _render(loc), f"environment variable {name} is not set")
        )
        return ""

    expanded = _VAR.sub(substitute, value)
    if _VAR.fullmatch(value):
        # A whole-value reference takes the type of what it expands to, as in go-ucfg.
        try:
            typed = yaml.safe_load(expanded)
        except yaml.YAMLError:
            return expanded
        if typed is None or isinstance(typed, bool | int | float):
            return typed if typed is not None else expanded
    return expanded


# --------------------------------------------------------------------------------------------
# Mapping errors to lines
# --------------------------------------------------------------------------------------------


def _duplicate_keys(node: yaml.Node, loc: Loc = ()) -> list[ConfigProblem]:
    """YAML keeps the last of repeated keys silently; in a hand-written file that is a mistake."""
    found: list[ConfigProblem] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                continue
            line = key.start_mark.line + 1
            if key.value in first:
                found.append(
                    ConfigProblem(
                        line,
                        _render((*loc, key.value)),
                        f"duplicate key (first at line {first[key.value]})",
                    )
                )
            else:
                first[key.value] = line
            found.extend(_duplicate_keys(value, (*loc, key.value)))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.extend(_duplicate_keys(item, (*loc, index)))
    return found


def _problems(
    exc: ValidationError, root: yaml.Node | None, model: type[BaseModel]
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = _unknown_key_message(model, loc)
        elif error["type"] == "missing":
            message = "required, but not set"
        elif isinstance(error.get("input"), str | int | float) and not isinstance(
            error.get("input"), bool
        ):
            got = repr(error["input"])
            if got not in message:
                message += f" (got {got})"
        line = _line_of(root, loc) if root is not None else 1
        problems.append(ConfigProblem(line, _render(loc), message))
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: p.line or 0)


def _line_of(root: yaml.Node, loc: Loc) -> int:
    """The 1-based line of the deepest node `loc` reaches: the key naming a field, the item of a
    list, or, for a missing field, the mapping it is missing from."""
    node = root
    line = root.start_mark.line
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    line, node = key.start_mark.line, value
                    break
            else:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return line + 1


def _render(loc: Loc) -> str:
    """`profiles[0].name` from `("profiles", 0, "name")`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class whose field `loc` names, by walking field annotations from `model`."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        current = _model_in(field.annotation) if field else None
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, dict, typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _unknown_key_message(model: type[BaseModel], loc: Loc) -> str:
    owner = _model_at(model, loc)
    if owner is None:
        return "unknown key"
    allowed = [f.alias or name for name, f in owner.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key; {hint}allowed: {', '.join(allowed)}"
