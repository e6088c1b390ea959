"""The `expr` of prometheusInstant: a small arithmetic/boolean language over `value`.

`value <= 1`, `value > 0 && value < 10`, `!(value == 3)`, `value * 100 >= 95`. Parsed once at
load; nothing but numbers, `value`, `+ - * /`, comparisons, `&& || !` and parentheses exists.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op><=|>=|==|!=|&&|\|\||[-+*/<>!()]))"
)
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a / b if b else float("nan"),
}

Node = tuple[object, ...]


@dataclass
class ValueExpr:
    text: str
    tree: Node

    def evaluate(self, value: float) -> bool:
        result = _eval(self.tree, value)
        return bool(result)


def _eval(node: Node, value: float) -> float | bool:
    kind = node[0]
    if kind == "num":
        return float(node[1])  # type: ignore[arg-type]
    if kind == "value":
        return value
    if kind == "not":
        return not _eval(node[1], value)  # type: ignore[arg-type]
    if kind == "neg":
        return -float(_eval(node[1], value))  # type: ignore[arg-type]
    if kind == "and":
        return bool(_eval(node[1], value)) and bool(_eval(node[2], value))  # type: ignore[arg-type]
    if kind == "or":
        return bool(_eval(node[1], value)) or bool(_eval(node[2], value))  # type: ignore[arg-type]
    left = float(_eval(node[1], value))  # type: ignore[arg-type]
    right = float(_eval(node[2], value))  # type: ignore[arg-type]
    op = str(kind)
    if op in _COMPARE:
        return _COMPARE[op](left, right)
    return _ARITH[op](left, right)


def parse(text: str) -> ValueExpr:
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"expr: unexpected {text[pos:].strip()[:10]!r} at column {pos + 1}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    tokens.append(("end", "", len(text) + 1))
    i = 0

    def peek() -> tuple[str, str, int]:
        return tokens[i]

    def take() -> tuple[str, str, int]:
        nonlocal i
        i += 1
        return tokens[i - 1]

    def or_() -> Node:
        left = and_()
        while peek()[1] == "||":
            take()
            left = ("or", left, and_())
        return left

    def and_() -> Node:
        left = compare()
        while peek()[1] == "&&":
            take()
            left = ("and", left, compare())
        return left

    def compare() -> Node:
        left = sum_()
        if peek()[1] in _COMPARE:
            op = take()[1]
            left = (op, left, sum_())
        return left

    def sum_() -> Node:
        left = product()
        while peek()[1] in ("+", "-"):
            op = take()[1]
            left = (op, left, product())
        return left

    def product() -> Node:
        left = unary()
        while peek()[1] in ("*", "/"):
            op = take()[1]
            left = (op, left, unary())
        return left

    def unary() -> Node:
        if peek()[1] == "!":
            take()
            return ("not", unary())
        if peek()[1] == "-":
            take()
            return ("neg", unary())
        kind, tok, col = take()
        if kind == "num":
            return ("num", float(tok))
        if kind == "name":
            if tok != "value":
                raise ValueError(f"expr: unknown name {tok!r} at column {col} (only `value`)")
            return ("value",)
        if tok == "(":
            inner = or_()
            if take()[1] != ")":
                raise ValueError(f"expr: missing ) for the ( at column {col}")
            return inner
        raise ValueError(f"expr: unexpected {tok or 'end'!r} at column {col}")

    if len(tokens) == 1:
        raise ValueError("expr: empty")
    tree = or_()
    if peek()[0] != "end":
        raise ValueError(f"expr: unexpected {peek()[1]!r} at column {peek()[2]}")
    return ValueExpr(text, tree)
