"""`nodeops run`: settings from flags and environment, then the manager until a signal.

Every flag has an environment variable (`NODEOPS_<FLAG>`, e.g. `NODEOPS_LEADER_ELECT=true`);
flags win over the environment. Bad settings and an unreachable API server end the process with
one clear line and a non-zero exit code, before anything is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

EXIT_CONFIG = 2


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
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    metrics_addr: str = ":8080"
    health_addr: str = ":8081"
    log_level: str = "info"
    log_format: str = "auto"
    drain_timeout: float = 10.0

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


def settings_from_args(args: Any) -> RunSettings:
    given = {k: v for k, v in vars(args).items() if k in RunSettings.model_fields and v is not None}
    return RunSettings(**given)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        parts.append(f"--{field.replace('_', '-')}: {err['msg']}")
    return "; ".join(parts)


async def _run(settings: RunSettings) -> int:
    from nodeops.controllers import REGISTRY, available
    from nodeops.kube import errors
    from nodeops.kube.leaderelection import LeaderElectionConfig
    from nodeops.kube.manager import Manager
    from nodeops.kube.oneshot import KubeconfigError, load_client

    unknown = [c for c in settings.controllers if c not in REGISTRY]
    if unknown:
        known = ", ".join(available()) or "none"
        print(
            f"nodeops run: --controllers: unknown controller(s) {', '.join(unknown)} "
            f"(available: {known})",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        client = await load_client(settings.kubeconfig, settings.context)
    except KubeconfigError as exc:
        print(f"nodeops run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        await client.request("GET", "/version", timeout=10)
    except errors.KubeError as exc:
        print(f"nodeops run: API server {client.base_url} unreachable: {exc}", file=sys.stderr)
        await client.close()
        return EXIT_CONFIG
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
        )
    manager = Manager(
        client,
        leader_election=election,
        metrics_addr=settings.metrics_addr,
        health_addr=settings.health_addr,
        drain_timeout=settings.drain_timeout,
    )
    for name in settings.controllers:
        manager.add(REGISTRY[name](manager))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, manager.stop)
    try:
        return await manager.run()
    finally:
        await client.close()


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
    return asyncio.run(_run(settings))
