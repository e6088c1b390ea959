"""YAML with line numbers: plain data plus the line of every key and item, and ${ENV} values.

The loader composes the YAML node graph (which carries marks) and builds plain Python data from
it, recording the line of each path (`("instances", "check", 0, "config", "key")`). `${VAR}` and
`${VAR:default}` inside scalars are replaced from the environment, as the reference does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]
MAX_DEPTH = 64
MAX_VALUES = 50_000
_OPEN = (
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
)
_CLOSE = (yaml.BlockEndToken, yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


class YamlProblem(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass
class Marked:
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that is in the file."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), 1)


def interpolate(text: str, env: Mapping[str, str], line: int) -> str:
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise YamlProblem(
            line, f"environment variable {name} is not set (write ${{{name}:default}})"
        )

    return _ENV.sub(sub, text)


class _Builder:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.lines: dict[Path, int] = {}
        self.constructor = yaml.SafeLoader("")
        self.count = 0

    def build(self, node: yaml.Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        self.count += 1
        if self.count > MAX_VALUES:
            raise YamlProblem(line, f"YAML too large (aliases expand to over {MAX_VALUES} values)")
        self.lines.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            self.constructor.flatten_mapping(node)
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, str | int | float | bool) or key is None:
                    raise YamlProblem(key_node.start_mark.line + 1, "keys must be plain scalars")
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
        if isinstance(node, yaml.ScalarNode) and "${" in str(node.value):
            return interpolate(str(node.value), self.env, line)
        return self.constructor.construct_object(node, deep=True)


def _check_depth(text: str) -> None:
    """Refuse deep nesting before composing (PyYAML composes recursively)."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlProblem(token.start_mark.line + 1, "YAML nested too deeply")
        elif isinstance(token, _CLOSE):
            depth -= 1


def load(text: str, env: Mapping[str, str] | None = None) -> Marked:
    """Parse YAML text; raises YamlProblem with the line of a syntax error."""
    try:
        _check_depth(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise YamlProblem(line, f"YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlProblem(1, f"YAML: {exc}") from None
    except RecursionError:
        raise YamlProblem(1, "YAML nested too deeply") from None
    if node is None:
        return Marked({}, {(): 1})
    builder = _Builder(os.environ if env is None else env)
    try:
        data = builder.build(node, ())
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlProblem(mark.line + 1 if mark else 1, f"YAML: {exc.problem}") from None
    except RecursionError:
        raise YamlProblem(1, "YAML nested too deeply") from None
    return Marked(data, builder.lines)
