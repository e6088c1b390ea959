"""Every duration setting of `nodeops run` takes a Go duration or seconds, and its help says
that it is a duration and what its default is."""

from __future__ import annotations

import argparse
import re

import pytest

from nodeops.api.settingduration import is_duration
from nodeops.cli import build_parser
from nodeops.controllers import plugins
from nodeops.run import ConfigProblem, RunSettings, plugin_flag, plugin_settings, settings_from_args


def _run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


def _help_of(flag: str) -> str:
    action = next(a for a in _run_parser()._actions if flag in a.option_strings)
    return " ".join((action.help or "").split())


def _args(*argv: str) -> object:
    return build_parser().parse_args(["run", *argv])


def test_the_cyclops_expiry_is_written_as_cyclops_writes_it() -> None:
    cycling = plugins()["cycling"]
    flag = "--cycling-delete-cnr-expiry"
    assert "duration, default 168h;" in _help_of(flag)
    settings = plugin_settings(cycling, _args(flag, "168h"))
    assert settings.delete_cnr_expiry == 168 * 3600  # type: ignore[attr-defined]
    settings = plugin_settings(cycling, _args(flag, "90"))  # seconds, as before
    assert settings.delete_cnr_expiry == 90  # type: ignore[attr-defined]
    with pytest.raises(ConfigProblem, match=rf'^{flag}: invalid duration "1 week"'):
        plugin_settings(cycling, _args(flag, "1 week"))
    with pytest.raises(ConfigProblem, match=rf"^{flag}: Input should be greater than 0"):
        plugin_settings(cycling, _args(f"{flag}=-5m"))


def test_every_duration_flag_takes_go_durations_and_shows_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    durations = []
    for plugin in plugins().values():
        for field, info in plugin.settings.model_fields.items():
            if is_duration(info):
                durations.append(plugin.name)
                flag = plugin_flag(plugin.name, field)
                assert re.search(r"\(duration, default \d[\dhms.]*;", _help_of(flag)), flag
                settings = plugin_settings(plugin, _args(flag, "1m30s"))
                assert getattr(settings, field) == 90.0, flag
    assert {"cycling", "cycling-observer", "detacher", "maintenance"} <= set(durations)
    for field, info in RunSettings.model_fields.items():
        if is_duration(info):
            flag = "--" + field.replace("_", "-")
            assert re.search(r"\(duration, default \d+s\)", _help_of(flag)), flag
            assert getattr(settings_from_args(_args(flag, "1m30s")), field) == 90.0
            assert getattr(settings_from_args(_args(flag, "20")), field) == 20.0
    monkeypatch.setenv("NODEOPS_LEASE_DURATION", "1m")
    assert RunSettings().lease_duration == 60.0
    monkeypatch.setenv("NODEOPS_MAINTENANCE_RELOAD_INTERVAL", "250ms")
    assert plugin_settings(plugins()["maintenance"], _args()).reload_interval == 0.25  # type: ignore[attr-defined]


def test_no_duration_hides_behind_a_plain_number() -> None:
    """A float setting whose name says it is a time must be a duration."""
    timely = re.compile(r"(timeout|interval|period|wait|limit|backoff|expiry|seconds|deadline)")
    for plugin in plugins().values():
        for field, info in plugin.settings.model_fields.items():
            if info.annotation is float and timely.search(field):
                assert is_duration(info), plugin_flag(plugin.name, field)
