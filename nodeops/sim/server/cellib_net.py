"""Kubernetes' CEL IP and CIDR libraries (`ip()`, `cidr()` and their methods).

Addresses are parsed as Go's netip.ParseAddr / ParsePrefix parse them, with the error texts
kube's functions wrap (IPv4 messages exactly; IPv6 ones in netip's words where they are simple
to tell apart), then kube's own refusals: zones and IPv4-mapped IPv6 addresses. A prefix keeps
its host bits (`cidr('10.0.0.1/8').ip()` is 10.0.0.1) as netip.Prefix does; `masked()` drops
them. Python's ipaddress does the address arithmetic and prints the canonical forms.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final

from celpy import celtypes

from nodeops.common.gomessages import go_quote
from nodeops.sim.server.cellib_types import CelFunction, Overload, glob, member, string_arg

IP_TYPE: Final = "net.IP"
CIDR_TYPE: Final = "net.CIDR"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class IP:
    __slots__ = ("addr",)

    def __init__(self, addr: Address) -> None:
        self.addr = addr

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IP):
            return NotImplemented
        return self.addr == other.addr

    def __hash__(self) -> int:
        return hash(self.addr)

    def __str__(self) -> str:
        return str(self.addr)


class CIDR:
    """netip.Prefix: an address (host bits kept) and a prefix length."""

    __slots__ = ("addr", "bits")

    def __init__(self, addr: Address, bits: int) -> None:
        self.addr = addr
        self.bits = bits

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network((self.addr, self.bits), strict=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CIDR):
            return NotImplemented
        return self.addr == other.addr and self.bits == other.bits

    def __hash__(self) -> int:
        return hash((self.addr, self.bits))

    def __str__(self) -> str:
        return f"{self.addr}/{self.bits}"


class _AddrError(ValueError):
    def __init__(self, raw: str, msg: str, at: str = "") -> None:
        where = f" (at {go_quote(at)})" if at else ""
        super().__init__(f"ParseAddr({go_quote(raw)}): {msg}{where}")


def _parse_v4(s: str) -> ipaddress.IPv4Address:
    fields: list[int] = []
    val, digits = 0, 0
    for i, c in enumerate(s):
        if "0" <= c <= "9":
            if digits == 1 and val == 0:
                raise _AddrError(s, "IPv4 field has octet with leading zero")
            val, digits = val * 10 + int(c), digits + 1
            if val > 255:
                raise _AddrError(s, "IPv4 field has value >255")
        elif c == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise _AddrError(s, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise _AddrError(s, "IPv4 address too long")
            fields.append(val)
            val, digits = 0, 0
        else:
            raise _AddrError(s, "unexpected character", s[i:])
    if len(fields) < 3:
        raise _AddrError(s, "IPv4 address too short")
    return ipaddress.IPv4Address(bytes([*fields, val]))


def _parse_v6(s: str) -> tuple[ipaddress.IPv6Address, str]:
    addr, _, zone = s.partition("%")
    if "%" in s and not zone:
        raise _AddrError(s, "zone must be a non-empty string")
    if addr.count("::") > 1:
        raise _AddrError(s, "multiple :: in address", addr[addr.index("::", 1) :])
    for part in addr.split(":"):
        if len(part) > 4 and "." not in part:
            raise _AddrError(s, "IPv6 field has value >=2^16", part)
    try:
        parsed = ipaddress.IPv6Address(addr)
    except ValueError:
        groups = addr.split(":")
        if "::" not in addr and len(groups) < 8 and "." not in addr:
            raise _AddrError(s, "IPv6 address too short") from None
        raise _AddrError(s, "unexpected character") from None
    return parsed, zone


def parse_addr(raw: str) -> Address:
    """kube's parseIPAddr: netip.ParseAddr, then no zones and no IPv4-mapped IPv6."""
    for c in raw:
        if c == ".":
            return _parse_v4(raw)
        if c == ":":
            addr, zone = _parse_v6(raw)
            if zone:
                raise ValueError(f"IP address {go_quote(raw)} with zone value is not allowed")
            if addr.ipv4_mapped is not None:
                raise ValueError(f"IPv4-mapped IPv6 address {go_quote(raw)} is not allowed")
            return addr
        if c == "%":
            raise _AddrError(raw, "missing IPv6 address")
    raise _AddrError(raw, "unable to parse IP")


