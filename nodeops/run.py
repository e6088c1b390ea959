"""`nodeops run`: settings from flags and environment, then the manager until a signal.

Every flag has an environment variable (`NODEOPS_<FLAG>`, e.g. `NODEOPS_LEADER_ELECT=true`);
flags win over the environment. Each controller plugin's settings model adds flags
`--<plugin>-<field>` and variables `NODEOPS_<PLUGIN>_<FIELD>`. Bad settings, a bad provider
configuration file and an unreachable API server end the process with one clear line and exit
code 2, before anything is started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import os
import signal
import socket
import sys
import types
import typing
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from nodeops.api.settingduration import SettingDuration, format_setting_duration, is_duration
from nodeops.common.yamlfile import ConfigFileError, load_yaml, read_config_text

if TYPE_CHECKING:
    from nodeops.controllers import ControllerPlugin

EXIT_CONFIG = 2
_PLUGIN_ERROR = "_plugin_error"


class RunSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NODEOPS_", extra="forbid")

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "nodeops-system"
    # Comma-separated in flags and environment alike (not JSON).
    controllers: Annotated[list[str], NoDecode] = Field(default_factory=list)
    leader_elect: bool = False
    leader_election_id: str = "nodeops-leader"
    leader_election_namespace: str | None = None
    leader_election_identity: str | None = None
    lease_duration: SettingDuration = 15.0
    renew_deadline: SettingDuration = 10.0
    retry_period: SettingDuration = 2.0
    leader_election_watch: bool = True
    metrics_addr: str = ":8080"
    health_addr: str = ":8081"
    log_level: str = "info"
    log_format: str = "auto"
    drain_timeout: SettingDuration = 10.0
    provider: str | None = None
    provider_config: str | None = None

    @field_validator("controllers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value not in ("debug", "info", "warning", "error"):
            raise ValueError("must be one of debug, info, warning, error")
        return value

    @field_validator("log_format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value not in ("auto", "json", "console"):
            raise ValueError("must be one of auto, json, console")
        return value


def _duration_note(info: FieldInfo) -> str:
    """`duration, default 168h` for a duration setting, else "": a bare number there is the
    one value users misread (seconds? minutes?)."""
    if not is_duration(info):
        return ""
    default = info.get_default(call_default_factory=True)
    return (
        "duration" if default is None else f"duration, default {format_setting_duration(default)}"
    )


def run_flag_help(field: str, text: str) -> str:
    """The help of a `nodeops run` flag of `RunSettings.field`."""
    note = _duration_note(RunSettings.model_fields[field])
    return f"{text} ({note})" if note else text


def settings_from_args(args: Any) -> RunSettings:
    given = {k: v for k, v in vars(args).items() if k in RunSettings.model_fields and v is not None}
    return RunSettings(**given)


class ConfigProblem(Exception):
    """A setting or file `nodeops run` cannot start with; the message is the line to print."""


# ---------------------------------------------------------------------- plugin settings


def _plugin_prefix(plugin: str) -> str:
    return plugin.replace("-", "_")


def plugin_flag(plugin: str, field: str) -> str:
    return f"--{plugin}-{field.replace('_', '-')}"


def plugin_env(plugin: str, field: str) -> str:
    return f"NODEOPS_{_plugin_prefix(plugin).upper()}_{field.upper()}"


def _plugin_dest(plugin: str, field: str) -> str:
    return f"plugin:{plugin}:{field}"


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or _non_none(annotation) == (bool,)


def _is_collection(annotation: Any) -> bool:
    return any(
        typing.get_origin(a) in (list, tuple, set, frozenset) for a in _non_none(annotation)
    ) or typing.get_origin(annotation) in (list, tuple, set, frozenset)


def _non_none(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def add_plugin_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--<plugin>-<field>` for every field of every controller plugin's settings.

    A plugin that cannot be loaded does not break the other commands: the problem is kept and
    reported when `nodeops run` starts.
    """
    from nodeops.controllers import PluginError, plugins

    try:
        loaded = plugins()
    except PluginError as exc:
        parser.set_defaults(**{_PLUGIN_ERROR: str(exc)})
        return
    for plugin in loaded.values():
        group = parser.add_argument_group(f"controller {plugin.name}", plugin.description or None)
        for field, info in plugin.settings.model_fields.items():
            flag = plugin_flag(plugin.name, field)
            env = plugin_env(plugin.name, field)
            text = info.description or field.replace("_", " ")
            note = _duration_note(info)
            kwargs: dict[str, Any] = {
                "dest": _plugin_dest(plugin.name, field),
                "default": None,
                "help": f"{text} ({note + '; ' if note else ''}env {env})",
            }
            if _is_bool(info.annotation):
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs["metavar"] = field.upper()
            try:
                group.add_argument(flag, **kwargs)
            except argparse.ArgumentError:
                parser.set_defaults(
                    **{
                        _PLUGIN_ERROR: f"controller {plugin.name}: setting {field} makes flag "
                        f"{flag}, which another setting already has"
                    }
                )


