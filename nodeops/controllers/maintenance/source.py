"""The configuration in force: loaded at start (a bad file stops startup), then watched.

The file is looked at every `interval` seconds (mounted Secrets and ConfigMaps change by an
atomic symlink swap, so its content is compared, not just its mtime). A changed file that loads
becomes the configuration in force at once; one that does not is reported with every
FILE:LINE problem and the last good configuration stays in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path

import structlog

from nodeops.common.yamlfile import ConfigFileError, read_config_text
from nodeops.controllers.maintenance.config import ConfigError, MaintenanceConfig, load_text
from nodeops.controllers.maintenance.metrics import CONFIG_GOOD, CONFIG_RELOADS
from nodeops.controllers.maintenance.plugins.base import Registry

log = structlog.get_logger(__name__)


class ConfigSource:
    def __init__(self, path: str | Path, registry: Registry | None = None) -> None:
        self.path = Path(path)
        self.registry = registry
        self._current: MaintenanceConfig | None = None
        self._digest = ""
        self.last_error: str | None = None
        self.listeners: list[Callable[[MaintenanceConfig], None]] = []

    @property
    def current(self) -> MaintenanceConfig:
        if self._current is None:
            raise RuntimeError("configuration not loaded")
        return self._current

    def _read(self) -> tuple[str, str]:
        """The file's text and digest; ConfigError naming the file when it cannot be read."""
        try:
            text = read_config_text(self.path)
        except ConfigFileError as exc:
            raise ConfigError.from_file_error(exc) from None
        return text, hashlib.sha256(text.encode()).hexdigest()

    def load(self) -> MaintenanceConfig:
        """The first load: raises ConfigError (FILE:LINE lines) so startup stops."""
        text, digest = self._read()
        config = load_text(text, str(self.path), registry=self.registry)
        self._current, self._digest = config, digest
        CONFIG_RELOADS.labels("success").inc()
        CONFIG_GOOD.set(1)
        for warning in config.warnings:
            log.warning("maintenance config", problem=str(warning))
        return config

    def reload(self) -> bool:
        """Load the file again if it changed; True when a new configuration is in force."""
        try:
            text, digest = self._read()
        except ConfigError as exc:
            return self._failed(str(exc))
        if digest == self._digest:
            return False
        try:
            config = load_text(text, str(self.path), registry=self.registry)
        except ConfigError as exc:
            self._digest = digest  # report a bad file once, not on every look
            return self._failed(str(exc))
        self._current, self._digest = config, digest
        self.last_error = None
        CONFIG_RELOADS.labels("success").inc()
        CONFIG_GOOD.set(1)
        log.info("maintenance config reloaded", file=str(self.path))
        for warning in config.warnings:
            log.warning("maintenance config", problem=str(warning))
        for listener in self.listeners:
            listener(config)
        return True

    def _failed(self, why: str) -> bool:
        if why != self.last_error:
            log.error("maintenance config not reloaded, keeping the last good one", problems=why)
        self.last_error = why
        CONFIG_RELOADS.labels("failure").inc()
        CONFIG_GOOD.set(0)
        return False

    async def watch(self, stop: asyncio.Event, interval: float = 5.0) -> None:
        """A manager runnable: look at the file until `stop`."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():
                self.reload()
