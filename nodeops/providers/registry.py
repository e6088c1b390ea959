"""Find providers by name through the `nodeops.providers` entry-point group and build them.

Built-in providers are registered in our own package metadata exactly like third-party ones, so
there is one discovery path and a cloud can be added with a `pip install` and no code here:

    [project.entry-points."nodeops.providers"]
    mycloud = "mycloud_nodeops:MyCloudProvider"

Discovery reads installed metadata on every call rather than caching it, so a distribution that
appears on `sys.path` later (a plugin installed while the process runs, a test's temporary
distribution) is found.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any, Final, cast

from pydantic import BaseModel, ValidationError

from nodeops.common.extras import MissingExtra
from nodeops.providers.base import Provider, ProviderConfigError

__all__ = [
    "ENTRY_POINT_GROUP",
    "available_providers",
    "create_provider",
    "create_providers",
    "provider_class",
    "validate_config",
]

ENTRY_POINT_GROUP: Final = "nodeops.providers"
_ROOT_KEY: Final = "providers"


def _entry_points(group: str) -> dict[str, list[importlib.metadata.EntryPoint]]:
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for ep in importlib.metadata.entry_points(group=group):
        found.setdefault(ep.name, []).append(ep)
    return found


def available_providers(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Names of the installed providers, sorted; nothing is imported."""
    return sorted(_entry_points(group))


def _distribution(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    return dist.name if dist is not None else "?"


def _select(name: str, key: str, group: str) -> importlib.metadata.EntryPoint:
    entries = _entry_points(group)
    candidates = entries.get(name)
    if not candidates:
        known = ", ".join(sorted(entries)) or "none are installed"
        raise ProviderConfigError(key, f"unknown provider {name!r}; known providers: {known}")
    # The same distribution can be visible twice (an editable install next to a build tree);
    # only different targets under one name are a real conflict.
    targets = {ep.value for ep in candidates}
    if len(targets) > 1:
        listed = ", ".join(
            f"{ep.value!r} from {_distribution(ep)}" for ep in sorted(candidates, key=str)
        )
        raise ProviderConfigError(key, f"provider {name!r} is registered more than once: {listed}")
    return candidates[0]


def provider_class(
    name: str, *, key: str | None = None, group: str = ENTRY_POINT_GROUP
) -> type[Provider]:
    """Import the provider class registered as `name`, checking it can be configured safely."""
    key = key or f"{_ROOT_KEY}.{name}"
    ep = _select(name, key, group)
    try:
        loaded = ep.load()
    except MissingExtra as exc:
        raise ProviderConfigError(key, str(exc)) from exc
    except Exception as exc:
        raise ProviderConfigError(key, f"cannot load {ep.value!r}: {exc}") from exc
    config = getattr(loaded, "Config", None)
    if not isinstance(loaded, type) or not (
        isinstance(config, type) and issubclass(config, BaseModel)
    ):
        raise ProviderConfigError(
            key, f"{ep.value!r} is not a provider class with a pydantic `Config` model"
        )
    if config.model_config.get("extra") != "forbid":
        # A model that ignores unknown keys would turn a typo into a silently default setting.
        raise ProviderConfigError(key, f"{ep.value!r}: its Config model must set extra='forbid'")
    if not callable(getattr(loaded, "close", None)):
        raise ProviderConfigError(key, f"{ep.value!r} has no close() method")
    return cast(type[Provider], loaded)


def _format_loc(key: str, loc: tuple[int | str, ...]) -> str:
    out = key
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    if error["type"] in ("missing", "extra_forbidden"):
        return message
    shown = repr(error.get("input"))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{message} (got {shown})"


def validate_config(
    cls: type[Provider], raw: Mapping[str, Any] | BaseModel | None, *, key: str
) -> BaseModel:
    """Validate a configuration block against `cls.Config`, naming each bad key."""
    model = cls.Config
    if isinstance(raw, model):
        return raw
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ProviderConfigError(key, f"expected a mapping of settings, got {type(raw).__name__}")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = [
            (_format_loc(key, tuple(err["loc"])), _describe(err))
            for err in exc.errors(include_url=False)
        ]
        (first_key, first_message), *more = problems
        raise ProviderConfigError(first_key, first_message, more=more) from None


def create_provider(
    name: str,
    config: Mapping[str, Any] | BaseModel | None = None,
    *,
    key: str | None = None,
    group: str = ENTRY_POINT_GROUP,
) -> Provider:
    """Build the provider registered as `name` from its configuration block.

    Raises `ProviderConfigError` naming the key for an unknown provider, a provider that cannot
    be imported, or a block that does not validate.
    """
    key = key or f"{_ROOT_KEY}.{name}"
    cls = provider_class(name, key=key, group=group)
    settings = validate_config(cls, config, key=key)
    try:
        provider: Provider = cast(Any, cls)(settings)
    except ValueError as exc:
        # Constructors may reject combinations a field validator cannot see.
        raise ProviderConfigError(key, str(exc)) from exc
    return provider


def create_providers(
    block: Mapping[str, Mapping[str, Any] | None] | None,
    *,
    key: str = _ROOT_KEY,
    group: str = ENTRY_POINT_GROUP,
) -> dict[str, Provider]:
    """Build every provider of a `providers:` block (`{name: settings}`).

    The first bad block raises; the providers built before it hold no connections yet (building
    does no I/O), so nothing is left open.
    """
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise ProviderConfigError(
            key, f"expected a mapping of providers, got {type(block).__name__}"
        )
    built: dict[str, Provider] = {}
    for name, settings in block.items():
        built[name] = create_provider(name, settings, key=f"{key}.{name}", group=group)
    return built
