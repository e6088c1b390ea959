"""One drain, run the way the command runs it or the way a reconciler does.

`drain` mode is `Drainer.drain` with the drain's own watches; `step` mode is what a controller
does: one `SharedInformers` over a started informer factory (a manager's), and `Drainer.step`
called pass after pass, requeued shortly, until the progress says complete. Both give the same
`Outcome`, so a test states what a drain must do once and holds both entries to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeops.drain.engine import Drainer, DrainProgress
from nodeops.drain.options import DrainOptions
from nodeops.drain.sources import SharedInformers
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.informer import InformerFactory

MODES = ("drain", "step")
REQUEUE_SECONDS = 0.05  # a reconciler's requeue between passes


@dataclass
class Outcome:
    evicted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    passes: int = 0


async def run_drain(
    client: Client,
    mode: str,
    node: str,
    options: DrainOptions | None = None,
    *,
    on_evicting: Callable[[dict[str, Any]], None] | None = None,
    on_progress: Callable[[DrainProgress], None] | None = None,
) -> Outcome:
    options = options or DrainOptions()
    if mode == "drain":
        result = await Drainer(
            client, options, on_evicting=on_evicting, on_progress=on_progress
        ).drain(node)
        return Outcome(
            evicted=result.deleted if options.disable_eviction else result.evicted,
            skipped=result.skipped,
            warnings=result.warnings,
            passes=1,
        )
    outcome = Outcome()

    def evicting(pod: dict[str, Any]) -> None:
        outcome.evicted.append(o.ref(pod))
        if on_evicting is not None:
            on_evicting(pod)

    factory = InformerFactory(client)
    sources = SharedInformers(factory, client)
    factory.start()
    drainer = Drainer(client, options, sources=sources, on_evicting=evicting)
    started = o.now()
    last = ""
    try:
        while True:
            progress = await drainer.step(node, started)
            outcome.passes += 1
            # Warnings are about pods still there: a reconciler reports them as they come.
            outcome.warnings += [w for w in progress.warnings if w not in outcome.warnings]
            if on_progress is not None and progress.message != last:
                on_progress(progress)
            last = progress.message
            if progress.complete:
                outcome.skipped = [d.ref for d in progress.plan.skipped]
                return outcome
            await asyncio.sleep(REQUEUE_SECONDS)
    finally:
        await factory.stop()
