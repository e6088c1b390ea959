"""Label and field selectors must parse, print, match and fail exactly like apimachinery's."""

from __future__ import annotations

import pytest

from nodeops.common.selectors import (
    EVERYTHING,
    NOTHING,
    FieldSelector,
    LabelSelector,
    SelectorError,
    escape_field_value,
    format_labels,
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "version": "7", "empty": ""}

KEY_REGEX_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_REGEX_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


# (selector, canonical string, labels, expected match)
LABEL_MATCH_CASES = [
    ("app=web", "app=web", LABELS, True),
    ("app=db", "app=db", LABELS, False),
    ("app==web", "app==web", LABELS, True),
    ("app!=web", "app!=web", LABELS, False),
    ("app!=db", "app!=db", LABELS, True),
    ("missing!=x", "missing!=x", LABELS, True),
    ("app in (db,web)", "app in (db,web)", LABELS, True),
    ("app in (web,db)", "app in (db,web)", LABELS, True),
    ("app in (db)", "app in (db)", LABELS, False),
    ("missing in (x)", "missing in (x)", LABELS, False),
    ("app notin (db)", "app notin (db)", LABELS, True),
    ("app notin (web,db)", "app notin (db,web)", LABELS, False),
    ("missing notin (x)", "missing notin (x)", LABELS, True),
    ("app", "app", LABELS, True),
    ("missing", "missing", LABELS, False),
    ("!missing", "!missing", LABELS, True),
    ("!app", "!app", LABELS, False),
    ("version>6", "version>6", LABELS, True),
    ("version>7", "version>7", LABELS, False),
    ("version<8", "version<8", LABELS, True),
    ("app>1", "app>1", LABELS, False),
    ("missing<1", "missing<1", LABELS, False),
    ("empty=", "empty=", LABELS, True),
    ("empty in ()", "empty in ()", LABELS, True),
    ("tier=front,app=web", "app=web,tier=front", LABELS, True),
    ("tier=front,app=db", "app=db,tier=front", LABELS, False),
    ("  app  =  web , tier ", "app=web,tier", LABELS, True),
    ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()", {"x": "", "y": "1"}, True),
    ("in in (in),notin notin (notin)", "in in (in),notin notin (notin)", {"in": "in"}, True),
    ("example.com/role=a", "example.com/role=a", {"example.com/role": "a"}, True),
    ("", "", LABELS, True),
    ("app=web", "app=web", None, False),
    ("!app", "!app", None, True),
]


@pytest.mark.parametrize(("text", "canonical", "labels", "expected"), LABEL_MATCH_CASES)
def test_label_selector_parses_prints_and_matches(
    text: str, canonical: str, labels: dict[str, str] | None, expected: bool
) -> None:
    selector = parse_label_selector(text)
    assert str(selector) == canonical
    assert selector.matches(labels) is expected
    # The canonical form parses back to the same selector.
    assert parse_label_selector(str(selector)) == selector


