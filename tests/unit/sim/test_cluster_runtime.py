"""Work queue semantics and informer cache bookkeeping, without a server."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeops.sim.clock import Clock
from nodeops.sim.cluster.apiclient import PODS, ApiClient
from nodeops.sim.cluster.informer import Informer, slim_pod
from nodeops.sim.cluster.runtime import Controller, WorkQueue


async def test_queue_deduplicates_and_requeues_keys_added_while_processing() -> None:
    q: WorkQueue[str] = WorkQueue(Clock(1.0))
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    key = await q.get()
    assert key == "a"
    q.add("a")  # while "a" is being processed
    assert len(q) == 1
    q.done("a")
    assert len(q) == 2
    assert await q.get() == "b"
    assert await q.get() == "a"


async def test_queue_add_after_uses_the_simulated_clock() -> None:
    q: WorkQueue[str] = WorkQueue(Clock(1000.0))
    q.add_after("x", 20)  # 20 ms of wall time
    q.add_after("x", 60)  # a later timer does not replace an earlier one
    assert len(q) == 0
    assert await asyncio.wait_for(q.get(), 1.0) == "x"
    q.close()


async def test_controller_retries_failures_with_backoff() -> None:
    class Flaky(Controller[str]):
        name = "flaky"

        def __init__(self) -> None:
            super().__init__(Clock(1.0), workers=1)
            self.calls = 0
            self.done = asyncio.Event()

        async def reconcile(self, key: str) -> float | None:
            self.calls += 1
            if self.calls < 3:
                raise RuntimeError("boom")
            self.done.set()
            return None

    c = Flaky()
    c.queue.add("k")
    task = asyncio.create_task(c.run())
    await asyncio.wait_for(c.done.wait(), 2.0)
    assert c.calls == 3
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _pod(name: str, rv: str, node: str = "n1", owner: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "ownerReferences": [{"uid": owner, "controller": True}],
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "env": [{"name": "E"}]}]},
    }


def test_informer_replace_emits_the_difference_and_keeps_indexes() -> None:
    inf = Informer(ApiClient("http://127.0.0.1:1"), PODS)
    inf.add_index("node", lambda o: [o["spec"]["nodeName"]])
    events: list[tuple[str | None, str | None]] = []

    def rv(obj: dict[str, Any] | None) -> str | None:
        return None if obj is None else str(obj["metadata"]["resourceVersion"])

    def handler(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        events.append((rv(old), rv(new)))

    inf.add_handler(handler)
    inf._replace([_pod("a", "1"), _pod("b", "2")])
    assert events == [(None, "1"), (None, "2")]
    assert "managedFields" not in inf.get("ns", "a")["metadata"]  # type: ignore[index]
    assert inf.get("ns", "a")["kind"] == "Pod"  # type: ignore[index]
    events.clear()
    inf._replace([_pod("a", "1"), _pod("c", "5", node="n2")])
    assert sorted(events, key=str) == sorted([("2", None), (None, "5")], key=str)
    assert {o["metadata"]["name"] for o in inf.by_index("node", "n1")} == {"a"}
    assert {o["metadata"]["name"] for o in inf.by_index("node", "n2")} == {"c"}
    inf._upsert(_pod("a", "6", node="n2"))
    assert inf.by_index("node", "n1") == []
    inf._delete(_pod("c", "7", node="n2"))
    assert [o["metadata"]["name"] for o in inf.by_index("node", "n2")] == ["a"]


def test_slim_pod_keeps_what_the_loops_read() -> None:
    pod = _pod("a", "1")
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    pod["spec"]["volumes"] = [{"name": "v"}]
    pod["status"] = {"containerStatuses": [{"name": "c", "ready": True, "imageID": "x"}]}
    slim = slim_pod(pod)
    assert slim["spec"] == {
        "nodeName": "n1",
        "containers": [{"name": "c"}],
        "tolerations": [{"operator": "Exists"}],
    }
    assert slim["status"]["containerStatuses"] == [{"name": "c", "ready": True}]
