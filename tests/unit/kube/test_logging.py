"""Logging writes to the standard error of the moment, whoever replaced it since it was set up."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from nodeops.kube.logging import configure


def test_a_closed_stream_that_once_was_stderr_breaks_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure("info", "json")
    log = structlog.get_logger("test")
    log.info("to the first")
    first.close()  # as a test's capture is closed once it is over
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.error("to the second")
    assert '"msg": "to the second"' in second.getvalue()
    structlog.reset_defaults()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stream", "coloured"), [(io.StringIO, False), (_Terminal, True)])
def test_console_lines_are_coloured_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, stream: type[io.StringIO], coloured: bool
) -> None:
    """`nodeops demo 2>file` and friends: a file gets plain text, a terminal gets colour."""
    out = stream()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.delenv("NO_COLOR", raising=False)
    configure("warning", "console")
    structlog.get_logger("test").warning("list/watch failed, retrying", failures=1)
    assert "list/watch failed, retrying" in out.getvalue()
    assert ("\x1b[" in out.getvalue()) is coloured
    structlog.reset_defaults()


def test_no_color_turns_colour_off_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setenv("NO_COLOR", "1")
    configure("warning", "console")
    structlog.get_logger("test").warning("plain")
    assert "plain" in out.getvalue() and "\x1b[" not in out.getvalue()
    structlog.reset_defaults()
