"""Check-chain expressions and trigger/notify chain lists.

A check chain is a boolean expression over check instance names: `!` binds tightest, then `&&`,
then `||`; parentheses group. It is parsed once at load into a small tree, so unknown names and
syntax errors are reported with their column before anything runs, and evaluation is a walk of
the tree (no general-purpose expression language is involved). Names are identifiers made of
letters, digits, `_` and `-` (so `reboot-ok` is one name, not a subtraction).

Trigger and notification chains are lists of instance names joined by `&&`, run in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class ExpressionError(ValueError):
    """A syntax error; `column` is 1-based within the expression text."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(f"column {column}: {message}")
        self.reason = message
        self.column = column


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    column: int


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Empty:
    """An empty chain: always passes (the reference's behaviour for an unset check)."""


Expr = Name | Not | And | Or | Empty


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # name, and, or, not, lparen, rparen, end
    text: str
    column: int


def _tokens(text: str) -> Iterator[_Token]:
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        col = i + 1
        if text.startswith("&&", i):
            yield _Token("and", "&&", col)
            i += 2
        elif text.startswith("||", i):
            yield _Token("or", "||", col)
            i += 2
        elif c == "!":
            yield _Token("not", "!", col)
            i += 1
        elif c == "(":
            yield _Token("lparen", "(", col)
            i += 1
        elif c == ")":
            yield _Token("rparen", ")", col)
            i += 1
        elif c in NAME_CHARS:
            j = i
            while j < n and text[j] in NAME_CHARS:
                j += 1
            yield _Token("name", text[i:j], col)
            i = j
        elif c == "&" or c == "|":
            raise ExpressionError(f'"{c}" must be doubled ("{c}{c}")', col)
        else:
            raise ExpressionError(f"unexpected character {c!r}", col)
    yield _Token("end", "", n + 1)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = list(_tokens(text))
        self.pos = 0
        self.depth = 0

    @property
    def current(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def parse(self) -> Expr:
        if self.current.kind == "end":
            return Empty()
        expr = self.or_()
        tok = self.current
        if tok.kind != "end":
            what = "a name" if tok.kind == "name" else f'"{tok.text}"'
            raise ExpressionError(f"unexpected {what}, expected && or ||", tok.column)
        return expr

    def or_(self) -> Expr:
        parts = [self.and_()]
        while self.current.kind == "or":
            self.take()
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_(self) -> Expr:
        parts = [self.unary()]
        while self.current.kind == "and":
            self.take()
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Expr:
        if self.current.kind == "not":
            self.take()
            return Not(self.unary())
        return self.primary()

    def primary(self) -> Expr:
        tok = self.take()
        if tok.kind == "name":
            return Name(tok.text, tok.column)
        if tok.kind == "lparen":
            self.depth += 1
            if self.depth > 100:
                raise ExpressionError("parentheses nested too deeply", tok.column)
            inner = self.or_()
            close = self.take()
            if close.kind == "end":
                # Nothing was misplaced: the ( is the one fact to point at.
                raise ExpressionError('missing ) for this "("', tok.column)
            if close.kind != "rparen":
                what = "a name" if close.kind == "name" else f'"{close.text}"'
                raise ExpressionError(f"unexpected {what}, expected &&, || or )", close.column)
            self.depth -= 1
            return inner
        if tok.kind == "end":
            raise ExpressionError("expression ends where a name was expected", tok.column)
        raise ExpressionError(f'unexpected "{tok.text}", expected a name or (', tok.column)


def parse(text: str | None) -> Expr:
    """Parse a check chain; None or blank is the empty chain."""
    if text is None:
        return Empty()
    if len(text) > 10_000:
        raise ExpressionError("expression longer than 10000 characters", 1)
    return _Parser(text).parse()


def names(expr: Expr) -> list[Name]:
    """Every name in the expression, in order of appearance (duplicates kept)."""
    out: list[Name] = []
    stack: list[Expr] = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Name):
            out.append(e)
        elif isinstance(e, Not):
            stack.append(e.operand)
        elif isinstance(e, And | Or):
            stack.extend(reversed(e.operands))
    return out


def evaluate(expr: Expr, value: Callable[[str], bool] | Mapping[str, bool]) -> bool:
    lookup = value.__getitem__ if isinstance(value, Mapping) else value
    if isinstance(expr, Name):
        return bool(lookup(expr.name))
    if isinstance(expr, Not):
        return not evaluate(expr.operand, lookup)
    if isinstance(expr, And):
        return all(evaluate(e, lookup) for e in expr.operands)
    if isinstance(expr, Or):
        return any(evaluate(e, lookup) for e in expr.operands)
    return True


def render(expr: Expr) -> str:
    """Canonical text of an expression (fully parenthesised where precedence needs it)."""
    if isinstance(expr, Name):
        return expr.name
    if isinstance(expr, Not):
        inner = render(expr.operand)
        return f"!{inner}" if isinstance(expr.operand, Name | Not) else f"!({inner})"
    if isinstance(expr, And):
        return " && ".join(
            f"({render(e)})" if isinstance(e, Or) else render(e) for e in expr.operands
        )
    if isinstance(expr, Or):
        return " || ".join(render(e) for e in expr.operands)
    return ""


@dataclass(frozen=True, slots=True)
class ChainItem:
    name: str
    column: int


def parse_chain(text: str | None) -> list[ChainItem]:
    """`a && b && c` as its names in order; None or blank is the empty chain."""
    if text is None or not text.strip():
        return []
    items: list[ChainItem] = []
    offset = 0
    for part in text.split("&&"):
        stripped = part.strip()
        column = offset + (len(part) - len(part.lstrip())) + 1
        if not stripped:
            raise ExpressionError("empty name in chain (expected `a && b`)", column)
        bad = next((c for c in stripped if c in "|!()"), None) or next(
            (c for c in stripped if c not in NAME_CHARS), None
        )
        if bad is not None:
            where = column + stripped.index(bad)
            if bad in "|!()":
                raise ExpressionError(
                    f"{bad!r} is not allowed in a trigger or notify chain, only `a && b`", where
                )
            if bad.isspace():
                raise ExpressionError("names must be joined by && (found a space)", where)
            raise ExpressionError(f"unexpected character {bad!r} in name", where)
        items.append(ChainItem(stripped, column))
        offset += len(part) + 2
    return items
