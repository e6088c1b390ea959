"""Events are never dropped silently: each one not recorded is counted by why, and logged."""

from __future__ import annotations

from nodeops.kube import NORMAL, Client, EventRecorder
from nodeops.kube.resources import EVENTS
from nodeops.sim.server.app import SimServer
from tests.integration.kube.support import sample


def _dropped(reason: str) -> float:
    return sample("nodeops_events_dropped_total", reason=reason)


async def test_events_the_queue_or_the_server_refuse_are_counted(
    client: Client, sim: SimServer
) -> None:
    recorder = EventRecorder(client, "nodeops-test", "here", queue_size=1)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "uid": "u1"}}
    elsewhere = {**cm, "metadata": {**cm["metadata"], "namespace": "no-such-namespace"}}
    full, refused = _dropped("queue_full"), _dropped("api_error")
    recorder.event(elsewhere, NORMAL, "First", "Test", "queued")
    recorder.event(cm, NORMAL, "Second", "Test", "no room left: dropped")
    assert _dropped("queue_full") == full + 1
    recorder.start()
    try:
        assert await recorder.flush(10)
        # The first was sent, and refused: its namespace does not exist.
        assert _dropped("api_error") == refused + 1
        recorder.event(cm, NORMAL, "Third", "Test", "recorded")
        assert await recorder.flush(10)
    finally:
        await recorder.stop()
    items, _ = await client.list(EVENTS, "default")
    assert [e["reason"] for e in items] == ["Third"]
    assert recorder.dropped == 2
