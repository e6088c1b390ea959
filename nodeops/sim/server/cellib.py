"""Kubernetes' CEL library functions for cel-python, and the optional type of `optionalOldSelf`.

kube-apiserver compiles CRD validation rules in an environment that adds the cel-go string
extensions, the Kubernetes list, regex and URL libraries and optionals to standard CEL. cel-python
has only standard CEL, so the functions rules commonly call are supplied here under the same names.
cel-python calls a receiver-style function with the receiver first, and one name serves every
receiver type, so each function dispatches on its argument types the way cel-go's overloads do;
an argument no overload accepts raises TypeError, which cel-python reports as "no such overload".
The quantity, IP/CIDR, semver and format libraries live in their own modules (`cellib_*`) and
declare their overloads (`DECLS`) for the checker; this module merges them into one table.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from celpy import celtypes

from nodeops.sim.server import cellib_format, cellib_net, cellib_quantity, cellib_semver
from nodeops.sim.server.cellib_types import CelFunction, Optional, Overload, int_arg, string_arg

__all__ = ["DECLS", "FUNCTIONS", "GLOBALS", "METHODS", "Optional", "Overload"]

# The names the library adds, with the receiver types (CEL type names) each accepts; "" marks a
# function that is also (or only) called globally. The checker uses this to report kube's
# "undeclared reference" and "no matching overload" at compile time.
METHODS: dict[str, frozenset[str]] = {
    "charAt": frozenset({"string"}),
    "indexOf": frozenset({"string", "list"}),
    "lastIndexOf": frozenset({"string", "list"}),
    "lowerAscii": frozenset({"string"}),
    "upperAscii": frozenset({"string"}),
    "replace": frozenset({"string"}),
    "split": frozenset({"string"}),
    "substring": frozenset({"string"}),
    "trim": frozenset({"string"}),
    "join": frozenset({"list"}),
    "isSorted": frozenset({"list"}),
    "sum": frozenset({"list"}),
    "max": frozenset({"list"}),
    "find": frozenset({"string"}),
    "findAll": frozenset({"string"}),
    "getScheme": frozenset({"url"}),
    "getHost": frozenset({"url"}),
    "getHostname": frozenset({"url"}),
    "getPort": frozenset({"url"}),
    "getEscapedPath": frozenset({"url"}),
    "getQuery": frozenset({"url"}),
    "hasValue": frozenset({"optional"}),
    "value": frozenset({"optional"}),
    "orValue": frozenset({"optional"}),
    # standard CEL methods cel-python already has
    "startsWith": frozenset({"string"}),
    "endsWith": frozenset({"string"}),
    "contains": frozenset({"string"}),
    "matches": frozenset({"string"}),
    "size": frozenset({"string", "bytes", "list", "map", "object"}),
    "getDate": frozenset({"timestamp"}),
    "getDayOfMonth": frozenset({"timestamp"}),
    "getDayOfWeek": frozenset({"timestamp"}),
    "getDayOfYear": frozenset({"timestamp"}),
    "getFullYear": frozenset({"timestamp"}),
    "getMonth": frozenset({"timestamp"}),
    "getHours": frozenset({"timestamp", "duration"}),
    "getMinutes": frozenset({"timestamp", "duration"}),
    "getSeconds": frozenset({"timestamp", "duration"}),
    "getMilliseconds": frozenset({"timestamp", "duration"}),
}

# Global functions: standard CEL conversions plus the library's constructors.
GLOBALS: frozenset[str] = frozenset(
    {
        "size",
        "int",
        "uint",
        "double",
        "string",
        "bool",
        "bytes",
        "duration",
        "timestamp",
        "type",
        "dyn",
        "matches",
        "url",
        "isURL",
    }
)


class Url(str):
    """A parsed URL as the Kubernetes URL library returns from `url()`."""


_string = string_arg
_int = int_arg


def char_at(s: Any, i: Any) -> celtypes.StringType:
    text, idx = _string(s), _int(i)
    if idx < 0 or idx > len(text):
        raise ValueError(f"index out of range: {idx}")
    return celtypes.StringType(text[idx : idx + 1])


def index_of(target: Any, sub: Any, start: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if item == sub:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, needle = _string(target), _string(sub)
    begin = 0 if start is None else _int(start)
    if begin < 0 or begin > len(text):
        raise ValueError(f"index out of range: {begin}")
    return celtypes.IntType(text.find(needle, begin))


def last_index_of(target: Any, sub: Any, end: Any = None) -> celtypes.IntType:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if target[i] == sub:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, needle = _string(target), _string(sub)
    if end is None:
        return celtypes.IntType(text.rfind(needle))
    stop = _int(end)
    if stop < 0 or stop > len(text):
        raise ValueError(f"index out of range: {stop}")
    return celtypes.IntType(text.rfind(needle, 0, stop + len(needle)))


def lower_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in _string(s)))


def upper_ascii(s: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in _string(s)))


def replace(s: Any, old: Any, new: Any, n: Any = None) -> celtypes.StringType:
    count = -1 if n is None else _int(n)
    return celtypes.StringType(_string(s).replace(_string(old), _string(new), count))


def split(s: Any, sep: Any, n: Any = None) -> celtypes.ListType:
    text, by = _string(s), _string(sep)
    limit = -1 if n is None else _int(n)
    if limit == 0:
        return celtypes.ListType([])
    if by == "":
        parts = list(text)
        if limit > 0 and len(parts) > limit:
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
    else:
        parts = text.split(by, limit - 1 if limit > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _string(s)
    begin = _int(start)
    stop = len(text) if end is None else _int(end)
    if begin < 0 or begin > len(text):
        raise ValueError(f"index out of range: {begin}")
    if stop < 0 or stop > len(text):
        raise ValueError(f"index out of range: {stop}")
    if begin > stop:
        raise ValueError(f"invalid substring range. start: {begin}, end: {stop}")
    return celtypes.StringType(text[begin:stop])


def trim(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(s).strip())


def join(items: Any, sep: Any = None) -> celtypes.StringType:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    by = "" if sep is None else _string(sep)
    return celtypes.StringType(by.join(_string(x) for x in items))


def is_sorted(items: Any) -> celtypes.BoolType:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    return celtypes.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def sum_(items: Any) -> Any:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    total: Any = celtypes.IntType(0)
    for i, item in enumerate(items):
        total = item if i == 0 else total + item
    return total


def max_(items: Any) -> Any:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    if not items:
        raise ValueError("max(list) argument must not be empty")
    return max(items)


def find(s: Any, pattern: Any) -> celtypes.StringType:
    m = re.search(_string(pattern), _string(s))
    return celtypes.StringType(m.group(0) if m else "")


def find_all(s: Any, pattern: Any, n: Any = None) -> celtypes.ListType:
    found = [m.group(0) for m in re.finditer(_string(pattern), _string(s))]
    if n is not None and _int(n) >= 0:
        found = found[: _int(n)]
    return celtypes.ListType([celtypes.StringType(x) for x in found])


def _parse_url(s: str) -> Url | None:
    if not s or " " in s:
        return None
    if not (s.startswith("/") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", s)):
        return None
    try:
        urlsplit(s).port  # noqa: B018 - raises on a bad port
    except ValueError:
        return None
    return Url(s)


def url(s: Any) -> Url:
    parsed = _parse_url(_string(s))
    if parsed is None:
        raise ValueError(f"URL parse error during conversion from string: {s}")
    return parsed


def is_url(s: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_parse_url(_string(s)) is not None)


def _url(u: Any) -> Any:
    if not isinstance(u, Url):
        raise TypeError("no such overload")
    return urlsplit(u)


def get_scheme(u: Any) -> celtypes.StringType:
    return celtypes.StringType(_url(u).scheme)


def get_host(u: Any) -> celtypes.StringType:
    return celtypes.StringType(_url(u).netloc.rpartition("@")[2])


def get_hostname(u: Any) -> celtypes.StringType:
    host = _url(u).netloc.rpartition("@")[2]
    if host.startswith("["):
        return celtypes.StringType(host[1 : host.index("]")])
    return celtypes.StringType(host.rpartition(":")[0] if ":" in host else host)


def get_port(u: Any) -> celtypes.StringType:
    host = _url(u).netloc.rpartition("@")[2]
    tail = host.rpartition("]")[2] if host.startswith("[") else host
    return celtypes.StringType(tail.rpartition(":")[2] if ":" in tail else "")


def get_escaped_path(u: Any) -> celtypes.StringType:
    return celtypes.StringType(_url(u).path)


def get_query(u: Any) -> celtypes.MapType:
    out: dict[str, list[str]] = {}
    for part in _url(u).query.split("&"):
        if part:
            key, _, val = part.partition("=")
            out.setdefault(key, []).append(val)
    return celtypes.MapType(
        {
            celtypes.StringType(k): celtypes.ListType([celtypes.StringType(x) for x in v])
            for k, v in out.items()
        }
    )


def has_value(opt: Any) -> celtypes.BoolType:
    if not isinstance(opt, Optional):
        raise TypeError("no such overload")
    return celtypes.BoolType(opt.val is not None)


def value(opt: Any) -> Any:
    if not isinstance(opt, Optional):
        raise TypeError("no such overload")
    if opt.val is None:
        raise ValueError("optional.none() dereference")
    return opt.val


def or_value(opt: Any, default: Any) -> Any:
    if not isinstance(opt, Optional):
        raise TypeError("no such overload")
    return default if opt.val is None else opt.val


def dyn(v: Any) -> Any:
    return v


def _ordered(a: Any, b: Any) -> int:
    """compareTo of two quantities or two semvers; any other pair has no overload."""
    if isinstance(a, cellib_quantity.Quantity) and isinstance(b, cellib_quantity.Quantity):
        return cellib_quantity.compare(a, b)
    if isinstance(a, cellib_semver.Semver) and isinstance(b, cellib_semver.Semver):
        return a.compare(b)
    raise TypeError("no such overload")


def is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_ordered(a, b) == 1)


def is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_ordered(a, b) == -1)


def compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_ordered(a, b))


def _string_conversion() -> CelFunction:
    """`string()` of an IP or CIDR, and cel-python's own conversion for everything else."""
    standard = celtypes.StringType

    def string(v: Any) -> Any:
        converted = cellib_net.to_string(v)
        return standard(v) if converted is None else converted

    return string


FUNCTIONS: dict[str, CelFunction] = {
    "charAt": char_at,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "replace": replace,
    "split": split,
    "substring": substring,
    "trim": trim,
    "join": join,
    "isSorted": is_sorted,
    "sum": sum_,
    "max": max_,
    "find": find,
    "findAll": find_all,
    "url": url,
    "isURL": is_url,
    "getScheme": get_scheme,
    "getHost": get_host,
    "getHostname": get_hostname,
    "getPort": get_port,
    "getEscapedPath": get_escaped_path,
    "getQuery": get_query,
    "hasValue": has_value,
    "value": value,
    "orValue": or_value,
    "dyn": dyn,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "compareTo": compare_to,
    "string": _string_conversion(),
    **cellib_quantity.FUNCTIONS,
    **cellib_net.FUNCTIONS,
    **cellib_semver.FUNCTIONS,
    **cellib_format.FUNCTIONS,
}

# Overloads of the libraries that declare them, merged by function name.
DECLS: dict[str, tuple[Overload, ...]] = {}
for _lib in (cellib_quantity, cellib_net, cellib_semver, cellib_format):
    for _name, _overloads in _lib.DECLS.items():
        DECLS[_name] = DECLS.get(_name, ()) + _overloads
