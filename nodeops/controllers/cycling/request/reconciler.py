"""The CycleNodeRequest reconciler: read the request, run the step of its phase, record.

The steps live by concern (selection, batching, scale-up, hand-over, healing, cleanup); what
joins them is `TRANSITIONS`, the one table from phase to step. A step that moves to another
phase goes on with it at once (its status is written first, so a crash in between resumes from
the new phase) instead of waiting for its own write to come back through the watch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from nodeops.api import CycleNodeRequest, InvalidResource
from nodeops.api.cyclenoderequest import CycleNodeRequestSpec
from nodeops.api.cycling import TERMINAL_PHASES
from nodeops.controllers.cycling.checks import CheckRunner
from nodeops.controllers.cycling.cloud import CloudWatcher, Providers
from nodeops.controllers.cycling.keys import REQUEST_FINALIZER
from nodeops.controllers.cycling.metrics import FAILURES
from nodeops.controllers.cycling.notify import Notifier
from nodeops.controllers.cycling.request.batching import initialised, waiting_termination
from nodeops.controllers.cycling.request.cleanup import deleted, terminal
from nodeops.controllers.cycling.request.env import Heal, RequestEnv, RequestView, Wait
from nodeops.controllers.cycling.request.handover import cordoning
from nodeops.controllers.cycling.request.healing import healing, to_healing
from nodeops.controllers.cycling.request.legacy import adopt_listed_queue
from nodeops.controllers.cycling.request.scaleup import scaling_up
from nodeops.controllers.cycling.request.selection import pending
from nodeops.controllers.cycling.resources import CYCLENODEREQUESTS
from nodeops.controllers.cycling.settings import CyclingSettings
from nodeops.controllers.cycling.status import timestamp
from nodeops.controllers.kit import Clock, EventSink, add_finalizer, events_or_null
from nodeops.kube import Informer, ReconcileContext, Request, Result
from nodeops.kube import objects as o
from nodeops.kube.client import Client
from nodeops.kube.events import EventRecorder

__all__ = ["TRANSITIONS", "CycleNodeRequestReconciler", "Step"]

Step = Callable[
    [RequestEnv, Request, RequestView, CycleNodeRequestSpec, ReconcileContext],
    Awaitable[Result | None],
]


async def undefined(
    env: RequestEnv,
    request: Request,
    view: RequestView,
    spec: CycleNodeRequestSpec,
    ctx: ReconcileContext,
) -> Result | None:
    """A new request: our finalizer first (a deletion from here on puts nodes back), then
    Pending."""
    del request, spec, ctx
    view.update(await add_finalizer(env.client, CYCLENODEREQUESTS, view.obj, REQUEST_FINALIZER))
    thread = None
    if env.notifier is not None:
        thread = await env.notifier.started(view)
    await env.status.commit(
        view,
        {
            "startedTimestamp": timestamp(env.time.now()),
            "observedGeneration": o.meta(view.obj).get("generation"),
            "threadTimestamp": thread,
        },
        phase="Pending",
        message="",
        condition=("Ready", "False", "Cycling", "cycling has started"),
    )
    return None


TRANSITIONS: Final[dict[str, Step]] = {
    "": undefined,
    "Pending": pending,
    "Initialised": initialised,
    "ScalingUp": scaling_up,
    "CordoningNode": cordoning,
    "WaitingTermination": waiting_termination,
    "Healing": healing,
}
"""The step of each phase that is not terminal (Successful and Failed only clean up)."""

_CHAIN = 8
"""Phases one reconcile may go through before handing back to the queue."""

_CLOUD_BLIND: Final = frozenset({"CordoningNode", "WaitingTermination"})
"""Phases whose steps never read the cloud: they wait on the nodes' children instead."""


class CycleNodeRequestReconciler:
    def __init__(
        self,
        *,
        client: Client,
        requests: Informer,
        children: Informer,
        nodes: Informer,
        pods: Informer,
        nodegroups: Informer,
        cloud: CloudWatcher,
        providers: Providers,
        checks: CheckRunner,
        events: EventRecorder | EventSink | None,
        settings: CyclingSettings,
        time: Clock,
        notifier: Notifier | None = None,
    ) -> None:
        self.env = RequestEnv(
            client=client,
            requests=requests,
            children=children,
            nodes=nodes,
            pods=pods,
            nodegroups=nodegroups,
            cloud=cloud,
            providers=providers,
            checks=checks,
            events=events_or_null(events),
            settings=settings,
            time=time,
            notifier=notifier,
        )

    async def reconcile(self, request: Request, ctx: ReconcileContext) -> Result | None:
        env = self.env
        obj = env.requests.get(request.name, request.namespace)
        if obj is None:
            env.forget(request)
            return None
        view = RequestView(obj)
        if o.deletion_timestamp(obj) is not None:
            if view.phase not in TERMINAL_PHASES:
                await adopt_listed_queue(env, view)
            return await deleted(env, request, view, ctx)
        if view.phase in TERMINAL_PHASES:
            env.forget(request)
            return await terminal(env, view)
        try:
            spec = CycleNodeRequest.parse_spec(obj).spec
        except InvalidResource as e:
            FAILURES.labels("CycleNodeRequest", "InvalidSpec").inc()
            await env.status.commit(
                view,
                {"finishedTimestamp": timestamp(env.time.now())},
                phase="Failed",
                reason="InvalidSpec",
                message=str(e),
                warning=True,
                condition=("Ready", "False", "InvalidSpec", str(e)),
            )
            return None
        await adopt_listed_queue(env, view)
        try:
            return await self._chain(request, view, spec, ctx)
        finally:
            if view.phase in _CLOUD_BLIND:
                # Nothing in these phases waits on the cloud: polling its groups for them
                # would describe every instance of the groups every interval for the length
                # of every drain. The next phase that reads the cloud watches it again.
                env.cloud.forget(request)

    async def _chain(
        self,
        request: Request,
        view: RequestView,
        spec: CycleNodeRequestSpec,
        ctx: ReconcileContext,
    ) -> Result | None:
        env = self.env
        for _ in range(_CHAIN):
            phase = view.phase
            step = TRANSITIONS.get(phase)
            if step is None:
                await env.fail(view, f"status.phase: unknown phase {phase!r}", "InvalidStatus")
                return None
            try:
                result = await step(env, request, view, spec, ctx)
            except Wait as wait:
                await env.status.commit(
                    view, condition=("Blocked", "True", wait.reason, wait.message[:32768])
                )
                after = wait.after if wait.after is not None else env.settings.check_interval
                ctx.log.debug(
                    "waiting", phase=phase, reason=wait.reason, message=wait.message, after=after
                )
                return Result(requeue_after=env.time.wall(after))
            except Heal as heal:
                await to_healing(env, view, heal.message, heal.reason)
                return None
            if result is not None or view.phase == phase or view.phase in TERMINAL_PHASES:
                return result
        return None
