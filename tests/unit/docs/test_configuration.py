"""docs/configuration.md is what the settings models and the command's help say, in full."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field

from nodeops.configref import _plugin_section, main, render
from tests.repo import DOCS

PAGE = DOCS / "configuration.md"
REGENERATE = "regenerate with `python -m nodeops.configref --output docs/configuration.md`"


def test_the_committed_page_is_generated() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), f"{PAGE.name} is out of date; {REGENERATE}"


def test_every_setting_is_explained() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `--")]
    assert len(rows) >= 16
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5 and all(cells), row
        flag, env = cells[0].strip("`"), cells[1].strip("`")
        assert env == "NODEOPS_" + flag.removeprefix("--").replace("-", "_").upper(), row


def test_the_entry_point_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    assert main(["--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert re.search(
        r"^\| `--leader-elect` \| `NODEOPS_LEADER_ELECT` \| boolean \| `false` \|", render(), re.M
    )


class _Settings(BaseModel):
    max_batch: int = Field(2, description="nodes replaced at once")
    dry_run: bool = False
    zones: list[str] = Field(default_factory=list, description="zones to act in")


def test_a_controllers_settings_become_flags_and_variables() -> None:
    section = "\n".join(_plugin_section("node-cycler", "Replaces nodes.", _Settings))
    assert section.startswith("## Controller `node-cycler`\n\nReplaces nodes.\n")
    assert (
        "| `--node-cycler-max-batch` | `NODEOPS_NODE_CYCLER_MAX_BATCH` | integer | `2` "
        "| nodes replaced at once |"
    ) in section
    assert (
        "| `--node-cycler-dry-run` | `NODEOPS_NODE_CYCLER_DRY_RUN` | boolean | `false` |" in section
    )
    assert "| list of string | unset | zones to act in |" in section
