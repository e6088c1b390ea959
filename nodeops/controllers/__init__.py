"""The controllers `nodeops run --controllers a,b` can run: plugins, each with its own settings.

A controller package exposes one object::

    PLUGIN = ControllerPlugin(name="cycling", settings=CyclingSettings, setup=setup)

    async def setup(ctx: SetupContext, settings: CyclingSettings) -> None:
        ctx.manager.add(Controller("cycling", ...).for_(...))

`nodeops run` derives a flag `--<plugin>-<field>` and an environment variable
`NODEOPS_<PLUGIN>_<FIELD>` from every field of the settings model (a pydantic model), validates
them before anything starts, and calls `setup` of each selected plugin with the validated
settings; `setup` adds controllers, runnables and checks to `ctx.manager`. Built-in controllers
are listed below, one line each; other distributions add theirs through the
`nodeops.controllers` entry-point group, as providers do.

Keep a controller package's top level light (the settings model and `setup`, importing the rest
inside `setup`): every `nodeops` command loads the plugins to build `nodeops run`'s flags.
Controllers never import each other; what they share lives in the controller kit
(`nodeops.controllers.kit`: predicates, drain passes, the status writer, the clock, events,
channel sources) and below it in `nodeops.kube`, `nodeops.drain` and `nodeops.providers`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel

from nodeops.kube.manager import Manager
from nodeops.providers.base import Provider, ProviderConfigError
from nodeops.providers.registry import create_provider

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "ControllerPlugin",
    "PluginError",
    "SetupContext",
    "SetupError",
    "available",
    "plugins",
]

ENTRY_POINT_GROUP: Final = "nodeops.controllers"

#: Built-in controller packages, one line each; each module exposes `PLUGIN`.
BUILTIN: tuple[str, ...] = (
    "nodeops.controllers.cycling",
    "nodeops.controllers.cycling:OBSERVER_PLUGIN",
    "nodeops.controllers.detacher",
    "nodeops.controllers.esx",
    "nodeops.controllers.kubernikus",
    "nodeops.controllers.maintenance",
)

_NAME: Final = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

S = TypeVar("S", bound=BaseModel)


class PluginError(Exception):
    """A controller plugin that cannot be loaded or is malformed."""


class SetupError(Exception):
    """A plugin's `setup` refused its configuration; the message says what to fix.

    `nodeops run` prints it as one line and exits with the configuration error code.
    """


@dataclass(frozen=True)
class SetupContext:
    """What a plugin's `setup` is given besides its settings."""

    manager: Manager
    #: The namespace of the operator's own objects (`--namespace`).
    namespace: str
    #: The default cloud provider's name (`--provider`), None when not given.
    provider: str | None = None
    #: The parsed `--provider-config FILE`: a mapping with a `providers:` block
    #: (`{name: settings}`), None when not given.
    provider_config: Mapping[str, Any] | None = None
    #: The file `provider_config` came from, for error messages.
    provider_config_file: str | None = None
    #: Every provider built through `create_provider`, closed by `close_providers`.
    created: list[Provider] = field(default_factory=list, repr=False)

    def create_provider(self, name: str | None = None) -> Provider:
        """Build provider `name` (default: `--provider`) from its block of the config file.

        Raises `ProviderConfigError` naming the file and the key at fault.
        """
        chosen = name or self.provider
        where = self.provider_config_file or "--provider-config"
        if not chosen:
            raise ProviderConfigError("--provider", "no provider was named")
        block = (self.provider_config or {}).get("providers") or {}
        if not isinstance(block, Mapping):
            raise ProviderConfigError(f"{where}: providers", "expected a mapping of providers")
        provider = create_provider(chosen, block.get(chosen), key=f"{where}: providers.{chosen}")
        self.created.append(provider)
        return provider

    async def close_providers(self) -> None:
        """Close every provider built here, once the controllers have stopped: their HTTP
        sessions would otherwise be left to the garbage collector, which complains on exit."""
        while self.created:
            await self.created.pop().close()


@dataclass(frozen=True)
class ControllerPlugin(Generic[S]):
    """A controller `nodeops run` can run: its name, its settings model and its setup."""

    name: str
    settings: type[S]
    setup: Callable[[SetupContext, S], Awaitable[None]]
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise PluginError(
                f"controller plugin name {self.name!r} must be lowercase words joined by '-'"
            )
        if not (isinstance(self.settings, type) and issubclass(self.settings, BaseModel)):
            raise PluginError(f"controller plugin {self.name}: settings must be a pydantic model")


def _load(target: str, where: str) -> ControllerPlugin[Any]:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"{where}: cannot import {module_name}: {exc}") from exc
    plugin = getattr(module, attr or "PLUGIN", None)
    if not isinstance(plugin, ControllerPlugin):
        raise PluginError(f"{where}: {target} has no ControllerPlugin named {attr or 'PLUGIN'}")
    return plugin


def plugins() -> dict[str, ControllerPlugin[Any]]:
    """Every controller plugin, built-in and installed, by name.

    Raises `PluginError` for a plugin that cannot be loaded or a name given twice, so a broken
    installation is reported instead of a controller silently missing.
    """
    found: dict[str, ControllerPlugin[Any]] = {}
    sources: list[tuple[str, str]] = [(m, f"built-in controller {m}") for m in BUILTIN]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "?"
        sources.append((ep.value, f"controller {ep.name!r} from {dist}"))
    for target, where in sources:
        plugin = _load(target, where)
        other = found.get(plugin.name)
        if other is not None and other is not plugin:
            raise PluginError(f"{where}: a controller named {plugin.name!r} is already registered")
        found[plugin.name] = plugin
    return found


def available() -> list[str]:
    return sorted(plugins())
