"""The savings count and the rule miner (llamon_agent.suggest), against hand counts and ground truth."""

from __future__ import annotations

import random

import pytest

from llamon_agent import suggest
from llamon_agent.expr import expression_rule
from llamon_agent.prestep import StaticToolBackend, run_prestep
from llamon_agent.suggest import Call, Observation, Turn
from llamon_agent.tools import AgentRequest
from tests.support.intents import INTENTS, generate, score


def _obs(run_id, query, *, model=(), rules=(), turns=(), version="v1", context=None, data=None):
    return Observation(
        run_id,
        AgentRequest(query=query, context=context or {}, a2a_data=data),
        model_calls=tuple(model),
        rule_calls=tuple(rules),
        turns=tuple(turns),
        version=version,
    )


def test_savings_agree_with_a_hand_count():
    order = Call("order-service", "get_order", {"query": "q"})
    crm = Call("customer-crm", "get_customer_profile", {"customer_id": "u1"})
    runs = [
        # 1: a rule called get_order, the model did not call it again: one turn saved.
        _obs(1, "주문 조회", rules=[order], turns=[Turn(900, 1000, 50, ())]),
        # 2: two rule calls, the model used both: still one turn (a floor).
        _obs(2, "주문 조회", rules=[order, crm], turns=[Turn(800, 900, 60, ())]),
        # 3: the rule called get_order and the model called it again: recalled, nothing saved.
        _obs(
            3,
            "주문 조회",
            rules=[order],
            model=[order],
            turns=[Turn(1000, 1200, 40, ("get_order",)), Turn(700, 1300, 90, ())],
        ),
        # 4: no rule; the model chose a tool (a comparable turn: 600 ms, 800 + 30 tokens).
        _obs(
            4,
            "배송",
            model=[order],
            turns=[Turn(600, 800, 30, ("get_order",)), Turn(500, 900, 80, ())],
            version="v2",
        ),
        # 5: small talk.
        _obs(5, "안녕", turns=[Turn(300, 400, 20, ())], version="v2"),
    ]
    out = suggest.savings(runs)
    total = out["*"]
    # Comparable turns: the ones in which the model chose a tool: runs 3 and 4 -> medians of
    # (1000, 600) ms, (1200, 800) input and (40, 30) output tokens.
    assert (total.turn_ms, total.turn_input_tokens, total.turn_output_tokens) == (800.0, 1000, 35)
    assert (total.runs, total.with_prestep, total.turns_saved, total.recalled) == (5, 3, 2, 1)
    assert total.ms_saved == 1600.0
    assert (total.input_tokens_saved, total.output_tokens_saved) == (2000, 70)
    assert total.recalled_runs == [3]
    assert total.advice == "system prompt에 “확정 호출 결과를 우선 사용” 명시"
    assert (out["v1"].runs, out["v1"].turns_saved, out["v2"].runs, out["v2"].turns_saved) == (3, 2, 2, 0)
    assert out["v2"].advice == ""
    assert total.to_json()["share_with_prestep"] == 0.6


def test_no_comparable_turn_values_a_saved_turn_at_nothing_but_still_counts_it():
    out = suggest.savings([_obs(1, "x", rules=[Call("s", "t")], turns=[Turn(100, 10, 1, ())])])["*"]
    assert out.turns_saved == 1 and out.ms_saved == 0.0 and out.turn_ms is None


# Intents with every kind of argument, two that share words (청구), one a rule already answers.
FEW = (
    "balance",
    "transactions",
    "appointment",
    "fx_rate",
    "loan_rate",
    "claim_status",
    "claim_new",
    "refund",
    "premium_profile",
)


@pytest.fixture(scope="module")
def mined():
    observations, truth = generate(2500, seed=11, only=FEW)
    return observations, truth, suggest.mine(observations)


