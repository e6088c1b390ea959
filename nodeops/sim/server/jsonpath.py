"""Kubernetes JSONPath (k8s.io/client-go/util/jsonpath), the dialect of CRD printer columns and
`kubectl get -o jsonpath`.

It is not RFC 9535 JSONPath: kube's parser and evaluator have their own rules and quirks, and
printed columns must come out the same as from a real cluster, so this follows client-go:

* `['a.b']` is *not* a key with a dot; it is the path `.a.b`. A literal dot is escaped:
  `.metadata.labels.kubernetes\\.io/hostname` or `['kubernetes\\.io/hostname']`.
* an out-of-range index is an error even when missing keys are allowed;
* filter comparisons need both sides of the same type (`1 == 1.0` is an error);
* values render as client-go prints them: maps and lists as compact JSON with sorted keys,
  floats as Go's `%v`, null as `null`.

Evaluation works on decoded JSON (dict, list, str, int, float, bool, None).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "JsonPath",
    "JsonPathError",
    "compile_path",
    "compile_template",
    "format_value",
    "go_json",
]


class JsonPathError(ValueError):
    """A JSONPath that does not parse, or that fails on a given object.

    `reason` is client-go's own message (what kubectl and kube-apiserver print); the string form
    also names the expression.
    """

    def __init__(self, expression: str, reason: str, *, parsing: bool = True) -> None:
        self.expression = expression
        self.reason = reason
        what = "invalid JSONPath" if parsing else "JSONPath"
        super().__init__(f"{what} {expression!r}: {reason}")


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _List:
    nodes: list[Any] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class _Text:
    text: str


@dataclass(slots=True, frozen=True)
class _Field:
    name: str


@dataclass(slots=True, frozen=True)
class _Param:
    value: int
    known: bool
    derived: bool = False


@dataclass(slots=True, frozen=True)
class _Array:
    params: tuple[_Param, _Param, _Param]


@dataclass(slots=True, frozen=True)
class _Filter:
    left: _List
    right: _List
    operator: str


@dataclass(slots=True, frozen=True)
class _Literal:
    """Int, float or bool constant, repeated once per input value like client-go does."""

    value: Any


@dataclass(slots=True, frozen=True)
class _Wildcard:
    pass


@dataclass(slots=True, frozen=True)
class _Recursive:
    pass


@dataclass(slots=True, frozen=True)
class _Union:
    lists: tuple[_List, ...]


@dataclass(slots=True, frozen=True)
class _Identifier:
    name: str


# --------------------------------------------------------------------------------------------
# Parser (a port of client-go's, including where it is surprising)
# --------------------------------------------------------------------------------------------

_EOF: Final = ""
_DICT_KEY_RE: Final = re.compile(r"'([^']*)'")
_SLICE_RE: Final = re.compile(r"(-?[0-9]*)(:-?[0-9]*)?(:-?[0-9]*)?")
_FILTER_RE: Final = re.compile(r"([^!<>=]+)([!<>=]+)(.+?)\Z")
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_TERMINATORS: Final = frozenset(" \t\r\n.,[]$@{}")


class _ParseError(Exception):
    pass


def _is_digit(ch: str) -> bool:
    return ch != _EOF and unicodedata.category(ch) == "Nd"


def _is_alnum(ch: str) -> bool:
    return ch != _EOF and (ch == "_" or ch.isalpha() or _is_digit(ch))


def _is_terminator(ch: str) -> bool:
    return ch == _EOF or ch in _TERMINATORS


def _go_rune(ch: str) -> str:
    """fmt's %#U."""
    if ch.isprintable():
        return f"U+{ord(ch):04X} '{ch}'"
    return f"U+{ord(ch):04X}"


_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}


