"""Configuration files people write by hand: YAML validated into a pydantic model.

Controllers read files such as `kubernikus.yaml` at startup. A mistake in one must stop startup
with a message that points at the line to fix (`kubernikus.yaml:4: intervals.requeue: ...`),
never at a traceback. The file is read by `nodeops.common.yamlfile` (lines of every key, `${ENV}`
expansion, duplicate keys and hostile input refused), and every validation error of the model
is mapped back onto the line of its field.

Durations are written as Go writes them (`30s`, `5m`, `1h30m`, `250ms`) or, as go-ucfg also
accepts, as a bare number of seconds; `GoDuration` reads them into seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError

from nodeops.api.duration import parse_duration
from nodeops.common.unknownkeys import unknown_key_message
from nodeops.common.yamlfile import (
    ConfigFileError,
    ConfigProblem,
    Marked,
    load_yaml,
    read_config_text,
    render_path,
)

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


# --------------------------------------------------------------------------------------------
# Go durations
# --------------------------------------------------------------------------------------------


def parse_go_duration(text: str) -> float:
    """Seconds of a Go duration string, with Go's `time.ParseDuration` grammar (the one parser,
    `nodeops.api.duration.parse_duration`); spaces around it are ignored.

    `"0"` alone needs no unit; every other number in a string does (`"30"` is refused, as in Go).
    """
    return parse_duration(text.strip())


def format_go_duration(seconds: float) -> str:
    """A short Go-style rendering (`1h30m`, `20s`, `250ms`) for messages."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:.9g}ms"
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
        out += f"{secs + frac:.9g}s"
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
    return parse_config_text(read_config_text(path), model, source=str(path), environ=environ)


def parse_config_text(
    text: str,
    model: type[M],
    *,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
) -> M:
    """Validate YAML `text` into `model`; `source` names the file in errors."""
    marked = load_yaml(text, source=source, environ=environ)
    if not isinstance(marked.data, dict):
        problem = ConfigProblem(marked.line_of(()), "", "expected a mapping of keys")
        raise ConfigFileError(source, [problem])
    try:
        return model.model_validate(marked.data)
    except ValidationError as exc:
        raise ConfigFileError(source, _problems(exc, marked, model)) from None


# --------------------------------------------------------------------------------------------
# Mapping errors to lines
# --------------------------------------------------------------------------------------------


def _problems(exc: ValidationError, marked: Marked, model: type[BaseModel]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = unknown_key_message(model, loc)
        elif error["type"] == "missing":
            message = "required, but not set"
        elif isinstance(error.get("input"), str | int | float) and not isinstance(
            error.get("input"), bool
        ):
            got = repr(error["input"])
            if got not in message and f'"{error["input"]}"' not in message:
                message += f" (got {got})"
        problems.append(ConfigProblem(marked.line_of(loc), render_path(loc), message))
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: p.line or 0)
