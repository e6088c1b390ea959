"""The `?labelSelector=` grammar: labels.Lexer and labels.Parser, token for token.

The same inputs parse and the same ones fail with the same message as in apimachinery, which the
simulated API server returns as a 400 BadRequest.
"""

from __future__ import annotations

from typing import Final

from nodeops.common.gomessages import field_invalid
from nodeops.common.selectors.errors import SelectorError
from nodeops.common.selectors.labels import EVERYTHING, LabelSelector
from nodeops.common.selectors.labelsyntax import label_key_errors
from nodeops.common.selectors.requirements import (
    BINARY_OPERATORS,
    OP_DOES_NOT_EXIST,
    OP_DOUBLE_EQUALS,
    OP_EQUALS,
    OP_EXISTS,
    OP_GT,
    OP_IN,
    OP_LT,
    OP_NOT_EQUALS,
    OP_NOT_IN,
    LabelRequirement,
    new_requirement,
)

__all__ = ["parse_label_selector"]

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
        key_errs = label_key_errors(key)
        if key_errs:
            raise SelectorError(field_invalid("<nil>", key, "; ".join(key_errs)))
        if self.lookahead()[0] in (_T_EOS, _T_COMMA) and op != OP_DOES_NOT_EXIST:
            op = OP_EXISTS
        if op in (OP_EXISTS, OP_DOES_NOT_EXIST):
            return new_requirement(key, op, [])
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
            raise SelectorError(f"found '{lit}', expected: {BINARY_OPERATORS}")
        values = self.set_values() if op in (OP_IN, OP_NOT_IN) else self.exact_value()
        return new_requirement(key, op, sorted(values))

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