def _ip_from(raw: str) -> IP:
    try:
        return IP(parse_addr(raw))
    except _AddrError as exc:
        raise ValueError(
            f"IP Address {go_quote(raw)} parse error during conversion from string: {exc}"
        ) from None


_PREFIX_ERR: Final = "network address parse error during conversion from string: "


def parse_prefix(raw: str) -> CIDR:
    """kube's parseCIDR: netip.ParsePrefix, then no IPv4-mapped IPv6."""

    def fail(msg: str) -> ValueError:
        return ValueError(f"{_PREFIX_ERR}netip.ParsePrefix({go_quote(raw)}): {msg}")

    slash = raw.rfind("/")
    if slash < 0:
        raise fail("no '/'")
    text, bits_text = raw[:slash], raw[slash + 1 :]
    addr: Address
    try:
        if "%" in text and ":" in text.partition("%")[0]:
            _parse_v6(text)  # a malformed address is reported before its zone
            raise fail("IPv6 zones cannot be present in a prefix")
        addr = parse_addr(text)
    except _AddrError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:
        if str(exc).startswith(_PREFIX_ERR):
            raise
        # netip takes an IPv4-mapped address; kube refuses the prefix below, after its bits
        addr = ipaddress.IPv6Address(text)
    if not (bits_text.isascii() and bits_text.isdigit()) or (
        len(bits_text) > 1 and bits_text[0] == "0"
    ):
        raise fail(f"bad bits after slash: {go_quote(bits_text)}")
    bits = int(bits_text)
    if bits > addr.max_prefixlen:
        raise fail("prefix length out of range")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise ValueError(f"{_PREFIX_ERR}IPv4-mapped IPv6 address {go_quote(raw)} is not allowed")
    return CIDR(addr, bits)


def _cidr_from(raw: str) -> CIDR:
    try:
        return parse_prefix(raw)
    except ValueError as exc:
        raise ValueError(f"{_PREFIX_ERR}{exc}") from None


def _ip(v: Any) -> IP:
    if not isinstance(v, IP):
        raise TypeError("no such overload")
    return v


def _cidr(v: Any) -> CIDR:
    if not isinstance(v, CIDR):
        raise TypeError("no such overload")
    return v


def ip(v: Any) -> IP:
    """`ip(<string>)`, and `<cidr>.ip()`: the prefix's address."""
    if isinstance(v, CIDR):
        return IP(v.addr)
    return _ip_from(string_arg(v))


def is_ip(s: Any) -> celtypes.BoolType:
    try:
        parse_addr(string_arg(s))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def ip_is_canonical(s: Any) -> celtypes.BoolType:
    raw = string_arg(s)
    return celtypes.BoolType(str(_ip_from(raw).addr) == raw)


def family(v: Any) -> celtypes.IntType:
    return celtypes.IntType(_ip(v).addr.version)


def is_unspecified(v: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_ip(v).addr.is_unspecified)


def is_loopback(v: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_ip(v).addr.is_loopback)


def _in(addr: Address, v4: str, v6: str) -> bool:
    net = ipaddress.ip_network(v4 if addr.version == 4 else v6)
    return addr in net


def is_link_local_multicast(v: Any) -> celtypes.BoolType:
    addr = _ip(v).addr
    if addr.version == 6:
        packed = addr.packed
        return celtypes.BoolType(packed[0] == 0xFF and packed[1] & 0x0F == 0x02)
    return celtypes.BoolType(addr in ipaddress.IPv4Network("224.0.0.0/24"))


def is_link_local_unicast(v: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_in(_ip(v).addr, "169.254.0.0/16", "fe80::/10"))


