"""Configuration files people write by hand: YAML read into plain data that remembers the line of
every key and item, with `${ENV}` expanded, and `FILE:LINE: reason` errors.

Every controller that reads a file at startup (`kubernikus.yaml`, `maintenance.yaml`) must stop
on a mistake with a message pointing at the line to fix, never with a traceback. So the YAML is
composed into nodes first (which carry their marks), and plain data is built from them while the
line of each path (`("instances", "check", 0, "config")`) is recorded; whoever validates the data
looks the line of a problem up by its path (`Marked.line_of`).

What a hand-written file gets beyond plain YAML:
- a key written twice in one mapping is an error (YAML keeps the last silently);
- `${NAME}` in a string value is replaced by the environment variable `NAME`, `${NAME:default}`
  falls back to `default`, an unset variable without a default is an error at its line; a value
  that is only a reference (`force: ${FORCE}`) is read as YAML again after expansion, so it can
  stand for a boolean or a number (go-ucfg's expansion, which the Go tools reading these files
  used);
- hostile input is an error, not a crash: nesting deeper than `MAX_DEPTH`, or aliases expanding
  to more than `MAX_VALUES` values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_VALUES",
    "ConfigFileError",
    "ConfigProblem",
    "Marked",
    "YamlPath",
    "load_yaml",
    "read_config_text",
    "render_path",
]

YamlPath = tuple[str | int, ...]
MAX_DEPTH: Final = 64
MAX_VALUES: Final = 50_000

_OPEN: Final = (
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
)
_CLOSE: Final = (yaml.BlockEndToken, yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
_VAR: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake: the 1-based line (None when the file itself is at fault), the field's path
    as written in messages (`profiles[0].name`, empty for the file as a whole), and why."""

    line: int | None
    field: str
    message: str


class ConfigFileError(ValueError):
    """A configuration file that cannot be used: one `FILE:LINE: field: reason` line each."""

    def __init__(self, source: str, problems: Sequence[ConfigProblem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(self.format(p) for p in self.problems))

    def format(self, problem: ConfigProblem) -> str:
        where = self.source if problem.line is None else f"{self.source}:{problem.line}"
        what = f" {problem.field}:" if problem.field else ""
        return f"{where}:{what} {problem.message}"


def render_path(path: YamlPath) -> str:
    """`profiles[0].name` from `("profiles", 0, "name")`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@dataclass
class Marked:
    """Plain data read from YAML, and the 1-based line of each path in it (`empty`: the file
    holds no document at all, read as `{}`)."""

    data: Any
    lines: dict[YamlPath, int] = field(default_factory=dict)
    empty: bool = False

    def line_of(self, path: Sequence[str | int]) -> int:
        """The line of `path`: of the key naming a field, of an item of a list; for a path
        that is not in the file (a missing field), of its nearest ancestor that is."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), 1)


def read_config_text(path: str | Path) -> str:
    """The text of the file at `path`; `ConfigFileError` naming the file when it cannot be read."""
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(
            source, [ConfigProblem(None, "", "cannot read: no such file")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigFileError(source, [ConfigProblem(None, "", f"cannot read: {reason}")]) from None


def load_yaml(
    text: str,
    *,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    expand: bool = True,
) -> Marked:
    """Read one YAML document; every problem, with its line, raises `ConfigFileError`.

    An empty document reads as `{}`. `environ` (default: the process's environment) is what
    `${NAME}` refers to; `expand=False` leaves `${NAME}` as written (files that are data, not
    settings, such as the simulator's scenarios)."""
    try:
        root = _compose(text)
    except _Problem as exc:
        raise ConfigFileError(source, [ConfigProblem(exc.line, "", exc.message)]) from None
    if root is None:
        return Marked({}, {(): 1}, empty=True)
    duplicates = _duplicate_keys(root)
    if duplicates:
        raise ConfigFileError(source, duplicates)
    builder = _Builder(os.environ if environ is None else environ, expand=expand)
    try:
        data = builder.build(root, ())
    except _Problem as exc:
        raise ConfigFileError(source, [ConfigProblem(exc.line, "", exc.message)]) from None
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        message = f"invalid YAML: {exc.problem or exc.context}"
        raise ConfigFileError(source, [ConfigProblem(line, "", message)]) from None
    except RecursionError:
        problem = ConfigProblem(1, "", "invalid YAML: nested too deeply")
        raise ConfigFileError(source, [problem]) from None
    if builder.problems:
        raise ConfigFileError(source, builder.problems)
    return Marked(data, builder.lines)


class _Problem(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _compose(text: str) -> yaml.Node | None:
    loader: yaml.SafeLoader | None = None
    try:
        _check_depth(text)
        loader = yaml.SafeLoader(text)
        return loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise _Problem(line, f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        raise _Problem(
            line, f"invalid YAML: character #x{exc.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as exc:
        raise _Problem(None, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise _Problem(1, "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_depth(text: str) -> None:
    """Refuse deep nesting before composing: PyYAML composes recursively."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Problem(token.start_mark.line + 1, "invalid YAML: nested too deeply")
        elif isinstance(token, _CLOSE):
            depth -= 1


def _duplicate_keys(
    node: yaml.Node, loc: YamlPath = (), seen: set[int] | None = None
) -> list[ConfigProblem]:
    """YAML keeps the last of repeated keys silently; in a hand-written file that is a mistake.

    Each node is looked at once, however many aliases name it (an alias bomb stays cheap)."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return []
    seen.add(id(node))
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
                        render_path((*loc, key.value)),
                        f"duplicate key (first at line {first[key.value]})",
                    )
                )
            else:
                first[key.value] = line
            found.extend(_duplicate_keys(value, (*loc, key.value), seen))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.extend(_duplicate_keys(item, (*loc, index), seen))
    return found


class _Builder:
    """Plain data from composed nodes, recording the line of every path and expanding `${ENV}`."""

    def __init__(self, env: Mapping[str, str], *, expand: bool = True) -> None:
        self.env = env
        self.expand_env = expand
        self.lines: dict[YamlPath, int] = {}
        self.problems: list[ConfigProblem] = []
        self.constructor = yaml.SafeLoader("")
        self.count = 0

    def build(self, node: yaml.Node, path: YamlPath) -> Any:
        line = node.start_mark.line + 1
        self.count += 1
        if self.count > MAX_VALUES:
            raise _Problem(
                line, f"invalid YAML: too large (aliases expand to over {MAX_VALUES} values)"
            )
        self.lines.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            self.constructor.flatten_mapping(node)
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    raise _Problem(key_node.start_mark.line + 1, "keys must be plain scalars")
                key = str(key).lower() if isinstance(key, bool) else str(key)
                child = (*path, key)
                self.lines[child] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, child)
            return out
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                items.append(self.build(item, (*path, i)))
            return items
        value = self.constructor.construct_object(node, deep=True)
        if self.expand_env and isinstance(value, str) and "${" in value:
            return self.expand(value, path)
        return value

    def expand(self, value: str, path: YamlPath) -> Any:
        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = self.env.get(name)
            if found is not None:
                return found
            if default is not None:
                return default
            self.problems.append(
                ConfigProblem(
                    self.lines.get(path, 1),
                    render_path(path),
                    f"environment variable {name} is not set (write ${{{name}:default}})",
                )
            )
            return ""

        expanded = _VAR.sub(substitute, value)
        if _VAR.fullmatch(value):
            # A whole-value reference takes the type of what it expands to, as in go-ucfg.
            try:
                typed = yaml.safe_load(expanded)
            except yaml.YAMLError:
                return expanded
            if isinstance(typed, bool | int | float):
                return typed
        return expanded