def plugin_settings(
    plugin: ControllerPlugin[Any], args: Any, environ: Mapping[str, str] | None = None
) -> BaseModel:
    """The plugin's settings from its flags, else its environment variables, validated.

    Raises `ConfigProblem` naming the flag (or variable) whose value is wrong.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for field, info in plugin.settings.model_fields.items():
        source = plugin_flag(plugin.name, field)
        value = getattr(args, _plugin_dest(plugin.name, field), None)
        if value is None and plugin_env(plugin.name, field) in environ:
            source = plugin_env(plugin.name, field)
            value = environ[source]
        if value is None:
            continue
        if isinstance(value, str) and _is_collection(info.annotation):
            value = [v.strip() for v in value.split(",") if v.strip()]
        values[field] = value
        origin[field] = source
    try:
        return plugin.settings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        where = origin.get(field) or plugin_flag(plugin.name, field)
        shown = f" (got {err['input']!r})" if field in origin and err["type"] != "missing" else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigProblem(f"{where}: {message}{shown}") from None


def unknown_controllers(unknown: list[str], known: Mapping[str, Any]) -> str:
    """The names not known, the likely meant name of each misspelt one, and the choices."""
    listed = ", ".join(sorted(known)) or "none"
    guesses = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1)
        if close:
            which = f" for {name!r}" if len(unknown) > 1 else ""
            guesses.append(f"did you mean {close[0]!r}{which}?")
    hint = f"; {' '.join(guesses)}" if guesses else ""
    return f"unknown controller(s) {', '.join(unknown)}{hint} (available: {listed})"


def load_provider_config(path: str) -> dict[str, Any]:
    """Read `--provider-config FILE`: a YAML mapping; problems as `FILE:LINE: reason`."""
    try:
        data = load_yaml(read_config_text(path), source=path).data
    except ConfigFileError as exc:
        raise ConfigProblem(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigProblem(
            f"{path}:1: expected a mapping (providers: ...), not {type(data).__name__}"
        )
    return data


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        parts.append(f"--{field.replace('_', '-')}: {err['msg']}")
    return "; ".join(parts)


async def _run(settings: RunSettings, args: Any) -> int:
    from nodeops.common.extras import MissingExtra
    from nodeops.controllers import PluginError, SetupContext, SetupError, plugins
    from nodeops.kube import errors
    from nodeops.kube.leaderelection import LeaderElectionConfig
    from nodeops.kube.manager import Manager
    from nodeops.kube.oneshot import KubeconfigError, load_client
    from nodeops.providers.base import ProviderConfigError
    from nodeops.providers.registry import provider_class

    try:
        if getattr(args, _PLUGIN_ERROR, None):
            raise PluginError(getattr(args, _PLUGIN_ERROR))
        known = plugins()
    except PluginError as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    unknown = [c for c in settings.controllers if c not in known]
    if unknown:
        print(f"nodeops run: --controllers: {unknown_controllers(unknown, known)}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        chosen = [
            (known[name], plugin_settings(known[name], args)) for name in settings.controllers
        ]
        provider_config = (
            load_provider_config(settings.provider_config) if settings.provider_config else None
        )
    except ConfigProblem as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if settings.provider:
        # Loaded before connecting: an unknown name or a cloud SDK left out of the install
        # (its extra) is a configuration mistake, reported as one line at once.
        try:
            provider_class(settings.provider, key="--provider")
        except ProviderConfigError as exc:
            print(f"nodeops run: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    try:
        client = await load_client(settings.kubeconfig, settings.context)
    except KubeconfigError as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        version = await client.request("GET", "/version", timeout=10)
    except errors.KubeError as exc:
        print(f"nodeops run: API server {client.base_url} unreachable: {exc}", file=sys.stderr)
        await client.close()
        return EXIT_CONFIG
    older = older_than_supported(version)
    if older:
        print(f"nodeops run: warning: {older}", file=sys.stderr)
    election = None
    if settings.leader_elect:
        identity = settings.leader_election_identity or (
            f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        )
        election = LeaderElectionConfig(
            namespace=settings.leader_election_namespace or settings.namespace,
            name=settings.leader_election_id,
            identity=identity,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
            watch_lease=settings.leader_election_watch,
        )
    manager = Manager(
        client,
        leader_election=election,
        metrics_addr=settings.metrics_addr,
        health_addr=settings.health_addr,
        drain_timeout=settings.drain_timeout,
    )
    context = SetupContext(
        manager=manager,
        namespace=settings.namespace,
        provider=settings.provider,
        provider_config=provider_config,
        provider_config_file=settings.provider_config,
    )
    try:
        for plugin, plugin_values in chosen:
            await plugin.setup(context, plugin_values)
    except (SetupError, ProviderConfigError, MissingExtra) as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        await context.close_providers()
        await client.close()
        return EXIT_CONFIG
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, manager.stop)
    try:
        return await manager.run()
    finally:
        try:
            await context.close_providers()
        finally:
            await client.close()


OLDEST_SUPPORTED = (1, 28)
"""The oldest kube-apiserver the CRDs install on as generated (their validation rules'
`fieldPath` and `reason` are 1.28's); docs/install.md gives the whole range."""


def older_than_supported(version: Any) -> str | None:
    """What to tell an operator about a server older than nodeops supports, from `/version`.

    A warning, not a refusal: the runtime itself works on older servers (the CRDs are what
    they refuse), and a cluster installed by hand may carry CRDs edited to fit.
    """
    if not isinstance(version, Mapping):
        return None
    try:
        found = (int(str(version.get("major"))), int(str(version.get("minor")).rstrip("+")))
    except ValueError:
        return None
    if found >= OLDEST_SUPPORTED:
        return None
    oldest = ".".join(map(str, OLDEST_SUPPORTED))
    return (
        f"the API server is Kubernetes {version.get('gitVersion') or '.'.join(map(str, found))}, "
        f"older than {oldest}, the oldest nodeops supports: its CRDs are refused there "
        "(see the supported versions in docs/install.md)"
    )


def run_from_args(args: Any) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"nodeops run: {_describe(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    except SettingsError as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from nodeops.kube.logging import configure

    configure(settings.log_level, settings.log_format)
    os.environ.setdefault("NODEOPS_NAMESPACE", settings.namespace)
    return asyncio.run(_run(settings, args))
