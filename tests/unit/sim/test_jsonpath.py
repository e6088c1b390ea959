"""Kubernetes JSONPath must select and print what client-go does, quirks included."""

from __future__ import annotations

from typing import Any

import pytest

from nodeops.sim.server.jsonpath import (
    JsonPathError,
    compile_path,
    compile_template,
    format_value,
    go_json,
)

STORE: dict[str, Any] = {
    "name": "jsonpath",
    "book": [
        {"category": "reference", "author": "Nigel Rees", "price": 8.95},
        {"category": "fiction", "author": "Evelyn Waugh", "price": 12.99},
        {"category": "fiction", "author": "Herman Melville", "price": 8.99},
    ],
    "bicycle": [
        {"color": "red", "price": 19.95, "isNew": True},
        {"color": "green", "price": 20.01, "isNew": False},
    ],
    "labels": {"engineer": 10, "web/html": 15, "k8s-app": 20},
}

NODES: dict[str, Any] = {
    "kind": "List",
    "items": [
        {
            "kind": "None",
            "metadata": {
                "name": "127.0.0.1",
                "labels": {"kubernetes.io/hostname": "127.0.0.1"},
            },
            "status": {
                "capacity": {"cpu": "4"},
                "ready": True,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}],
            },
        },
        {
            "kind": "None",
            "metadata": {
                "name": "127.0.0.2",
                "labels": {"kubernetes.io/hostname": "127.0.0.2"},
            },
            "status": {
                "capacity": {"cpu": "8"},
                "ready": False,
                "addresses": [
                    {"type": "LegacyHostIP", "address": "127.0.0.2"},
                    {"type": "another", "address": "127.0.0.3"},
                ],
            },
        },
    ],
    "users": [
        {"name": "myself", "user": {}},
        {"name": "e2e", "user": {"username": "admin", "password": "secret"}},
    ],
}

TYPES: dict[str, Any] = {
    "bools": [True, False, True, False],
    "integers": [1, 2, 3, 4],
    "floats": [1.0, 2.2, 3.3, 4.0],
    "interfaces": [True, "one", 1, 1.1],
    "maps": [{"name": "one", "value": 1}, {"name": "two", "value": 2.02}],
}

POINTS: list[dict[str, Any]] = [
    {"id": "i1", "x": 4, "y": -5},
    {"id": "i2", "x": -2, "y": -5, "z": 1},
    {"id": "i3", "x": 8, "y": 3},
    {"id": "i7", "x": None, "y": 4},
]

