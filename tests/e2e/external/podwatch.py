"""Pods seen as the API server reports every change: `kubectl get pods -w -o json
--output-watch-events` in a thread, each event applied to a local copy in resourceVersion order.

A check run on every event sees each state the pods passed through, so an invariant (a budget
never exceeded, a node out of its load balancer before its first pod stops) is judged on all of
them, not on a few samples.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Pod = dict[str, Any]
Pods = dict[str, Pod]


def ready(pod: Pod) -> bool:
    """Ready and not being deleted: what a PodDisruptionBudget counts as healthy."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def on_node(pods: Pods, node: str) -> list[Pod]:
    return [p for p in pods.values() if (p.get("spec") or {}).get("nodeName") == node]


class PodWatch:
    """Watches the pods of NAMESPACE matching SELECTOR (or, with RESOURCE, other objects: `None`
    for a cluster-wide kind); `on_event(pods)` runs after each event."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str | None,
        selector: str,
        on_event: Callable[[Pods], None] | None = None,
        *,
        resource: str = "pods",
    ) -> None:
        self.pods: Pods = {}
        self.events = 0
        self.failure: BaseException | None = None
        self._on_event = on_event
        self._changed = threading.Condition()
        self._proc = subprocess.Popen(
            [
                "kubectl",
                "--kubeconfig",
                str(kubeconfig),
                "get",
                resource,
                *(("-n", namespace) if namespace else ()),
                "-l",
                selector,
                "-w",
                "-o",
                "json",
                "--output-watch-events",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        text: list[str] = []
        for line in self._proc.stdout:
            text.append(line)
            try:  # one event a line, as kubectl prints them; pretty-printed ones span several
                event = json.loads("".join(text))
            except json.JSONDecodeError:
                continue
            text.clear()
            pod = event["object"]
            with self._changed:
                if event["type"] == "DELETED":
                    self.pods.pop(pod["metadata"]["name"], None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    self.pods[pod["metadata"]["name"]] = pod
                self.events += 1
                if self._on_event is not None and self.failure is None:
                    try:
                        self._on_event(self.pods)
                    except BaseException as exc:  # judged by the test, in its own thread
                        self.failure = exc
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, what: str, check: Callable[[Pods], bool], timeout: float = 90) -> None:
        """Until CHECK holds on the pods as last reported (a watch, not a poll)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not check(self.pods):
                self.raise_failure()
                if self._proc.poll() is not None and not self._thread.is_alive():
                    err = self._proc.stderr.read() if self._proc.stderr else ""
                    raise AssertionError(f"the pod watch ended before {what}: {err}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}; pods: {sorted(self.pods)}")
                self._changed.wait(left)
            self.raise_failure()

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._thread.join(10)
