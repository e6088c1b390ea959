"""`nodeops run` settings: flags, NODEOPS_* environment variables, precedence, clear errors."""

from __future__ import annotations

import pytest

from nodeops.cli import build_parser
from nodeops.run import RunSettings, settings_from_args


def _args(*argv: str) -> object:
    return build_parser().parse_args(["run", *argv])


def test_defaults() -> None:
    s = settings_from_args(_args())
    assert (s.leader_elect, s.leader_election_id, s.metrics_addr, s.health_addr) == (
        False,
        "nodeops-leader",
        ":8080",
        ":8081",
    )
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)


def test_environment_sets_every_flag_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEOPS_LEADER_ELECT", "true")
    monkeypatch.setenv("NODEOPS_CONTROLLERS", "a, b")
    monkeypatch.setenv("NODEOPS_LOG_LEVEL", "debug")
    monkeypatch.setenv("NODEOPS_METRICS_ADDR", "127.0.0.1:9000")
    s = settings_from_args(_args("--metrics-addr", ":9100"))
    assert s.leader_elect is True
    assert s.controllers == ["a", "b"]
    assert s.log_level == "debug"
    assert s.metrics_addr == ":9100"  # the flag beats the environment
    s = settings_from_args(_args("--no-leader-elect"))
    assert s.leader_elect is False


def test_bad_values_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="log_level"):
        settings_from_args(_args("--log-level", "loud"))
    monkeypatch.setenv("NODEOPS_LEASE_DURATION", "soon")
    with pytest.raises(ValueError, match="lease_duration"):
        RunSettings()
