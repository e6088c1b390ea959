"""Checks that ask Prometheus: an instant query's value, and kured-style firing alerts."""

from __future__ import annotations

import re
from typing import Any

import httpx
from pydantic import Field, field_validator

from nodeops.controllers.maintenance.plugins import valueexpr
from nodeops.controllers.maintenance.plugins.base import (
    CheckResult,
    PluginConfig,
    PluginContext,
    PluginError,
    PluginType,
)

TIMEOUT = 10.0


async def prometheus_get(
    http: httpx.AsyncClient, base: str, path: str, params: dict[str, str] | None = None
) -> Any:
    """GET a Prometheus API path; the `data` of a successful answer, else PluginError."""
    url = base.rstrip("/") + path
    try:
        resp = await http.get(url, params=params, timeout=TIMEOUT)
    except httpx.HTTPError as exc:
        raise PluginError(f"prometheus {url}: {type(exc).__name__}: {exc}") from exc
    try:
        body = resp.json()
    except ValueError:
        raise PluginError(
            f"prometheus {url}: HTTP {resp.status_code}, not JSON: {resp.text[:200]!r}"
        ) from None
    if resp.status_code >= 400 or not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else None
        raise PluginError(f"prometheus {url}: HTTP {resp.status_code}: {detail or resp.text[:200]}")
    return body.get("data"), body.get("warnings") or []


class InstantConfig(PluginConfig):
    url: str = Field(min_length=1)
    # Optional, as in the reference, which loads a check without them (its own tests use one
    # as a check that always fails); such a check fails with an error each time it runs.
    query: str = ""
    expr: str = ""

    @field_validator("expr")
    @classmethod
    def _expr(cls, value: str) -> str:
        if value:
            valueexpr.parse(value)
        return value

    def load_warnings(self) -> list[tuple[str, str]]:
        return [
            (name, "not set: the check fails with an error every time it runs")
            for name in ("query", "expr")
            if not getattr(self, name)
        ]


class PrometheusInstant:
    """The instant query returns exactly one sample, and `expr` holds for its value."""

    def __init__(self, config: InstantConfig) -> None:
        self.config = config
        self.expr = valueexpr.parse(config.expr) if config.expr else None

    async def check(self, ctx: PluginContext) -> CheckResult:
        c = self.config
        if not c.query or self.expr is None:
            missing = ", ".join(f"config.{n}" for n in ("query", "expr") if not getattr(c, n))
            raise PluginError(f"prometheusInstant: {missing} not set")
        data, warnings = await prometheus_get(
            ctx.cluster.http, c.url, "/api/v1/query", {"query": c.query}
        )
        info: dict[str, Any] = {"url": c.url, "query": c.query, "expr": c.expr}
        if warnings:
            info["warns"] = warnings
        kind = (data or {}).get("resultType")
        result = (data or {}).get("result")
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            raw = result[1]
        elif kind == "vector" and isinstance(result, list):
            if len(result) != 1:
                raise PluginError(f"query returned {len(result)} samples, expected exactly one")
            raw = (result[0].get("value") or [None, None])[1]
        else:
            raise PluginError(f"query returned {kind!r}, expected a vector with one sample")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise PluginError(f"sample value {raw!r} is not a number") from None
        info["value"] = value
        if self.expr.evaluate(value):
            return CheckResult.ok(**info)
        return CheckResult.blocked(f"{c.expr} is false for value {value:g}", **info)


class AlertsConfig(PluginConfig):
    url: str = Field(min_length=1)
    match: str = ""  # only alerts whose name matches count
    ignore: str = ""  # alerts whose name matches never count (kured's --alert-filter-regexp)
    firingOnly: bool = False  # pending alerts block too unless set (kured's --alert-firing-only)
    labels: dict[str, str] = Field(default_factory=dict)  # the alert must carry these labels

    @field_validator("match", "ignore")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regular expression {value!r}: {exc}") from None
        return value


class PrometheusAlerts:
    """No (matching) alert is active: kured's rule for holding reboots while something burns."""

    def __init__(self, config: AlertsConfig) -> None:
        self.config = config
        self.match = re.compile(config.match) if config.match else None
        self.ignore = re.compile(config.ignore) if config.ignore else None

    def counts(self, alert: dict[str, Any]) -> bool:
        labels = alert.get("labels") or {}
        name = str(labels.get("alertname", ""))
        if self.config.firingOnly and alert.get("state") != "firing":
            return False
        if self.match is not None and not self.match.fullmatch(name):
            return False
        if self.ignore is not None and self.ignore.fullmatch(name):
            return False
        return all(labels.get(k) == v for k, v in self.config.labels.items())

    async def check(self, ctx: PluginContext) -> CheckResult:
        data, _ = await prometheus_get(ctx.cluster.http, self.config.url, "/api/v1/alerts")
        alerts = (data or {}).get("alerts")
        if not isinstance(alerts, list):
            raise PluginError("prometheus answered without an alerts list")
        active = sorted(
            {str((a.get("labels") or {}).get("alertname", "")) for a in alerts if self.counts(a)}
        )
        if active:
            return CheckResult.blocked(f"alerts active: {', '.join(active)}", alerts=active)
        return CheckResult.ok(alerts=[])


TYPES = [
    PluginType("check", "prometheusInstant", InstantConfig, PrometheusInstant, "query value"),
    PluginType("check", "prometheusAlerts", AlertsConfig, PrometheusAlerts, "no alert firing"),
]