def _unquote(s: str) -> str:
    """client-go's UnquoteExtend: strconv.Unquote that also accepts single quotes."""
    if len(s) < 2 or s[0] != s[-1] or s[0] not in "\"'":
        raise ValueError("invalid syntax")
    quote = s[0]
    body = s[1:-1]
    if "\\" not in body and quote not in body:
        return body
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c == quote:
            raise ValueError("invalid syntax")
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("invalid syntax")
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in "'\"":
            if e != quote:
                raise ValueError("invalid syntax")
            out.append(e)
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i : i + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("invalid syntax")
            cp = int(digits, 16)
            if e != "x" and (cp > 0x10FFFF or 0xD800 <= cp < 0xE000):
                raise ValueError("invalid syntax")
            out.append(chr(cp))
            i += width
        elif e in "01234567":
            digits = body[i - 1 : i + 2]
            if len(digits) != 3 or not all(d in "01234567" for d in digits):
                raise ValueError("invalid syntax")
            cp = int(digits, 8)
            if cp > 255:
                raise ValueError("invalid syntax")
            out.append(chr(cp))
            i += 2
        else:
            raise ValueError("invalid syntax")
    return "".join(out)


class _Parser:
    """Reads a template into a list of top-level nodes (text and `{...}` lists)."""

    def __init__(self, text: str) -> None:
        self.input = text
        self.pos = 0
        self.start = 0
        self.width = 0
        self.root: list[_Text | _List] = []

    # --- cursor ---

    def next(self) -> str:
        if self.pos >= len(self.input):
            self.width = 0
            return _EOF
        self.width = 1
        ch = self.input[self.pos]
        self.pos += 1
        return ch

    def peek(self) -> str:
        ch = self.next()
        self.backup()
        return ch

    def backup(self) -> None:
        self.pos -= self.width

    def consume_text(self) -> str:
        value = self.input[self.start : self.pos]
        self.start = self.pos
        return value

    def rest(self) -> str:
        return self.input[self.pos :]

    # --- grammar ---

    def parse(self) -> list[_Text | _List]:
        while True:
            brace = self.input.find("{", self.pos)
            if brace < 0:
                self.pos = len(self.input)
                if self.pos > self.start:
                    self.root.append(_Text(self.consume_text()))
                return self.root
            self.pos = brace
            if self.pos > self.start:
                self.root.append(_Text(self.consume_text()))
            self.pos += 1
            self.consume_text()
            action = _List()
            self.root.append(action)
            self.inside_action(action)

    def inside_action(self, cur: _List) -> None:
        while True:
            rest = self.rest()
            if rest.startswith("}"):
                self.pos += 1
                self.consume_text()
                return
            if rest.startswith("[?("):
                self.parse_filter(cur)
                continue
            if rest.startswith(".."):
                self.parse_recursive(cur)
                continue
            r = self.next()
            if r == _EOF or r in "\r\n":
                raise _ParseError("unclosed action")
            if r in " @$":
                self.consume_text()
            elif r == "[":
                self.parse_array(cur)
            elif r in "\"'":
                self.parse_quote(cur, r)
            elif r == ".":
                self.parse_field(cur)
            elif r in "+-" or _is_digit(r):
                self.backup()
                self.parse_number(cur)
            elif _is_alnum(r):
                self.backup()
                self.parse_identifier(cur)
            else:
                raise _ParseError(f"unrecognized character in action: {_go_rune(r)}")

    def parse_identifier(self, cur: _List) -> None:
        while not _is_terminator(self.next()):
            pass
        self.backup()
        value = self.consume_text()
        if value in ("true", "false"):
            cur.nodes.append(_Literal(value == "true"))
        else:
            cur.nodes.append(_Identifier(value))

    def parse_recursive(self, cur: _List) -> None:
        if cur.nodes and isinstance(cur.nodes[-1], _Recursive):
            raise _ParseError("invalid multiple recursive descent")
        self.pos += 2
        self.consume_text()
        cur.nodes.append(_Recursive())
        if _is_alnum(self.peek()):
            self.parse_field(cur)

    def parse_number(self, cur: _List) -> None:
        if self.peek() in ("+", "-"):
            self.next()
        while True:
            r = self.next()
            if r != "." and not _is_digit(r):
                self.backup()
                break
        value = self.consume_text()
        if _INT_RE.fullmatch(value) and -(2**63) <= int(value) < 2**63:
            cur.nodes.append(_Literal(int(value)))
            return
        try:
            if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)", value):
                raise ValueError(value)
            cur.nodes.append(_Literal(float(value)))
        except ValueError:
            raise _ParseError(f"cannot parse number {value}") from None

    def parse_array(self, cur: _List) -> None:
        while True:
            r = self.next()
            if r == _EOF or r == "\n":
                raise _ParseError("unterminated array")
            if r == "]":
                break
        text = self.consume_text()[1:-1]
        if text == "*":
            text = ":"
        parts = text.split(",")
        if len(parts) > 1:
            lists = tuple(_parse_action(f"[{p.strip(' ')}]") for p in parts)
            cur.nodes.append(_Union(lists))
            return
        m = _DICT_KEY_RE.fullmatch(text)
        if m:
            cur.nodes.extend(_parse_action("." + m.group(1)).nodes)
            return
        m = _SLICE_RE.fullmatch(text)
        if m is None:
            raise _ParseError(f"invalid array index {text}")
        groups = [m.group(1) or "", m.group(2) or "", m.group(3) or ""]
        params: list[_Param] = []
        for i, raw in enumerate(groups):
            if raw:
                if i > 0:
                    raw = raw[1:]
                if i > 0 and raw == "":
                    params.append(_Param(0, False))
                else:
                    try:
                        params.append(_Param(int(raw), True))
                    except ValueError:
                        raise _ParseError(f"array index {raw} is not a number") from None
            elif i == 1:
                params.append(_Param(params[0].value + 1, True, True))
            else:
                params.append(_Param(0, False))
        cur.nodes.append(_Array((params[0], params[1], params[2])))

    def parse_filter(self, cur: _List) -> None:
        self.pos += 3
        self.consume_text()
        begin = False
        end = False
        pair = ""
        while True:
            r = self.next()
            if r == _EOF or r == "\n":
                raise _ParseError("unterminated filter")
            if r in "\"'":
                if not begin:
                    begin = True
                    pair = r
                    continue
                if self.input[self.pos - 2] != "\\" and r == pair:
                    end = True
            elif r == ")" and begin == end:
                break
        if self.next() != "]":
            raise _ParseError("unclosed array expect ]")
        text = self.consume_text()[:-2]
        m = _FILTER_RE.match(text)
        if m is None:
            cur.nodes.append(_Filter(_parse_action(text), _List(), "exists"))
        else:
            left = _parse_action(m.group(1))
            right = _parse_action(m.group(3))
            cur.nodes.append(_Filter(left, right, m.group(2)))

    def parse_quote(self, cur: _List, end: str) -> None:
        while True:
            r = self.next()
            if r == _EOF or r == "\n":
                raise _ParseError("unterminated quoted string")
            if r == end and self.input[self.pos - 2] != "\\":
                break
        value = self.consume_text()
        try:
            cur.nodes.append(_Text(_unquote(value)))
        except ValueError as e:
            raise _ParseError(f"unquote string {value} error {e}") from None

    def parse_field(self, cur: _List) -> None:
        self.consume_text()
        while True:
            r = self.next()
            if r == "\\":
                self.next()
            elif _is_terminator(r):
                self.backup()
                break
        value = self.consume_text()
        if value == "*":
            cur.nodes.append(_Wildcard())
        else:
            cur.nodes.append(_Field(value.replace("\\", "")))


