"""Node cycling: CycleNodeRequest, CycleNodeStatus and NodeGroup, and the observer.

`nodeops run --controllers cycling` runs the request and node controllers;
`--controllers cycling-observer` the observer, which creates requests for node groups whose
instances or OnDelete DaemonSet pods are out of date. The package's top level stays light (the
settings and the setup functions): every `nodeops` command loads the plugins to build flags.
"""

from __future__ import annotations

from nodeops.controllers import ControllerPlugin, SetupContext, SetupError
from nodeops.controllers.cycling.settings import CyclingSettings, ObserverSettings

__all__ = ["OBSERVER_PLUGIN", "PLUGIN", "CyclingSettings", "ObserverSettings"]


async def setup(ctx: SetupContext, settings: CyclingSettings) -> None:
    from nodeops.controllers.cycling.cloud import Providers
    from nodeops.controllers.cycling.notify import Notifier, SlackNotifier, parse_secret_ref
    from nodeops.controllers.cycling.wiring import install

    notifier: Notifier | None = None
    if settings.slack_channel or settings.slack_token_secret:
        if not (settings.slack_channel and settings.slack_token_secret):
            raise SetupError("--cycling-slack-channel and --cycling-slack-token-secret go together")
        try:
            secret = parse_secret_ref(settings.slack_token_secret, ctx.namespace)
        except ValueError as e:
            raise SetupError(f"--cycling-slack-token-secret: {e}") from None
        notifier = SlackNotifier(
            ctx.manager.client,
            channel=settings.slack_channel,
            token_secret=secret,
            api_url=settings.slack_api_url,
            cluster=settings.cluster_name,
        )
    install(
        ctx.manager,
        namespace=settings.namespace or ctx.namespace,
        providers=Providers(ctx.create_provider, ctx.provider),
        settings=settings,
        notifier=notifier,
    )


async def setup_observer(ctx: SetupContext, settings: ObserverSettings) -> None:
    from nodeops.controllers.cycling.cloud import Providers
    from nodeops.controllers.cycling.observer import install_observer

    install_observer(
        ctx.manager,
        namespace=settings.namespace or ctx.namespace,
        providers=Providers(ctx.create_provider, ctx.provider),
        settings=settings,
    )


PLUGIN = ControllerPlugin(
    name="cycling",
    settings=CyclingSettings,
    setup=setup,
    description="replace the nodes of cloud node groups: CycleNodeRequest, CycleNodeStatus",
)
OBSERVER_PLUGIN = ControllerPlugin(
    name="cycling-observer",
    settings=ObserverSettings,
    setup=setup_observer,
    description="create CycleNodeRequests for node groups whose nodes are out of date",
)
