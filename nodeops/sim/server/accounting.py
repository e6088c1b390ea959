"""Request accounting and the `/sim/` control routes of the simulated API server.

Benchmarks compare clients by the load they put on the apiserver ("how many requests did
`kubectl drain` make against `nodeops drain`"), so the server counts every Kubernetes request by
verb, resource, status code and client. The counters are read, reset and the fault spec is
switched over HTTP, under `/sim/`, a prefix no Kubernetes client ever requests, so a benchmark
or an integration test can drive the server the same way whether it runs in-process or not.

The `/sim/` routes never call `RequestStats.record`: reading the counters must not change them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import orjson
from aiohttp import web

from nodeops.sim.server.faults import FaultInjector, FaultSpecError

SIM_PREFIX: Final = "/sim"
UNKNOWN_AGENT: Final = "unknown"

# Distinct User-Agent strings are few (one per client build); the bound only guards against noise.
_AGENT_CACHE_LIMIT: Final = 1024


def agent_prefix(user_agent: str) -> str:
    """The product token of a User-Agent: `kubectl` for `kubectl/v1.30.1 (linux/amd64) ...`.

    Versions and platforms differ between machines and runs; grouping by product keeps a
    benchmark's numbers comparable across them.
    """
    product = user_agent.strip().split("/", 1)[0].split(" ", 1)[0]
    return product or UNKNOWN_AGENT


class RequestStats:
    """Counters per (verb, resource, code, client), aggregated only when someone reads them.

    `record` runs once per request, so it does one dict lookup and two additions; all grouping
    work is deferred to `snapshot`, which benchmarks call a handful of times per run.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cells: dict[tuple[str, str, int, str], list[float]] = {}
        self._agents: dict[str, str] = {}
        self._since = clock()

    def record(self, verb: str, resource: str, code: int, user_agent: str, seconds: float) -> None:
        agent = self._agents.get(user_agent)
        if agent is None:
            if len(self._agents) >= _AGENT_CACHE_LIMIT:
                self._agents.clear()
            agent = self._agents[user_agent] = agent_prefix(user_agent)
        key = (verb, resource, code, agent)
        cell = self._cells.get(key)
        if cell is None:
            self._cells[key] = [1, seconds]
        else:
            cell[0] += 1
            cell[1] += seconds

    def reset(self) -> None:
        self._cells = {}
        self._since = self._clock()

    def snapshot(self) -> dict[str, Any]:
        """Totals and breakdowns; every bucket is `{"requests": n, "seconds": latency sum}`.

        Verb and resource combine as `verb/resource` (`create/pods/eviction`), the way fault
        targets are written, so a count read here can be turned into a fault target directly.
        Per client, the verb/resource breakdown is repeated, because comparing two clients'
        request mix is what the numbers are for.
        """
        total = _Bucket()
        by_verb: dict[str, _Bucket] = {}
        by_resource: dict[str, _Bucket] = {}
        by_pair: dict[str, _Bucket] = {}
        by_code: dict[str, _Bucket] = {}
        by_agent: dict[str, _Bucket] = {}
        agent_pairs: dict[str, dict[str, _Bucket]] = {}
        for (verb, resource, code, agent), (n, secs) in self._cells.items():
            pair = f"{verb}/{resource}"
            count = int(n)
            total.add(count, secs)
            _bucket(by_verb, verb).add(count, secs)
            _bucket(by_resource, resource).add(count, secs)
            _bucket(by_pair, pair).add(count, secs)
            _bucket(by_code, str(code)).add(count, secs)
            _bucket(by_agent, agent).add(count, secs)
            _bucket(agent_pairs.setdefault(agent, {}), pair).add(count, secs)
        agents: dict[str, Any] = {}
        for agent, bucket in sorted(by_agent.items()):
            agents[agent] = bucket.as_dict()
            agents[agent]["by_verb_resource"] = _dump(agent_pairs[agent])
        return {
            "elapsed_seconds": self._clock() - self._since,
            "total": total.as_dict(),
            "by_verb": _dump(by_verb),
            "by_resource": _dump(by_resource),
            "by_verb_resource": _dump(by_pair),
            "by_code": _dump(by_code),
            "by_agent": agents,
        }


class _Bucket:
    __slots__ = ("requests", "seconds")

    def __init__(self) -> None:
        self.requests = 0
        self.seconds = 0.0

    def add(self, requests: int, seconds: float) -> None:
        self.requests += requests
        self.seconds += seconds

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "seconds": self.seconds}


def _bucket(buckets: dict[str, _Bucket], key: str) -> _Bucket:
    bucket = buckets.get(key)
    if bucket is None:
        bucket = buckets[key] = _Bucket()
    return bucket


def _dump(buckets: dict[str, _Bucket]) -> dict[str, dict[str, Any]]:
    return {key: buckets[key].as_dict() for key in sorted(buckets)}


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _bad_request(message: str) -> web.Response:
    return _json({"message": message}, status=400)


def stats_routes(stats: RequestStats, faults: FaultInjector) -> list[web.RouteDef]:
    """Routes for the server's application; they hold no state beyond the two objects given.

    - `GET /sim/requests`: the `RequestStats.snapshot()`.
    - `DELETE /sim/requests`: the snapshot just before resetting, so a benchmark reads and clears
      in one request without losing anything recorded in between.
    - `GET /sim/faults`: current spec (text and dict form), seed and counts.
    - `PUT /sim/faults`: replace the spec. A text body is the text grammar; a JSON body is a
      string (text grammar), a list (dict form), or `{"spec": <either>, "seed": <int>}`.
      Answers like `GET`, or 400 `{"message": ...}` leaving the old spec in force.
    """

    async def get_requests(request: web.Request) -> web.Response:
        return _json(stats.snapshot())

    async def delete_requests(request: web.Request) -> web.Response:
        snapshot = stats.snapshot()
        stats.reset()
        return _json(snapshot)

    async def get_faults(request: web.Request) -> web.Response:
        return _json(faults.describe())

    async def put_faults(request: web.Request) -> web.Response:
        body = await request.read()
        spec: Any = body.decode("utf-8", errors="replace")
        seed: Any = None
        if request.content_type == "application/json":
            try:
                spec = orjson.loads(body) if body.strip() else None
            except orjson.JSONDecodeError as e:
                return _bad_request(f"invalid JSON: {e}")
            if isinstance(spec, dict):
                unknown = sorted(set(spec) - {"spec", "seed"})
                if unknown:
                    return _bad_request(f"unknown keys {unknown}; expected 'spec' and 'seed'")
                seed = spec.get("seed")
                spec = spec.get("spec")
            if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
                return _bad_request(f"seed must be an integer, got {seed!r}")
            if spec is not None and not isinstance(spec, str | list):
                return _bad_request("spec must be a string or a list of clauses")
        try:
            faults.update(spec, seed=seed)
        except FaultSpecError as e:
            return _bad_request(str(e))
        return _json(faults.describe())

    return [
        web.get(f"{SIM_PREFIX}/requests", get_requests, allow_head=False),
        web.delete(f"{SIM_PREFIX}/requests", delete_requests),
        web.get(f"{SIM_PREFIX}/faults", get_faults, allow_head=False),
        web.put(f"{SIM_PREFIX}/faults", put_faults),
    ]
