"""Watches that ask for another shape (`as=Table`, `as=PartialObjectMetadata`), over real HTTP.

kube-apiserver converts each watch event's object on its own: a Table with the one row for that
object and the object's resourceVersion, columnDefinitions only in the first event of a stream
(whatever its type, a BOOKMARK included), the row's `object` as `includeObject` says, and ERROR
events left as a Status. kubectl's `get -w` relies on exactly that to print full rows.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from nodeops.api.crd import all_crds
from nodeops.sim.server.app import SimServer
from tests.waiting import until

from .conftest import Api, node, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
KUBECTL_ACCEPT = f"{TABLE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/default/pods"
CNRS = "/apis/nodeops.dev/v1alpha1/namespaces/default/cyclenoderequests"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class Events:
    """A watch stream read one event at a time, each read bounded by a timeout."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        while True:
            line = await asyncio.wait_for(self.resp.content.readline(), timeout)
            if not line:
                raise AssertionError("the watch ended")
            if line.strip():
                event: dict[str, Any] = orjson.loads(line)
                return event

    async def next_change(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next event that is not a BOOKMARK."""
        while True:
            event = await self.next(timeout)
            if event["type"] != "BOOKMARK":
                return event


@asynccontextmanager
async def watch(
    api: Api, path: str, accept: str, params: dict[str, str] | None = None
) -> AsyncIterator[Events]:
    headers = {**api.headers, "Accept": accept}
    async with api.session.get(
        api.base + path,
        params={"watch": "true", **(params or {})},
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=30),
    ) as resp:
        assert resp.status == 200, await resp.text()
        yield Events(resp)


async def list_table(api: Api, path: str) -> dict[str, Any]:
    status, table = await api.get(path, headers={"Accept": KUBECTL_ACCEPT})
    assert status == 200 and table["kind"] == "Table", table
    return dict(table)


def only_row(event: dict[str, Any]) -> dict[str, Any]:
    table = event["object"]
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1", table
    assert len(table["rows"]) == 1, table
    row: dict[str, Any] = table["rows"][0]
    return row


def ready_node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = node(name, labels)
    body["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "Ubuntu 24.04 LTS"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
    }
    return body


async def install_cnr_crd(api: Api) -> list[dict[str, Any]]:
    """The CycleNodeRequest CRD, served; returns its priority-0 printer columns."""
    crd = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "CycleNodeRequest")
    status, body = await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 201, body

    async def served() -> bool:
        code, _ = await api.get(CNRS)
        return code == 200

    await until(served, what="the CycleNodeRequest resource to be served")
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return [c for c in columns if not c.get("priority")]


def cnr(name: str, concurrency: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "nodeops.dev/v1alpha1",
        "kind": "CycleNodeRequest",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeGroupName": f"ng-{name}",
            "selector": {"matchLabels": {"pool": name}},
            "cycleSettings": {"method": "Drain", "concurrency": concurrency},
        },
    }


# ------------------------------------------------------------------------------------------
# Rows per event
# ------------------------------------------------------------------------------------------


async def test_node_watch_sends_one_row_per_event(api: Api) -> None:
    await api.post(NODES, ready_node("n1"))
    listed = await list_table(api, NODES)
    rv = listed["metadata"]["resourceVersion"]

    async with watch(api, NODES, KUBECTL_ACCEPT, {"resourceVersion": rv}) as events:
        _, created = await api.post(NODES, node("n2"))
        added = await events.next()
        assert added["type"] == "ADDED"
        # The first event carries the same columns as the list, so kubectl prints no new header.
        assert added["object"]["columnDefinitions"] == listed["columnDefinitions"]
        row = only_row(added)
        assert row["cells"][:3] == ["n2", "Unknown", "<none>"]
        assert re.fullmatch(r"\d+s", row["cells"][3]), row["cells"]
        assert "conditions" not in row
        assert row["object"] == {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": created["metadata"],
        }
        assert added["object"]["metadata"] == {
            "resourceVersion": created["metadata"]["resourceVersion"]
        }

        await api.patch(
            f"{NODES}/n2",
            {"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}},
        )
        _, patched = await api.patch(
            f"{NODES}/n2/status",
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        )
        labelled = await events.next()
        assert labelled["type"] == "MODIFIED"
        assert labelled["object"]["columnDefinitions"] is None
        assert only_row(labelled)["cells"][:3] == ["n2", "Unknown", "worker"]
        ready = await events.next()
        assert ready["type"] == "MODIFIED" and ready["object"]["columnDefinitions"] is None
        assert only_row(ready)["cells"][:3] == ["n2", "Ready", "worker"]
        assert (
            ready["object"]["metadata"]["resourceVersion"]
            == (patched["metadata"]["resourceVersion"])
        )

        status, _ = await api.delete(f"{NODES}/n2")
        assert status == 200
        deleted = await events.next()
        assert deleted["type"] == "DELETED"
        assert only_row(deleted)["cells"][:3] == ["n2", "Ready", "worker"]
        assert len(only_row(deleted)["cells"]) == len(listed["columnDefinitions"])


@pytest.mark.parametrize("include", ["Object", "Metadata", "None", ""])
async def test_pod_watch_rows_follow_include_object(api: Api, include: str) -> None:
    params = {"resourceVersion": (await list_table(api, PODS))["metadata"]["resourceVersion"]}
    if include:
        params["includeObject"] = include
    async with watch(api, PODS, KUBECTL_ACCEPT, params) as events:
        await api.post(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
        )
        await api.post("/api/v1/namespaces/x/pods", pod("not-mine"))
        _, created = await api.post(PODS, pod("p1", {"app": "a"}, node="n1"))
        added = await events.next()
        row = only_row(added)
        assert row["cells"][:4] == ["p1", "0/1", "Pending", "0"]
        assert row["cells"][6] == "n1"
        if include == "Object":
            assert row["object"] == created
        elif include == "None":
            assert "object" in row and row["object"] is None
        else:
            assert row["object"]["kind"] == "PartialObjectMetadata"
            assert row["object"]["metadata"] == created["metadata"]

        _, running = await api.patch(f"{PODS}/p1/status", {"status": {"phase": "Running"}})
        modified = await events.next()
        assert modified["type"] == "MODIFIED" and modified["object"]["columnDefinitions"] is None
        assert only_row(modified)["cells"][:3] == ["p1", "0/1", "Running"]
        assert (
            modified["object"]["metadata"]["resourceVersion"]
            == (running["metadata"]["resourceVersion"])
        )


async def test_custom_resource_watch_uses_printer_columns(api: Api) -> None:
    columns = await install_cnr_crd(api)
    await api.post(CNRS, cnr("roll-a"))
    listed = await list_table(api, CNRS)
    assert [c["name"] for c in listed["columnDefinitions"]][1:] == [c["name"] for c in columns]
    rv = listed["metadata"]["resourceVersion"]
    params = {"resourceVersion": rv, "includeObject": "Object"}
    async with watch(api, CNRS, KUBECTL_ACCEPT, params) as events:
        _, created = await api.post(CNRS, cnr("roll-b", concurrency=3))
        added = await events.next()
        assert added["object"]["columnDefinitions"] == listed["columnDefinitions"]
        row = only_row(added)
        by_name = dict(
            zip([c["name"] for c in listed["columnDefinitions"]], row["cells"], strict=True)
        )
        assert by_name["Name"] == "roll-b"
        assert by_name["Node Group Name"] == "ng-roll-b"
        assert by_name["Method"] == "Drain" and by_name["Concurrency"] == 3
        assert by_name["Status"] is None and by_name["Cycled"] is None
        assert re.fullmatch(r"\d+s", by_name["Age"]), by_name
        assert row["object"] == created

        _, patched = await api.patch(
            f"{CNRS}/roll-b/status",
            {"status": {"phase": "Pending", "progress": {"total": 3, "cycled": 1}}},
        )
        modified = await events.next()
        assert modified["object"]["columnDefinitions"] is None
        by_name = dict(
            zip(
                [c["name"] for c in listed["columnDefinitions"]],
                only_row(modified)["cells"],
                strict=True,
            )
        )
        assert (by_name["Status"], by_name["Cycled"], by_name["Total"]) == ("Pending", 1, 3)
        assert (
            modified["object"]["metadata"]["resourceVersion"]
            == (patched["metadata"]["resourceVersion"])
        )
        assert only_row(modified)["object"]["status"]["phase"] == "Pending"


# ------------------------------------------------------------------------------------------
# Headers, bookmarks, watch-lists
# ------------------------------------------------------------------------------------------


async def test_watch_list_table_and_bookmarks(api: Api) -> None:
    for name in ("p1", "p2"):
        await api.post(PODS, pod(name))
    params = {
        "sendInitialEvents": "true",
        "allowWatchBookmarks": "true",
        "resourceVersionMatch": "NotOlderThan",
    }
    async with watch(api, PODS, TABLE, params) as events:
        first, second = await events.next(), await events.next()
        assert [first["type"], second["type"]] == ["ADDED", "ADDED"]
        assert first["object"]["columnDefinitions"] is not None
        assert second["object"]["columnDefinitions"] is None
        assert {only_row(first)["cells"][0], only_row(second)["cells"][0]} == {"p1", "p2"}

        end = await events.next()
        assert end["type"] == "BOOKMARK"
        table = end["object"]
        assert table["columnDefinitions"] is None
        row = only_row(end)
        # The bookmark's object is the resource's empty object: a row of empty cells.
        assert row["cells"][:3] == ["", "0/0", ""]
        assert len(row["cells"]) == len(first["object"]["columnDefinitions"])
        assert row["object"]["kind"] == "PartialObjectMetadata"
        meta = row["object"]["metadata"]
        assert meta["annotations"] == {INITIAL_EVENTS_END: "true"}
        assert table["metadata"] == {"resourceVersion": meta["resourceVersion"]}
        _, listed = await api.get(PODS)
        assert meta["resourceVersion"] == listed["metadata"]["resourceVersion"]

        periodic = await events.next()
        assert periodic["type"] == "BOOKMARK"
        assert "annotations" not in only_row(periodic)["object"]["metadata"]
        await api.post(PODS, pod("p3"))
        added = await events.next_change()
        assert only_row(added)["cells"][0] == "p3"
        assert added["object"]["columnDefinitions"] is None


async def test_a_bookmark_first_takes_the_headers(api: Api) -> None:
    _, listed = await api.get(NODES)
    params = {
        "resourceVersion": listed["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "includeObject": "Object",
    }
    async with watch(api, NODES, TABLE, params) as events:
        bookmark = await events.next()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["columnDefinitions"] is not None
        row = only_row(bookmark)
        assert row["cells"][:2] == ["", "Unknown"]
        assert row["object"]["kind"] == "Node" and row["object"]["apiVersion"] == "v1"
        await api.post(NODES, node("n1"))
        added = await events.next_change()
        assert added["object"]["columnDefinitions"] is None
        assert only_row(added)["cells"][0] == "n1"


async def test_error_events_stay_a_status(api: Api, server: SimServer) -> None:
    _, created = await api.post(NODES, node("n1"))
    server.faults.update("watch-expire=1@nodes")
    try:
        params = {"resourceVersion": created["metadata"]["resourceVersion"]}
        async with watch(api, NODES, KUBECTL_ACCEPT, params) as events:
            error = await events.next()
    finally:
        server.faults.update(None)
    assert error["type"] == "ERROR"
    assert error["object"]["kind"] == "Status" and error["object"]["code"] == 410


# ------------------------------------------------------------------------------------------
# Accept negotiation and options
# ------------------------------------------------------------------------------------------


async def test_v1beta1_table_watch(api: Api) -> None:
    _, listed = await api.get(NODES)
    params = {"resourceVersion": listed["metadata"]["resourceVersion"]}
    # Tables are not served as protobuf: that clause is passed over for the next one.
    accept = (
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,"
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    )
    async with watch(api, NODES, accept, params) as events:
        await api.post(NODES, node("n1"))
        table = (await events.next())["object"]
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1beta1"
    assert table["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"


@pytest.mark.parametrize(
    "accept",
    [
        "application/json;as=Table",  # no group and version: not a conversion kube knows
        "application/json;as=Table;v=v2;g=meta.k8s.io",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
    ],
)
async def test_unservable_table_clauses_fall_back_to_objects(api: Api, accept: str) -> None:
    _, listed = await api.get(NODES)
    params = {"resourceVersion": listed["metadata"]["resourceVersion"]}
    async with watch(api, NODES, accept, params) as events:
        _, created = await api.post(NODES, node("n1"))
        event = await events.next()
    assert event == {"type": "ADDED", "object": created}
    status, got = await api.get(NODES, headers={"Accept": accept})
    assert status == 200 and got["kind"] == "NodeList"


async def test_partial_object_metadata_watch(api: Api) -> None:
    _, listed = await api.get(NODES)
    params = {"resourceVersion": listed["metadata"]["resourceVersion"], "allowWatchBookmarks": "1"}
    accept = (
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,"
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    )
    async with watch(api, NODES, accept, params) as events:
        _, created = await api.post(NODES, node("n1", {"pool": "a"}))
        added = await events.next_change()
        bookmark = await events.next()
    assert added == {
        "type": "ADDED",
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": created["metadata"],
        },
    }
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["kind"] == "PartialObjectMetadata"
    assert set(bookmark["object"]["metadata"]) == {"resourceVersion"}


async def test_invalid_include_object_is_a_bad_request(api: Api) -> None:
    message = (
        "Unable to convert to Table as requested: includeObject: Invalid value: "
        "\"All\": must be 'Metadata', 'Object', 'None', or empty"
    )
    for params in ({"watch": "true", "includeObject": "All"}, {"includeObject": "All"}):
        status, body = await api.get(NODES, params=params, headers={"Accept": KUBECTL_ACCEPT})
        assert (status, body["reason"], body["message"]) == (400, "BadRequest", message)
    # Without a Table there are no table options to validate.
    status, _ = await api.get(NODES, params={"includeObject": "All"})
    assert status == 200


PARTIAL = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"


async def test_get_and_list_as_partial_object_metadata(api: Api) -> None:
    """What client-go's metadata informers read (the garbage collector's, for one): GET and
    LIST answer with metadata alone, each list item with its own kind and apiVersion."""
    _, created = await api.post(NODES, node("meta-1", {"a": "b"}))
    status, got = await api.get(f"{NODES}/meta-1", headers={"Accept": PARTIAL})
    assert status == 200
    assert got == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": created["metadata"],
    }
    status, listed = await api.get(NODES, params={"limit": "1"}, headers={"Accept": PARTIAL})
    assert status == 200
    assert (listed["kind"], listed["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert set(listed["metadata"]) >= {"resourceVersion"}
    [item] = listed["items"]
    assert (item["kind"], item["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert set(item) == {"kind", "apiVersion", "metadata"}
    # A shape the server cannot give falls back to the plain object.
    status, plain = await api.get(
        f"{NODES}/meta-1", headers={"Accept": "application/json;as=Foo;v=v1;g=meta.k8s.io"}
    )
    assert (status, plain["kind"]) == (200, "Node")


async def test_an_apply_that_creates_answers_201(api: Api) -> None:
    """kube's patch handler answers 201 when a server-side apply created the object, and 200
    when it changed an existing one."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "applied"}}
    params = {"fieldManager": "test"}
    for expected in (201, 200):
        status, obj = await api.call(
            "PATCH",
            f"{NODES}/applied",
            body,
            content_type="application/apply-patch+yaml",
            params=params,
        )
        assert (status, obj["metadata"]["name"]) == (expected, "applied")


