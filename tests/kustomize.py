"""Rendering the kustomizations in `manifests/` with `kubectl kustomize`, as users install them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.repo import MANIFESTS

BASE = MANIFESTS / "base"
OVERLAYS = MANIFESTS / "overlays"
COMPONENTS = MANIFESTS / "components"
MONITORING = MANIFESTS / "monitoring"

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


def overlay_dirs() -> list[Path]:
    """The base and every provider overlay: each is a complete install."""
    return [BASE, *sorted(p.parent for p in OVERLAYS.glob("*/kustomization.yaml"))]


def component_dirs() -> list[Path]:
    """Every optional part of an install: the controllers' components, then monitoring."""
    return [*sorted(p.parent for p in COMPONENTS.glob("*/kustomization.yaml")), MONITORING]


def name_of(path: Path) -> str:
    return str(path.relative_to(MANIFESTS))


def render_text(path: Path) -> str:
    done = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr}"
    return done.stdout


def render(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render_text(path)) if doc]


def with_components(workdir: Path, overlay: Path, components: list[Path]) -> Path:
    """A kustomization that installs `overlay` with `components`, the way docs/install.md tells
    users to write theirs."""
    workdir.mkdir(parents=True, exist_ok=True)
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize refuses absolute paths to other kustomizations.
        "resources": [os.path.relpath(overlay, workdir)],
        "components": [os.path.relpath(c, workdir) for c in components],
    }
    (workdir / "kustomization.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return workdir


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} objects of kind {kind} named {name}"
    return found[0]


def manager_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = find(objects, "Deployment", "nodeops")
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager"
    ]
    return container


def unknown_fields(obj: dict[str, Any]) -> list[str]:
    """Fields of a built-in object that its Kubernetes type does not have: what a server with
    `fieldValidation=Strict` (kubectl's default) refuses. The field catalogue is the client
    library's models, generated from Kubernetes' OpenAPI document."""
    from kubernetes_asyncio.client import models

    version = obj["apiVersion"].rpartition("/")[2]
    model = f"{version[0].upper()}{version[1:]}{obj['kind']}"
    assert hasattr(models, model), f"no model {model} for {obj['apiVersion']} {obj['kind']}"
    return _unknown(obj, model, "", models)


def _unknown(value: Any, type_name: str, path: str, models: Any) -> list[str]:
    if value is None:
        return []
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [
            p
            for i, v in enumerate(value)
            for p in _unknown(v, type_name[5:-1], f"{path}[{i}]", models)
        ]
    if type_name.startswith("dict("):
        inner = type_name[5:-1].split(", ", 1)[1]
        return [p for k, v in value.items() for p in _unknown(v, inner, f"{path}.{k}", models)]
    model = getattr(models, type_name, None)
    if model is None:  # a scalar, `object` (int-or-string, raw JSON) or a date
        return []
    if not isinstance(value, dict):
        return [f"{path}: not an object"]
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    problems = []
    for key, sub in value.items():
        where = f"{path}.{key}" if path else key
        if key not in by_json:
            problems.append(where)
        else:
            problems += _unknown(sub, model.openapi_types[by_json[key]], where, models)
    return problems
