"""Plugin types from other packages, found through the `nodeops.maintenance.plugins` entry point."""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeops.controllers.maintenance.config import ConfigError, default_registry, load_text
from nodeops.controllers.maintenance.plugins.base import ENTRY_POINT_GROUP

from .fakes import context, node

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "thirdparty_maintenance"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fixture package laid out as pip would: importable, its entry points visible."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site-packages"
    info = site / f"nodeops_namecheck-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    entries = project["entry-points"][ENTRY_POINT_GROUP]
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(FIXTURE))
    importlib.invalidate_caches()
    yield
    for module in [m for m in sys.modules if m.startswith("nodeops_namecheck")]:
        del sys.modules[module]
    importlib.invalidate_caches()


CONFIG = """\
instances:
  check:
  - type: nodeNameMatches
    name: workers
    config: {pattern: "worker-.*"}
profiles:
- name: p
  operational:
    transitions: [{check: workers, next: maintenance-required}]
"""


async def test_a_third_party_check_type_is_usable(installed: None) -> None:
    registry = default_registry()
    assert "nodeNameMatches" in registry.names("check")
    config = load_text(CONFIG, registry=registry, env={})
    check = config.checks["workers"].plugin
    assert (await check.check(context(node("worker-1")))).passed
    assert not (await check.check(context(node("db-1")))).passed


def test_without_the_package_the_type_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown check plugin type 'nodeNameMatches'"):
        load_text(CONFIG, env={})


def test_loading_entry_points_twice_is_harmless(installed: None) -> None:
    registry = default_registry()
    assert registry.load_entry_points() == []  # the same PluginType objects again