# ------------------------------------------------------------------------------------------
# kubectl get -w
# ------------------------------------------------------------------------------------------

kubectl_only = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl is not installed"
)
COLUMN_GAP = re.compile(r" {3,}")


class KubectlWatch:
    """`kubectl get -w` as a subprocess whose output is read line by line as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def until(self, pattern: str, timeout: float = 20.0) -> str:
        """Read lines until one matches `pattern`; fail after `timeout` seconds."""
        assert self.proc.stdout is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise AssertionError(f"no line matching {pattern!r} in {self.lines!r}")
            try:
                raw = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            except TimeoutError:
                continue
            if not raw:
                err = b""
                if self.proc.stderr is not None:
                    err = await self.proc.stderr.read()
                raise AssertionError(f"kubectl ended: {self.lines!r} {err.decode()}")
            line = raw.decode().rstrip("\n")
            self.lines.append(line)
            if re.search(pattern, line):
                return line


@asynccontextmanager
async def kubectl_watch(kubeconfig: Path, *args: str) -> AsyncIterator[KubectlWatch]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "get",
        *args,
        "-w",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield KubectlWatch(proc)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


def assert_full_rows(lines: list[str], header: list[str], row: str) -> None:
    """One header, then only rows with every column, each matching `row`.

    kubectl prints an empty cell as nothing, so columns are not counted but spelled out: a row
    printed without the server's columns has only NAME and a client-side AGE (`<invalid>`).
    """
    assert COLUMN_GAP.split(lines[0].strip()) == header, lines
    for line in lines[1:]:
        assert "<invalid>" not in line, lines
        assert re.fullmatch(row, line.rstrip()), (row, line, lines)


@kubectl_only
@pytest.mark.kubectl
@pytest.mark.parametrize("flags", [(), ("--output-watch-events", "-o", "wide")])
async def test_kubectl_get_nodes_watch(
    api: Api, server: SimServer, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    await api.post(NODES, ready_node("n1"))
    prefix = r"^ADDED\s+" if flags else r"^"
    async with kubectl_watch(kubeconfig, "nodes", *flags) as kc:
        await kc.until(prefix + r"n1\s+Ready\s")
        await api.post(NODES, ready_node("n2"))
        await kc.until(prefix + r"n2\s+Ready\s+<none>\s")
        await api.patch(
            f"{NODES}/n2", {"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}}
        )
        modified = r"^MODIFIED\s+" if flags else r"^"
        await kc.until(modified + r"n2\s+Ready\s+worker\s")
        await api.delete(f"{NODES}/n2")
        if flags:
            await kc.until(r"^DELETED\s+n2\s")
    header = ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    row = r"n[12]\s+Ready\s+(<none>|worker)\s+\d+s\s+v1\.36\.0"
    if flags:
        header = ["EVENT", *header, "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE"]
        header += ["KERNEL-VERSION", "CONTAINER-RUNTIME"]
        row = r"(ADDED|MODIFIED|DELETED)\s+" + row
        row += r"\s+10\.0\.0\.9\s+<none>\s+Ubuntu 24\.04 LTS\s+<unknown>\s+<unknown>"
    assert len(kc.lines) >= 4
    assert_full_rows(kc.lines, header, row)


@kubectl_only
@pytest.mark.kubectl
async def test_kubectl_get_cnr_watch(api: Api, server: SimServer, tmp_path: Path) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    columns = await install_cnr_crd(api)
    await api.post(CNRS, cnr("roll-a"))
    async with kubectl_watch(kubeconfig, "cnr", "-n", "default") as kc:
        await kc.until(r"^roll-a\s+ng-roll-a\s+Drain\s+2\s")
        await api.patch(
            f"{CNRS}/roll-a/status",
            {"status": {"phase": "Pending", "progress": {"total": 3, "cycled": 1}}},
        )
        await kc.until(r"^roll-a\s+ng-roll-a\s+Drain\s+2\s+Pending\s+1\s+3\s")
        await api.post(CNRS, cnr("roll-b", concurrency=5))
        await kc.until(r"^roll-b\s+ng-roll-b\s+Drain\s+5\s")
    header = ["NAME"] + [c["name"].upper() for c in columns]
    assert_full_rows(
        kc.lines, header, r"roll-[ab]\s+ng-roll-[ab]\s+Drain\s+\d(\s+Pending\s+1\s+3)?\s+\d+s"
    )
