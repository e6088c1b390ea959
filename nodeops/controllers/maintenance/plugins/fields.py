"""Config field types shared by plugins: durations, scalar strings, weekday lists."""

from __future__ import annotations

from datetime import time
from typing import Annotated, Any

from pydantic import BeforeValidator

from nodeops.controllers.maintenance.durations import (
    parse_clock,
    parse_duration,
    parse_month_day,
    parse_weekday,
)


def _scalar_text(value: Any) -> Any:
    """YAML `value: true` or `value: 3` meant the text, as Go's config decoder reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _weekdays(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ValueError("expected a list of weekdays")
    return [parse_weekday(v) for v in value]


def _month_days(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ValueError('expected a list of dates like ["Dec 24"]')
    return [parse_month_day(v) for v in value]


Duration = Annotated[float, BeforeValidator(parse_duration)]
Text = Annotated[str, BeforeValidator(_scalar_text)]
Clock = Annotated[time, BeforeValidator(parse_clock)]
Weekdays = Annotated[list[int], BeforeValidator(_weekdays)]
MonthDays = Annotated[list[tuple[int, int]], BeforeValidator(_month_days)]
