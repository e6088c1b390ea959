"""kube's quantity, IP/CIDR, semver and format CEL libraries: each function answers as
kube-apiserver's does, true and false, and fails where kube fails, at compile time (the CRD is
refused) or at evaluation (the write is refused with the library's error text)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.sim.server import cel

PROPS = {
    "s": {"type": "string"},
    "t": {"type": "string"},
    "n": {"type": "integer"},
}
PASS = "pass"
FAIL = "fail"


def _schema(rule: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": PROPS,
                "x-kubernetes-validations": [{"rule": rule}],
            }
        },
    }


def run(rule: str, **spec: Any) -> str:
    """PASS, FAIL, the evaluation error, or the compile error of `rule` with `self` = spec."""
    schema = _schema(rule)
    compile_errors = cel.rule_compile_errors({"openAPIV3Schema": schema}, "v")
    if compile_errors:
        return compile_errors[0][2].split("}: ", 1)[1]
    causes = cel.validate(schema, {"spec": spec}, None)
    if not causes:
        return PASS
    message = causes[0][2]
    if message == f"Invalid value: failed rule: {rule}":
        return FAIL
    prefix, suffix = 'Invalid value: "object": ', f" evaluating rule: {rule}"
    assert message.startswith(prefix) and message.endswith(suffix), message
    return message[len(prefix) : -len(suffix)]


QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)

CASES: list[tuple[str, dict[str, Any], str]] = [
    # quantity
    ("quantity(self.s) == quantity('200M')", {"s": "0.2G"}, PASS),
    ("quantity(self.s) == quantity('200M')", {"s": "0.3G"}, FAIL),
    ("quantity(self.s).isLessThan(quantity('1Gi'))", {"s": "512Mi"}, PASS),
    ("quantity(self.s).isLessThan(quantity('1Gi'))", {"s": "1Gi"}, FAIL),
    ("quantity(self.s).isGreaterThan(quantity('50M'))", {"s": "50Mi"}, PASS),
    ("quantity(self.s).isGreaterThan(quantity('50M'))", {"s": "50M"}, FAIL),
    ("quantity(self.s).compareTo(quantity('50Mi')) == -1", {"s": "50M"}, PASS),
    ("quantity(self.s).compareTo(quantity('0.2G')) == 0", {"s": "200M"}, PASS),
    ("quantity(self.s).isInteger()", {"s": "10Mo"}, QUANTITY_FORMAT),
    ("quantity(self.s).isInteger()", {"s": "10Mm"}, "unable to parse quantity's suffix"),
    # K is among the letters the format admits, then no suffix table has it
    ("quantity(self.s).isInteger()", {"s": "200K"}, "unable to parse quantity's suffix"),
    ("isQuantity(self.s)", {"s": "1.3Gi"}, PASS),
    ("isQuantity(self.s)", {"s": "1,3G"}, FAIL),
    ("quantity(self.s).isInteger()", {"s": "50000000G"}, PASS),
    ("quantity(self.s).isInteger()", {"s": "9999999999999999999999999999999999999G"}, FAIL),
    # kube answers from its int64 form: 1.5Gi and 1000m are whole but not int64 amounts
    ("quantity(self.s).isInteger()", {"s": "1.5Gi"}, FAIL),
    ("quantity(self.s).isInteger()", {"s": "1000m"}, FAIL),
    ("quantity(self.s).asInteger() == 50000", {"s": "50k"}, PASS),
    ("quantity(self.s).asInteger() == 1", {"s": "1.5Gi"}, "cannot convert value to integer"),
    ("quantity(self.s).asApproximateFloat() == 50703.0", {"s": "50.703k"}, PASS),
    ("quantity(self.s).asApproximateFloat() < 1.0", {"s": "1"}, FAIL),
    ("sign(quantity(self.s)) == -1", {"s": "-5m"}, PASS),
    ("sign(quantity(self.s)) == 0", {"s": "1"}, FAIL),
    ("quantity(self.s).add(quantity('20')) == quantity('50.02k')", {"s": "50k"}, PASS),
    ("quantity(self.s).add(20) == quantity('50020')", {"s": "50k"}, PASS),
    ("quantity(self.s).add(20).isLessThan(quantity('50020'))", {"s": "50k"}, FAIL),
    ("quantity(self.s).sub(quantity('20')) == quantity('49.98k')", {"s": "50k"}, PASS),
    (
        "quantity(self.s).add(20).sub(quantity('100k')).sub(-50000).asInteger() == 20",
        {"s": "50k"},
        PASS,
    ),
    (
        "[quantity(self.s)].all(x, x.add(quantity('1')).compareTo(x.add(quantity('2'))) == -1)",
        {"s": "9999999999999999999999999999999999999"},
        PASS,
    ),
    # IP
    ("ip(self.s).family() == 4", {"s": "192.168.0.1"}, PASS),
    ("ip(self.s).family() == 4", {"s": "2001:db8::1"}, FAIL),
    (
        "ip(self.s).family() == 4",
        {"s": "192.168.0.01"},
        'IP Address "192.168.0.01" parse error during conversion from string: '
        'ParseAddr("192.168.0.01"): IPv4 field has octet with leading zero',
    ),
    (
        "ip(self.s).family() == 6",
        {"s": "::ffff:1.2.3.4"},
        'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed',
    ),
    (
        "ip(self.s).family() == 6",
        {"s": "fe80::1%eth0"},
        'IP address "fe80::1%eth0" with zone value is not allowed',
    ),
    ("isIP(self.s)", {"s": "fd00::1"}, PASS),
    ("isIP(self.s)", {"s": "1.2.3"}, FAIL),
    ("ip.isCanonical(self.s)", {"s": "2001:db8::1"}, PASS),
    ("ip.isCanonical(self.s)", {"s": "2001:DB8:0::1"}, FAIL),
    ("ip(self.s).isUnspecified()", {"s": "::"}, PASS),
    ("ip(self.s).isUnspecified()", {"s": "0.0.0.1"}, FAIL),
    ("ip(self.s).isLoopback()", {"s": "127.0.0.2"}, PASS),
    ("ip(self.s).isLoopback()", {"s": "::2"}, FAIL),
    ("ip(self.s).isLinkLocalMulticast()", {"s": "ff02::1"}, PASS),
    ("ip(self.s).isLinkLocalMulticast()", {"s": "224.0.1.1"}, FAIL),
    ("ip(self.s).isLinkLocalUnicast()", {"s": "fe80::1"}, PASS),
    ("ip(self.s).isLinkLocalUnicast()", {"s": "10.0.0.1"}, FAIL),
    ("ip(self.s).isGlobalUnicast()", {"s": "10.0.0.1"}, PASS),
    ("ip(self.s).isGlobalUnicast()", {"s": "255.255.255.255"}, FAIL),
    ("string(ip(self.s)) == '2001:db8::1'", {"s": "2001:DB8::1"}, PASS),
    ("ip(self.s) == ip('10.0.0.1')", {"s": "10.0.0.2"}, FAIL),
    # CIDR
    ("isCIDR(self.s)", {"s": "10.0.0.0/8"}, PASS),
    ("isCIDR(self.s)", {"s": "10.0.0.0/33"}, FAIL),
    (
        "cidr(self.s).prefixLength() == 8",
        {"s": "10.0.0.0/08"},
        "network address parse error during conversion from string: network address parse "
        'error during conversion from string: netip.ParsePrefix("10.0.0.0/08"): bad bits '
        'after slash: "08"',
    ),
    ("cidr(self.s).prefixLength() == 64", {"s": "2001:db8::/64"}, PASS),
    ("cidr(self.s).containsIP(self.t)", {"s": "10.0.0.0/8", "t": "10.1.2.3"}, PASS),
    ("cidr(self.s).containsIP(self.t)", {"s": "10.0.0.0/8", "t": "::1"}, FAIL),
    ("cidr(self.s).containsIP(ip(self.t))", {"s": "10.0.0.0/8", "t": "11.0.0.1"}, FAIL),
    ("cidr(self.s).containsCIDR(self.t)", {"s": "10.0.0.0/8", "t": "10.1.0.0/16"}, PASS),
    ("cidr(self.s).containsCIDR(cidr(self.t))", {"s": "10.0.0.0/8", "t": "0.0.0.0/0"}, FAIL),
    ("cidr(self.s).ip() == ip('10.1.2.3')", {"s": "10.1.2.3/8"}, PASS),
    ("string(cidr(self.s).masked()) == '10.0.0.0/8'", {"s": "10.1.2.3/8"}, PASS),
    ("cidr(self.s).masked() == cidr(self.s)", {"s": "10.1.2.3/8"}, FAIL),
    # semver
    ("isSemver(self.s)", {"s": "1.2.3-rc.1+build.5"}, PASS),
    ("isSemver(self.s)", {"s": "v1.2.3"}, FAIL),
    ("isSemver(self.s, true)", {"s": "v1.2"}, PASS),
    ("semver(self.s, true) == semver('1.1.1')", {"s": "01.01.01"}, PASS),
    ("semver(self.s).major() == 1", {"s": "1.2"}, "No Major.Minor.Patch elements found"),
    (
        "semver(self.s).major() == 1",
        {"s": "01.2.3"},
        'Major number must not contain leading zeroes "01"',
    ),
    ("semver(self.s).major() == 1 && semver(self.s).minor() == 2", {"s": "1.2.3"}, PASS),
    ("semver(self.s).patch() == 4", {"s": "1.2.3"}, FAIL),
    ("semver(self.s).isLessThan(semver('1.10.0'))", {"s": "1.9.0"}, PASS),
    ("semver(self.s).isGreaterThan(semver('1.0.0'))", {"s": "1.0.0-rc.1"}, FAIL),
    ("semver(self.s).compareTo(semver('1.0.0-alpha')) == 1", {"s": "1.0.0-alpha.1"}, PASS),
    # format
    ("!format.dns1123Label().validate(self.s).hasValue()", {"s": "my-name"}, PASS),
    (
        "format.dns1123Label().validate(self.s).value() == ['must not contain dots']",
        {"s": "a.b"},
        PASS,
    ),
    (
        "format.dns1123Label().validate(self.s).value()[0] == self.t",
        {
            "s": "My_Name",
            "t": "a lowercase RFC 1123 label must consist of lower case alphanumeric "
            "characters or '-', and must start and end with an alphanumeric character (e.g. "
            "'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        },
        PASS,
    ),
    ("!format.dns1123Subdomain().validate(self.s).hasValue()", {"s": "a.example.com"}, PASS),
    ("!format.dns1123Subdomain().validate(self.s).hasValue()", {"s": "A.example.com"}, FAIL),
    ("!format.dns1035Label().validate(self.s).hasValue()", {"s": "abc-1"}, PASS),
    ("!format.dns1035Label().validate(self.s).hasValue()", {"s": "1abc"}, FAIL),
    ("!format.qualifiedName().validate(self.s).hasValue()", {"s": "example.com/My.Name"}, PASS),
    (
        "format.qualifiedName().validate(self.s).value() == ['prefix part must be non-empty']",
        {"s": "/name"},
        PASS,
    ),
    ("!format.dns1123LabelPrefix().validate(self.s).hasValue()", {"s": "web-"}, PASS),
    ("!format.dns1123Label().validate(self.s).hasValue()", {"s": "web-"}, FAIL),
    ("!format.dns1123SubdomainPrefix().validate(self.s).hasValue()", {"s": "a.b-"}, PASS),
    # a prefix's trailing dash and the character before it are checked as one letter
    ("!format.dns1035LabelPrefix().validate(self.s).hasValue()", {"s": "1-"}, PASS),
    ("!format.dns1035LabelPrefix().validate(self.s).hasValue()", {"s": "1a-"}, FAIL),
    ("!format.labelValue().validate(self.s).hasValue()", {"s": ""}, PASS),
    (
        "format.labelValue().validate(self.s).value()[0] == 'must be no more than 63 bytes'",
        {"s": "a" * 64},
        PASS,
    ),
    ("!format.uri().validate(self.s).hasValue()", {"s": "https://example.com/x?y=1"}, PASS),
    (
        "format.uri().validate(self.s).value() == ['parse \"example.com\": invalid URI for request']",
        {"s": "example.com"},
        PASS,
    ),
    (
        "!format.uuid().validate(self.s).hasValue()",
        {"s": "0CB9D1A2-4E1A-4B7C-9F3E-1A2B3C4D5E6F"},
        PASS,
    ),
    (
        "format.uuid().validate(self.s).value() == ['does not match the UUID format']",
        {"s": "not-a-uuid"},
        PASS,
    ),
    ("!format.byte().validate(self.s).hasValue()", {"s": "aGVsbG8="}, PASS),
    ("format.byte().validate(self.s).value() == ['invalid base64']", {"s": "aGVsbG8"}, PASS),
    ("!format.date().validate(self.s).hasValue()", {"s": "2024-02-29"}, PASS),
    ("format.date().validate(self.s).value() == ['invalid date']", {"s": "2023-02-29"}, PASS),
    ("!format.datetime().validate(self.s).hasValue()", {"s": "2024-02-29T23:59:59.5+02:00"}, PASS),
    ("!format.datetime().validate(self.s).hasValue()", {"s": "2024-02-29 10:00:00Z"}, FAIL),
    ("format.named(self.s).hasValue()", {"s": "dns1123Label"}, PASS),
    ("format.named(self.s).hasValue()", {"s": "DNS1123Label"}, FAIL),
    ("format.named('uuid').value().validate(self.s).hasValue()", {"s": "x"}, PASS),
]


@pytest.mark.parametrize(
    ("rule", "spec", "expected"),
    CASES,
    ids=[f"{i}-{c[0][:40]}" for i, c in enumerate(CASES)],
)
def test_library_functions(rule: str, spec: dict[str, Any], expected: str) -> None:
    assert run(rule, **spec) == expected


def _compile_error(rule: str, column: int, message: str) -> str:
    dots = "." * (column - 1)
    return f"compilation failed: ERROR: <input>:1:{column}: {message}\n | {rule}\n | {dots}^"


@pytest.mark.parametrize(
    ("rule", "column", "message"),
    [
        (
            "isQuantity([1, 2, 3])",
            11,
            "found no matching overload for 'isQuantity' applied to '(list(int))'",
        ),
        # kube declares sign() as a global function only
        (
            "quantity(self.s).sign() == 1",
            22,
            "found no matching overload for 'sign' applied to 'kubernetes.Quantity.()'",
        ),
        (
            "quantity(self.s) < quantity('1')",
            18,
            "found no matching overload for '_<_' applied to "
            "'(kubernetes.Quantity, kubernetes.Quantity)'",
        ),
        (
            "quantity(self.s).add('1')",
            21,
            "found no matching overload for 'add' applied to 'kubernetes.Quantity.(string)'",
        ),
        (
            "semver(self.s).isLessThan(quantity('1'))",
            26,
            "found no matching overload for 'isLessThan' applied to "
            "'kubernetes.Semver.(kubernetes.Quantity)'",
        ),
        ("ip(self.n).isLoopback()", 3, "found no matching overload for 'ip' applied to '(int)'"),
        (
            "self.s.family() == 4",
            14,
            "found no matching overload for 'family' applied to 'string.()'",
        ),
        (
            "cidr(self.s).containsIP(1)",
            24,
            "found no matching overload for 'containsIP' applied to 'net.CIDR.(int)'",
        ),
        (
            "string(quantity(self.s)) == '1'",
            7,
            "found no matching overload for 'string' applied to '(kubernetes.Quantity)'",
        ),
        (
            "format.dns1123Label().validate(1).hasValue()",
            31,
            "found no matching overload for 'validate' applied to 'kubernetes.NamedFormat.(int)'",
        ),
        (
            "isSemver(self.s, 1)",
            9,
            "found no matching overload for 'isSemver' applied to '(string, int)'",
        ),
        ("cidrs(self.s) == 1", 6, "undeclared reference to 'cidrs' (in container '')"),
    ],
)
def test_compile_errors(rule: str, column: int, message: str) -> None:
    assert run(rule, s="1") == _compile_error(rule, column, message)


def test_results_are_typed_for_the_checker() -> None:
    # A library call's result type is known, so a non-bool rule is refused like kube does.
    rule = "quantity(self.s).compareTo(quantity('1'))"
    assert run(rule, s="1") == "cel expression must evaluate to a bool"
