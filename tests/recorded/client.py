"""The one HTTP client of the recorded cases, for a real API server and the simulated one alike.

It hands back what a recording keeps: the status code, the decoded body and the `Warning`
headers (kubectl prints those), and waits on watches, never on sleeps.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

Obj = dict[str, Any]

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@dataclass
class Reply:
    code: int
    body: Any
    warnings: list[str] = field(default_factory=list)

    def status(self) -> Obj:
        """The parts of an answer a client acts on: code, reason, message, causes, warnings."""
        out: Obj = {"code": self.code}
        body = self.body if isinstance(self.body, dict) else {}
        if body.get("kind") == "Status":
            out["reason"] = body.get("reason")
            out["message"] = body.get("message")
            causes = (body.get("details") or {}).get("causes")
            if causes:
                out["causes"] = causes
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def _warnings(headers: Any) -> list[str]:
    """`Warning: 299 - "text"` headers, as their texts."""
    texts = []
    for value in headers.getall("Warning", []):
        text = (value.split(" ", 2)[-1] if value.startswith("299") else value).strip()
        if len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1].replace('\\"', '"')
        texts.append(text)
    return texts


class Http:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base: str,
        token: str | None,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.session = session
        self.base = base.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        accept: str | None = None,
    ) -> Reply:
        headers = dict(self.headers)
        if accept:
            headers["Accept"] = accept
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.base + path, data=data, params=params, headers=headers, ssl=self.ssl
        ) as resp:
            raw = await resp.read()
            try:
                decoded: Any = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                decoded = raw.decode(errors="replace")
            return Reply(resp.status, decoded, _warnings(resp.headers))

    async def patch(
        self, path: str, body: Any, kind: str = "merge", params: Mapping[str, str] | None = None
    ) -> Reply:
        return await self.call("PATCH", path, body, content_type=PATCH_TYPES[kind], params=params)

    async def must(self, method: str, path: str, body: Any = None, **kw: Any) -> Obj:
        """A request the case needs to succeed to go on; anything else stops the case."""
        reply = await self.call(method, path, body, **kw)
        if reply.code >= 300:
            raise RuntimeError(f"{method} {path}: {reply.code} {reply.body}")
        return reply.body if isinstance(reply.body, dict) else {}

    async def events(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        count: int,
        timeout: float,
        accept: str | None = None,
        after: Callable[[], Any] | None = None,
    ) -> list[Obj]:
        """Up to `count` watch events from `path`; `after` (a coroutine function) runs once the
        watch is open, so what it changes is seen."""
        headers = dict(self.headers)
        if accept:
            headers["Accept"] = accept
        events: list[Obj] = []
        q = {"watch": "true", **params}

        async def read() -> None:
            async with self.session.get(
                self.base + path, params=q, headers=headers, ssl=self.ssl
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"watch {path}: {resp.status} {await resp.text()}")
                opened.set()
                async for line in resp.content:
                    if line.strip():
                        events.append(orjson.loads(line))
                        if len(events) >= count:
                            return

        opened = asyncio.Event()
        reader = asyncio.create_task(read())
        try:
            if after is not None:
                await asyncio.wait_for(opened.wait(), timeout)
                await after()
            await asyncio.wait_for(asyncio.shield(reader), timeout)
        except TimeoutError:
            pass
        finally:
            reader.cancel()
        return events

    async def wait(
        self,
        collection: str,
        name: str,
        condition: Callable[[Obj | None], bool],
        *,
        timeout: float,
    ) -> Obj | None:
        """The object `name` of `collection` once `condition` holds for it (None: it is gone),
        watched from its current state; raises TimeoutError if it never does."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            current = await self.call("GET", f"{collection}/{name}")
            obj = current.body if current.code == 200 else None
            if condition(obj):
                return obj
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError(f"{collection}/{name}: condition not met in {timeout}s")
            rv = (obj or {}).get("metadata", {}).get("resourceVersion")
            params = {"fieldSelector": f"metadata.name={name}", "timeoutSeconds": "30"}
            if rv:
                params["resourceVersion"] = rv
            seen = await self.events(collection, params, count=1, timeout=min(remaining, 30))
            for event in seen:
                if event.get("type") == "DELETED" and condition(None):
                    return None