# (template, data, what kubectl prints)
RENDER_CASES: list[tuple[str, Any, str]] = [
    ("hello jsonpath", None, "hello jsonpath"),
    ("hello {.name}", STORE, "hello jsonpath"),
    ('{"{"}', None, "{"),
    ("{..}", [1, 2, 3], "[1,2,3]"),
    ("{[1,3,4]}", [0, 1, 2, 3, 4], "1 3 4"),
    ("{[0:2]}", ["Monday", "Tuesday", "Wednesday"], "Monday Tuesday"),
    ("{[?(@<5)]}", [2, 6, 3, 7], "2 3"),
    ("{$.labels.web/html}", STORE, "15"),
    ("{.labels.k8s-app}", STORE, "20"),
    ("{.bicycle[*].color}", STORE, "red green"),
    ("{.book[*].author}", STORE, "Nigel Rees Evelyn Waugh Herman Melville"),
    ("{..price}", STORE, "8.95 12.99 8.99 19.95 20.01"),
    ("{...price}", STORE, "8.95 12.99 8.99 19.95 20.01"),
    ("{.book[-1:].author}", STORE, "Herman Melville"),
    ("{..book[2].author}", STORE, "Herman Melville"),
    ("{.bicycle[?(@.isNew==true)].color}", STORE, "red"),
    ("{.book[?(@.price<9.0)].author}", STORE, "Nigel Rees Herman Melville"),
    ("{.book[?(@.price>9.5)].author}", STORE, "Evelyn Waugh"),
    ('{.book[?(@.category!="fiction")].author}', STORE, "Nigel Rees"),
    ("{.book[?(@.price<=8.99)].author}", STORE, "Nigel Rees Herman Melville"),
    ("{.book[?(@.price>=12.99)].author}", STORE, "Evelyn Waugh"),
    ("{.book[0]}", STORE, '{"author":"Nigel Rees","category":"reference","price":8.95}'),
    ("{ .bools }", TYPES, "[true,false,true,false]"),
    ("{ .bools[-1] }", TYPES, "false"),
    ("{ .bools[:4:2] }", TYPES, "true true"),
    ("{ .integers[-2] }", TYPES, "3"),
    ("{ .floats }", TYPES, "[1,2.2,3.3,4]"),
    ("{ .floats[0:2] }", TYPES, "1 2.2"),
    ("{ .interfaces[:4:2] }", TYPES, "true 1"),
    ("{ .maps[1::2] }", TYPES, '{"name":"two","value":2.02}'),
    ("{[?(@.z)].id}", POINTS, "i2"),
    ("{[0]['id']}", POINTS, "i1"),
    ("{[-1]['x']}", POINTS, "null"),
    ("{range .items[*]}{.metadata.name}, {end}{.kind}", NODES, "127.0.0.1, 127.0.0.2, List"),
    ('{range .items[*]}{.metadata.name}{"\\t"}{end}', NODES, "127.0.0.1\t127.0.0.2\t"),
    (
        "{range .items[*]}{range .status.addresses[*]}{.address}, {end}{end}",
        NODES,
        "127.0.0.1, 127.0.0.2, 127.0.0.3, ",
    ),
    ("{.items[*].status.addresses[*].address}", NODES, "127.0.0.1 127.0.0.2 127.0.0.3"),
    (
        "{.items[*]['metadata.name', 'status.capacity']}",
        NODES,
        '127.0.0.1 127.0.0.2 {"cpu":"4"} {"cpu":"8"}',
    ),
    (
        "{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
        NODES,
        '[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] ',
    ),
    ('{.users[?(@.name=="e2e")].user.password}', NODES, "secret"),
    ("{.items[0].metadata.labels.kubernetes\\.io/hostname}", NODES, "127.0.0.1"),
    ("{.items[0].metadata.labels['kubernetes\\.io/hostname']}", NODES, "127.0.0.1"),
    (
        '{.items[?(@.metadata.labels.kubernetes\\.io/hostname=="127.0.0.1")].kind}',
        NODES,
        "None",
    ),
    ("{.items[?(@..ready==true)].metadata.name}", NODES, "127.0.0.1"),
    ("{..name}", NODES, "127.0.0.1 127.0.0.2 myself e2e"),
    ("{range .items[*]}{.metadata.name}{end}", {"items": []}, ""),
    ("before-{.missing}after", STORE, "before-after"),
    ('{.a[?(@.s == "()")].v}', {"a": [{"s": "()", "v": 1}, {"s": "x", "v": 2}]}, "1"),
    ('{.a[?(@.s == "(\\"\\")")].v}', {"a": [{"s": '("")', "v": 1}]}, "1"),
    ("{.a[?(@.s == '\\'')].v}", {"a": [{"s": "'", "v": 3}]}, "3"),
    ("{.name.*}", {"name": "ab"}, "97 98"),
    ("{.f}", {"f": 1e6}, "1e+06"),
    ("{.f}", {"f": 123456.0}, "123456"),
    ("{.m}", {"m": {"b": 1e6, "a": "<&>"}}, '{"a":"\\u003c\\u0026\\u003e","b":1000000}'),
]


@pytest.mark.parametrize(("template", "data", "expected"), RENDER_CASES)
def test_render_matches_kubectl(template: str, data: Any, expected: str) -> None:
    assert compile_template(template).render(data) == expected


# (path as a CRD column writes it, object, find(), first())
PATH_CASES = [
    (".status.phase", {"status": {"phase": "Running"}}, ["Running"], "Running"),
    (".status.phase", {"status": {}}, [], None),
    (".status.phase", {"status": None}, [], None),
    (".spec.replicas", {"spec": {"replicas": 0}}, [0], 0),
    (".spec.x", {"spec": {"x": None}}, [None], None),
    (
        '.status.conditions[?(@.type=="Ready")].status',
        {
            "status": {
                "conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "y"}]
            }
        },
        ["y"],
        "y",
    ),
    (".items[*].n", {"items": [{"n": 1}, {"n": 2}]}, [1, 2], 1),
    ("['a.b']", {"a": {"b": 1}, "a.b": 2}, [1], 1),
    ("['a\\.b']", {"a": {"b": 1}, "a.b": 2}, [2], 2),
    (".a['b', 'c']", {"a": {"b": 1, "c": 2}}, [1, 2], 1),
    ("..n", {"x": {"n": 1}, "y": [{"n": 2}]}, [1, 2], 1),
    (".spec.*", {"spec": {"a": 1, "b": "x"}}, [1, "x"], 1),
    (".list[1:]", {"list": [1, 2, 3]}, [2, 3], 2),
    (".list[-2]", {"list": [1, 2, 3]}, [2], 2),
    (".list[0:0]", {"list": [1, 2, 3]}, [], None),
]


