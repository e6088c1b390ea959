"""Kubernetes' CEL quantity library (`quantity()`, `isQuantity()` and the Quantity methods).

The value comes from the project's quantity parser; what this module adds is what only CEL
shows: resource.ParseQuantity's stricter syntax and its error texts, and which of its two
representations a quantity has. kube keeps a quantity as a scaled int64 when it can and as an
arbitrary-precision decimal (rounded up to nano units) otherwise, and `isInteger()` /
`asInteger()` answer from that representation, so `quantity('1.5Gi').isInteger()` is false
although its value is whole. Arithmetic keeps kube's rules for when a result leaves int64.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_UP, Context, Decimal, localcontext
from typing import Any, Final

from celpy import celtypes

from nodeops.common.quantity import parse_quantity
from nodeops.sim.server.cellib_types import (
    CelFunction,
    Overload,
    glob,
    int_arg,
    member,
    string_arg,
)

TYPE: Final = "kubernetes.Quantity"
_INT64_MAX: Final = 2**63 - 1
_INT64_MIN: Final = -(2**63)
_SPLIT_RE: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT: Final = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"
_SCAN: Final = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_DECIMAL_SUFFIXES: Final = {
    "": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NANO: Final = Decimal("1e-9")
# inf.Dec is exact: no rounding to the default 28 digits anywhere
_EXACT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _fits(v: int) -> bool:
    return _INT64_MIN <= v <= _INT64_MAX


class Quantity:
    """A quantity as kube holds it: `value * 10**scale`, either as an int64 amount
    (`decimal` false) or as an inf.Dec (`decimal` true)."""

    __slots__ = ("decimal", "scale", "value")

    def __init__(self, value: int, scale: int, decimal: bool) -> None:
        self.value = value
        self.scale = scale
        self.decimal = decimal

    def exact(self) -> Decimal:
        return _EXACT.scaleb(Decimal(self.value), self.scale)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.exact() == other.exact()

    def __hash__(self) -> int:
        return hash(self.exact())

    def __repr__(self) -> str:
        return f"quantity({self.exact()})"


def _suffix(suffix: str) -> tuple[int, int] | None:
    """(base, exponent) of a suffix, as suffixHandler.interpret reads it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix]
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix]
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        return 10, int(suffix[1:])
    return None


def parse(text: str) -> Quantity:
    """resource.ParseQuantity; ValueError with its message on bad input."""
    if not text:
        raise ValueError(ERR_FORMAT)
    m = _SCAN.fullmatch(text)
    if m is None:
        raise ValueError(ERR_FORMAT)
    sign, num, denom, suffix = m.group(1), m.group(2) or "0", m.group(3) or "", m.group(4)
    base_exp = _suffix(suffix)
    if base_exp is None:
        raise ValueError(ERR_SUFFIX)
    base, exponent = base_exp
    negative = sign == "-"
    if base == 10:
        scale = exponent
        precision = 18 - len(num) - len(denom)
        mantissa = 1
    else:
        scale = 0
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if not denom else -1
        mantissa = 1 << exponent
    if precision >= 0 and scale - len(denom) >= -9:
        amount = int(num + denom) * mantissa
        if _fits(amount):
            return Quantity(-amount if negative else amount, scale - len(denom), False)
    with localcontext(_EXACT):
        magnitude = abs(parse_quantity(f"{sign}{num}.{denom or '0'}{suffix}"))
        if magnitude:
            magnitude = magnitude.quantize(_NANO, rounding=ROUND_UP)
        if base == 2 and magnitude > _INT64_MAX:
            magnitude = Decimal(_INT64_MAX)
        unscaled = int(magnitude.scaleb(9))
    return Quantity(-unscaled if negative else unscaled, -9, True)


