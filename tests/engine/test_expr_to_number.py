"""to_number(value, default=None): a number from a DataPart value that may be text (issue 43)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamon_agent.expr import CostMeter, ExprError, build_namespace, compile_params, compile_when
from llamon_agent.expr.helpers import to_number
from llamon_agent.tools import AgentRequest


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (86, 86),
        (86.5, 86.5),
        ("86", 86),
        ("86.5", 86.5),
        (" 86 ", 86),
        ("\u00a086\t\n", 86),  # any white space around it
        ("８６", 86),  # full-width digits (NFKC)
        ("－３.５", -3.5),  # full-width minus sign
        ("+7", 7),
        (".5", 0.5),
        ("1,200,000", 1200000),
        ("1,234.50", 1234.5),
        ("-0", 0),
    ],
)
def test_a_number_or_a_text_of_one_is_a_number(value, number) -> None:
    found = to_number(value)
    assert found == number and type(found) is type(number)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,  # a bool is not a number here
        False,
        "",
        "   ",
        "86%",
        "eighty",
        "8 6",
        "1,20",  # thousands commas in groups of three only
        "12,",
        "86.",
        "1e3",  # no exponents: a vital sign or an amount is never written so
        "NaN",
        "inf",
        "٨٦",  # Arabic-Indic digits: only ASCII digits (after NFKC) count
        "0x56",
        "9" * 65,  # longer than MAX_NUMBER_TEXT_CHARS
        "9" * 20,  # out of the 64-bit range
        2**64,
        math.nan,
        math.inf,
        [86],
        {"value": 86},
    ],
)
def test_anything_else_is_the_default_never_an_error(value) -> None:
    assert to_number(value) is None
    assert to_number(value, 100) == 100


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), st.integers(), st.floats(), st.none(), st.booleans()))
def test_to_number_never_raises_and_gives_a_finite_number_or_the_default(value) -> None:
    found = to_number(value, "default")
    assert found == "default" or (type(found) in (int, float) and math.isfinite(found))


def _ns(a2a_data, meter=None):
    return build_namespace(AgentRequest(query="vitals", a2a_data=a2a_data).to_context([]), meter=meter)


def test_in_a_rule_text_fails_no_pre_step_and_costs_a_constant() -> None:
    when = compile_when('to_number(data_get("spo2"), 100) < 90')
    assert when.evaluate(_ns([{"spo2": "86"}])) is True
    assert when.evaluate(_ns([{"spo2": "n/a"}])) is False
    assert when.evaluate(_ns(None)) is False
    # Without it, the same text fails the evaluation: what the static check warns about.
    with pytest.raises(ExprError):
        compile_when('data_get("spo2", 100) < 90').evaluate(_ns([{"spo2": "86"}]))
    params = compile_params('{"amount": to_number(data_get("amount"))}')
    assert params.evaluate(_ns([{"amount": "1,200,000"}])) == {"amount": 1200000}
    # Charged like a short read, whatever the text: a long one costs no more than 64 characters.
    spent = []
    for text in ("86", "x" * 100_000):
        meter = CostMeter(expr_budget=10_000)
        compile_when("to_number(data_get('spo2')) == 86").evaluate(_ns([{"spo2": text}], meter=meter))
        spent.append(10_000 - meter.left)
    assert spent[0] == spent[1] and spent[0] < 100


def test_it_is_a_helper_and_only_callable() -> None:
    with pytest.raises(ExprError, match="to_number can only be called"):
        compile_when("to_number == 1")