@pytest.mark.parametrize(("path", "obj", "found", "first"), PATH_CASES)
def test_compile_path_find_and_first(path: str, obj: Any, found: list[Any], first: Any) -> None:
    compiled = compile_path(path)
    assert compiled.template == "{" + path + "}"
    assert compiled.find(obj) == found
    assert compiled.first(obj) == first


def test_compile_path_detects_templates_unless_told() -> None:
    assert compile_path("{.a}{.b}").find({"a": 1, "b": 2}) == [1, 2]
    assert compile_path("{.a}", template=True).template == "{.a}"
    with pytest.raises(JsonPathError) as info:
        compile_path("{.a}", template=False)
    assert info.value.reason == "unrecognized character in action: U+007B '{'"


def test_first_reads_only_the_first_segment_like_printer_columns() -> None:
    compiled = compile_template("{.missing}{.present}")
    assert compiled.find_results({"present": 1}) == [[], [1]]
    assert compiled.first({"present": 1}) is None


# (template, exact client-go message)
PARSE_ERROR_CASES = [
    ("{.hello", "unclosed action"),
    ("{*}", "unrecognized character in action: U+002A '*'"),
    ("{\t}", "unrecognized character in action: U+0009"),
    ("{+12.3.0}", "cannot parse number +12.3.0"),
    ("{[1}", "unterminated array"),
    ("{[?(.price]}", "unterminated filter"),
    ("{[?(@.a)x]}", "unclosed array expect ]"),
    ("{........}", "invalid multiple recursive descent"),
    ("{[a]}", "invalid array index a"),
    ('{"abc}', "unterminated quoted string"),
    ('{"\\q"}', 'unquote string "\\q" error invalid syntax'),
]


@pytest.mark.parametrize(("template", "reason"), PARSE_ERROR_CASES)
def test_parse_errors_name_the_expression(template: str, reason: str) -> None:
    with pytest.raises(JsonPathError) as info:
        compile_template(template)
    assert info.value.reason == reason
    assert info.value.expression == template
    assert repr(template) in str(info.value)


# (template, data, exact client-go message), evaluated with missing keys as errors
EVAL_ERROR_CASES = [
    ("{hello}", STORE, "unrecognized identifier hello"),
    ("{.hello}", STORE, "hello is not found"),
    ("{.labels[0]}", STORE, "map[string]interface {} is not array or slice"),
    ("{.book[?(@.price<>10)]}", STORE, "unrecognized filter operator <>"),
    ("{range .labels.*}{@}{end}{end}", STORE, "not in range, nothing to end"),
    ("{.book[5]}", STORE, "array index out of bounds: index 5, length 3"),
    ("{.book[-4]}", STORE, "array index out of bounds: index -1, length 3"),
    ("{.book[2:1]}", STORE, "starting index 2 is greater than ending index 1"),
    ("{.book[::0]}", STORE, "step must be > 0"),
    ("{.book[?(@.price>10)]}", STORE, "incompatible types for comparison"),
    ("{.bicycle[?(@.isNew<true)]}", STORE, "invalid type for comparison"),
    ("{.name[?(@.x)]}", STORE, "jsonpath is not array or slice and cannot be filtered"),
    ("{.book[?(@..price>1)]}", {"book": [{"a": {"price": 2}, "price": 3}]}, "can only compare "
     "one element at a time"),
]  # fmt: skip


@pytest.mark.parametrize(("template", "data", "reason"), EVAL_ERROR_CASES)
def test_evaluation_errors(template: str, data: Any, reason: str) -> None:
    with pytest.raises(JsonPathError) as info:
        compile_template(template, allow_missing_keys=False).render(data)
    assert info.value.reason == reason


def test_out_of_range_index_fails_even_when_missing_keys_are_allowed() -> None:
    compiled = compile_path(".status.conditions[0].type")
    assert compiled.find({"status": {}}) == []
    with pytest.raises(JsonPathError):
        compiled.find({"status": {"conditions": []}})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "null"),
        (True, "true"),
        (7, "7"),
        (0.5, "0.5"),
        (1e-5, "1e-05"),
        (1234567.0, "1.234567e+06"),
        ("plain", "plain"),
        ({"b": [1, 2.0], "a": None}, '{"a":null,"b":[1,2]}'),
    ],
)
def test_format_value(value: Any, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e21, "1e+21"), (1e20, "100000000000000000000"), (1e-7, "1e-7"), (-0.25, "-0.25")],
)
def test_go_json_floats(value: float, text: str) -> None:
    assert go_json(value) == text
