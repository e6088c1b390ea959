"""Kubernetes label and field selectors with apimachinery's grammar, semantics and error texts.

The simulated API server answers `?labelSelector=` and `?fieldSelector=` the way kube-apiserver
does: the same inputs parse, the same ones fail with the same message (returned as 400 BadRequest),
and the canonical string form is identical, so clients that echo selectors back see no difference.

A list call may test one selector against 150,000 objects, so a parsed selector compiles its
requirements once into a single Python function: `selector.matches(labels)` is a direct call of
that function, with no per-requirement dispatch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

__all__ = [
    "EVERYTHING",
    "FIELDS_EVERYTHING",
    "NOTHING",
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "SelectorError",
    "escape_field_value",
    "format_labels",
    "label_selector_from_object",
    "parse_field_selector",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """A selector that apimachinery would refuse; the message is the one kube-apiserver returns."""


# --------------------------------------------------------------------------------------------
# Go-compatible message helpers
# --------------------------------------------------------------------------------------------


def _go_quote(s: str) -> str:
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


def _go_json(value: Any) -> str:
    """encoding/json's compact form with its HTML escaping, for non-string bad values."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _invalid(path: str, value: Any, detail: str) -> str:
    """field.Invalid(...).Error(): `<path>: Invalid value: <value>: <detail>`."""
    shown = _go_quote(value) if isinstance(value, str) else _go_json(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(messages: list[str]) -> str:
    """utilerrors.Aggregate.Error(): one message alone, several deduplicated inside brackets."""
    seen: list[str] = []
    for m in messages:
        if m not in seen:
            seen.append(m)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


# --------------------------------------------------------------------------------------------
# Label key and value validation (k8s.io/apimachinery/pkg/api/validate/content)
# --------------------------------------------------------------------------------------------

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_MAX: Final = 63
_SUBDOMAIN_MAX: Final = 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _byte_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _label_key_errors(key: str) -> list[str]:
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > _SUBDOMAIN_MAX:
                errs.append(f"prefix part must be no more than {_SUBDOMAIN_MAX} bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errs.append(
                    "prefix part "
                    + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > _LABEL_MAX:
        errs.append(f"name part must be no more than {_LABEL_MAX} bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


# The same Go formatting for other validation messages (the simulator's admission rules).
go_quote = _go_quote
go_json = _go_json
label_key_errors = _label_key_errors


def _label_value_errors(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > _LABEL_MAX:
        errs.append(f"must be no more than {_LABEL_MAX} bytes")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


# --------------------------------------------------------------------------------------------
# Label requirements and selectors
# --------------------------------------------------------------------------------------------

# selection.Operator spellings, which are also what Requirement.String() dispatches on.
OP_EQUALS: Final = "="
OP_DOUBLE_EQUALS: Final = "=="
OP_NOT_EQUALS: Final = "!="
OP_IN: Final = "in"
OP_NOT_IN: Final = "notin"
OP_EXISTS: Final = "exists"
OP_DOES_NOT_EXIST: Final = "!"
OP_GT: Final = "gt"
OP_LT: Final = "lt"

_BINARY_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"
_INT64_RE: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), which unlike int() refuses spaces and underscores."""
    if not _INT64_RE.fullmatch(text):
        return None
    n = int(text)
    if n < _INT64_MIN or n > _INT64_MAX:
        return None
    return n


class LabelRequirement(NamedTuple):
    """One `key <op> values` term; `values` keeps the order the requirement was built with."""

    key: str
    operator: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        op = self.operator
        if op == OP_EXISTS:
            return self.key
        if op == OP_DOES_NOT_EXIST:
            return "!" + self.key
        symbol = {
            OP_EQUALS: "=",
            OP_DOUBLE_EQUALS: "==",
            OP_NOT_EQUALS: "!=",
            OP_IN: " in ",
            OP_NOT_IN: " notin ",
            OP_GT: ">",
            OP_LT: "<",
        }[op]
        vals = self.values[0] if len(self.values) == 1 else ",".join(sorted(self.values))
        if op in (OP_IN, OP_NOT_IN):
            vals = "(" + vals + ")"
        return self.key + symbol + vals


def _new_requirement(key: str, op: str, values: list[str], path: str = "") -> LabelRequirement:
    """labels.NewRequirement: validates everything and reports all problems at once."""
    prefix = path + "." if path else ""
    errs: list[str] = []
    # Go reports an empty value list as a nil slice, which encodes as `null`.
    shown_values: list[str] | None = values if values else None
    key_errs = _label_key_errors(key)
    if key_errs:
        errs.append(_invalid(prefix + "key", key, "; ".join(key_errs)))
    values_path = prefix + "values"
    if op in (OP_IN, OP_NOT_IN):
        if not values:
            errs.append(
                _invalid(
                    values_path,
                    shown_values,
                    "for 'in', 'notin' operators, values set can't be empty",
                )
            )
    elif op in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_NOT_EQUALS):
        if len(values) != 1:
            errs.append(
                _invalid(
                    values_path, shown_values, "exact-match compatibility requires one single value"
                )
            )
    elif op in (OP_EXISTS, OP_DOES_NOT_EXIST):
        if values:
            errs.append(
                _invalid(
                    values_path,
                    shown_values,
                    "values set must be empty for exists and does not exist",
                )
            )
    elif op in (OP_GT, OP_LT):
        if len(values) != 1:
            errs.append(
                _invalid(
                    values_path,
                    shown_values,
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                )
            )
        for i, v in enumerate(values):
            if _parse_int64(v) is None:
                errs.append(
                    _invalid(
                        f"{values_path}[{i}]",
                        v,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    else:
        raise ValueError(f"unknown label selector operator {op!r}")
    for i, v in enumerate(values):
        v_errs = _label_value_errors(v)
        if v_errs:
            errs.append(_invalid(f"{values_path}[{i}][{key}]", v, "; ".join(v_errs)))
    if errs:
        raise SelectorError(_aggregate(errs))
    return LabelRequirement(key, op, tuple(values))


_MatchFn = Callable[[Mapping[str, str] | None], bool]
_EMPTY: Final[Mapping[str, str]] = {}


def _int_compare(value: str | None, bound: int, greater: bool) -> bool:
    if value is None:
        return False
    n = _parse_int64(value)
    if n is None:
        return False
    return n > bound if greater else n < bound


def _match_all(labels: Mapping[str, str] | None) -> bool:
    return True


def _match_none(labels: Mapping[str, str] | None) -> bool:
    return False


def _compile_label_matcher(reqs: tuple[LabelRequirement, ...]) -> _MatchFn:
    """Build one function testing every requirement inline.

    Only indices reach the generated source; keys and values are bound as constants in its
    namespace, so no selector text is ever evaluated.
    """
    if not reqs:
        return _match_all
    namespace: dict[str, Any] = {"_EMPTY": _EMPTY, "_int_compare": _int_compare}
    terms: list[str] = []
    needs_get = False
    for i, r in enumerate(reqs):
        k = f"_k{i}"
        v = f"_v{i}"
        namespace[k] = r.key
        op = r.operator
        if op == OP_EXISTS:
            terms.append(f"{k} in labels")
        elif op == OP_DOES_NOT_EXIST:
            terms.append(f"{k} not in labels")
        elif op in (OP_GT, OP_LT):
            # NewRequirement guarantees exactly one integer value.
            namespace[v] = _parse_int64(r.values[0])
            terms.append(f"_int_compare(get({k}), {v}, {op == OP_GT})")
            needs_get = True
        else:
            positive = op in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN)
            if len(set(r.values)) == 1:
                namespace[v] = r.values[0]
                terms.append(f"get({k}) {'==' if positive else '!='} {v}")
            else:
                namespace[v] = frozenset(r.values)
                terms.append(f"get({k}) {'in' if positive else 'not in'} {v}")
            needs_get = True
    lines = ["def _match(labels):", "    if labels is None:", "        labels = _EMPTY"]
    if needs_get:
        lines.append("    get = labels.get")
    lines.append("    return " + " and ".join(terms))
    exec("\n".join(lines), namespace)
    fn: _MatchFn = namespace["_match"]
    return fn


class LabelSelector:
    """A parsed, immutable label selector (apimachinery's internalSelector or Nothing).

    `matches` is an attribute holding the compiled predicate, so the hot loop calls it directly.
    """

    __slots__ = ("_nothing", "_reqs", "matches")

    matches: _MatchFn
    _reqs: tuple[LabelRequirement, ...]
    _nothing: bool

    def __init__(
        self, requirements: Iterable[LabelRequirement] = (), *, nothing: bool = False
    ) -> None:
        # Go sorts by key with a sort that is stable for the short lists selectors are.
        reqs = tuple(sorted(requirements, key=lambda r: r.key))
        object.__setattr__(self, "_reqs", () if nothing else reqs)
        object.__setattr__(self, "_nothing", nothing)
        object.__setattr__(
            self, "matches", _match_none if nothing else _compile_label_matcher(reqs)
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("LabelSelector is immutable")

    @property
    def requirements(self) -> tuple[LabelRequirement, ...]:
        return self._reqs

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (Nothing is not empty, as in Go)."""
        return not self._nothing and not self._reqs

    @property
    def matches_nothing(self) -> bool:
        return self._nothing

    def requires_exact_match(self, key: str) -> str | None:
        """The single value `key` must have, if the selector pins one; lets callers use an index."""
        for r in self._reqs:
            if r.key == key:
                if r.operator in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector.nothing()"
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return self._nothing == other._nothing and self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash((self._nothing, self._reqs))

    @staticmethod
    def everything() -> LabelSelector:
        return EVERYTHING

    @staticmethod
    def nothing() -> LabelSelector:
        return NOTHING


EVERYTHING: Final = LabelSelector()
NOTHING: Final = LabelSelector(nothing=True)


# --- lexer -----------------------------------------------------------------------------------

_T_ERROR: Final = 0
_T_EOS: Final = 1
_T_CLOSE: Final = 2
_T_COMMA: Final = 3
_T_NOT: Final = 4
_T_DEQ: Final = 5
_T_EQ: Final = 6
_T_GT: Final = 7
_T_IDENT: Final = 8
_T_IN: Final = 9
_T_LT: Final = 10
_T_NEQ: Final = 11
_T_NOTIN: Final = 12
_T_OPEN: Final = 13

_STRING_TO_TOKEN: Final = {
    ")": _T_CLOSE,
    ",": _T_COMMA,
    "!": _T_NOT,
    "==": _T_DEQ,
    "=": _T_EQ,
    ">": _T_GT,
    "in": _T_IN,
    "<": _T_LT,
    "!=": _T_NEQ,
    "notin": _T_NOTIN,
    "(": _T_OPEN,
}
_SPECIAL: Final = frozenset("=!(),><")
_WHITESPACE: Final = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[int, str]]:
    """Tokenise like labels.Lexer, including its treatment of NUL as an end marker."""
    items: list[tuple[int, str]] = []
    pos = 0
    n = len(text)

    def read() -> str:
        nonlocal pos
        if pos < n:
            ch = text[pos]
            pos += 1
            return ch
        return "\0"

    while True:
        ch = read()
        while ch in _WHITESPACE:
            ch = read()
        if ch == "\0":
            items.append((_T_EOS, ""))
            return items
        if ch in _SPECIAL:
            buf = ch
            tok = _STRING_TO_TOKEN[ch]
            lit = ch
            while True:
                nxt = read()
                if nxt == "\0":
                    break
                if nxt in _SPECIAL:
                    cand = buf + nxt
                    if cand in _STRING_TO_TOKEN:
                        buf = cand
                        tok = _STRING_TO_TOKEN[cand]
                        lit = cand
                        continue
                pos -= 1
                break
            items.append((tok, lit))
            continue
        buf = ch
        while True:
            nxt = read()
            if nxt == "\0":
                break
            if nxt in _SPECIAL or nxt in _WHITESPACE:
                pos -= 1
                break
            buf += nxt
        items.append((_STRING_TO_TOKEN.get(buf, _T_IDENT), buf))


class _LabelParser:
    __slots__ = ("items", "pos")

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_T_IN, _T_NOTIN):
            tok = _T_IDENT
        return tok, lit

    def consume(self, values: bool = True) -> tuple[int, str]:
        tok, lit = self.lookahead(values)
        self.pos += 1
        return tok, lit

    def parse(self) -> list[LabelRequirement]:
        reqs: list[LabelRequirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_T_IDENT, _T_NOT):
                try:
                    reqs.append(self.requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from None
                t, lit2 = self.consume()
                if t == _T_EOS:
                    return reqs
                if t == _T_COMMA:
                    t2, lit3 = self.lookahead()
                    if t2 not in (_T_IDENT, _T_NOT):
                        raise SelectorError(f"found '{lit3}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _T_EOS:
                return reqs
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> LabelRequirement:
        op = ""
        tok, lit = self.consume()
        if tok == _T_NOT:
            op = OP_DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok != _T_IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        key_errs = _label_key_errors(key)
        if key_errs:
            raise SelectorError(_invalid("<nil>", key, "; ".join(key_errs)))
        if self.lookahead()[0] in (_T_EOS, _T_COMMA) and op != OP_DOES_NOT_EXIST:
            op = OP_EXISTS
        if op in (OP_EXISTS, OP_DOES_NOT_EXIST):
            return _new_requirement(key, op, [])
        tok, lit = self.consume(values=False)
        op = {
            _T_IN: OP_IN,
            _T_EQ: OP_EQUALS,
            _T_DEQ: OP_DOUBLE_EQUALS,
            _T_GT: OP_GT,
            _T_LT: OP_LT,
            _T_NOTIN: OP_NOT_IN,
            _T_NEQ: OP_NOT_EQUALS,
        }.get(tok, "")
        if not op:
            raise SelectorError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        values = self.set_values() if op in (OP_IN, OP_NOT_IN) else self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def set_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _T_OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_T_IDENT, _T_COMMA):
            values = self.identifier_list()
            self.consume()  # the ')' identifier_list stopped in front of
            return values
        if tok == _T_CLOSE:
            self.consume()
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _T_IDENT:
                values.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSE:
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _T_COMMA:
                if not values:
                    values.add("")
                tok2, _ = self.lookahead()
                if tok2 == _T_CLOSE:
                    values.add("")
                    return values
                if tok2 == _T_COMMA:
                    values.add("")
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_T_EOS, _T_COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _T_IDENT:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """labels.Parse: the `?labelSelector=` grammar, where an empty string selects everything."""
    reqs = _LabelParser(text).parse()
    if not reqs:
        return EVERYTHING
    return LabelSelector(reqs)


_OBJECT_OPERATORS: Final = {
    "In": OP_IN,
    "NotIn": OP_NOT_IN,
    "Exists": OP_EXISTS,
    "DoesNotExist": OP_DOES_NOT_EXIST,
}


def label_selector_from_object(sel: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector for a `{matchLabels, matchExpressions}` mapping.

    A missing selector (None) matches nothing, while a present but empty one (`{}`) matches
    everything; this is why a PDB or Deployment without `selector` selects no pods.
    """
    if sel is None:
        return NOTHING
    match_labels: Mapping[str, Any] = sel.get("matchLabels") or {}
    match_expressions: list[Mapping[str, Any]] = sel.get("matchExpressions") or []
    if not match_labels and not match_expressions:
        return EVERYTHING
    reqs: list[LabelRequirement] = []
    for k, v in match_labels.items():
        reqs.append(_new_requirement(str(k), OP_EQUALS, [str(v)]))
    for expr in match_expressions:
        raw_op = expr.get("operator", "")
        op = _OBJECT_OPERATORS.get(raw_op)
        if op is None:
            raise SelectorError(f"{_go_quote(str(raw_op))} is not a valid label selector operator")
        values = expr.get("values")
        reqs.append(_new_requirement(str(expr.get("key", "")), op, list(values) if values else []))
    return LabelSelector(reqs)


def format_labels(labels: Mapping[str, str] | None) -> str:
    """labels.FormatLabels: `k=v` pairs sorted as whole strings, or `<none>`."""
    if not labels:
        return "<none>"
    return ",".join(sorted(f"{k}={v}" for k, v in labels.items()))


# --------------------------------------------------------------------------------------------
# Field selectors (k8s.io/apimachinery/pkg/fields)
# --------------------------------------------------------------------------------------------


class FieldRequirement(NamedTuple):
    field: str
    operator: str  # "=" or "!="
    value: str

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_field_value(self.value)}"


def escape_field_value(value: str) -> str:
    """fields.EscapeValue: backslash-escape `\\`, `,` and `=` so a value parses back unchanged."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_field_value(raw: str) -> str:
    if "\\" not in raw and "," not in raw and "=" not in raw:
        return raw
    out: list[str] = []
    in_slash = False
    for ch in raw:
        if in_slash:
            if ch in "\\,=":
                out.append(ch)
            else:
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            in_slash = False
            continue
        if ch == "\\":
            in_slash = True
        elif ch in ",=":
            # Go prints the rune with %v, which is its code point.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    if not text:
        return []
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, ch in enumerate(text):
        if in_slash:
            in_slash = False
        elif ch == "\\":
            in_slash = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _field_matcher(reqs: tuple[FieldRequirement, ...]) -> Callable[[Mapping[str, str]], bool]:
    if not reqs:
        return lambda fields: True
    if len(reqs) == 1:
        f, op, v = reqs[0]
        if op == "=":
            return lambda fields: fields.get(f, "") == v
        return lambda fields: fields.get(f, "") != v
    eq = tuple((r.field, r.value) for r in reqs if r.operator == "=")
    ne = tuple((r.field, r.value) for r in reqs if r.operator != "=")

    def match(fields: Mapping[str, str]) -> bool:
        get = fields.get
        for f, v in eq:
            if get(f, "") != v:
                return False
        for f, v in ne:
            if get(f, "") == v:
                return False
        return True

    return match


class FieldSelector:
    """A parsed field selector; a field absent from the mapping compares as the empty string."""

    __slots__ = ("_reqs", "matches")

    matches: Callable[[Mapping[str, str]], bool]
    _reqs: tuple[FieldRequirement, ...]

    def __init__(self, requirements: Iterable[FieldRequirement] = ()) -> None:
        reqs = tuple(requirements)
        object.__setattr__(self, "_reqs", reqs)
        object.__setattr__(self, "matches", _field_matcher(reqs))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FieldSelector is immutable")

    @property
    def requirements(self) -> list[FieldRequirement]:
        """`(field, op, value)` tuples, op being `=` or `!=`."""
        return list(self._reqs)

    @property
    def empty(self) -> bool:
        return not self._reqs

    @property
    def fields(self) -> frozenset[str]:
        """Field names referenced, so a server can refuse ones its resource does not support."""
        return frozenset(r.field for r in self._reqs)

    def requires_exact_match(self, field: str) -> str | None:
        for r in self._reqs:
            if r.field == field and r.operator == "=":
                return r.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash(self._reqs)


FIELDS_EVERYTHING: Final = FieldSelector()


def parse_field_selector(text: str) -> FieldSelector:
    """fields.ParseSelector: comma-joined `field=value`, `field==value` or `field!=value` terms.

    Terms are sorted as raw strings before parsing (as Go does), which fixes the order of
    `requirements` and of the canonical string. Terms whose field and value are both empty are
    dropped, like Go's identity transform does.
    """
    reqs: list[FieldRequirement] = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        value = _unescape_field_value(rhs)
        if not lhs and not value:
            continue
        reqs.append(FieldRequirement(lhs, "!=" if op == "!=" else "=", value))
    if not reqs:
        return FIELDS_EVERYTHING
    return FieldSelector(reqs)
