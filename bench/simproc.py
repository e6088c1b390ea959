"""A simulated API server preloaded with a large cluster, in its own process.

Benchmarks measure a client; the server must not share the client's event loop or core, so it
runs in a child process and reports its URL back through a pipe.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import random
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson


@dataclass(frozen=True)
class ClusterShape:
    nodes: int
    pods: int
    namespaces: int = 10
    replicasets_per_namespace: int = 50


def generate(shape: ClusterShape, seed: int = 1) -> tuple[list[bytes], list[bytes]]:
    """Encoded nodes and pods as a real cluster stores them (managedFields, owners, status)."""
    from nodeops.sim import objects

    rng = random.Random(seed)
    nodes = [
        orjson.dumps(
            objects.make_node(f"node-{i:05d}", group="workers", rng=rng, with_server_fields=True)
        )
        for i in range(shape.nodes)
    ]
    owners = []
    for n in range(shape.namespaces):
        for r in range(shape.replicasets_per_namespace):
            owners.append(
                objects.make_replicaset(
                    f"app-{r}-{n}", f"ns-{n}", replicas=1, rng=rng, with_server_fields=True
                )
            )
    pods = []
    for i in range(shape.pods):
        owner = owners[i % len(owners)]
        ns = owner["metadata"]["namespace"]
        pod = objects.make_pod(
            f"{owner['metadata']['name']}-{i:06d}",
            ns,
            node_name=f"node-{i % max(1, shape.nodes):05d}",
            owner=owner,
            rng=rng,
            with_server_fields=True,
        )
        pods.append(orjson.dumps(pod))
    return nodes, pods


def _serve(shape: ClusterShape, conn: Connection) -> None:
    from nodeops.sim.server.app import SimServer

    async def main() -> None:
        server = SimServer(history_size=1000)
        reg = server.registry
        namespaces = reg.lookup("", "v1", "namespaces")
        for n in range(shape.namespaces):
            reg.create(namespaces, "", {"metadata": {"name": f"ns-{n}"}})
        nodes, pods = generate(shape)
        for plural, raws in (("nodes", nodes), ("pods", pods)):
            rt = reg.lookup("", "v1", plural)
            server.store.load(rt.storage_key, raws, reg.storage_type(rt).field_set)
        json_bytes = sum(map(len, nodes)) + sum(map(len, pods))
        del nodes, pods
        await server.start()
        conn.send({"url": server.url, "json_bytes": json_bytes})
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_reader(conn.fileno(), stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


class ServerProcess:
    """`with ServerProcess(shape) as info:` -> {"url": ..., "json_bytes": ...}."""

    def __init__(self, shape: ClusterShape) -> None:
        self.shape = shape
        self._parent, child = mp.get_context("spawn").Pipe()
        self._proc = mp.get_context("spawn").Process(
            target=_serve, args=(shape, child), daemon=True
        )
        self.info: dict[str, Any] = {}

    def __enter__(self) -> dict[str, Any]:
        started = time.perf_counter()
        self._proc.start()
        if not self._parent.poll(900):
            raise RuntimeError("the simulated server did not start")
        self.info = self._parent.recv()
        self.info["load_seconds"] = round(time.perf_counter() - started, 1)
        print(
            f"server ready at {self.info['url']} in {self.info['load_seconds']}s", file=sys.stderr
        )
        return self.info

    def __exit__(self, *exc: object) -> None:
        self._parent.send("stop")
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
