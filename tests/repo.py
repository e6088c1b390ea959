"""Where things are in the repository, for tests that check committed files against the code."""

from __future__ import annotations

from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
MANIFESTS: Final = ROOT / "manifests"
CRDS: Final = MANIFESTS / "crds"
DOCS: Final = ROOT / "docs"
