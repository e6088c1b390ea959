"""docs/architecture.md names only what exists: every file and module it cites, the layers as the
import-linter contract orders them, the controllers there are, and the names each controller's
decision and each piece of the kit is said to hold."""

from __future__ import annotations

import importlib
import importlib.util
import re
import tomllib
from typing import Any

import pytest

from nodeops import controllers
from tests.repo import DOCS, ROOT

PAGE = (DOCS / "architecture.md").read_text(encoding="utf-8")
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"
]
CONTROLLERS = ROOT / "nodeops" / "controllers"

# `nodeops/kube/`, `tests/e2e/test_monitoring.py`, `kit/clock.py` (a path under the controllers)
PATH = re.compile(r"`(\w+(?:/[\w.]*)+|pyproject\.toml)`")
# `nodeops.kube.finalizers`, `nodeops.controllers.kit`
DOTTED = re.compile(r"`(nodeops(?:\.\w+)+)`")


def _contract(name: str) -> dict[str, Any]:
    (found,) = (c for c in CONTRACTS if c["name"] == name)
    return found


def _section(heading: str) -> str:
    return PAGE.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _rows(section: str) -> list[list[str]]:
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]  # without the header


def _cited_paths(text: str) -> list[str]:
    return [p for p in PATH.findall(text) if "<" not in p]


def _resolve(path: str) -> bool:
    return (ROOT / path).exists() or (CONTROLLERS / path).exists()


def _module_of(path: str) -> str:
    where = ROOT / path if (ROOT / path).exists() else CONTROLLERS / path
    relative = where.relative_to(ROOT).with_suffix("")
    return ".".join(relative.parts)


def _importable(dotted: str) -> bool:
    """A module, or a name in a module (`nodeops.controllers.kit.Clock`)."""
    try:
        if importlib.util.find_spec(dotted) is not None:  # imports its parents only
            return True
    except ModuleNotFoundError:
        pass
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


def test_the_page_cites_files_and_modules() -> None:
    assert len(_cited_paths(PAGE)) > 20 and len(DOTTED.findall(PAGE)) > 10


@pytest.mark.parametrize("path", sorted(set(_cited_paths(PAGE))))
def test_every_cited_path_exists(path: str) -> None:
    assert _resolve(path), f"docs/architecture.md cites `{path}`, which does not exist"


@pytest.mark.parametrize("dotted", sorted(set(DOTTED.findall(PAGE))))
def test_every_cited_module_exists(dotted: str) -> None:
    assert _importable(dotted), f"docs/architecture.md cites `{dotted}`, which does not exist"


def test_every_linked_page_exists() -> None:
    for target in re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", PAGE):
        assert (DOCS / target).is_file(), target


def test_the_layers_are_the_contracts() -> None:
    block = _section("The layers").split("```\n", 2)[1]
    shown = [re.split(r"\s{2,}", line)[0] for line in block.splitlines()]
    assert shown == _contract("layers point downwards")["layers"]
    for name in (
        "layers point downwards",
        "the simulator is never imported by the operator",
        "the operator's core needs no extra: no cloud SDK, none of the simulator's packages",
        "controllers never import each other; what they share is the kit beneath them",
    ):
        assert _contract(name)  # the contracts the page explains are still there
        assert f'"{name.split(":")[0]}"' in PAGE, name


def test_every_controller_is_in_the_skeleton_table() -> None:
    packages = {p.name for p in CONTROLLERS.iterdir() if (p / "__init__.py").is_file()} - {"kit"}
    contract = _contract(
        "controllers never import each other; what they share is the kit beneath them"
    )
    layer, kit = contract["layers"]
    assert kit == "kit" and set(layer.replace(" ", "").split("|")) == packages
    first_cells = {row[0].strip("`") for row in _rows(_section("A controller's skeleton"))}
    assert first_cells >= packages
    assert {m.split(".")[2].split(":")[0] for m in controllers.BUILTIN} == packages


def _names_in(cell: str) -> list[str]:
    """The code names of a table cell (`Step`, `next_action()`, `TRANSITIONS`), not its paths."""
    return [
        name.removesuffix("()")
        for name in re.findall(r"`([A-Za-z_]\w*(?:\(\))?)`", cell)
        if not name.endswith(".py")
    ]


@pytest.mark.parametrize(
    ("section", "column"), [("A controller's skeleton", 2), ("The controller kit", 1)]
)
def test_named_pieces_live_in_the_modules_of_their_row(section: str, column: int) -> None:
    checked = 0
    for row in _rows(_section(section)):
        modules = [_module_of(p) for p in _cited_paths(" ".join(row)) if p.endswith(".py")]
        modules += DOTTED.findall(" ".join(row))
        if not modules or len(row) <= column:  # the section's other table
            continue
        for name in _names_in(row[column]):
            assert any(_importable(f"{m}.{name}") for m in modules), (section, name, modules)
            checked += 1
    assert checked >= 5
