"""A controller with what a real one has: a finalizer, an owned child, a guarded status patch and
a runnable.

A `Greeting` (example.nodeops.dev/v1) asks for its message to be published. The reconciler
records its intent first (a finalizer), keeps an owned ConfigMap holding the message (garbage
collected with the Greeting), publishes the message on a board that lives outside the cluster
(here a small HTTP API, run by the manager as a runnable; in a real controller: a load balancer,
a DNS zone, a cloud), and writes status with a patch guarded by the resourceVersion it read.
When the Greeting is deleted, the finalizer holds it until the message is withdrawn.

Run it against the simulated cluster:

    nodeops sim serve --kubeconfig-out sim.kubeconfig &
    python examples/greeting_controller.py --kubeconfig sim.kubeconfig --install-crd --port 8099 &
    kubectl --kubeconfig sim.kubeconfig apply -f - <<'EOF'
    apiVersion: example.nodeops.dev/v1
    kind: Greeting
    metadata: {name: hello, namespace: default}
    spec: {message: "hello, world"}
    EOF
    curl localhost:8099/greetings
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import Any

from aiohttp import web

from nodeops.kube import (
    Client,
    Controller,
    Manager,
    ReconcileContext,
    Request,
    Resource,
    Result,
    add_finalizer,
    remove_finalizer,
    set_owner_reference,
)
from nodeops.kube import objects as o
from nodeops.kube.resources import CONFIGMAPS, CRDS

GROUP = "example.nodeops.dev"
GREETINGS = Resource(GROUP, "v1", "greetings", "Greeting", True)
FINALIZER = f"{GROUP}/published"
CHILD_LABEL = f"{GROUP}/greeting"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"greetings.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "greetings", "singular": "greeting", "kind": "Greeting"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["message"],
                                "properties": {"message": {"type": "string"}},
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


class Board:
    """The world outside the cluster: published messages, served over HTTP by a runnable.

    Publishing and withdrawing are idempotent, as every external call of a controller must be:
    the reconciler may run again after a crash at any line.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.messages: dict[str, str] = {}

    def publish(self, key: str, message: str) -> None:
        self.messages[key] = message

    def withdraw(self, key: str) -> None:
        self.messages.pop(key, None)

    async def serve(self, stop: asyncio.Event) -> None:
        """The runnable: serve `GET /greetings` until the manager stops."""

        async def greetings(_: web.Request) -> web.Response:
            return web.json_response(self.messages)

        app = web.Application()
        app.router.add_get("/greetings", greetings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


class GreetingReconciler:
    def __init__(self, manager: Manager, board: Board) -> None:
        self.client = manager.client
        self.board = board
        self.greetings = manager.informers.informer(GREETINGS)
        # Only the ConfigMaps this controller made (they carry its label) are cached.
        self.configmaps = manager.informers.informer(CONFIGMAPS, label_selector=CHILD_LABEL)

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        greeting = self.greetings.get(request.name, request.namespace)
        if greeting is None:
            return None  # gone: its finalizer already saw to the cleanup
        key = str(request)
        if o.deletion_timestamp(greeting) is not None:
            if o.has_finalizer(greeting, FINALIZER):
                ctx.ensure_may_act(f"withdraw {key}")
                self.board.withdraw(key)
                await remove_finalizer(self.client, GREETINGS, greeting, FINALIZER)
            return None

        # Intent first: from here on, a deletion waits until the message is withdrawn.
        greeting = await add_finalizer(self.client, GREETINGS, greeting, FINALIZER)
        message = str((greeting.get("spec") or {}).get("message", ""))

        child: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{request.name}-greeting",
                "namespace": request.namespace,
                "labels": {CHILD_LABEL: request.name},
            },
            "data": {"message": message},
        }
        set_owner_reference(child, greeting)
        await self.client.create_or_patch(CONFIGMAPS, child, request.namespace)

        ctx.ensure_may_act(f"publish {key}")
        self.board.publish(key, message)

        status = {
            "phase": "Published",
            "observedGeneration": o.meta(greeting).get("generation"),
            "configMap": child["metadata"]["name"],
        }
        if greeting.get("status") != status:
            # Guarded: a status computed from this read must not overwrite a newer one.
            await self.client.patch_status(
                GREETINGS,
                request.name,
                status,
                request.namespace,
                resource_version=o.resource_version(greeting),
            )
        return None


async def main(kubeconfig: str, port: int, install_crd: bool, seconds: float | None) -> int:
    client = await Client.from_kubeconfig(kubeconfig)
    try:
        if install_crd:
            await client.create_or_patch(CRDS, CRD)
        manager = Manager(client, metrics_addr="0", health_addr="0")
        board = Board(port)
        reconciler = GreetingReconciler(manager, board)
        manager.add(
            Controller("greetings", reconciler)
            .for_(reconciler.greetings)
            .owns(reconciler.configmaps)
        )
        manager.add_runnable(board.serve, name="board", needs_leader=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, manager.stop)
        if seconds:
            loop.call_later(seconds, manager.stop)
        return await manager.run()
    finally:
        await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, default=8099, help="port of the board's HTTP API")
    parser.add_argument("--install-crd", action="store_true", help="create the Greeting CRD")
    parser.add_argument("--seconds", type=float, help="stop after this long (default: a signal)")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.kubeconfig, args.port, args.install_crd, args.seconds)))
