"""The node detacher: take a node out of its external load balancers before its pods stop, and
put it back in exactly those when it returns.

`nodeops run --controllers detacher` runs it with the settings of
`nodeops.controllers.detacher.settings.DetacherSettings` (flags `--detacher-<field>`); as a
library, `nodeops.controllers.detacher.wiring.detacher_controller` builds the controller for
a `Manager` of one's own. See docs/detacher.md.
"""

from __future__ import annotations

from nodeops.controllers import ControllerPlugin, SetupContext
from nodeops.controllers.detacher.settings import DetacherSettings

__all__ = ["PLUGIN", "DetacherSettings"]


async def _setup(ctx: SetupContext, settings: DetacherSettings) -> None:
    from nodeops.controllers.detacher.wiring import setup

    await setup(ctx, settings)


PLUGIN = ControllerPlugin(
    name="detacher",
    settings=DetacherSettings,
    setup=_setup,
    description="take nodes out of external load balancers before their pods stop",
)
