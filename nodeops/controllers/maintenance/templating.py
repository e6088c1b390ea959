"""Messages in Go's text/template syntax, rendered the way the reference renders them.

Templates are compiled once when the configuration loads, so a syntax error stops the load with
its place. Rendering uses gotpl (a pure-Python text/template) with a strict budget on output size,
loop iterations and function calls, and with no attribute or method access: the data handed to a
template is plain maps, lists and strings, so a template can read but never execute anything.

The data mirrors what the reference's templates see: `.Node` is the Node as Go's struct would
show it (`.Node.Name`, `.Node.Labels`, `.Node.Annotations`, `.Node.Spec.Unschedulable`,
`.Node.Status.NodeInfo.KubeletVersion`, ...), `.State` the state as a string, `.Profile` the
profile's name, `.InMaintenance` and `.LastTransition`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import gotpl
from gotpl import ExecutionBudget, SandboxPolicy, TypedMap

# A Slack message holds at most 40,000 characters; a mail body this much is plenty.
MAX_OUTPUT = 40_000
_BUDGET = ExecutionBudget(
    max_output_chars=MAX_OUTPUT,
    max_iterations=10_000,
    max_template_depth=20,
    max_function_calls=10_000,
)
_SANDBOX = SandboxPolicy(max_template_chars=100_000, default_budget=_BUDGET)

# Fields of a Node that Go declares as map[string]string (or map of quantities): indexing a
# missing key gives "" there, where a generic map gives <no value>.
_STRING_MAPS = frozenset({"labels", "annotations", "capacity", "allocatable", "nodeSelector"})


class TemplateError(ValueError):
    """A template that does not parse (`line`/`column` within the template) or fails to run."""

    def __init__(self, message: str, line: int = 0, column: int = 0, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.reason = message
        self.line = line
        self.column = column
        self.field = field


class Template:
    def __init__(self, source: str, name: str = "message") -> None:
        self.source = source
        try:
            self._template = gotpl.Template(source, name=name, sandbox=_SANDBOX, budget=_BUDGET)
        except gotpl.TemplateError as exc:
            line = int(getattr(exc, "line", 0) or 0)
            column = int(getattr(exc, "column", 0) or 0)
            raise TemplateError(_reason(str(exc)), line, column, name) from None

    def render(self, data: Mapping[str, Any]) -> str:
        try:
            return self._template.render(data)
        except gotpl.TemplateError as exc:
            raise TemplateError(_strip_prefix(str(exc))) from None
        except (RecursionError, ValueError, TypeError) as exc:
            raise TemplateError(f"rendering failed: {exc}") from None


def _strip_prefix(message: str) -> str:
    return message.removeprefix("template: ")


def _reason(message: str) -> str:
    """`template:1:7: unclosed action` -> `unclosed action` (the place is reported apart)."""
    parts = _strip_prefix(message).split(":", 3)
    if len(parts) == 4 and parts[1].strip().isdigit() and parts[2].strip().isdigit():
        return parts[3].strip()
    return _strip_prefix(message)


def go_time(value: datetime | None) -> str:
    """time.Time as Go prints it (`2006-01-02 15:04:05.999999999 -0700 MST`, in UTC)."""
    if value is None:
        return "0001-01-01 00:00:00 +0000 UTC"
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + " +0000 UTC"


def _pascal(key: str) -> str:
    return key[:1].upper() + key[1:]


def _go_view(value: Any, key: str = "") -> Any:
    if isinstance(value, Mapping):
        if key in _STRING_MAPS:
            data = {str(k): v for k, v in value.items()}
            return TypedMap(data, zero="", key_type="string", value_type="string")
        return {_pascal(str(k)): _go_view(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_view(v, key) for v in value]
    return value


def node_view(node: Mapping[str, Any]) -> dict[str, Any]:
    """The Node as Go's corev1.Node shows it: ObjectMeta's fields promoted to the top."""
    meta = node.get("metadata") or {}
    view: dict[str, Any] = {
        "Kind": node.get("kind", "Node"),
        "APIVersion": node.get("apiVersion", "v1"),
        "ObjectMeta": _go_view(meta),
        "Spec": _go_view(node.get("spec") or {}),
        "Status": _go_view(node.get("status") or {}),
    }
    view.update(_go_view(meta))
    for key in ("Labels", "Annotations"):
        if key not in view:
            view[key] = TypedMap({}, zero="", key_type="string", value_type="string")
    view["UID"] = meta.get("uid", "")
    return view


def message_data(
    node: Mapping[str, Any],
    *,
    state: str,
    profile: str,
    in_maintenance: bool,
    last_transition: datetime | None,
    log_details: bool = False,
) -> dict[str, Any]:
    return {
        "Node": node_view(node),
        "State": state,
        "Profile": profile,
        "InMaintenance": in_maintenance,
        "LastTransition": go_time(last_transition),
        "LogDetails": log_details,
    }
