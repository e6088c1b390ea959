"""Command-line values checked the way kubectl checks them, with kubectl's words.

One-shot commands (`nodeops drain`, `cordon`, `uncordon`, and the commands that reuse them)
validate every input before their first request, so a typo never leaves a node cordoned and a
script sees the message and exit code it knows from kubectl. The messages are pflag's and
cobra's: `invalid argument "1x" for "--timeout" flag: time: unknown unit "x" in duration "1x"`.
Everything here is pure: it parses or raises `ArgumentError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeops.common.selectors import SelectorError, parse_label_selector


class ArgumentError(ValueError):
    """A bad command line. `hint` is kubectl's second line ("See 'kubectl drain -h' ...")."""

    def __init__(self, message: str, hint: str = "") -> None:
        self.message = message
        self.hint = hint
        super().__init__(message)

    def lines(self, command: str) -> str:
        """The text to print: `error: <message>` and, when there is one, the hint."""
        own = self.message.startswith(("error: ", "Error from server"))
        text = self.message if own else f"error: {self.message}"
        if self.hint == "usage":
            text += f"\nSee '{command} --help' for usage."
        elif self.hint == "help":
            text += f"\nSee '{command} -h' for help and examples"
        return text


def go_quote(text: str) -> str:
    """Go's `strconv.Quote` for the characters command lines carry."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _time_quote(text: str) -> str:
    """The `time` package's own quoting: bytes outside printable ASCII as \\xNN."""
    out = ['"']
    for ch in text:
        if ord(ch) >= 0x80 or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def _flag_error(flag: str, value: str, why: str) -> ArgumentError:
    return ArgumentError(
        f"invalid argument {go_quote(value)} for {go_quote(flag)} flag: {why}", "usage"
    )


_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_BARE_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_MAX_DURATION = (2**63 - 1) * 1e-9


def parse_duration(value: str, flag: str = "--timeout") -> float:
    """Go's `time.ParseDuration` ("1h30m", "500ms", "-1.5s", "0"), in seconds.

    A bare number is taken as seconds ("90"), which kubectl refuses ("missing unit"); nodeops
    has always accepted it. Errors carry pflag's and Go's wording.
    """
    if _BARE_NUMBER.fullmatch(value):
        seconds = float(value)
        if abs(seconds) > _MAX_DURATION:
            raise _flag_error(flag, value, f"time: invalid duration {_time_quote(value)}")
        return seconds
    orig, s = value, value
    negative = False
    if s and s[0] in "+-":
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0.0
    invalid = _flag_error(flag, value, f"time: invalid duration {_time_quote(orig)}")
    if not s:
        raise invalid
    total = 0.0
    while s:
        if not (s[0] == "." or (s[0].isascii() and s[0].isdigit())):
            raise invalid
        m = re.match(r"(\d*)(\.(\d*))?", s)
        assert m is not None
        whole, frac = m.group(1), m.group(3)
        if not whole and not frac:
            raise invalid
        s = s[m.end() :]
        i = 0
        while i < len(s) and not (s[i] == "." or (s[i].isascii() and s[i].isdigit())):
            i += 1
        if i == 0:
            raise _flag_error(flag, value, f"time: missing unit in duration {_time_quote(orig)}")
        unit, s = s[:i], s[i:]
        if unit not in _UNITS:
            raise _flag_error(
                flag,
                value,
                f"time: unknown unit {_time_quote(unit)} in duration {_time_quote(orig)}",
            )
        total += float(f"{whole or 0}.{frac or 0}") * _UNITS[unit]
        if total > _MAX_DURATION:
            raise invalid
    return -total if negative else total


_INT64 = (-(2**63), 2**63 - 1)


def parse_int(value: str, flag: str) -> int:
    """pflag's int flags: `strconv.ParseInt(value, 0, 64)` (0x, 0o, 0b, leading-0 octal, _)."""
    text = value
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    syntax = _flag_error(
        flag, value, f"strconv.ParseInt: parsing {go_quote(value)}: invalid syntax"
    )
    base = 10
    digits = text
    lower = text.lower()
    if lower.startswith(("0x", "0o", "0b")):
        base = {"x": 16, "o": 8, "b": 2}[lower[1]]
        digits = text[2:]
        if digits.startswith("_"):
            digits = digits[1:]
    elif len(text) > 1 and text[0] == "0":
        base = 8
        digits = text[1:]
    if not digits or digits.startswith("_") or digits.endswith("_") or "__" in digits:
        raise syntax
    if "_" in digits and base == 10:
        raise syntax  # Go allows underscores only with a base prefix (or leading 0)
    allowed = "0123456789abcdef"[:base]
    if any(c not in allowed for c in digits.replace("_", "").lower()):
        raise syntax
    number = sign * int(digits.replace("_", ""), base)
    if not _INT64[0] <= number <= _INT64[1]:
        raise _flag_error(
            flag, value, f"strconv.ParseInt: parsing {go_quote(value)}: value out of range"
        )
    return number


DRY_RUN_VALUES = ("none", "client", "server")


def parse_dry_run(value: str) -> str:
    """kubectl's `--dry-run`: none, client or server (true/false still mean client/none)."""
    if value in DRY_RUN_VALUES:
        return value
    if value == "true":
        return "client"
    if value == "false":
        return "none"
    raise ArgumentError(f'Invalid dry-run value ({value}). Must be "none", "server", or "client".')


def check_pod_selector(value: str) -> str:
    """`--pod-selector`, parsed before anything is done, with kubectl drain's very message."""
    if value:
        try:
            parse_label_selector(value)
        except SelectorError:
            raise ArgumentError(
                "--pod-selector=<pod_selector> must be a valid label selector"
            ) from None
    return value


def check_selector(value: str, resource: str = "/v1, Resource=nodes") -> str:
    """`-l/--selector` on a resource: kubectl learns of a bad one from the server's 400; here
    it is caught before any request, with the same line."""
    if value:
        try:
            parse_label_selector(value)
        except SelectorError as exc:
            raise ArgumentError(
                f"Error from server (BadRequest): Unable to find {go_quote(resource)} that match "
                f'label selector {go_quote(value)}, field selector "": {exc}'
            ) from None
    return value


@dataclass(frozen=True)
class ResourceArg:
    """A command-line argument naming an object of one kind: `NAME` or `TYPE/NAME`."""

    name: str


def resource_name(arg: str, kind_names: tuple[str, ...]) -> ResourceArg:
    """`node-1`, or `node/node-1` when `kind_names` holds "node"; kubectl's errors otherwise."""
    if arg == "":
        raise ArgumentError("resource name may not be empty")
    if "/" not in arg:
        return ResourceArg(arg)
    parts = arg.split("/")
    if len(parts) > 2:
        raise ArgumentError("arguments in resource/name form may not have more than one slash")
    kind, name = parts
    if not kind or not name:
        raise ArgumentError("arguments in resource/name form must have a single resource and name")
    if kind.lower() not in kind_names:
        raise ArgumentError(f"expected resource of type {kind_names[0]}, got {go_quote(kind)}")
    return ResourceArg(name)
