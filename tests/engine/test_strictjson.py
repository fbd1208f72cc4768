"""llamon_agent.strictjson: the one parser for JSON a person sends refuses what later breaks as a 500."""

from __future__ import annotations

import json

import pytest

from llamon_agent.strictjson import MAX_DEPTH, MAX_INT_DIGITS, JSONInputError, loads

REFUSED = {
    "NaN": ('{"a": NaN}', "NaN is not a JSON number"),
    "Infinity": ("[Infinity]", "Infinity is not a JSON number"),
    "-Infinity": ("-Infinity", "-Infinity is not a JSON number"),
    "a float that overflows to inf": ("[1e999]", "too large"),
    "5,000 digits (int() would raise ValueError)": ("9" * 5_000, "5000 digits"),
    "too many digits, negative": ("-" + "1" * (MAX_INT_DIGITS + 1), f"at most {MAX_INT_DIGITS}"),
    "100,000 deep (RecursionError)": ("[" * 100_000 + "]" * 100_000, "nested more than"),
    "just over the depth bound": ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested more than"),
    "objects over the depth bound": ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "nested"),
    "NUL in a value": ('{"a": "x\\u0000y"}', "NUL"),
    "NUL in a key": ('{"\\u0000": 1}', "NUL"),
    "not UTF-8": (b'{"a": "caf\xe9"}', "not UTF-8"),
    "not JSON": ("{nope", "not valid JSON: Expecting property name enclosed in double quotes at line 1"),
}


@pytest.mark.parametrize("text,message", REFUSED.values(), ids=REFUSED.keys())
def test_refused_with_a_message(text: str | bytes, message: str) -> None:
    with pytest.raises(JSONInputError, match=message.replace("(", r"\(")):
        loads(text)


def test_the_syntax_error_keeps_its_position_for_callers() -> None:
    with pytest.raises(JSONInputError) as caught:
        loads('{"a": 1,\n "b" 2}')
    assert (caught.value.decode_error.lineno, caught.value.decode_error.colno) == (2, 6)


def test_what_is_accepted_reads_as_json_does_and_keeps_key_order() -> None:
    text = (
        '{"zeta": 1, "alpha": [1.5, -2, "주문"], "mid": {"b": null, "a": true}, "n": '
        + "9" * MAX_INT_DIGITS
        + "}"
    )
    value = loads(text)
    assert value == json.loads(text)
    assert list(value) == ["zeta", "alpha", "mid", "n"] and list(value["mid"]) == ["b", "a"]
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_nul_may_pass_where_nothing_is_stored() -> None:
    assert loads('["a\\u0000"]', allow_nul=True) == ["a\x00"]
