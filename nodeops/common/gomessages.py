"""Go's way of printing bad values and field errors, for messages that must read as kube-apiserver's.

Clients and tests compare error texts with what kube-apiserver returns, so the selectors and the
simulator's admission rules format values with Go's %q and encoding/json and join field errors the
way apimachinery's `field.Invalid` and `utilerrors.Aggregate` do.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["aggregate", "field_invalid", "go_json", "go_quote"]


def go_quote(s: str) -> str:
    """Go's strconv.Quote, because field errors print bad values with %q."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch.isprintable() and ch != "\x7f":
            out.append(ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif cp < 0x80:
            out.append(f"\\x{cp:02x}")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_json(value: Any) -> str:
    """encoding/json's compact form with its HTML escaping, for non-string bad values."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def field_invalid(path: str, value: Any, detail: str) -> str:
    """field.Invalid(...).Error(): `<path>: Invalid value: <value>: <detail>`."""
    shown = go_quote(value) if isinstance(value, str) else go_json(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def aggregate(messages: list[str]) -> str:
    """utilerrors.Aggregate.Error(): one message alone, several deduplicated inside brackets."""
    seen: list[str] = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"