def _int64_add(a: Quantity, b: Quantity) -> Quantity | None:
    """int64Amount.Add: None when the sum leaves int64 and kube moves to inf.Dec."""
    if b.value == 0:
        return Quantity(a.value, a.scale, False)
    if a.value == 0:
        return Quantity(b.value, b.scale, False)
    if a.scale == b.scale:
        total, scale = a.value + b.value, a.scale
    elif a.scale > b.scale:
        shifted = a.value * 10 ** (a.scale - b.scale)
        if not _fits(shifted):
            return None
        total, scale = shifted + b.value, b.scale
    else:
        shifted = b.value * 10 ** (b.scale - a.scale)
        if not _fits(shifted):
            return None
        total, scale = a.value + shifted, a.scale
    return Quantity(total, scale, False) if _fits(total) else None


def _add(a: Quantity, b: Quantity) -> Quantity:
    if not (a.decimal or b.decimal):
        fast = _int64_add(a, b)
        if fast is not None:
            return fast
    scale = min(a.scale, b.scale)
    total = a.value * 10 ** (a.scale - scale) + b.value * 10 ** (b.scale - scale)
    return Quantity(total, scale, True)


def _operand(other: Any) -> Quantity:
    if isinstance(other, Quantity):
        return other
    return Quantity(int_arg(other), 0, False)


def _quantity(q: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError("no such overload")
    return q


def _as_int64(q: Quantity) -> int | None:
    if q.decimal or q.scale < 0:
        return None
    v = q.value * 10**q.scale
    return v if _fits(v) else None


def _pow10(n: int) -> float:
    """Go's math.Pow10, whose rounding asApproximateFloat inherits."""
    if n > 308:
        return math.inf
    if n < -323:
        return 0.0
    if n >= 0:
        return float(f"1e{32 * (n // 32)}") * float(f"1e{n % 32}")
    return float(f"1e-{32 * (-n // 32)}") / float(f"1e{-n % 32}")


def quantity(s: Any) -> Quantity:
    return parse(string_arg(s))


def is_quantity(s: Any) -> celtypes.BoolType:
    try:
        parse(string_arg(s))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def is_integer(q: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_as_int64(_quantity(q)) is not None)


def as_integer(q: Any) -> celtypes.IntType:
    v = _as_int64(_quantity(q))
    if v is None:
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(v)


def as_approximate_float(q: Any) -> celtypes.DoubleType:
    quant = _quantity(q)
    try:
        base = float(quant.value)
    except OverflowError:
        base = math.copysign(math.inf, quant.value)
    if quant.scale == 0:
        return celtypes.DoubleType(base)
    return celtypes.DoubleType(base * _pow10(quant.scale))


def sign(q: Any) -> celtypes.IntType:
    v = _quantity(q).value
    return celtypes.IntType((v > 0) - (v < 0))


def add(q: Any, other: Any) -> Quantity:
    return _add(_quantity(q), _operand(other))


def sub(q: Any, other: Any) -> Quantity:
    o = _operand(other)
    return _add(_quantity(q), Quantity(-o.value, o.scale, o.decimal))


def compare(a: Quantity, b: Quantity) -> int:
    x, y = a.exact(), b.exact()
    return (x > y) - (x < y)


FUNCTIONS: dict[str, CelFunction] = {
    "quantity": quantity,
    "isQuantity": is_quantity,
    "isInteger": is_integer,
    "asInteger": as_integer,
    "asApproximateFloat": as_approximate_float,
    "sign": sign,
    "add": add,
    "sub": sub,
}

DECLS: dict[str, tuple[Overload, ...]] = {
    "quantity": (glob(("string",), TYPE),),
    "isQuantity": (glob(("string",), "bool"),),
    # kube declares sign as a global overload, so `q.sign()` does not compile
    "sign": (glob((TYPE,), "int"),),
    "isGreaterThan": (member(TYPE, (TYPE,), "bool"),),
    "isLessThan": (member(TYPE, (TYPE,), "bool"),),
    "compareTo": (member(TYPE, (TYPE,), "int"),),
    "asApproximateFloat": (member(TYPE, (), "double"),),
    "asInteger": (member(TYPE, (), "int"),),
    "isInteger": (member(TYPE, (), "bool"),),
    "add": (member(TYPE, (TYPE,), TYPE), member(TYPE, ("int",), TYPE)),
    "sub": (member(TYPE, (TYPE,), TYPE), member(TYPE, ("int",), TYPE)),
}
