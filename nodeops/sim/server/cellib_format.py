"""Kubernetes' CEL format library (`format.dns1123Label()` ... `format.named()`, `validate()`).

`<format>.validate(s)` is none when `s` is valid and otherwise the error messages of the
apimachinery validation function kube calls, so rules built from it read as kube's do. Name
formats answer with k8s.io/apimachinery/pkg/util/validation's words (lengths in characters);
qualified names and label values with the content package's (lengths in bytes), which the
project's label syntax module already speaks. The `format.x` names are namespaced functions in
cel-go; the checker's parse step turns `format.x(...)` into a call of that one name.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Callable
from typing import Any, Final

from celpy import celtypes

from nodeops.common.gomessages import go_quote
from nodeops.common.selectors.labelsyntax import label_key_errors, label_value_errors
from nodeops.sim.server.cellib_types import (
    CelFunction,
    Optional,
    Overload,
    glob,
    member,
    string_arg,
)

TYPE: Final = "kubernetes.NamedFormat"

_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT: Final = _LABEL_FMT + "(\\." + _LABEL_FMT + ")*"
_DNS1035_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE: Final = re.compile(_LABEL_FMT)
_SUBDOMAIN_RE: Final = re.compile(_SUBDOMAIN_FMT)
_DNS1035_RE: Final = re.compile(_DNS1035_FMT)
_LABEL_ERR: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_LABEL_FMT}')"
)
_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_SUBDOMAIN_FMT}')"
)
_DNS1035_ERR: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'abc-123', regex used for validation is '{_DNS1035_FMT}')"
)
_UUID_RE: Final = re.compile(
    r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE
)
_BASE64_RE: Final = re.compile(
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})"
)
_DATE_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIME_RE: Final = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))"
)


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _mask_trailing_dash(name: str) -> str:
    """A generateName prefix may end in '-': kube validates it as if that were a letter."""
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def dns1123_label(value: str) -> list[str]:
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _LABEL_RE.fullmatch(value):
        errs.append("must not contain dots" if _SUBDOMAIN_RE.fullmatch(value) else _LABEL_ERR)
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    errs = [_max_len(253)] if len(value) > 253 else []
    if not _SUBDOMAIN_RE.fullmatch(value):
        errs.append(_SUBDOMAIN_ERR)
    return errs


def dns1035_label(value: str) -> list[str]:
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _DNS1035_RE.fullmatch(value):
        errs.append(_DNS1035_ERR)
    return errs


def _request_uri(value: str) -> list[str]:
    """url.ParseRequestURI's refusals, worded as Go's url.Error."""

    def err(msg: str) -> list[str]:
        return [f"parse {go_quote(value)}: {msg}"]

    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return err("net/url: invalid control character in URL")
    if not value:
        return err("empty url")
    if value == "*":
        return []
    rest, scheme = value, ""
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", value)
    if value.startswith(":"):
        return err("missing protocol scheme")
    if m:
        scheme, rest = m.group(1), value[m.end() :]
    rest = rest.partition("?")[0]
    if not rest.startswith("/"):
        return [] if scheme else err("invalid URI for request")
    path = rest
    if scheme and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        path = slash + tail
        host = authority.rpartition("@")[2]
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in port and not port.rpartition(":")[2].isdigit() and port.rpartition(":")[2]:
            return err(f"invalid port {go_quote(':' + port.rpartition(':')[2])} after host")
    bad = re.search(r"%(?![0-9A-Fa-f]{2})(.{0,2})", path)
    if bad:
        return err(f"invalid URL escape {go_quote('%' + bad.group(1))}")
    return []


def _date_ok(value: str) -> bool:
    if not _DATE_RE.fullmatch(value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _datetime_ok(value: str) -> bool:
    """strfmt's IsDateTime: a valid date, 't', and a time it only bounds by string order."""
    if len(value) < 4:
        return False
    parts = value.lower().split("t")
    if len(parts) < 2 or not _date_ok(parts[0]):
        return False
    m = _TIME_RE.search(parts[1])
    if m is None or not re.match(_TIME_RE.pattern + "$", parts[1]):
        return False
    return m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _base64_ok(value: str) -> bool:
    if not _BASE64_RE.fullmatch(value):
        return False
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        return False
    return True


def _check(ok: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda value: [] if ok(value) else [message]


class NamedFormat:
    __slots__ = ("name", "validate")

    def __init__(self, name: str, validate: Callable[[str], list[str]]) -> None:
        self.name = name
        self.validate = validate

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedFormat) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


FORMATS: Final[dict[str, NamedFormat]] = {
    "dns1123Label": NamedFormat("DNS1123Label", dns1123_label),
    "dns1123Subdomain": NamedFormat("DNS1123Subdomain", dns1123_subdomain),
    "dns1035Label": NamedFormat("DNS1035Label", dns1035_label),
    "qualifiedName": NamedFormat("QualifiedName", label_key_errors),
    "dns1123LabelPrefix": NamedFormat(
        "DNS1123LabelPrefix", lambda s: dns1123_label(_mask_trailing_dash(s))
    ),
    "dns1123SubdomainPrefix": NamedFormat(
        "DNS1123SubdomainPrefix", lambda s: dns1123_subdomain(_mask_trailing_dash(s))
    ),
    "dns1035LabelPrefix": NamedFormat(
        "DNS1035LabelPrefix", lambda s: dns1035_label(_mask_trailing_dash(s))
    ),
    "labelValue": NamedFormat("LabelValue", label_value_errors),
    "uri": NamedFormat("URI", _request_uri),
    "uuid": NamedFormat(
        "uuid", _check(lambda s: bool(_UUID_RE.fullmatch(s)), "does not match the UUID format")
    ),
    "byte": NamedFormat("byte", _check(_base64_ok, "invalid base64")),
    "date": NamedFormat("date", _check(_date_ok, "invalid date")),
    "datetime": NamedFormat("datetime", _check(_datetime_ok, "invalid datetime")),
}


def named(name: Any) -> Optional:
    return Optional(FORMATS.get(string_arg(name)))


def validate(fmt: Any, value: Any) -> Optional:
    if not isinstance(fmt, NamedFormat):
        raise TypeError("no such overload")
    errs = fmt.validate(string_arg(value))
    if not errs:
        return Optional(None)
    return Optional(celtypes.ListType([celtypes.StringType(e) for e in errs]))


def _constant(f: NamedFormat) -> CelFunction:
    return lambda: f


FUNCTIONS: dict[str, CelFunction] = {
    "format.named": named,
    "validate": validate,
    **{f"format.{name}": _constant(f) for name, f in FORMATS.items()},
}

DECLS: dict[str, tuple[Overload, ...]] = {
    "format.named": (glob(("string",), f"optional({TYPE})"),),
    "validate": (member(TYPE, ("string",), "optional(list(string))"),),
    **{f"format.{name}": (glob((), TYPE),) for name in FORMATS},
}
