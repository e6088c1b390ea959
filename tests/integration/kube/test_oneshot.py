"""The one-shot error policy against a small real HTTP server on loopback: passing errors are
retried and said, final ones end the command in one line, also when a watch in the background
meets them; a broken kubeconfig is one line too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nodeops.kube import errors
from nodeops.kube.informer import Informer
from nodeops.kube.oneshot import (
    Kind,
    KubeconfigError,
    OneShotClient,
    check_kubeconfig,
    classify,
    describe,
    load_client,
    unattended,
)
from nodeops.kube.resources import NODES, PODS


class Server:
    """Answers each path with the next of its scripted (status, body) answers, then the last."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.calls: dict[str, int] = {}

    def answer(self, path: str, *answers: tuple[int, dict[str, Any]]) -> None:
        self.script[path] = list(answers)

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        self.calls[path] = self.calls.get(path, 0) + 1
        answers = self.script.get(path) or [(404, status(404, "NotFound", "not scripted"))]
        code, body = answers.pop(0) if len(answers) > 1 else answers[0]
        return web.json_response(body, status=code)


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    srv = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield srv, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1", "resourceVersion": "1"}}
UNAVAILABLE = (503, status(503, "ServiceUnavailable", "the server is shutting down"))


async def test_passing_errors_are_retried_and_said(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.answer("/api/v1/nodes/n1", UNAVAILABLE, UNAVAILABLE, (200, NODE))
    said: list[str] = []
    async with OneShotClient(url, qps=0, on_retry=said.append) as client:
        node = await client.get(NODES, "n1")
    assert node["metadata"]["name"] == "n1"
    assert srv.calls["/api/v1/nodes/n1"] == 3
    assert len(said) == 2 and said[0].startswith(
        "Error from server (ServiceUnavailable): the server is shutting down; retrying in "
    )


async def test_final_errors_are_not_retried(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.answer("/api/v1/nodes/n1", (403, status(403, "Forbidden", 'nodes "n1" is forbidden')))
    srv.answer("/api/v1/namespaces/d/pods/p/eviction", UNAVAILABLE, (201, {}))
    async with OneShotClient(url, qps=0) as client:
        with pytest.raises(errors.Forbidden) as info:
            await client.get(NODES, "n1")
        assert describe(info.value) == 'Error from server (Forbidden): nodes "n1" is forbidden'
        # A POST is never repeated by the client: the eviction's sender decides.
        client._eviction_version = "v1"
        with pytest.raises(errors.ServerError):
            await client.evict("p", "d")
    assert srv.calls["/api/v1/nodes/n1"] == 1
    assert srv.calls["/api/v1/namespaces/d/pods/p/eviction"] == 1


async def test_a_final_error_in_an_unattended_watch_ends_the_command(
    server: tuple[Server, str],
) -> None:
    srv, url = server
    srv.answer("/api/v1/pods", (403, status(403, "Forbidden", 'pods is forbidden: User "x"')))
    async with OneShotClient(url, qps=0) as client:
        pods = Informer(client, PODS)
        with unattended():
            pods.start()

        async def waits_for_the_pods() -> None:
            await pods.wait_synced()  # never: the list is refused

        try:
            with pytest.raises(errors.Forbidden):
                await asyncio.wait_for(client.run(waits_for_the_pods()), 20)
        finally:
            await pods.stop()


async def test_an_attended_error_is_the_callers_alone(server: tuple[Server, str]) -> None:
    _, url = server

    async def work(client: OneShotClient) -> str:
        try:
            await client.get(NODES, "gone")  # scripted nowhere: 404, which the caller handles
        except errors.NotFound:
            return "handled"
        return "unexpected"

    async with OneShotClient(url, qps=0) as client:
        assert await client.run(work(client)) == "handled"
        assert not client.failed.done()


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (errors.error_for(400, None), Kind.PERMANENT),
        (errors.error_for(401, None), Kind.PERMANENT),
        (errors.error_for(403, None), Kind.PERMANENT),
        (errors.error_for(404, None), Kind.PERMANENT),
        (errors.error_for(422, None), Kind.PERMANENT),
        (errors.error_for(429, None), Kind.TRANSIENT),
        (errors.error_for(500, None), Kind.TRANSIENT),
        (errors.error_for(503, None), Kind.TRANSIENT),
        (errors.ConnectionFailed("reset"), Kind.TRANSIENT),
        (errors.error_for(409, None), Kind.OTHER),
        (errors.error_for(410, None), Kind.OTHER),
    ],
)
def test_classification(exc: errors.KubeError, kind: Kind) -> None:
    assert classify(exc) is kind


def test_kubectls_lines() -> None:
    unauthorized = errors.error_for(401, status(401, "Unauthorized", "Unauthorized"))
    assert describe(unauthorized) == "error: You must be logged in to the server (Unauthorized)"
    refused = errors.ConnectionFailed("GET /api: Cannot connect to host: Connect call failed")
    assert describe(refused, "https://10.0.0.1:6443") == (
        "The connection to the server 10.0.0.1:6443 was refused - did you specify the right "
        "host or port?"
    )


async def test_kubeconfig_problems_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(KubeconfigError, match=f"^stat {missing}: no such file or directory$"):
        check_kubeconfig(str(missing))
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(KubeconfigError) as info:
        await load_client(str(empty), None)
    assert str(info.value) == "invalid configuration: no configuration has been provided"
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
    )
    with pytest.raises(KubeconfigError, match=r'^context "nope" does not exist$'):
        await load_client(str(config), "nope")
    client = await load_client(str(config), None, cls=OneShotClient)
    assert isinstance(client, OneShotClient)
    await client.close()
