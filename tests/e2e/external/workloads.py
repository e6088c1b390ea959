"""Workloads of the scenarios, pinned to the attached nodes with a nodeSelector on the attach
label, so that on a shared cluster they land nowhere else and nothing else's pods are drained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.external.attached import ATTACH_LABEL, Attached
from tests.e2e.external.conftest import kubectl


def pinned_deployment(
    attached: Attached,
    namespace: str,
    name: str,
    replicas: int,
    *,
    max_unavailable: int | None,
    labels: dict[str, str] | None = None,
    **pod_spec: Any,
) -> list[dict[str, Any]]:
    """A Deployment on the attached nodes, and with MAX_UNAVAILABLE its PodDisruptionBudget.
    Its pods are labelled `app: NAME` and LABELS; POD_SPEC adds to their spec."""
    labels = {"app": name, **(labels or {})}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {ATTACH_LABEL: attached.id},
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{"name": "web", "image": "nginx:1.27"}],
                        **pod_spec,
                    },
                },
            },
        }
    ]
    if max_unavailable is not None:
        docs.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": labels}},
            }
        )
    return docs


def apply_and_wait_ready(kubeconfig: Path, docs: list[dict[str, Any]]) -> None:
    """Applied; returns when the Deployment's replicas are all ready (a watch, by kubectl)."""
    done = kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        meta, replicas = doc["metadata"], doc["spec"]["replicas"]
        ready = kubectl(
            kubeconfig, "wait", "-n", meta["namespace"], f"deployment/{meta['name']}",
            f"--for=jsonpath={{.status.readyReplicas}}={replicas}", "--timeout=90s",
        )  # fmt: skip
        assert ready.returncode == 0, ready.stderr