def _parse_action(text: str) -> _List:
    """client-go's parseAction: parse `{text}` and keep its first action."""
    root = _Parser("{" + text + "}").parse()
    first = root[0]
    assert isinstance(first, _List)
    return first


# --------------------------------------------------------------------------------------------
# Go value formatting
# --------------------------------------------------------------------------------------------


def _shortest(x: float) -> tuple[str, str, int]:
    """Sign, shortest round-trip digits and decimal-point position of a finite float."""
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    if ds == "0":
        return ("-" if sign else ""), "0", 1
    lead = len(digits) - len("".join(map(str, digits)).lstrip("0"))
    point = len(digits) + exponent - lead
    return ("-" if sign else ""), ds.lstrip("0"), point


def _fixed(sign: str, ds: str, point: int) -> str:
    if point <= 0:
        return f"{sign}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return sign + ds + "0" * (point - len(ds))
    return f"{sign}{ds[:point]}.{ds[point:]}"


def _exp(sign: str, ds: str, point: int, min_exp_digits: int) -> str:
    e = point - 1
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return f"{sign}{mant}e{'-' if e < 0 else '+'}{abs(e):0{min_exp_digits}d}"


def go_float_v(x: float) -> str:
    """fmt's %v for a float64 (shortest %g, switching to exponent form at 1e+06 and 1e-05)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    sign, ds, point = _shortest(x)
    if ds == "0":
        return sign + "0"
    exp = point - 1
    if exp < -4 or exp >= 6:
        return _exp(sign, ds, point, 2)
    return _fixed(sign, ds, point)


def _go_json_float(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"json: unsupported value: {go_float_v(x)}")
    sign, ds, point = _shortest(x)
    if ds == "0":
        return sign + "0"
    if abs(x) < 1e-6 or abs(x) >= 1e21:
        return _exp(sign, ds, point, 1 if point - 1 < 0 else 2)
    return _fixed(sign, ds, point)


def _go_json_string(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_json(value: Any) -> str:
    """encoding/json.Marshal of decoded JSON: compact, keys sorted, HTML characters escaped."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_json_float(value)
    if isinstance(value, str):
        return _go_json_string(value)
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{_go_json_string(k)}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def format_value(value: Any) -> str:
    """How client-go prints one result: JSON for maps and lists, Go's %v for everything else."""
    if isinstance(value, (dict, list, tuple)):
        return go_json(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return go_float_v(value)
    return str(value)


def _go_type(value: Any) -> str:
    """reflect.Type.String() of the value json.Unmarshal would have produced."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, (list, tuple)):
        return "[]interface {}"
    return "interface {}"


def _go_v(value: Any) -> str:
    """fmt's %v of a decoded JSON value, for error messages."""
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        inner = " ".join(f"{k}:{_go_v(v)}" for k, v in sorted(value.items()))
        return f"map[{inner}]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(_go_v(v) for v in value) + "]"
    return format_value(value)


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