def is_global_unicast(v: Any) -> celtypes.BoolType:
    """netip's IsGlobalUnicast: private and ULA addresses count as global."""
    addr = _ip(v).addr
    if addr.version == 4 and addr == ipaddress.IPv4Address("255.255.255.255"):
        return celtypes.BoolType(False)
    return celtypes.BoolType(
        not addr.is_unspecified
        and not addr.is_loopback
        and not _in(addr, "224.0.0.0/4", "ff00::/8")
        and not _in(addr, "169.254.0.0/16", "fe80::/10")
    )


def cidr(s: Any) -> CIDR:
    return _cidr_from(string_arg(s))


def is_cidr(s: Any) -> celtypes.BoolType:
    try:
        parse_prefix(string_arg(s))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def contains_ip(c: Any, other: Any) -> celtypes.BoolType:
    prefix = _cidr(c)
    addr = other.addr if isinstance(other, IP) else _ip_from(string_arg(other)).addr
    if addr.version != prefix.addr.version:
        return celtypes.BoolType(False)
    return celtypes.BoolType(addr in prefix.network())


def contains_cidr(c: Any, other: Any) -> celtypes.BoolType:
    prefix = _cidr(c)
    inner = other if isinstance(other, CIDR) else _cidr_from(string_arg(other))
    if inner.addr.version != prefix.addr.version or inner.bits < prefix.bits:
        return celtypes.BoolType(False)
    return celtypes.BoolType(inner.network().subnet_of(prefix.network()))  # type: ignore[arg-type]


def masked(c: Any) -> CIDR:
    prefix = _cidr(c)
    return CIDR(prefix.network().network_address, prefix.bits)


def prefix_length(c: Any) -> celtypes.IntType:
    return celtypes.IntType(_cidr(c).bits)


def to_string(v: Any) -> celtypes.StringType | None:
    """`string(<ip>)` and `string(<cidr>)`; None for the standard conversions to handle."""
    if isinstance(v, (IP, CIDR)):
        return celtypes.StringType(str(v))
    return None


FUNCTIONS: dict[str, CelFunction] = {
    "ip": ip,
    "isIP": is_ip,
    "ip.isCanonical": ip_is_canonical,
    "family": family,
    "isUnspecified": is_unspecified,
    "isLoopback": is_loopback,
    "isLinkLocalMulticast": is_link_local_multicast,
    "isLinkLocalUnicast": is_link_local_unicast,
    "isGlobalUnicast": is_global_unicast,
    "cidr": cidr,
    "isCIDR": is_cidr,
    "containsIP": contains_ip,
    "containsCIDR": contains_cidr,
    "masked": masked,
    "prefixLength": prefix_length,
}

DECLS: dict[str, tuple[Overload, ...]] = {
    "ip": (glob(("string",), IP_TYPE), member(CIDR_TYPE, (), IP_TYPE)),
    "isIP": (glob(("string",), "bool"),),
    "ip.isCanonical": (glob(("string",), "bool"),),
    "family": (member(IP_TYPE, (), "int"),),
    "isUnspecified": (member(IP_TYPE, (), "bool"),),
    "isLoopback": (member(IP_TYPE, (), "bool"),),
    "isLinkLocalMulticast": (member(IP_TYPE, (), "bool"),),
    "isLinkLocalUnicast": (member(IP_TYPE, (), "bool"),),
    "isGlobalUnicast": (member(IP_TYPE, (), "bool"),),
    "cidr": (glob(("string",), CIDR_TYPE),),
    "isCIDR": (glob(("string",), "bool"),),
    "containsIP": (
        member(CIDR_TYPE, ("string",), "bool"),
        member(CIDR_TYPE, (IP_TYPE,), "bool"),
    ),
    "containsCIDR": (
        member(CIDR_TYPE, ("string",), "bool"),
        member(CIDR_TYPE, (CIDR_TYPE,), "bool"),
    ),
    "masked": (member(CIDR_TYPE, (), CIDR_TYPE),),
    "prefixLength": (member(CIDR_TYPE, (), "int"),),
    "string": (glob((IP_TYPE,), "string"), glob((CIDR_TYPE,), "string")),
}
