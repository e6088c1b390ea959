"""kubectl, as an SRE uses it, against the simulator announcing itself as Kubernetes 1.32.

One test per command family. A 1.32 kubectl (or a version-matching kubectl dispatcher, which
the announced version selects) sends the bodies of `kubectl create <kind>` and `create token`
as protobuf, which a real API server accepts.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nodeops.sim.serve import SimCluster, SimOptions
from tests.repo import ROOT
from tests.waiting import until

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

KUBE_VERSION = "v1.32.4"
NODEGROUP = ROOT / "examples" / "cycling" / "nodegroup.yaml"
CRDS = ROOT / "manifests" / "crds"


class Kubectl:
    def __init__(self, kubeconfig: Path, sim: SimCluster) -> None:
        self.kubeconfig = kubeconfig
        self.sim = sim

    async def run(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(self.kubeconfig),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), timeout=90
        )
        if ok:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
        return out.decode() + ("" if ok else err.decode())

    async def json(self, *args: str) -> Any:
        return json.loads(await self.run(*args, "-o", "json"))


async def _cluster(tmp_path: Path, **options: Any) -> AsyncIterator[Kubectl]:
    sim = SimCluster(SimOptions(nodes=2, instant=True, kube_version=KUBE_VERSION, **options))
    await sim.start()
    try:
        yield Kubectl(sim.server.write_kubeconfig(tmp_path / "kubeconfig"), sim)
    finally:
        await sim.stop()


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    async for k in _cluster(tmp_path):
        yield k


async def test_imperative_create_of_core_kinds(kubectl: Kubectl) -> None:
    """The generators' objects arrive whole, whatever encoding kubectl picked."""
    k = kubectl
    await k.run("create", "namespace", "team")
    await k.run("create", "configmap", "cfg", "-n", "team", "--from-literal=a=b")
    await k.run("create", "secret", "generic", "sec", "-n", "team", "--from-literal=a=b")
    await k.run("create", "serviceaccount", "bot", "-n", "team")
    await k.run(
        "create", "deployment", "web", "-n", "team", "--image=nginx:1.27", "--replicas=2",
        "--port=8080",
    )  # fmt: skip
    await k.run("create", "service", "clusterip", "web", "-n", "team", "--tcp=80:8080")
    await k.run(
        "create", "pdb", "web", "-n", "team", "--selector=app=web", "--min-available=50%"
    )  # fmt: skip
    await k.run(
        "create", "role", "reader", "-n", "team", "--verb=get,list", "--resource=pods"
    )  # fmt: skip
    await k.run(
        "create", "rolebinding", "reader", "-n", "team", "--role=reader",
        "--serviceaccount=team:bot", "--user=alice",
    )  # fmt: skip
    await k.run("create", "clusterrole", "healthz", "--verb=get", "--non-resource-url=/healthz")
    await k.run("create", "clusterrolebinding", "healthz", "--clusterrole=healthz", "--user=u")

    assert (await k.json("get", "configmap", "cfg", "-n", "team"))["data"] == {"a": "b"}
    assert (await k.json("get", "secret", "sec", "-n", "team"))["data"] == {"a": "Yg=="}
    deploy = await k.json("get", "deployment", "web", "-n", "team")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nginx:1.27"
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    svc = await k.json("get", "service", "web", "-n", "team")
    assert svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["ports"][0]["targetPort"] == 8080
    pdb = await k.json("get", "pdb", "web", "-n", "team")
    assert pdb["spec"]["minAvailable"] == "50%"
    binding = await k.json("get", "rolebinding", "reader", "-n", "team")
    assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {
        ("ServiceAccount", "bot"),
        ("User", "alice"),
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "reader",
    }
    role = await k.json("get", "clusterrole", "healthz")
    assert role["rules"] == [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]

    async def ready() -> bool:
        out = await k.run("get", "deployment", "web", "-n", "team", "-o", "jsonpath={.status}")
        return '"readyReplicas":2' in out

    await until(ready, timeout=60, what="deployment ready")


