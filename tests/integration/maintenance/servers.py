"""Small real HTTP servers on loopback standing in for Slack, Prometheus and Keystone/Kubernikus."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Recorder:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Answers to give, in order, before the default one (status, body).
    scripted: list[tuple[int, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    def texts(self) -> list[str]:
        return [r["json"].get("text", "") for r in self.requests if isinstance(r.get("json"), dict)]


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _record(rec: Recorder, request: web.Request) -> dict[str, Any]:
    body = await request.read()
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    entry = {
        "path": request.path,
        "query": dict(request.query),
        "headers": dict(request.headers),
        "json": parsed,
        "body": body.decode(errors="replace"),
    }
    rec.requests.append(entry)
    return entry


def _scripted(rec: Recorder) -> web.Response | None:
    if rec.scripted:
        status, body = rec.scripted.pop(0)
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.json_response(body, status=status)
    return None


@contextlib.asynccontextmanager
async def slack_server() -> AsyncIterator[Recorder]:
    """Webhooks (`/hook/...` answers `ok`) and the Web API's chat.postMessage."""
    rec = Recorder()
    counter = {"ts": 0}

    async def hook(request: web.Request) -> web.Response:
        await _record(rec, request)
        return _scripted(rec) or web.Response(text="ok")

    async def post_message(request: web.Request) -> web.Response:
        entry = await _record(rec, request)
        scripted = _scripted(rec)
        if scripted is not None:
            return scripted
        if request.headers.get("Authorization") != "Bearer token":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        counter["ts"] += 1
        ts = f"1700000000.{counter['ts']:06d}"
        entry["ts"] = ts
        return web.json_response({"ok": True, "ts": ts, "channel": "C1"})

    app = web.Application()
    app.router.add_post("/hook/{name}", hook)
    app.router.add_post("/api/chat.postMessage", post_message)
    async with serve(app) as url:
        rec.url = url
        yield rec


@contextlib.asynccontextmanager
async def prometheus_server() -> AsyncIterator[Recorder]:
    """`/api/v1/query` answers `state["value"]` (one sample); `/api/v1/alerts` `state["alerts"]`."""
    rec = Recorder(state={"value": "1", "alerts": []})

    async def query(request: web.Request) -> web.Response:
        await _record(rec, request)
        scripted = _scripted(rec)
        if scripted is not None:
            return scripted
        samples = rec.state.get("samples")
        if samples is None:
            samples = [{"metric": {}, "value": [1700000000.0, rec.state["value"]]}]
        return web.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": samples}}
        )

    async def alerts(request: web.Request) -> web.Response:
        await _record(rec, request)
        return _scripted(rec) or web.json_response(
            {"status": "success", "data": {"alerts": rec.state["alerts"]}}
        )

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    app.router.add_get("/api/v1/alerts", alerts)
    async with serve(app) as url:
        rec.url = url
        yield rec


@contextlib.asynccontextmanager
async def kubernikus_server() -> AsyncIterator[Recorder]:
    """Keystone's `/v3/auth/tokens` and Kubernikus' `/api/v1/clusters/<name>`."""
    rec = Recorder(state={"pools": [2, 1], "password": "pw"})

    async def tokens(request: web.Request) -> web.Response:
        entry = await _record(rec, request)
        password = entry["json"]["auth"]["identity"]["password"]["user"]["password"]
        if password != rec.state["password"]:
            return web.json_response({"error": {"code": 401}}, status=401)
        return web.json_response(
            {"token": {"expires_at": "2099-01-01T00:00:00.000000Z"}},
            status=201,
            headers={"X-Subject-Token": "tok-1"},
        )

    async def cluster(request: web.Request) -> web.Response:
        await _record(rec, request)
        if request.headers.get("x-auth-token") != "tok-1":
            return web.json_response({"message": "unauthorized"}, status=401)
        pools = [{"name": f"p{i}", "size": n} for i, n in enumerate(rec.state["pools"])]
        return web.json_response({"name": request.match_info["name"], "spec": {"nodePools": pools}})

    app = web.Application()
    app.router.add_post("/v3/auth/tokens", tokens)
    app.router.add_get("/api/v1/clusters/{name}", cluster)
    async with serve(app) as url:
        rec.url = url
        yield rec
