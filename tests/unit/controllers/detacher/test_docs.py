"""docs/detacher.md says what the code does: its IAM policy and its flags."""

from __future__ import annotations

import ast
from pathlib import Path

from nodeops.controllers.detacher.reconciler import PROVIDER_METHODS
from nodeops.controllers.detacher.settings import DetacherSettings
from nodeops.providers.aws import iam

ROOT = Path(__file__).resolve().parents[4]
DOC = ROOT / "docs" / "detacher.md"
PACKAGE = ROOT / "nodeops" / "controllers" / "detacher"


def provider_calls() -> set[str]:
    """Methods called on anything named `provider` (`self.provider.x`, `self.r.provider.x`)."""
    found: set[str] = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "provider" and node.func.attr != "close":
                found.add(node.func.attr)
    return found


def test_the_listed_provider_methods_are_those_called() -> None:
    calls = provider_calls()
    assert {"deregister", "register", "registrations"} <= calls  # the scan sees the code
    assert calls == set(PROVIDER_METHODS)


def test_the_documented_policy_is_generated_from_those_methods() -> None:
    policy = iam.render(iam.policy_for(PROVIDER_METHODS, sid="NodeopsDetacher"))
    assert f"```json\n{policy}\n```" in DOC.read_text()


def test_every_setting_is_documented_as_a_flag() -> None:
    doc = DOC.read_text()
    for field in DetacherSettings.model_fields:
        assert f"`--detacher-{field.replace('_', '-')}`" in doc, field