# (selector, exact apimachinery message)
LABEL_ERROR_CASES = [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("a=b,", "found '', expected: identifier after ','"),
    ("a=b,,c", "found ',', expected: identifier after ','"),
    ("=a", "found '=', expected: !, identifier, or 'end of string'"),
    ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
    ("!,", "unable to parse requirement: found ',', expected: identifier"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
    ("a in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
    ("a in (b,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
    ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
    ("a>b", 'unable to parse requirement: values[0]: Invalid value: "b": '
     "for 'Gt', 'Lt' operators, the value must be an integer"),
    ("k_=v", f'unable to parse requirement: <nil>: Invalid value: "k_": name part {KEY_REGEX_MSG}'),
    ("-ltier=x", 'unable to parse requirement: <nil>: Invalid value: "-ltier": '
     f"name part {KEY_REGEX_MSG}"),
    ("a/b/c", 'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key '
     f"{KEY_REGEX_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ("/a", 'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty'),
    ("Ex.com/a", 'unable to parse requirement: <nil>: Invalid value: "Ex.com/a": prefix part a '
     "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
     "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
     "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    ("a=b!", "found '!', expected: ',' or 'end of string'"),
    ("a=" + "x" * 64, 'unable to parse requirement: values[0][a]: Invalid value: "' + "x" * 64
     + '": must be no more than 63 bytes'),
    ("a=-b", f'unable to parse requirement: values[0][a]: Invalid value: "-b": {VALUE_REGEX_MSG}'),
    ("a<-1", f'unable to parse requirement: values[0][a]: Invalid value: "-1": {VALUE_REGEX_MSG}'),
    ("x" * 64, f'unable to parse requirement: <nil>: Invalid value: "{"x" * 64}": '
     "name part must be no more than 63 bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), LABEL_ERROR_CASES)
def test_label_selector_errors_carry_apimachinery_messages(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_empty_name_reports_both_problems() -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector("example.com/=x")
    assert str(info.value) == (
        'unable to parse requirement: <nil>: Invalid value: "example.com/": '
        f"name part must be non-empty; name part {KEY_REGEX_MSG}"
    )


def test_gt_lt_use_int64_parsing_of_label_values() -> None:
    selector = parse_label_selector("n>10")
    assert selector.matches({"n": "11"})
    assert selector.matches({"n": "+11"})
    assert not selector.matches({"n": "1_1"})
    assert not selector.matches({"n": " 11"})
    assert not selector.matches({"n": "99999999999999999999"})


# (metav1.LabelSelector, canonical string, labels, expected match)
OBJECT_CASES = [
    ({}, "", {}, True),
    ({"matchLabels": None, "matchExpressions": []}, "", {"a": "b"}, True),
    ({"matchLabels": {"b": "1", "a": "2"}}, "a=2,b=1", {"a": "2", "b": "1"}, True),
    ({"matchLabels": {"a": "2"}}, "a=2", {"a": "3"}, False),
    (
        {"matchExpressions": [{"key": "c", "operator": "In", "values": ["z", "y"]}]},
        "c in (y,z)",
        {"c": "y"},
        True,
    ),
    (
        {"matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["y"]}]},
        "c notin (y)",
        {"c": "y"},
        False,
    ),
    ({"matchExpressions": [{"key": "d", "operator": "Exists"}]}, "d", {"d": ""}, True),
    ({"matchExpressions": [{"key": "d", "operator": "DoesNotExist"}]}, "!d", {"d": ""}, False),
    (
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
        },
        "app=web,tier in (front)",
        LABELS,
        True,
    ),
]


@pytest.mark.parametrize(("obj", "canonical", "labels", "expected"), OBJECT_CASES)
def test_label_selector_from_object(
    obj: dict[str, object], canonical: str, labels: dict[str, str], expected: bool
) -> None:
    selector = label_selector_from_object(obj)
    assert str(selector) == canonical
    assert selector.matches(labels) is expected


def test_missing_selector_object_matches_nothing_but_empty_matches_everything() -> None:
    nothing = label_selector_from_object(None)
    assert nothing is NOTHING
    assert not nothing.matches({})
    assert not nothing.matches(LABELS)
    assert not nothing.empty
    assert nothing.matches_nothing
    everything = label_selector_from_object({})
    assert everything is EVERYTHING
    assert everything.matches({})
    assert everything.empty
    assert not everything.matches_nothing


OBJECT_ERROR_CASES = [
    (
        {"matchExpressions": [{"key": "c", "operator": "In"}]},
        "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
    ),
    (
        {"matchExpressions": [{"key": "c", "operator": "Exists", "values": ["a"]}]},
        'values: Invalid value: ["a"]: values set must be empty for exists and does not exist',
    ),
    ({"matchExpressions": [{"key": "c", "operator": "Foo"}]}, '"Foo" is not a valid label '
     "selector operator"),
    ({"matchLabels": {"Bad Key": "v"}}, f'key: Invalid value: "Bad Key": name part {KEY_REGEX_MSG}'),
    ({"matchLabels": {"k": "bad value"}}, 'values[0][k]: Invalid value: "bad value": '
     f"{VALUE_REGEX_MSG}"),
    (
        {"matchExpressions": [{"key": "-k", "operator": "In", "values": []}]},
        f'[key: Invalid value: "-k": name part {KEY_REGEX_MSG}, values: Invalid value: null: '
        "for 'in', 'notin' operators, values set can't be empty]",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "message"), OBJECT_ERROR_CASES)
def test_label_selector_object_errors(obj: dict[str, object], message: str) -> None:
    with pytest.raises(SelectorError) as info:
        label_selector_from_object(obj)
    assert str(info.value) == message


def test_requires_exact_match_and_immutability() -> None:
    selector = parse_label_selector("app=web,tier in (a,b),zone in (z)")
    assert selector.requires_exact_match("app") == "web"
    assert selector.requires_exact_match("tier") is None
    assert selector.requires_exact_match("zone") == "z"
    assert selector.requires_exact_match("other") is None
    with pytest.raises(AttributeError):
        selector.matches = lambda labels: True
    assert hash(selector) == hash(parse_label_selector("zone in (z),tier in (b,a),app=web"))


def test_requirements_are_sorted_by_key() -> None:
    selector = parse_label_selector("b=1,a in (y,x),!c")
    assert [(r.key, r.operator, r.values) for r in selector.requirements] == [
        ("a", "in", ("x", "y")),
        ("b", "=", ("1",)),
        ("c", "!", ()),
    ]
    assert repr(selector) == "LabelSelector('a in (x,y),b=1,!c')"
    assert isinstance(selector, LabelSelector)


def test_nul_is_an_end_marker_like_in_the_go_lexer() -> None:
    # At a token start NUL ends the input; right after a token it is swallowed as a separator.
    assert parse_label_selector("\x00a=b") is EVERYTHING
    assert str(parse_label_selector("a=b\x00,c=d")) == "a=b,c=d"
    assert str(parse_label_selector("a=b,\x00c=d")) == "a=b,c=d"
    with pytest.raises(SelectorError) as info:
        parse_label_selector("a=b, \x00c=d")
    assert str(info.value) == "found '', expected: identifier after ','"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, "<none>"),
        (None, "<none>"),
        ({"b": "1", "a": "2"}, "a=2,b=1"),
        ({"a": "1", "a-b": "2"}, "a-b=2,a=1"),
    ],
)
def test_format_labels(labels: dict[str, str] | None, expected: str) -> None:
    assert format_labels(labels) == expected


# --------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------

FIELDS = {"metadata.name": "pod-1", "spec.nodeName": "n1", "status.phase": "Running"}

# (selector, canonical, requirements, fields, expected)
FIELD_CASES = [
    ("spec.nodeName=n1", "spec.nodeName=n1", [("spec.nodeName", "=", "n1")], FIELDS, True),
    ("spec.nodeName==n1", "spec.nodeName=n1", [("spec.nodeName", "=", "n1")], FIELDS, True),
    ("spec.nodeName!=n1", "spec.nodeName!=n1", [("spec.nodeName", "!=", "n1")], FIELDS, False),
    ("spec.nodeName=", "spec.nodeName=", [("spec.nodeName", "=", "")], {}, True),
    ("spec.nodeName!=", "spec.nodeName!=", [("spec.nodeName", "!=", "")], FIELDS, True),
    ("spec.nodeName!=", "spec.nodeName!=", [("spec.nodeName", "!=", "")], {}, False),
    (
        "status.phase!=Failed,spec.nodeName=n1",
        "spec.nodeName=n1,status.phase!=Failed",
        [("spec.nodeName", "=", "n1"), ("status.phase", "!=", "Failed")],
        FIELDS,
        True,
    ),
    (
        "status.phase=Running,metadata.name=pod-2",
        "metadata.name=pod-2,status.phase=Running",
        [("metadata.name", "=", "pod-2"), ("status.phase", "=", "Running")],
        FIELDS,
        False,
    ),
    ("a=b\\,c", "a=b\\,c", [("a", "=", "b,c")], {"a": "b,c"}, True),
    ("a=x\\=y\\\\z", "a=x\\=y\\\\z", [("a", "=", "x=y\\z")], {"a": "x=y\\z"}, True),
    ("a=b,", "a=b", [("a", "=", "b")], {"a": "b"}, True),
    ("=", "", [], {}, True),
    ("", "", [], {}, True),
    (" a = b", " a = b", [(" a ", "=", " b")], {" a ": " b"}, True),
]


@pytest.mark.parametrize(("text", "canonical", "reqs", "fields", "expected"), FIELD_CASES)
def test_field_selector_parses_prints_and_matches(
    text: str,
    canonical: str,
    reqs: list[tuple[str, str, str]],
    fields: dict[str, str],
    expected: bool,
) -> None:
    selector = parse_field_selector(text)
    assert str(selector) == canonical
    assert [tuple(r) for r in selector.requirements] == reqs
    assert selector.matches(fields) is expected
    assert selector.empty is (not reqs)
    assert parse_field_selector(str(selector)) == selector


FIELD_ERROR_CASES = [
    ("a", "invalid selector: 'a'; can't understand 'a'"),
    ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
    ("a=b=c", "invalid field selector: unescaped character in value: 61"),
    ("a=b\\x", "invalid field selector: invalid escape sequence: \\x"),
    ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
]


@pytest.mark.parametrize(("text", "message"), FIELD_ERROR_CASES)
def test_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_field_selector(text)
    assert str(info.value) == message


def test_field_selector_helpers() -> None:
    selector = parse_field_selector("metadata.name=a,spec.nodeName!=b")
    assert selector.fields == frozenset({"metadata.name", "spec.nodeName"})
    assert selector.requires_exact_match("metadata.name") == "a"
    assert selector.requires_exact_match("spec.nodeName") is None
    assert escape_field_value("a,b=c\\") == "a\\,b\\=c\\\\"
    assert isinstance(selector, FieldSelector)
    with pytest.raises(AttributeError):
        selector.matches = lambda fields: True


def test_selectors_handle_large_lists() -> None:
    """A list of 150k objects is filtered with one compiled predicate per selector."""
    objects = [{"app": f"a{i % 50}", "tier": "db" if i % 3 == 0 else "web"} for i in range(150_000)]
    selector = parse_label_selector("app in (a1,a2),tier!=db")
    matched = [o for o in objects if selector.matches(o)]
    assert len(matched) == sum(1 for o in objects if o["app"] in ("a1", "a2") and o["tier"] != "db")


def test_the_same_requirements_share_one_compiled_matcher() -> None:
    """A budget's or workload's selector is parsed again at every eviction and pod event:
    compiling it each time cost more than matching with it."""
    first = label_selector_from_object({"matchLabels": {"app": "web"}, "matchExpressions": []})
    again = label_selector_from_object({"matchLabels": {"app": "web"}})
    other = label_selector_from_object({"matchLabels": {"app": "api"}})
    assert first.matches is again.matches
    assert first.matches is not other.matches
    assert again.matches({"app": "web"}) and not other.matches({"app": "web"})
