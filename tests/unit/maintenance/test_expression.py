"""Check-chain expressions: precedence, names, errors with their column; chain lists."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeops.controllers.maintenance import expression as ex


def truth(**values: bool) -> dict[str, bool]:
    return values


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a", "a"),
        ("!a", "!a"),
        ("a && b || c", "a && b || c"),
        ("a || b && c", "a || b && c"),
        ("(a || b) && c", "(a || b) && c"),
        ("!(a || b)", "!(a || b)"),
        ("!!a", "!!a"),
        ("transition && !(a || b)", "transition && !(a || b)"),
    ],
)
def test_render_round_trip(text: str, expected: str) -> None:
    assert ex.render(ex.parse(text)) == expected


def test_precedence_not_then_and_then_or() -> None:
    expr = ex.parse("a || b && !c")
    for a, b, c in itertools.product([False, True], repeat=3):
        assert ex.evaluate(expr, truth(a=a, b=b, c=c)) == (a or (b and not c))
    expr = ex.parse("!a && b")
    for a, b in itertools.product([False, True], repeat=2):
        assert ex.evaluate(expr, truth(a=a, b=b)) == ((not a) and b)


def test_names_may_hold_dashes_underscores_digits() -> None:
    expr = ex.parse("reboot-ok && check_2 || 3rd")
    assert [n.name for n in ex.names(expr)] == ["reboot-ok", "check_2", "3rd"]
    assert [n.column for n in ex.names(expr)] == [1, 14, 25]


def test_operators_need_no_spaces() -> None:
    expr = ex.parse("a&&!b||(c)")
    assert ex.evaluate(expr, truth(a=True, b=False, c=False))
    assert [n.name for n in ex.names(expr)] == ["a", "b", "c"]


def test_empty_passes() -> None:
    assert ex.evaluate(ex.parse(None), {})
    assert ex.evaluate(ex.parse("   "), {})


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("a &&", 5, "ends where a name"),
        ("a & b", 3, "doubled"),
        ("a | b", 3, "doubled"),
        ("(a || b", 1, "missing )"),
        ("a && (b", 6, "missing )"),
        ("a && (b c)", 9, "expected &&, || or )"),
        ("a b", 3, "expected && or ||"),
        ("a && )", 6, 'unexpected ")"'),
        ("a == b", 3, "unexpected character '='"),
        ("a + 1", 3, "unexpected character '+'"),
        ("a)", 2, 'unexpected ")"'),
    ],
)
def test_syntax_errors_name_the_column(text: str, column: int, fragment: str) -> None:
    with pytest.raises(ex.ExpressionError) as err:
        ex.parse(text)
    assert err.value.column == column
    assert fragment in err.value.reason


def test_an_unclosed_parenthesis_is_reported_at_one_column() -> None:
    with pytest.raises(ex.ExpressionError) as err:
        ex.parse("a && (b")
    assert "column" not in err.value.reason


def test_chains() -> None:
    assert [i.name for i in ex.parse_chain("remove_approval && reboot-ok")] == [
        "remove_approval",
        "reboot-ok",
    ]
    assert ex.parse_chain(None) == [] and ex.parse_chain("") == []
    with pytest.raises(ex.ExpressionError, match="only `a && b`"):
        ex.parse_chain("a || b")
    with pytest.raises(ex.ExpressionError, match="empty name"):
        ex.parse_chain("a && && b")
    with pytest.raises(ex.ExpressionError, match="joined by &&"):
        ex.parse_chain("a b")


NAMES = st.sampled_from(["a", "b", "c", "d-1", "e_2"])


def exprs() -> st.SearchStrategy[ex.Expr]:
    return st.recursive(
        NAMES.map(lambda n: ex.Name(n, 1)),
        lambda inner: st.one_of(
            inner.map(ex.Not),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: ex.And(tuple(xs))),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: ex.Or(tuple(xs))),
        ),
        max_leaves=12,
    )


@settings(max_examples=200, deadline=None)
@given(exprs(), st.fixed_dictionaries({n: st.booleans() for n in ["a", "b", "c", "d-1", "e_2"]}))
def test_rendered_expressions_parse_back_to_the_same_truth(
    expr: ex.Expr, values: dict[str, bool]
) -> None:
    again = ex.parse(ex.render(expr))
    assert ex.evaluate(again, values) == ex.evaluate(expr, values)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab-_&|!() \t=+x\n", max_size=40))
def test_any_text_parses_or_fails_with_a_column(text: str) -> None:
    try:
        expr = ex.parse(text)
    except ex.ExpressionError as err:
        assert 1 <= err.column <= len(text) + 1
    else:
        ex.evaluate(expr, lambda _: True)
    try:
        ex.parse_chain(text)
    except ex.ExpressionError as err:
        assert 1 <= err.column <= len(text) + 1


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ex.ExpressionError, match="nested too deeply"):
        ex.parse("(" * 500 + "a" + ")" * 500)
    assert ex.evaluate(ex.parse("!" * 200 + "a"), {"a": True})
