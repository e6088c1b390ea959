"""Resource quantities ("250m", "1.5Gi", "1e3") as schedulers and fit checks need them.

CPU is kept in millicores and everything else in whole units, as integers, so that summing the
requests of a hundred pods on a node never drifts the way floats would.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a Kubernetes quantity; raises ValueError on nonsense."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = value.strip()
    if not text:
        raise ValueError("empty quantity")
    for suffix, mult in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * mult
    if text[-1] in "numkMGTPE":
        return _number(text[:-1], value) * _DECIMAL[text[-1]]
    return _number(text, value)


def _number(text: str, original: str) -> Decimal:
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"invalid quantity {original!r}") from None
    if not d.is_finite():
        raise ValueError(f"invalid quantity {original!r}")
    return d


@lru_cache(maxsize=4096)
def cpu_millis(value: str | int | float | None) -> int:
    """Millicores, rounded up like the API server canonicalises "0.0001" to "1m".

    Cached: a cluster's pods use a few dozen distinct quantities, read on every pod event.
    """
    if value is None:
        return 0
    return math.ceil(parse_quantity(value) * 1000)


@lru_cache(maxsize=4096)
def units(value: str | int | float | None) -> int:
    """Whole units (bytes, pods), rounded up."""
    if value is None:
        return 0
    return math.ceil(parse_quantity(value))
