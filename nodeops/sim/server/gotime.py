"""Go's `time.Parse` of kube's `MicroTime` layout, with Go's error texts.

kube-apiserver decodes a request body with encoding/json; a `MicroTime` field
(`metav1.MicroTime.UnmarshalJSON`) accepts `null` or a string that
`time.Parse("2006-01-02T15:04:05.000000Z07:00", s)` accepts, and anything else fails the whole
decode with the parser's own message, which the server returns in a 400 (a create or update) or a
422 (a patch). Clients see that message, so it is reproduced here for this one layout: the same
chunk-by-chunk walk as Go's parser, the same "cannot parse X as Y" and "out of range" wording,
and Go's quoting of the offending text.
"""

from __future__ import annotations

from typing import Any, Final

RFC3339_MICRO: Final = "2006-01-02T15:04:05.000000Z07:00"

# (literal prefix, layout element) in the order Go's nextStdChunk splits the layout.
_CHUNKS: Final = (
    (b"", "2006"),
    (b"-", "01"),
    (b"-", "02"),
    (b"T", "15"),
    (b":", "04"),
    (b":", "05"),
    (b"", ".000000"),
    (b"", "Z07:00"),
)
_DIGITS: Final = frozenset(b"0123456789")
_DAYS_BEFORE_LEAP: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class _Bad(Exception):
    """errBad / errAtoi: the element could not be read."""


def _go_quote(raw: bytes) -> str:
    """time's own quote(): printable ASCII as is, `"` and `\\` escaped, other bytes as \\xNN."""
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code >= 0x80:
            for byte in ch.encode("utf-8", "surrogateescape"):
                out.append(f"\\x{byte:02x}")
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def _is_digit(value: bytes, i: int) -> bool:
    return len(value) > i and value[i] in _DIGITS


def _getnum(value: bytes, fixed: bool) -> tuple[int, bytes]:
    if not _is_digit(value, 0):
        raise _Bad
    if not _is_digit(value, 1):
        if fixed:
            raise _Bad
        return value[0] - 48, value[1:]
    return (value[0] - 48) * 10 + value[1] - 48, value[2:]


def _atoi(text: bytes) -> int:
    neg = False
    if text and text[:1] in (b"-", b"+"):
        neg = text[:1] == b"-"
        text = text[1:]
    if not text or any(b not in _DIGITS for b in text):
        raise _Bad
    number = int(text)
    return -number if neg else number


def _days_in(month: int, year: int) -> int:
    if month == 2 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
        return 28
    return _DAYS_BEFORE_LEAP[month - 1]


def micro_time_error(value: Any) -> str | None:
    """The error `MicroTime.UnmarshalJSON` returns for a decoded JSON value, or None if it parses."""
    if value is None:
        return None
    if not isinstance(value, str):
        kind = (
            "bool"
            if isinstance(value, bool)
            else "number"
            if isinstance(value, int | float)
            else "object"
            if isinstance(value, dict)
            else "array"
        )
        return f"json: cannot unmarshal {kind} into Go value of type string"
    return _parse_error(value.encode("utf-8", "surrogatepass"))


def _parse_error(original: bytes) -> str | None:
    def cannot(value_elem: bytes, layout_elem: str) -> str:
        return (
            f"parsing time {_go_quote(original)} as {_go_quote(RFC3339_MICRO.encode())}: "
            f"cannot parse {_go_quote(value_elem)} as {_go_quote(layout_elem.encode())}"
        )

    def message(text: str) -> str:
        return f"parsing time {_go_quote(original)}{text}"

    value = original
    year = month = day = 0
    for prefix, element in _CHUNKS:
        for expected in prefix:
            if not value or value[0] != expected:
                return cannot(value, prefix.decode())
            value = value[1:]
        hold = value
        out_of_range = ""
        try:
            if element == "2006":
                if len(value) < 4 or not _is_digit(value, 0):
                    raise _Bad
                year = _atoi(value[:4])
                value = value[4:]
            elif element == "01":
                month, value = _getnum(value, True)
                if not 1 <= month <= 12:
                    out_of_range = "month"
            elif element == "02":
                day, value = _getnum(value, True)
            elif element == "15":
                hour, value = _getnum(value, False)
                if not 0 <= hour < 24:
                    out_of_range = "hour"
            elif element == "04":
                minute, value = _getnum(value, True)
                if not 0 <= minute < 60:
                    out_of_range = "minute"
            elif element == "05":
                second, value = _getnum(value, True)
                if not 0 <= second < 60:
                    out_of_range = "second"
            elif element == ".000000":
                if len(value) < 7 or value[:1] not in (b".", b","):
                    raise _Bad
                if _atoi(value[1:7]) < 0:
                    out_of_range = "fractional second"
                value = value[7:]
            else:  # Z07:00
                if value[:1] == b"Z":
                    value = value[1:]
                    continue
                if len(value) < 6 or value[3:4] != b":":
                    raise _Bad
                sign, hh, mm, value = value[:1], value[1:3], value[4:6], value[6:]
                # As Go does: read both numbers, judge the ranges, then the sign; a range
                # error is reported before an unreadable part.
                bad = False
                hours = minutes = 0
                try:
                    hours, _ = _getnum(hh, True)
                    minutes, _ = _getnum(mm, True)
                except _Bad:
                    bad = True
                if hours > 24:
                    out_of_range = "time zone offset hour"
                if minutes > 60:
                    out_of_range = "time zone offset minute"
                if bad or sign not in (b"+", b"-"):
                    raise _Bad
        except _Bad:
            if out_of_range:
                return message(f": {out_of_range} out of range")
            return cannot(hold, element)
        if out_of_range:
            return message(f": {out_of_range} out of range")
    if value:
        return message(f": extra text: {_go_quote(value)}")
    if day < 1 or day > _days_in(month, year):
        return message(": day out of range")
    return None
