"""docs/simulator.md's list of differences from kube-apiserver agrees with what the page (and
tests/integration/sim/test_kubectl_commands.py) shows working: TLS, `kubectl explain` of custom
resources, `kubectl auth can-i`."""

from __future__ import annotations

import re

from tests.repo import DOCS

PAGE = (DOCS / "simulator.md").read_text(encoding="utf-8")


def _differences() -> str:
    section = PAGE.split("## Differences from a real API server", 1)[1]
    return " ".join(section.split("\n## ", 1)[0].split())


def test_the_differences_do_not_deny_what_works() -> None:
    text = _differences()
    assert "`--tls`" in PAGE.split("## Differences", 1)[0]
    assert "no TLS" not in text
    assert not re.search(r"`kubectl explain`\s+fails", text)
    assert "explain` works for custom resources" in text
    assert not re.search(r"`kubectl auth can-i`,? (are|is) not served", text)
    assert "`kubectl auth can-i` and `kubectl auth whoami` are answered" in text