async def test_create_token_and_auth_over_tls(tmp_path: Path) -> None:
    async for k in _cluster(tmp_path, rbac=True):
        await k.run("create", "serviceaccount", "viewer")
        token = (await k.run("create", "token", "viewer", "--duration=1h")).strip()
        assert token.count(".") == 2  # a JWT
        assert (await k.run("auth", "can-i", "list", "pods")).strip() == "yes"
        assert "kubernetes-admin" in await k.run("auth", "whoami")

        viewer = Kubectl(k.sim.server.write_kubeconfig(tmp_path / "viewer", token=token), k.sim)
        who = await viewer.run("auth", "whoami")
        assert "system:serviceaccount:default:viewer" in who
        assert (await viewer.run("auth", "can-i", "list", "nodes", ok=False)).startswith("no")
        assert (await viewer.run("auth", "can-i", "get", "/healthz")).strip() == "yes"


async def test_get_output_formats_describe_and_api_resources(kubectl: Kubectl) -> None:
    k = kubectl
    wide = (await k.run("get", "nodes", "-o", "wide")).splitlines()
    assert wide[0].split()[:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    assert len(wide) == 3
    assert "kind: Node" in await k.run("get", "node", "node-0", "-o", "yaml")
    assert (await k.json("get", "nodes"))["kind"] == "List"
    names = await k.run("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")
    assert names.split() == ["node-0", "node-1"]
    described = await k.run("describe", "node", "node-0")
    assert "Name:               node-0" in described and "Conditions:" in described
    resources = await k.run("api-resources", "--no-headers")
    for expected in ("pods", "deployments", "poddisruptionbudgets", "leases"):
        assert any(line.split()[0] == expected for line in resources.splitlines()), expected


async def test_apply_client_and_server_side_for_nodeops_crds_and_resources(
    kubectl: Kubectl,
) -> None:
    k = kubectl
    crds = sorted(str(p) for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml")
    args = [arg for path in crds for arg in ("-f", path)]
    out = await k.run("apply", *args)
    assert out.count("created") == len(crds), out
    out = await k.run("apply", "--server-side", *args)
    assert out.count("serverside-applied") == len(crds), out

    async def served() -> bool:
        out = await k.run("get", "nodegroups", ok=False)
        return "the server doesn't have a resource type" not in out

    await until(served, what="nodegroups served")
    out = await k.run("apply", "-f", str(NODEGROUP))
    assert "nodegroup.nodeops.dev/web created" in out
    assert "unchanged" in await k.run("apply", "-f", str(NODEGROUP))
    out = await k.run("apply", "--server-side", "--force-conflicts", "-f", str(NODEGROUP))
    assert "serverside-applied" in out
    row = (await k.run("get", "ng", "web", "--no-headers")).split()
    assert row[0] == "web"
    described = await k.run("describe", "nodegroup", "web")
    assert "Kind:         NodeGroup" in described


async def test_patch_label_annotate_and_replace(kubectl: Kubectl) -> None:
    k = kubectl
    await k.run("create", "configmap", "cfg", "--from-literal=a=b")
    await k.run("label", "configmap", "cfg", "tier=db")
    await k.run("annotate", "configmap", "cfg", "owner=sre")
    await k.run("label", "node", "node-0", "pool=blue")
    await k.run("patch", "configmap", "cfg", "-p", '{"data":{"c":"d"}}')
    await k.run("patch", "configmap", "cfg", "--type=merge", "-p", '{"data":{"e":"f"}}')
    await k.run(
        "patch", "configmap", "cfg", "--type=json",
        "-p", '[{"op":"remove","path":"/data/a"}]',
    )  # fmt: skip
    cfg = await k.json("get", "configmap", "cfg")
    assert cfg["metadata"]["labels"] == {"tier": "db"}
    assert cfg["metadata"]["annotations"]["owner"] == "sre"
    assert cfg["data"] == {"c": "d", "e": "f"}
    assert (await k.json("get", "node", "node-0"))["metadata"]["labels"]["pool"] == "blue"

    # What `kubectl edit` does after the editor closes: a PUT of the edited object.
    cfg["data"]["edited"] = "yes"
    await k.run("replace", "-f", "-", stdin=json.dumps(cfg))
    assert (await k.json("get", "configmap", "cfg"))["data"]["edited"] == "yes"
    stale = dict(cfg, data={"x": "y"})
    out = await k.run("replace", "-f", "-", stdin=json.dumps(stale), ok=False)
    assert "the object has been modified" in out


async def test_get_watch_then_delete(kubectl: Kubectl) -> None:
    k = kubectl
    await k.run("create", "configmap", "watched", "--from-literal=a=b")
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(k.kubeconfig), "get", "configmap", "watched",
        "-w", "-o", "jsonpath={.metadata.name} {.data.a}{\"\\n\"}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert first.decode().split() == ["watched", "b"]
        await k.run("patch", "configmap", "watched", "-p", '{"data":{"a":"c"}}')
        second = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert second.decode().split() == ["watched", "c"]
    finally:
        proc.kill()
        await proc.wait()
    out = await k.run("delete", "configmap", "watched")
    assert 'configmap "watched" deleted' in out
    out = await k.run("get", "configmap", "watched", ok=False)
    assert "NotFound" in out


async def test_explain_custom_resources(kubectl: Kubectl) -> None:
    k = kubectl
    await k.run("apply", "-f", str(CRDS / "nodeops.dev_nodegroups.yaml"))

    async def explained() -> str | None:
        out = await k.run("explain", "nodegroup.spec.cycleSettings.method", ok=False)
        return out if "FIELD: method <string>" in out else None

    out = await until(explained, what="kubectl explain of a nodeops CRD field")
    assert "KIND:       NodeGroup" in out
    assert "Drain" in out and "Wait" in out  # the enum
    fields = await k.run("explain", "nodegroups.spec")
    assert "cycleSettings\t<Object> -required-" in fields


async def test_debug_node(kubectl: Kubectl) -> None:
    """`kubectl debug node/...` creates a host-namespaced pod pinned to the node."""
    k = kubectl
    out = await k.run("debug", "node/node-0", "--image=busybox:1.36")
    assert "Creating debugging pod node-debugger-node-0-" in out
    (pod,) = (await k.json("get", "pods"))["items"]
    spec = pod["spec"]
    assert spec["nodeName"] == "node-0"
    assert spec["hostPID"] and spec["hostNetwork"] and spec["hostIPC"]
    assert spec["volumes"] == [{"name": "host-root", "hostPath": {"path": "/"}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "host-root", "mountPath": "/host"}]


async def test_priority_classes_as_kube_apiserver_serves_them(kubectl: Kubectl) -> None:
    """The classes the scheduler preempts by: created with kubectl's generator, listed with
    kube's columns, and held to kube's rules (reserved names, the highest user value, one
    default, an immutable value)."""
    k = kubectl
    await k.run("create", "priorityclass", "batch", "--value=100", "--preemption-policy=Never")
    await k.run("create", "priorityclass", "serving", "--value=1000", "--global-default")
    lines = (await k.run("get", "priorityclasses")).splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"batch", "serving", "system-cluster-critical", "system-node-critical"}
    assert (rows["batch"][1:3], rows["batch"][-1]) == (["100", "false"], "Never")
    assert (rows["serving"][1:3], rows["serving"][-1]) == (["1000", "true"], "PreemptLowerPriority")
    assert rows["system-node-critical"][1] == "2000001000"
    refused = await k.run("create", "priorityclass", "huge", "--value=2000000000", ok=False)
    assert "maximum allowed value of a user defined priority is 1000000000" in refused
    refused = await k.run("create", "priorityclass", "system-mine", "--value=1", ok=False)
    assert "prefix are reserved for system use only" in refused
    refused = await k.run(
        "create", "priorityclass", "other", "--value=5", "--global-default", ok=False
    )
    assert (
        "PriorityClass serving is already marked as default. Only one default can exist" in refused
    )
    # Marking another class the default is refused as making one is; the default itself may
    # be written again.
    refused = await k.run(
        "patch", "priorityclass", "batch", "-p", '{"globalDefault": true}', ok=False
    )
    assert (
        'priorityclasses.scheduling.k8s.io "batch" is forbidden: PriorityClass serving is '
        "already marked as default. Only one default can exist" in refused
    )
    await k.run("patch", "priorityclass", "serving", "-p", '{"description": "web"}')
    refused = await k.run("patch", "priorityclass", "batch", "-p", '{"value": 5}', ok=False)
    assert "Value: Forbidden: may not be changed in an update." in refused
    await k.run("run", "job", "--image=nginx:1.27", "--restart=Never")
    pod = await k.json("get", "pod", "job")
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == ("serving", 1000)
