"""The read-only HTTP API and dashboard: `/api/v1/info` (every node's explanation as JSON,
the reference's shape), `/api/v1/info/<node>`, and `/static/` (the dashboard page)."""

from __future__ import annotations

import asyncio
from importlib.resources import files

from aiohttp import web

from nodeops.controllers.maintenance.info import InfoStore
from nodeops.controllers.maintenance.source import ConfigSource

DASHBOARD = "dashboard.html"


def build_app(info: InfoStore, source: ConfigSource | None = None) -> web.Application:
    page = files("nodeops.controllers.maintenance.static").joinpath(DASHBOARD).read_bytes()

    async def all_info(_: web.Request) -> web.Response:
        return web.json_response(info.all())

    async def one(request: web.Request) -> web.Response:
        item = info.get(request.match_info["node"])
        if item is None:
            return web.json_response({"error": "node not known (yet)"}, status=404)
        return web.json_response(item)

    async def config(_: web.Request) -> web.Response:
        if source is None:
            return web.json_response({})
        cfg = source.current
        return web.json_response(
            {
                "file": cfg.source,
                "labelFilter": cfg.label_filter,
                "profiles": sorted(cfg.profiles),
                "lastError": source.last_error or "",
            }
        )

    async def dashboard(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    async def root(_: web.Request) -> web.Response:
        raise web.HTTPFound("/static/")

    app = web.Application()
    app.router.add_get("/api/v1/info", all_info)
    app.router.add_get("/api/v1/info/{node}", one)
    app.router.add_get("/api/v1/config", config)
    app.router.add_get("/static/", dashboard)
    app.router.add_get("/static", root)
    app.router.add_get("/", root)
    return app


async def serve(app: web.Application, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve until `stop` (a manager runnable: only the leader, which has the explanations)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
