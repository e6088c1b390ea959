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
