"""Durations of the operator's settings (`nodeops run` flags and `NODEOPS_*` variables).

A setting takes a Go duration (`90s`, `168h`, `1h30m`), the way the configuration files, the
CRDs and every Kubernetes flag write one, or a bare number of seconds (`90`), which these
settings have always taken. The value is seconds, so code that reads a setting is unchanged.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final

from pydantic import BeforeValidator
from pydantic.fields import FieldInfo

from nodeops.api.configfile import format_go_duration
from nodeops.api.duration import parse_duration

__all__ = ["SettingDuration", "format_setting_duration", "is_duration"]

_NUMBER: Final = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


def _seconds(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # numbers as they are; anything else is refused by the float validation
    text = value.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    return parse_duration(text)


_VALIDATOR: Final = BeforeValidator(_seconds)

SettingDuration = Annotated[float, _VALIDATOR]
"""Seconds, written as a Go duration (`90s`, `168h`) or a number of seconds."""


def is_duration(info: FieldInfo) -> bool:
    """Whether a settings field is a `SettingDuration` (for help texts and the reference)."""
    return _VALIDATOR in info.metadata


def format_setting_duration(seconds: float) -> str:
    """A default as the user would write it: `168h`, `1m30s`, `500ms`, `0s`."""
    if not math.isfinite(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    return sign + format_go_duration(abs(seconds))
