"""The floor of a drain on a given control plane: how soon a node can be empty at all.

    python -m bench.ideal_drain --kubeconfig K NODE

A drainer with nothing of its own to slow it: it cordons the node, lists its pods (leaving out
DaemonSet and mirror pods, as `kubectl drain --ignore-daemonsets` does), and evicts them as
fast as their PodDisruptionBudgets allow, with no client-side rate limit. Pods no budget covers
are evicted all at once. Pods of one budget are evicted one after another while the budget, as
last seen by a watch, still allows a disruption: concurrent evictions against one budget
conflict on its status, and kube-apiserver retries those only after 500 ms. An eviction the
control plane refuses (429) is sent again on the budget's next change, not after a pause. The
drain ends when a watch of the node's pods has seen every evicted pod deleted.

What is left is the control plane's own reaction: the ReplicaSet controller replacing the
evicted pods, the scheduler binding them, the kubelets starting them and the disruption
controller counting them healthy again. It prints one JSON line: its requests (each watch
counts once), evictions sent and refused. It reads the kubeconfig as `nodeops sim attach` does
(a token or a client certificate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from nodeops.sim.attach.kubeconfig import Target, load_target

Obj = dict[str, Any]
AGENT = "ideal-drain/1"


def _matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector as kube-apiserver evaluates it; an empty one matches every pod."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or ()
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _evictable(pod: Obj) -> bool:
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ()):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class Drainer:
    def __init__(self, session: aiohttp.ClientSession, server: str, node: str) -> None:
        self.session = session
        self.server = server
        self.node = node
        self.requests: Counter[str] = Counter()
        self.evictions = 0
        self.refused = 0
        self.pdbs: dict[tuple[str, str], Obj] = {}
        self.pdb_changes = 0
        self.unconfirmed: dict[tuple[str, str], set[str]] = {}
        self.ever_disrupted: dict[tuple[str, str], set[str]] = {}
        self.changed = asyncio.Condition()
        self.remaining: set[str] = set()
        self.emptied = asyncio.Event()
        self.started = time.perf_counter()
        self.last_eviction = 0.0

    async def request(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        self.requests[method] += 1
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with self.session.request(
            method, self.server + path, json=body, headers=headers
        ) as resp:
            payload = await resp.read()
            return resp.status, (json.loads(payload) if payload else {})

    async def watch(
        self, path: str, rv: str, on_event: Callable[[str, Obj], Awaitable[None]]
    ) -> None:
        """Every event after `rv` until cancelled; the budget and pods watched here outlive no
        drain long enough to meet a compaction, so a 410 is an error, not a relist."""
        while True:
            self.requests["WATCH"] += 1
            url = f"{self.server}{path}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"watch {path}: {resp.status} {await resp.text()}")
                async for line in resp.content:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        raise RuntimeError(f"watch {path}: {event['object']}")
                    rv = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        await on_event(event["type"], event["object"])

    # -- budgets ---------------------------------------------------------------------------

    async def on_pdb(self, kind: str, pdb: Obj) -> None:
        key = (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
        if kind == "DELETED":
            self.pdbs.pop(key, None)
        else:
            self.pdbs[key] = pdb
            disrupted = (pdb.get("status") or {}).get("disruptedPods") or {}
            self.unconfirmed.get(key, set()).difference_update(disrupted)
            self.ever_disrupted.setdefault(key, set()).update(disrupted)
        async with self.changed:
            self.pdb_changes += 1
            self.changed.notify_all()

    def budget(self, key: tuple[str, str]) -> int:
        """Disruptions the budget allows now: its last status, less the evictions it has not
        shown yet (an eviction writes the pod into `disruptedPods` before it answers)."""
        pdb = self.pdbs.get(key)
        if pdb is None:
            return sys.maxsize  # deleted meanwhile: nothing holds its pods any more
        status = pdb.get("status") or {}
        if status.get("observedGeneration") != pdb["metadata"].get("generation"):
            return 0
        allowed = int(status.get("disruptionsAllowed") or 0)
        return allowed - len(self.unconfirmed.get(key, ()))

    # -- pods ------------------------------------------------------------------------------

    async def on_pod(self, kind: str, pod: Obj) -> None:
        if kind == "DELETED":
            self.remaining.discard(pod["metadata"]["uid"])
            if not self.remaining:
                self.emptied.set()

    async def evict(self, pod: Obj) -> int:
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "deleteOptions": {"preconditions": {"uid": meta["uid"]}},
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
        status, answer = await self.request("POST", path, body)
        if status in (200, 201):
            self.evictions += 1
            self.last_eviction = time.perf_counter() - self.started
        elif status == 429:
            self.refused += 1
        elif status not in (404, 409):  # gone already, or replaced under its name
            raise RuntimeError(f"evicting {meta['namespace']}/{meta['name']}: {status} {answer}")
        return status

    async def _next_change(self, seen: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.pdb_changes != seen)

    async def evict_within(self, key: tuple[str, str], pods: list[Obj]) -> None:
        pending = deque(pods)
        self.unconfirmed[key] = set()
        while pending:
            async with self.changed:
                await self.changed.wait_for(lambda: self.budget(key) > 0)
                seen = self.pdb_changes
            pod = pending[0]
            status = await self.evict(pod)
            if status == 429:
                await self._next_change(seen)
                continue
            pending.popleft()
            name = pod["metadata"]["name"]
            if status in (200, 201) and name not in self.ever_disrupted.get(key, ()):
                self.unconfirmed[key].add(name)

    async def drain(self) -> None:
        node_path = f"/api/v1/nodes/{quote(self.node)}"
        status, answer = await self.request("PATCH", node_path, {"spec": {"unschedulable": True}})
        if status != 200:
            raise RuntimeError(f"cordoning {self.node}: {status} {answer}")
        field = quote(f"spec.nodeName={self.node}")
        pods_path = f"/api/v1/pods?fieldSelector={field}"
        status, listed = await self.request("GET", pods_path)
        if status != 200:
            raise RuntimeError(f"listing the pods of {self.node}: {status} {listed}")
        pods = [p for p in listed["items"] if _evictable(p)]
        self.remaining = {p["metadata"]["uid"] for p in pods}
        watches: list[asyncio.Task[None]] = []
        watches.append(
            asyncio.create_task(
                self.watch(pods_path, listed["metadata"]["resourceVersion"], self.on_pod)
            )
        )
        groups: dict[tuple[str, str] | None, list[Obj]] = {}
        for ns in sorted({p["metadata"]["namespace"] for p in pods}):
            pdb_path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets?"
            status, pdbs = await self.request("GET", pdb_path)
            if status != 200:
                raise RuntimeError(f"listing budgets in {ns}: {status} {pdbs}")
            for pdb in pdbs["items"]:
                self.pdbs[(ns, pdb["metadata"]["name"])] = pdb
            watches.append(
                asyncio.create_task(
                    self.watch(pdb_path, pdbs["metadata"]["resourceVersion"], self.on_pdb)
                )
            )
        for pod in pods:
            meta = pod["metadata"]
            covering = [
                key
                for key, pdb in self.pdbs.items()
                if key[0] == meta["namespace"]
                and _matches(pdb["spec"].get("selector") or {}, meta.get("labels") or {})
            ]
            groups.setdefault(covering[0] if covering else None, []).append(pod)
        try:
            if not self.remaining:
                return
            work: list[Awaitable[object]] = [self.evict(p) for p in groups.pop(None, [])]
            work += [self.evict_within(key, group) for key, group in groups.items() if key]
            await asyncio.gather(*work)
            await self.emptied.wait()
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)


async def drain(target: Target, node: str, timeout: float) -> Obj:
    """Drain `node`; what it took: requests, evictions sent and refused, when the last
    eviction passed and when the node was empty (seconds from the start)."""
    headers = {"User-Agent": AGENT}
    if target.token:
        headers["Authorization"] = f"Bearer {target.token}"
    connector = aiohttp.TCPConnector(ssl=target.ssl_context or False, limit=0)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        drainer = Drainer(session, target.server, node)
        await asyncio.wait_for(drainer.drain(), timeout)
    return {
        "last_eviction_seconds": round(drainer.last_eviction, 3),
        "emptied_seconds": round(time.perf_counter() - drainer.started, 3),
        "requests": sum(drainer.requests.values()),
        "requests_by_verb": dict(sorted(drainer.requests.items())),
        "evictions": drainer.evictions,
        "evictions_refused": drainer.refused,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--context")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("node")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    out = asyncio.run(drain(load_target(args.kubeconfig, args.context), args.node, args.timeout))
    out["seconds"] = round(time.perf_counter() - started, 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
