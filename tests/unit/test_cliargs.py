"""Command-line values checked as kubectl checks them: Go's durations and integers, pflag's and
cobra's messages, kubectl drain's selector and dry-run checks."""

from __future__ import annotations

import pytest

from nodeops.common.cliargs import (
    ArgumentError,
    check_pod_selector,
    check_selector,
    parse_dry_run,
    parse_duration,
    parse_int,
    resource_name,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("1s", 1.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("2us", 2e-6),
        ("2\u00b5s", 2e-6),
        ("3ns", 3e-9),
        ("-1m", -60.0),
        ("+5s", 5.0),
        ("1h1m1s1ms", 3661.001),
        ("90", 90.0),  # nodeops also takes bare seconds
        ("2.5", 2.5),
    ],
)
def test_durations_as_go_parses_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        ("", 'time: invalid duration ""'),
        ("x", 'time: invalid duration "x"'),
        ("s", 'time: invalid duration "s"'),
        (".s", 'time: invalid duration ".s"'),
        ("1s2", 'time: missing unit in duration "1s2"'),
        ("-", 'time: invalid duration "-"'),
        ("1 s", 'time: unknown unit " s" in duration "1 s"'),
        ("1é", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ],
)
def test_bad_durations_in_pflags_words(text: str, why: str) -> None:
    with pytest.raises(ArgumentError) as info:
        parse_duration(text, "--timeout")
    assert info.value.message == f'invalid argument "{text}" for "--timeout" flag: {why}'.replace(
        f'"{text}" for', f"{_go(text)} for"
    )
    assert info.value.lines("nodeops drain").endswith("See 'nodeops drain --help' for usage.")


def _go(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("-7", -7),
        ("+3", 3),
        ("0x10", 16),
        ("0o17", 15),
        ("010", 8),
        ("0b101", 5),
        ("0x_1f", 31),
        ("1_000", None),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_integers_as_strconv_parses_them(text: str, value: int | None) -> None:
    if value is None:
        with pytest.raises(ArgumentError):
            parse_int(text, "--grace-period")
    else:
        assert parse_int(text, "--grace-period") == value


def test_bad_integers_in_pflags_words() -> None:
    with pytest.raises(ArgumentError) as info:
        parse_int("x", "--grace-period")
    assert info.value.message == (
        'invalid argument "x" for "--grace-period" flag: strconv.ParseInt: parsing "x": '
        "invalid syntax"
    )
    with pytest.raises(ArgumentError) as info:
        parse_int("9223372036854775808", "--chunk-size")
    assert info.value.message.endswith(": value out of range")


def test_dry_run_values() -> None:
    assert [parse_dry_run(v) for v in ("none", "client", "server", "true", "false")] == [
        "none",
        "client",
        "server",
        "client",
        "none",
    ]
    with pytest.raises(ArgumentError) as info:
        parse_dry_run("bogus")
    assert info.value.lines("nodeops drain") == (
        'error: Invalid dry-run value (bogus). Must be "none", "server", or "client".'
    )


def test_selectors_in_kubectls_words() -> None:
    assert check_pod_selector("app=web,tier in (a,b)") == "app=web,tier in (a,b)"
    with pytest.raises(ArgumentError) as info:
        check_pod_selector("a in (b")
    assert info.value.lines("nodeops drain") == (
        "error: --pod-selector=<pod_selector> must be a valid label selector"
    )
    with pytest.raises(ArgumentError) as info:
        check_selector("a in (b")
    assert info.value.lines("nodeops drain") == (
        'Error from server (BadRequest): Unable to find "/v1, Resource=nodes" that match label '
        'selector "a in (b", field selector "": unable to parse requirement: found \'\', '
        "expected: ',' or ')'"
    )


@pytest.mark.parametrize(
    ("arg", "name", "error"),
    [
        ("node-1", "node-1", None),
        ("node/node-1", "node-1", None),
        ("nodes/node-1", "node-1", None),
        ("no/node-1", "node-1", None),
        ("", None, "resource name may not be empty"),
        ("a/b/c", None, "arguments in resource/name form may not have more than one slash"),
        ("pod/x", None, 'expected resource of type node, got "pod"'),
    ],
)
def test_node_arguments(arg: str, name: str | None, error: str | None) -> None:
    if error is None:
        assert resource_name(arg, ("node", "nodes", "no")).name == name
    else:
        with pytest.raises(ArgumentError, match=error):
            resource_name(arg, ("node", "nodes", "no"))