def test_mined_rules_are_right_on_held_out_runs(mined):
    observations, truth, result = mined
    scored = score(result.suggestions, observations, truth)
    # Every kept suggestion is right on the runs it never learned from (the true intent), with the
    # right arguments; most intents are found even from 6,000 runs.
    assert result.suggestions
    assert all(p["precision"] >= 0.99 for p in scored["per_suggestion"]), scored["per_suggestion"]
    assert scored["args_right"] >= 0.99
    assert scored["recovered"] == scored["intents"] == 8
    # Already answered by a rule: never proposed again.
    ruled = {(i.mcp_id, i.tool) for i in INTENTS.values() if i.ruled}
    assert not ruled & {(s.candidate.mcp_id, s.candidate.tool) for s in result.suggestions}


def test_each_kind_of_argument_is_derived(mined):
    _observations, _truth, result = mined
    kinds = {(s.candidate.tool, k): v for s in result.suggestions for k, v in s.candidate.arg_kinds.items()}
    assert kinds.get(("get_balance", "customer_id")) == "context"
    assert kinds.get(("book_appointment", "patient_id")) == "data"
    assert kinds.get(("get_rate", "query")) == "query"
    assert kinds.get(("get_loan_rates", "product")) == "constant"
    assert kinds.get(("get_claim", "claim_id")) == "pattern"
    claim = next(s for s in result.suggestions if s.candidate.tool == "get_claim")
    assert 're_find(r"CLM-\\d{4}-\\d{6}", query)' in claim.candidate.params


def test_suggestions_are_ranked_by_saving_and_carry_cases(mined):
    _observations, _truth, result = mined
    saved = [s.turns_saved for s in result.suggestions]
    assert saved == sorted(saved, reverse=True)
    top = result.suggestions[0].to_json()
    assert top["cases"]["must_call"] and top["cases"]["must_not_call"]
    assert top["saving"]["ms"] > 0 and top["replayed"]["fired"] >= top["replayed"]["agreed"] > 0


def test_a_tool_the_model_calls_at_random_gets_no_rule():
    rnd = random.Random(3)
    words = ["잔액", "주문", "예약", "환율", "보험", "카드", "검색"]
    runs = []
    for i in range(1, 3001):
        query = " ".join(rnd.sample(words, 3))
        model = [Call("s", "coin", {"x": 1})] if rnd.random() < 0.3 else []
        runs.append(_obs(i, query, model=model))
    result = suggest.mine(runs)
    assert result.suggestions == []
    assert [r.tool for r in result.rejected] == ["coin"]


def test_too_few_runs_say_so():
    runs = [
        _obs(i, "환불 해주세요", model=[Call("s", "refund", {"q": "환불 해주세요"})]) for i in range(1, 6)
    ]
    result = suggest.mine(runs)
    assert result.suggestions == [] and "only" in result.rejected[0].reason


def test_hostile_keys_and_values_still_make_rules_the_engine_accepts():
    # Context keys and DataPart values with quotes, backslashes, newlines and RTL marks; a huge query.
    key, value = 'a"b\\c\n', 'x"y\\\u202e'
    runs = []
    for i in range(1, 401):
        hit = i % 2 == 0
        runs.append(
            _obs(
                i,
                ("환불 " if hit else "안녕 ") + "가" * (50_000 if i == 2 else 3),
                context={key: value if hit else "other"},
                data=[{key: value}] if hit else None,
                model=[Call("s", "refund", {"k": value, "q": "const"})] if hit else [],
            )
        )
    result = suggest.mine(runs)
    assert result.suggestions, result.rejected
    for s in result.suggestions:
        rule = expression_rule(
            name="r", mcp_id="s", tool_name="refund", when=s.candidate.when, params=s.candidate.params
        )
        out = run_prestep([rule], runs[3].request, backend=StaticToolBackend({"s": ["refund"]}), dry_run=True)
        assert out.fired and out.fired[0].params == {"k": value, "q": "const"}


def test_model_noise_needs_enough_candidates():
    tallies = [suggest.Tally(fired=100, agreed=95) for _ in range(4)]
    assert suggest.model_noise([], tallies) == 0.0
    tallies.append(suggest.Tally(fired=100, agreed=90))
    assert suggest.model_noise([], tallies) == pytest.approx(0.05)
