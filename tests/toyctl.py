"""Install the test controller plugin (tests/fixtures/thirdparty_controller) the way pip would.

A `*.dist-info` directory with the plugin's entry points goes into a site directory; with that
directory and the fixture's source on the path, `importlib.metadata` finds the plugin exactly as
it finds an installed one, in this process or in a `nodeops` subprocess (through PYTHONPATH).
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "thirdparty_controller"
GROUP = "nodeops.controllers"


def install(site: Path) -> list[str]:
    """Lay the distribution out in `site`; returns the paths to put on sys.path."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    entries = project["entry-points"][GROUP]
    lines = [f"[{GROUP}]", *(f"{k} = {v}" for k, v in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    importlib.invalidate_caches()
    return [str(site), str(FIXTURE)]
