"""Health and readiness probes in controller-runtime's format, with pluggable checks.

`/healthz` and `/readyz` answer `200 ok` when every check passes, and `500` with one line per
check (`[+]name ok`, `[-]name failed: reason withheld`) and `healthz check failed` otherwise;
`?verbose` lists the checks on success too, `?exclude=name` leaves one out, and `/readyz/<name>`
runs one. Reasons stay out of the HTTP answer (probes are often reachable from outside) and go to
the log instead, as controller-runtime does.

A check is a plain function returning None when healthy, or a short reason when not: it runs on
every probe, so it reads state the manager already keeps rather than calling the API server.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

Check = Callable[[], str | None]


class Checks:
    """A named set of checks behind one probe path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        if not name or "/" in name:
            raise ValueError(f"a check name is a non-empty word without '/', not {name!r}")
        if name in self._checks:
            raise ValueError(f"a {self.path} check named {name!r} is already registered")
        self._checks[name] = check

    def names(self) -> list[str]:
        return list(self._checks)

    def failures(self, exclude: frozenset[str] = frozenset()) -> dict[str, str]:
        """The failing checks and their reasons (a check that raises fails with its error)."""
        failed: dict[str, str] = {}
        for name, check in self._checks.items():
            if name in exclude:
                continue
            reason = _run(check)
            if reason is not None:
                failed[name] = reason
        return failed

    def register(self, app: web.Application) -> None:
        app.router.add_get(self.path, self._handle_all)
        app.router.add_get(self.path + "/{name}", self._handle_one)

    async def _handle_all(self, request: web.Request) -> web.Response:
        exclude = frozenset(request.query.getall("exclude", []))
        verbose = "verbose" in request.query
        lines = []
        failed = False
        for name, check in self._checks.items():
            if name in exclude:
                continue
            reason = _run(check)
            if reason is None:
                lines.append(f"[+]{name} ok")
            else:
                failed = True
                lines.append(f"[-]{name} failed: reason withheld")
                log.info("probe check failed", probe=self.path, check=name, reason=reason)
        if failed:
            lines.append(f"{self.path.strip('/')} check failed")
            return _text("\n".join(lines) + "\n", 500)
        if verbose:
            lines.append(f"{self.path.strip('/')} check passed")
            return _text("\n".join(lines) + "\n", 200)
        return _text("ok", 200)

    async def _handle_one(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        check = self._checks.get(name)
        if check is None:
            return _text(f"no such check: {name}\n", 404)
        reason = _run(check)
        if reason is None:
            return _text("ok", 200)
        log.info("probe check failed", probe=self.path, check=name, reason=reason)
        return _text(f"internal server error: {name} failed: reason withheld\n", 500)


def _run(check: Check) -> str | None:
    try:
        return check()
    except Exception as exc:  # a broken check is a failing check, not a broken probe server
        return f"check raised {type(exc).__name__}: {exc}"


def _text(body: str, status: int) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain", charset="utf-8")
