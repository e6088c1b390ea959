"""The committed CRD manifests are exactly what the models generate, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeops.api import all_crds, render_crds_yaml
from nodeops.api.__main__ import main
from nodeops.api.crd import (
    GENERATED_HEADER,
    KUSTOMIZATION_FILE,
    crd_file_name,
    crd_file_text,
    crd_kustomization_text,
)
from tests.repo import CRDS, ROOT

REGENERATE = f"regenerate with `nodeops crds --output-dir {CRDS.relative_to(ROOT)}`"


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["metadata"]["name"])
def test_committed_manifest_matches_the_generator(crd: dict[str, Any]) -> None:
    path = CRDS / crd_file_name(crd)
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing; {REGENERATE}"
    assert path.read_text(encoding="utf-8") == crd_file_text(crd), (
        f"{path.name} is out of date; {REGENERATE}"
    )


def test_no_stale_manifests() -> None:
    expected = {crd_file_name(crd) for crd in all_crds()} | {KUSTOMIZATION_FILE}
    present = {p.name for p in CRDS.iterdir()}
    assert present == expected, REGENERATE
    for name in present:
        assert (CRDS / name).read_text(encoding="utf-8").startswith(GENERATED_HEADER)


def test_the_kustomization_lists_every_crd() -> None:
    text = (CRDS / KUSTOMIZATION_FILE).read_text(encoding="utf-8")
    assert text == crd_kustomization_text(crd_file_name(c) for c in all_crds()), REGENERATE
    assert yaml.safe_load(text)["resources"] == sorted(crd_file_name(c) for c in all_crds())


def test_the_module_entry_point_regenerates_the_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--output-dir", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {p.name for p in CRDS.iterdir()}
    for path in tmp_path.iterdir():
        assert path.read_text(encoding="utf-8") == (CRDS / path.name).read_text(encoding="utf-8")
    capsys.readouterr()
    assert main([]) == 0
    assert capsys.readouterr().out == render_crds_yaml()