class _EvalError(Exception):
    """An evaluation failure, with the partial value client-go returns alongside its error."""

    def __init__(self, message: str, partial: list[Any]) -> None:
        super().__init__(message)
        self.message = message
        self.partial = partial


_KIND_BOOL: Final = 1
_KIND_INT: Final = 2
_KIND_FLOAT: Final = 3
_KIND_STRING: Final = 4


def _kind(v: Any) -> int:
    if isinstance(v, bool):
        return _KIND_BOOL
    if isinstance(v, int):
        return _KIND_INT
    if isinstance(v, float):
        return _KIND_FLOAT
    if isinstance(v, str):
        return _KIND_STRING
    raise ValueError("invalid type for comparison")


def _equal(a: Any, b: Any) -> bool:
    if _kind(a) != _kind(b):
        raise ValueError("incompatible types for comparison")
    return bool(a == b)


def _less(a: Any, b: Any) -> bool:
    ka = _kind(a)
    if ka != _kind(b):
        raise ValueError("incompatible types for comparison")
    if ka == _KIND_BOOL:
        raise ValueError("invalid type for comparison")
    return bool(a < b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "<":
        return _less(a, b)
    if op == ">":
        return not (_less(a, b) or _equal(a, b))
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op == "<=":
        return _less(a, b) or _equal(a, b)
    if op == ">=":
        return not _less(a, b)
    raise ValueError(f"unrecognized filter operator {op}")


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        # Go indexes strings by byte.
        return list(value.encode("utf-8"))
    return []


@dataclass(slots=True)
class _RangeState:
    begin: int = 0
    inside: int = 0
    end: int = 0
    last_end: int = -1


class JsonPath:
    """A compiled JSONPath template; immutable and safe to share between threads."""

    __slots__ = ("_allow_missing", "_nodes", "_simple", "expression", "template")

    def __init__(
        self, expression: str, template: str, nodes: list[_Text | _List], allow_missing: bool
    ) -> None:
        self.expression = expression
        self.template = template
        self._nodes = nodes
        self._allow_missing = allow_missing
        # Printer columns are mostly plain `.a.b.c` chains; those skip the general evaluator.
        self._simple: tuple[str, ...] | None = None
        if len(nodes) == 1 and isinstance(nodes[0], _List):
            chain = nodes[0].nodes
            if chain and all(isinstance(n, _Field) for n in chain):
                self._simple = tuple(n.name for n in chain)

    def __repr__(self) -> str:
        return f"JsonPath({self.expression!r})"

    # --- public API ---

    def find_results(self, obj: Any) -> list[list[Any]]:
        """One result list per top-level node, as client-go's FindResults returns them."""
        if self._simple is not None:
            cur = obj
            for name in self._simple:
                if isinstance(cur, dict) and name in cur:
                    cur = cur[name]
                elif self._allow_missing:
                    return [[]]
                else:
                    raise JsonPathError(self.expression, f"{name} is not found", parsing=False)
            return [[cur]]
        try:
            return self._run(0, obj, _RangeState())
        except _EvalError as e:
            raise JsonPathError(self.expression, e.message, parsing=False) from None

    def find(self, obj: Any) -> list[Any]:
        """Every value the expression selects, in order."""
        return [v for results in self.find_results(obj) for v in results]

    def first(self, obj: Any) -> Any | None:
        """The first selected value, None when nothing is selected (how printer columns read)."""
        results = self.find_results(obj)
        if not results or not results[0]:
            return None
        return results[0][0]

    def render(self, obj: Any) -> str:
        """The text `kubectl get -o jsonpath=...` prints for `obj`."""
        return "".join(" ".join(format_value(v) for v in r) for r in self.find_results(obj))

    # --- evaluation ---

    def _run(self, start: int, data: Any, st: _RangeState) -> list[list[Any]]:
        nodes = self._nodes
        full: list[list[Any]] = []
        i = start
        while i < len(nodes):
            results = self._walk([data], nodes[i], st)
            if st.end > 0 and st.end <= st.inside:
                st.end -= 1
                st.last_end = i
                break
            if st.begin > 0:
                st.begin -= 1
                st.inside += 1
                if results:
                    for value in results:
                        full.extend(self._run(i + 1, value, st))
                else:
                    # Still walk the body so the matching {end} is found.
                    self._run(i + 1, None, st)
                st.inside -= 1
                if st.last_end > i:
                    i = st.last_end
                i += 1
                continue
            full.append(results)
            i += 1
        return full

    def _walk(self, values: list[Any], node: Any, st: _RangeState) -> list[Any]:
        if isinstance(node, _List):
            return self._eval_list(values, node, st)
        if isinstance(node, _Text):
            return [node.text]
        if isinstance(node, _Field):
            return self._eval_field(values, node.name)
        if isinstance(node, _Array):
            return self._eval_array(values, node)
        if isinstance(node, _Filter):
            return self._eval_filter(values, node, st)
        if isinstance(node, _Literal):
            return [node.value for _ in values]
        if isinstance(node, _Wildcard):
            return [c for v in values if v is not None for c in _children(v)]
        if isinstance(node, _Recursive):
            return self._eval_recursive(values)
        if isinstance(node, _Union):
            out: list[Any] = []
            for lst in node.lists:
                try:
                    out.extend(self._eval_list(values, lst, st))
                except _EvalError as e:
                    raise _EvalError(e.message, values) from None
            return out
        if isinstance(node, _Identifier):
            if node.name == "range":
                st.begin += 1
                return values
            if node.name == "end":
                if st.inside > 0:
                    st.end += 1
                    return []
                raise _EvalError("not in range, nothing to end", [])
            raise _EvalError(f"unrecognized identifier {node.name}", values)
        raise _EvalError(f"unexpected Node {node!r}", values)

    def _eval_list(self, values: list[Any], node: _List, st: _RangeState) -> list[Any]:
        cur = values
        for child in node.nodes:
            cur = self._walk(cur, child, st)
        return cur

    def _eval_field(self, values: list[Any], name: str) -> list[Any]:
        if not values:
            return []
        results = [v[name] for v in values if isinstance(v, dict) and name in v]
        if not results and not self._allow_missing:
            raise _EvalError(f"{name} is not found", results)
        return results

    def _eval_array(self, values: list[Any], node: _Array) -> list[Any]:
        result: list[Any] = []
        for value in values:
            if value is None:
                continue
            if not isinstance(value, (list, tuple)):
                raise _EvalError(f"{_go_type(value)} is not array or slice", values)
            p0, p1, p2 = node.params
            length = len(value)
            start = p0.value if p0.known else 0
            if start < 0:
                start += length
            stop = p1.value if p1.known else length
            if stop < 0 or (stop == 0 and p1.derived):
                stop += length
            if stop == start:
                return result
            if start >= length or start < 0:
                raise _EvalError(
                    f"array index out of bounds: index {start}, length {length}", values
                )
            if stop > length or stop < 0:
                raise _EvalError(
                    f"array index out of bounds: index {stop - 1}, length {length}", values
                )
            if start > stop:
                raise _EvalError(
                    f"starting index {start} is greater than ending index {stop}", values
                )
            step = 1
            if p2.known:
                if p2.value <= 0:
                    raise _EvalError("step must be > 0", values)
                step = p2.value
            result.extend(value[start:stop:step])
        return result

    def _eval_recursive(self, values: list[Any]) -> list[Any]:
        result: list[Any] = []
        for value in values:
            if value is None:
                continue
            children = _children(value)
            if children:
                result.append(value)
                result.extend(self._eval_recursive(children))
        return result

    def _eval_filter(self, values: list[Any], node: _Filter, st: _RangeState) -> list[Any]:
        results: list[Any] = []
        for value in values:
            if not isinstance(value, (list, tuple)):
                raise _EvalError(
                    f"{_go_v(value)} is not array or slice and cannot be filtered", values
                )
            for item in value:
                try:
                    lefts = self._eval_list([item], node.left, st)
                    left_error: _EvalError | None = None
                except _EvalError as e:
                    lefts = e.partial
                    left_error = e
                if node.operator == "exists":
                    if lefts:
                        results.append(item)
                    continue
                if left_error is not None:
                    raise _EvalError(left_error.message, values)
                if not lefts:
                    continue
                if len(lefts) > 1:
                    raise _EvalError("can only compare one element at a time", values)
                try:
                    rights = self._eval_list([item], node.right, st)
                except _EvalError as e:
                    raise _EvalError(e.message, values) from None
                if not rights:
                    continue
                if len(rights) > 1:
                    raise _EvalError("can only compare one element at a time", values)
                try:
                    passed = _compare(node.operator, lefts[0], rights[0])
                except ValueError as e:
                    raise _EvalError(str(e), results) from None
                if passed:
                    results.append(item)
        return results


def compile_template(text: str, *, allow_missing_keys: bool = True) -> JsonPath:
    """Compile a kubectl-style template: literal text with `{...}` actions, `{range}`/`{end}`.

    Missing keys yield nothing by default, as with kubectl's --allow-missing-template-keys.
    """
    try:
        nodes = _Parser(text).parse()
    except _ParseError as e:
        raise JsonPathError(text, str(e)) from None
    return JsonPath(text, text, nodes, allow_missing_keys)


def compile_path(
    expr: str, *, template: bool | None = None, allow_missing_keys: bool = True
) -> JsonPath:
    """Compile a path such as `.status.conditions[?(@.type=="Ready")].status`.

    A bare path is wrapped in braces, which is exactly what kube does with a CRD column's
    `jsonPath`. With `template=None` an expression starting with `{` is taken as a template;
    `template=False` always wraps (CRD semantics), `template=True` never does.
    """
    as_template = expr.startswith("{") if template is None else template
    text = expr if as_template else "{" + expr + "}"
    try:
        nodes = _Parser(text).parse()
    except _ParseError as e:
        raise JsonPathError(expr, str(e)) from None
    return JsonPath(expr, text, nodes, allow_missing_keys)
