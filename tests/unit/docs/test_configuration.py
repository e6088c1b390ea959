"""docs/configuration.md is what the settings models and the command's help say, in full."""

from __future__ import annotations

import re
from pathlib import Path

from nodeops.configref import main, render
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
