"""`nodeops sim attach` / `detach` against an API server that is not the simulator's own.

The "existing cluster" is a bare simulated API server with no control loops at all, as a bare
kube-apiserver is: nothing there registers nodes, heart-beats, schedules or starts pods unless
the attached simulator does. Waits are woken by the server's own writes (its store's write
hooks), never by sleeping.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import yaml

from nodeops.sim.attach import ATTACH_LABEL, Attachment, AttachOptions
from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import LEASES, NODES, PODS, ApiClient
from nodeops.sim.objects import for_create, make_node
from nodeops.sim.server.app import SimServer
from nodeops.sim.server.auth import GROUP_ALL_AUTHENTICATED, UserInfo

T = TypeVar("T")

OUTSIDER = "worker-outside"


async def until_written(
    server: SimServer, check: Callable[[], T], *, timeout: float = 30.0, what: str = "it"
) -> T:
    """`check()` once it is truthy, re-checked after each write the server stores."""
    changed = asyncio.Event()

    def hook(key: Any, ev: Any) -> None:
        changed.set()

    server.store.write_hooks.append(hook)
    last: Any = None
    try:
        async with asyncio.timeout(timeout):
            while not (last := check()):
                changed.clear()
                await changed.wait()
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}; last: {last!r}") from None
    finally:
        server.store.write_hooks.remove(hook)
    return last


def stored(server: SimServer, group: str, plural: str, ns: str | None = None) -> list[Any]:
    rt = server.registry.lookup(group, "v1", plural)
    entries = server.store.bucket(rt.storage_key).entries(ns)
    return [server.registry.decode(rt, e) for e in entries]


def labelled_objects(server: SimServer) -> list[str]:
    """Every stored object carrying the attach label, as kind/namespace/name."""
    found = []
    for bucket in server.store.buckets.values():
        for entry in bucket.entries(None):
            obj = entry.decode()
            meta = obj.get("metadata") or {}
            if ATTACH_LABEL in (meta.get("labels") or {}):
                found.append(f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta['name']}")
    return sorted(found)


def node_names(server: SimServer) -> set[str]:
    return {n["metadata"]["name"] for n in stored(server, "", "nodes")}


def count_writes(server: SimServer) -> list[Any]:
    writes: list[Any] = []
    server.store.write_hooks.append(lambda key, ev: writes.append(key))
    return writes


@pytest.fixture
async def bare() -> AsyncIterator[SimServer]:
    """A bare API server holding one node of its own, which nothing attached may touch."""
    srv = SimServer(clock=Clock(1.0), bookmark_interval=0.5)
    await srv.start()
    srv.create(for_create(make_node(OUTSIDER, rng=1)))
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
def kubeconfig(bare: SimServer, tmp_path: Path) -> Path:
    return bare.write_kubeconfig(tmp_path / "kubeconfig")


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def test_attached_nodes_run_pods_and_leave_no_trace(
    bare: SimServer, kubeconfig: Path, tmp_path: Path
) -> None:
    outsider_before = bare.registry.get(bare.registry.lookup("", "v1", "nodes"), "", OUTSIDER)
    attachment = Attachment(
        AttachOptions(
            kubeconfig=str(kubeconfig),
            instance="t1",
            nodes=2,
            node_groups=1,
            instant=True,
            controllers=frozenset({"scheduler"}),
            provider_config_out=str(tmp_path / "providers.yaml"),
        )
    )
    await attachment.start()
    try:
        ours = f"{ATTACH_LABEL}=t1"
        nodes = await until_written(
            bare,
            lambda: [
                n
                for n in stored(bare, "", "nodes")
                if (n["metadata"].get("labels") or {}).get(ATTACH_LABEL) == "t1"
            ],
            what="nodes",
        )
        assert len(nodes) == 2
        assert all(n["spec"]["providerID"].startswith("sim:///group-0/") for n in nodes)
        assert all(_ready(n) for n in nodes)
        names = {n["metadata"]["name"] for n in nodes}

        # Each node's kubelet heart-beats through its Lease, labelled like everything created.
        def leased() -> bool:
            leases = stored(bare, "coordination.k8s.io", "leases", "kube-node-lease")
            return {lease["metadata"]["name"] for lease in leases} >= names

        await until_written(bare, leased, what="leases")
        client = ApiClient(bare.url, bare.admin_token)
        try:
            leases = await client.list(LEASES, "kube-node-lease", label_selector=ours)
            assert {lease["metadata"]["name"] for lease in leases.items} == names
            # A pod the attached scheduler places on an attached node, which runs it.
            await client.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "hello", "namespace": "default"},
                    "spec": {
                        "containers": [{"name": "c", "image": "nginx:1.27"}],
                        "nodeSelector": {ATTACH_LABEL: "t1"},
                    },
                },
                "default",
            )

            def running() -> dict[str, Any] | None:
                for pod in stored(bare, "", "pods", "default"):
                    if pod["metadata"]["name"] == "hello":
                        if (pod.get("status") or {}).get("phase") == "Running":
                            return dict(pod)
                return None

            pod = await until_written(bare, running, what="the pod running")
            assert pod is not None and pod["spec"]["nodeName"] in names
            # The simulated cloud answers on loopback, as the provider config says.
            config = yaml.safe_load((tmp_path / "providers.yaml").read_text())["providers"]["sim"]
            async with aiohttp.ClientSession() as http:
                async with http.get(
                    f"{config['url']}/sim/cloud/nodegroups/group-0",
                    headers={"Authorization": f"Bearer {config['token']}"},
                ) as resp:
                    group = await resp.json()
            assert {i["privateDnsName"] for i in group["instances"]} == names
            # The foreign node has no simulated kubelet: nothing wrote to it.
            outsider = await client.get(NODES, OUTSIDER)
            assert outsider == outsider_before
        finally:
            await client.close()
    finally:
        removed = await attachment.stop()
    assert removed["nodes"] == 2
    assert labelled_objects(bare) == []
    assert node_names(bare) == {OUTSIDER}
    # The pod was not the attach's: it stays, for the cluster's pod GC to judge.
    assert [p["metadata"]["name"] for p in stored(bare, "", "pods", "default")] == ["hello"]
    outsider_after = bare.registry.get(bare.registry.lookup("", "v1", "nodes"), "", OUTSIDER)
    assert outsider_after == outsider_before


async def _nodeops(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nodeops.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _run(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await _nodeops(*args)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_detach_cleans_up_after_kill_9(
    bare: SimServer, kubeconfig: Path, tmp_path: Path
) -> None:
    proc = await _nodeops(
        "sim", "attach", "--kubeconfig", str(kubeconfig), "--id", "crash", "--nodes", "3",
        "--provider-config-out", str(tmp_path / "providers.yaml"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert b"attached to" in line, line
        # Killed while its kubelets are heart-beating: nodes and leases exist.
        await until_written(
            bare,
            lambda: len([x for x in labelled_objects(bare) if x.startswith("Lease/")]) == 3,
            what="three leases",
        )
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert len(labelled_objects(bare)) == 6
    code, out, err = await _run("sim", "detach", "--kubeconfig", str(kubeconfig), "--id", "crash")
    assert code == 0, err
    assert "removed 6 objects" in out
    assert labelled_objects(bare) == []
    assert node_names(bare) == {OUTSIDER}
    # Detaching again finds nothing and says so.
    code, out, _ = await _run("sim", "detach", "--kubeconfig", str(kubeconfig), "--id", "crash")
    assert (code, out.strip()) == (0, "nothing to remove")


async def test_sigterm_detaches(bare: SimServer, kubeconfig: Path, tmp_path: Path) -> None:
    proc = await _nodeops(
        "sim", "attach", "--kubeconfig", str(kubeconfig), "--nodes", "1",
        "--provider-config-out", str(tmp_path / "providers.yaml"),
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert b"attached to" in line, line
    assert labelled_objects(bare)
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    assert "detached: removed" in out.decode()
    assert labelled_objects(bare) == []
    assert node_names(bare) == {OUTSIDER}


def _one_line_refusal(code: int, err: str, expected: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nodeops sim attach: "), lines
    assert expected in lines[0], lines


async def test_unreachable_server_is_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code, _, err = await _run("sim", "attach", "--kubeconfig", str(config))
    _one_line_refusal(code, err, f"cannot reach http://127.0.0.1:{port}")


async def test_missing_permission_is_named_and_nothing_created(tmp_path: Path) -> None:
    server = SimServer(clock=Clock(1.0), auth=True, rbac=True)
    await server.start()
    try:
        assert server.authn is not None
        server.authn.add_static_token(
            "viewer-token", UserInfo("viewer", (GROUP_ALL_AUTHENTICATED,))
        )
        server.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "node-viewer"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
                ],
            }
        )
        server.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "viewer"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "node-viewer",
                },
                "subjects": [{"kind": "User", "name": "viewer"}],
            }
        )
        config = server.write_kubeconfig(tmp_path / "kubeconfig", token="viewer-token")
        writes = count_writes(server)
        code, _, err = await _run("sim", "attach", "--kubeconfig", str(config))
        _one_line_refusal(code, err, "cannot create nodes")
        assert writes == []
    finally:
        await server.stop()


async def test_a_taken_node_name_is_refused_and_nothing_created(
    bare: SimServer, kubeconfig: Path, tmp_path: Path
) -> None:
    bare.create(for_create(make_node("sim-node-1", rng=2)))
    writes = count_writes(bare)
    code, _, err = await _run(
        "sim", "attach", "--kubeconfig", str(kubeconfig), "--nodes", "2",
        "--provider-config-out", str(tmp_path / "providers.yaml"),
    )  # fmt: skip
    _one_line_refusal(code, err, "Node sim-node-1 exists")
    assert writes == []
    assert not (tmp_path / "providers.yaml").exists()


async def test_detach_releases_what_a_stopped_operator_left_terminating(
    bare: SimServer, kubeconfig: Path
) -> None:
    """An object of the attach's that carries the finalizer of an operator no longer running
    (a roll's request after `nodeops demo --kubeconfig`) would stay Terminating for ever, and
    keep its namespace and CustomResourceDefinition Terminating with it: detach releases it."""
    labels = {ATTACH_LABEL: "held"}
    bare.create(
        for_create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "request",
                    "namespace": "default",
                    "labels": labels,
                    "finalizers": ["nodeops.dev/cycle-cleanup"],
                },
            }
        )
    )
    code, out, err = await _run("sim", "detach", "--kubeconfig", str(kubeconfig), "--id", "held")
    assert "removed 1 object" in out, out
    assert code == 0, err
    assert stored(bare, "", "configmaps", "default") == []
    assert labelled_objects(bare) == []
