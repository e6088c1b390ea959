"""Kubernetes' CEL semver library (`semver()`, `isSemver()`, 1.33's `normalize` argument).

kube parses with blang/semver v4, so the error texts and the ordering (pre-release identifiers
numeric before alphanumeric, build metadata ignored) are that package's.
"""

from __future__ import annotations

import re
from typing import Any, Final

from celpy import celtypes

from nodeops.common.gomessages import go_quote
from nodeops.sim.server.cellib_types import (
    CelFunction,
    Overload,
    bool_arg,
    glob,
    member,
    string_arg,
)

TYPE: Final = "kubernetes.Semver"
_DIGITS: Final = re.compile(r"[0-9]*")
_ALNUM: Final = re.compile(r"[0-9A-Za-z-]*")


class Semver:
    __slots__ = ("build", "major", "minor", "patch", "pre")

    def __init__(
        self, major: int, minor: int, patch: int, pre: list[str | int], build: list[str]
    ) -> None:
        self.major, self.minor, self.patch, self.pre, self.build = major, minor, patch, pre, build

    def compare(self, other: Semver) -> int:
        a, b = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if a != b:
            return 1 if a > b else -1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            if isinstance(x, int) != isinstance(y, int):
                return -1 if isinstance(x, int) else 1
            return 1 if x > y else -1  # type: ignore[operator]
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, tuple(self.pre)))


def _number(text: str, what: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"Invalid character(s) found in {what.lower()} number {go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f"{what} number must not contain leading zeroes {go_quote(text)}")
    if not text or int(text) >= 2**64:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(text)}: invalid syntax")
    return int(text)


def parse(s: str) -> Semver:
    """blang/semver's Parse."""
    if not s:
        raise ValueError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major, minor = _number(parts[0], "Major"), _number(parts[1], "Minor")
    patch_text, build, pre_text = parts[2], [], []
    if "+" in patch_text:
        patch_text, _, tail = patch_text.partition("+")
        build = tail.split(".")
    if "-" in patch_text:
        patch_text, _, tail = patch_text.partition("-")
        pre_text = tail.split(".")
    patch = _number(patch_text, "Patch")
    pre: list[str | int] = []
    for p in pre_text:
        if not p:
            raise ValueError("Prerelease is empty")
        if _DIGITS.fullmatch(p):
            if len(p) > 1 and p[0] == "0":
                raise ValueError(
                    f"Numeric PreRelease version must not contain leading zeroes {go_quote(p)}"
                )
            pre.append(int(p))
        elif _ALNUM.fullmatch(p):
            pre.append(p)
        else:
            raise ValueError(f"Invalid character(s) found in prerelease {go_quote(p)}")
    for b in build:
        if not b:
            raise ValueError("Build meta data is empty")
        if not _ALNUM.fullmatch(b):
            raise ValueError(f"Invalid character(s) found in build meta data {go_quote(b)}")
    return Semver(major, minor, patch, pre, build)


def normalize_and_parse(s: str) -> Semver:
    """kube's normalizeAndParse: no "v", missing minor/patch filled, leading zeros dropped."""
    parts = s.removeprefix("v").split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse(".".join(parts))


def semver(s: Any, normalize: Any = None) -> Semver:
    text = string_arg(s)
    if normalize is not None and bool_arg(normalize):
        return normalize_and_parse(text)
    return parse(text)


def is_semver(s: Any, normalize: Any = None) -> celtypes.BoolType:
    try:
        semver(s, normalize)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(v: Any) -> Semver:
    if not isinstance(v, Semver):
        raise TypeError("no such overload")
    return v


def major(v: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(v).major)


def minor(v: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(v).minor)


def patch(v: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(v).patch)


FUNCTIONS: dict[str, CelFunction] = {
    "semver": semver,
    "isSemver": is_semver,
    "major": major,
    "minor": minor,
    "patch": patch,
}

DECLS: dict[str, tuple[Overload, ...]] = {
    "semver": (glob(("string",), TYPE), glob(("string", "bool"), TYPE)),
    "isSemver": (glob(("string",), "bool"), glob(("string", "bool"), "bool")),
    "isGreaterThan": (member(TYPE, (TYPE,), "bool"),),
    "isLessThan": (member(TYPE, (TYPE,), "bool"),),
    "compareTo": (member(TYPE, (TYPE,), "int"),),
    "major": (member(TYPE, (), "int"),),
    "minor": (member(TYPE, (), "int"),),
    "patch": (member(TYPE, (), "int"),),
}
