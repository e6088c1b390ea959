"""Structured logging: JSON lines when not on a terminal (in a pod), readable console on a TTY.

Reconcile context (controller, object, reconcile id) is bound through contextvars by the
controller, so every line a reconciler logs says what it was working on.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error")


class _CurrentStderr:
    """`sys.stderr` as it is when a line is written, not as it was when logging was configured:
    whoever replaces it later (a test capturing output, then closing its stream) would otherwise
    leave every logger writing to a closed file, and a reconcile that logs would fail."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "auto") -> None:
    """`fmt` is json, console or auto (console on a TTY, JSON otherwise)."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"log format must be auto, json or console, not {fmt!r}")
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if use_json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("msg"),
            structlog.processors.JSONRenderer(),
        ]
    else:
        # Colour only for a terminal: escape codes in a file or pipe are noise (NO_COLOR: never).
        colors = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        processors.append(structlog.dev.ConsoleRenderer(colors=colors))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
