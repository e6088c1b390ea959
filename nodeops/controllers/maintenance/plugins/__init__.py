"""Built-in plugin types of the maintenance controller (see `base` for the protocol)."""

from __future__ import annotations

from nodeops.controllers.maintenance.plugins.base import PluginType


def builtin_types() -> list[PluginType]:
    from nodeops.controllers.maintenance.plugins import (
        checks,
        esx,
        kubernikus,
        notifications,
        pods,
        prometheus,
        schedules,
        stagger,
        triggers,
    )

    return [
        *checks.TYPES,
        *stagger.TYPES,
        *pods.TYPES,
        *prometheus.TYPES,
        *kubernikus.TYPES,
        *esx.TYPES,
        *triggers.TYPES,
        *notifications.TYPES,
        *schedules.TYPES,
    ]
