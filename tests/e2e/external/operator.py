"""The operator as it runs in a cluster: under the ServiceAccount `nodeops` holding exactly the
roles `manifests/` grants for the base and one controller's component, with a token from
`kubectl create token`, as `nodeops run` in a process of its own, stopped with SIGTERM.

So every controller's scenario is also the proof of its RBAC on the cluster's own authorizer:
the scenario must reach its goal and the operator's log must show no refused request.

The manifests name the namespace `nodeops-system` and cluster-wide roles `nodeops-<controller>`;
here the namespace is the test's own and the cluster-wide names carry it as a suffix, so that a
nodeops installed in the cluster is not touched.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.external.conftest import kubectl
from tests.kustomize import BASE, COMPONENTS, render, with_components

ACCOUNT = "nodeops"
MANIFEST_NAMESPACE = "nodeops-system"
E2E_LABEL = "nodeops.dev/e2e"
RBAC_KINDS = ("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
CLUSTER_WIDE = ("ClusterRole", "ClusterRoleBinding")
REFUSED = re.compile(r"\b403\b|is forbidden:")


def rbac_objects(workdir: Path, component: str, namespace: str) -> list[dict[str, Any]]:
    """The base's and the component's RBAC, rendered by kustomize as an install renders it,
    moved into `namespace`."""
    objects = render(
        with_components(workdir / f"install-{component}", BASE, [COMPONENTS / component])
    )
    moved = []
    for obj in objects:
        if obj["kind"] not in RBAC_KINDS:
            continue
        meta = obj["metadata"]
        meta.setdefault("labels", {})[E2E_LABEL] = namespace
        if obj["kind"] in CLUSTER_WIDE:
            meta["name"] = f"{meta['name']}-{namespace}"
        else:
            assert meta.get("namespace") == MANIFEST_NAMESPACE, obj
            meta["namespace"] = namespace
        ref = obj.get("roleRef")
        if ref is not None and ref["kind"] == "ClusterRole":
            ref["name"] = f"{ref['name']}-{namespace}"
        for subject in obj.get("subjects") or ():
            assert subject["namespace"] == MANIFEST_NAMESPACE, subject
            subject["namespace"] = namespace
        moved.append(obj)
    return moved


def rules_of(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole"):
            yield from obj["rules"]


@dataclass(frozen=True)
class Identity:
    """The operator's ServiceAccount: its kubeconfig and the roles it holds."""

    kubeconfig: Path
    namespace: str
    objects: list[dict[str, Any]]


@contextmanager
def operator_identity(
    admin: Path, workdir: Path, component: str, namespace: str
) -> Iterator[Identity]:
    objects = rbac_objects(workdir, component, namespace)
    applied = kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    assert applied.returncode == 0, applied.stderr
    try:
        token = kubectl(admin, "create", "token", ACCOUNT, "-n", namespace, "--duration=1h")
        assert token.returncode == 0, token.stderr
        view = kubectl(admin, "config", "view", "--raw", "--minify", "--flatten", "-o", "json")
        assert view.returncode == 0, view.stderr
        config = json.loads(view.stdout)
        (user,) = config["users"]
        user["name"] = f"{namespace}-{ACCOUNT}"
        user["user"] = {"token": token.stdout.strip()}
        (context,) = config["contexts"]
        context["context"]["user"] = user["name"]
        path = workdir / f"{component}-operator.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        yield Identity(path, namespace, objects)
    finally:
        kubectl(admin, "delete", "clusterrolebinding,clusterrole", "-l", f"{E2E_LABEL}={namespace}")


class Operator:
    """`nodeops run ARGS` in its own process, its log kept in a file."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str) -> None:
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nodeops.cli",
                    "run",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--log-format",
                    "json",
                    "--metrics-addr",
                    "0",
                    "--health-addr",
                    "0",
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def alive(self) -> None:
        assert self.proc.poll() is None, f"nodeops run exited: {self.output()[-3000:]}"

    def output(self) -> str:
        return self.log.read_text()

    def refused(self) -> list[str]:
        """Log lines of requests the API server refused (403 Forbidden)."""
        return [line for line in self.output().splitlines() if REFUSED.search(line)]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@contextmanager
def running(identity: Identity, *args: str) -> Iterator[Operator]:
    """The operator with ARGS in the identity's namespace; on the way out it must stop cleanly
    on SIGTERM and have been refused nothing."""
    log = identity.kubeconfig.with_suffix(".log")
    operator = Operator(identity.kubeconfig, log, "--namespace", identity.namespace, *args)
    try:
        yield operator
    except BaseException:
        operator.stop()
        raise
    assert operator.stop() == 0, operator.output()[-3000:]
    assert operator.refused() == [], "\n".join(operator.refused()[:20])
