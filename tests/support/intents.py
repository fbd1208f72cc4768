"""Recorded runs with known intents: what the rule miner (llamon_agent.suggest) is measured on.

Written from what customers of Korean banks, card companies, insurers, hospitals and shops type
into a chat window (short, particles attached, spaces left out, typos, English mixed in), not from
the miner's literals. Each run is one customer message on one chatbot; the scripted model calls
the intent's tool with arguments taken from the request (the whole query, the user id, a
DataPart value, a number found in the text, a constant), except on NOISE of the runs, where it
calls a wrong tool or none. Small talk calls nothing. Three intents already have a rule (their
runs carry the rule's call); the model calls the tool again on a few of them.

``generate(n, seed)`` gives (observations, truth): ``truth[run_id]`` is the intent's name (or
None for small talk); ``INTENTS`` maps a name to its :class:`Intent` (server, tool, and the right
arguments of a run: ``intent.args(request)``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llamon_agent.suggest import Call, Observation, Turn
from llamon_agent.tools import AgentRequest

NOISE = 0.05
SMALL_TALK = 0.12
TYPO = 0.06


@dataclass(frozen=True)
class Intent:
    name: str
    mcp_id: str
    tool: str
    phrasings: tuple[str, ...]
    chatbots: tuple[str, ...]
    args: Callable[[AgentRequest], dict[str, Any]]
    slots: Callable[[random.Random], dict[str, str]] = lambda rnd: {}
    data: Callable[[random.Random, dict[str, str]], list[dict[str, Any]] | None] = lambda rnd, s: None
    ruled: bool = False  # a rule already calls this tool


def _found(pattern: str) -> Callable[[AgentRequest], str | None]:
    def get(req: AgentRequest) -> str | None:
        m = re.search(pattern, req.query)
        return m.group(0) if m else None

    return get


def _data(key: str) -> Callable[[AgentRequest], Any]:
    def get(req: AgentRequest) -> Any:
        for part in req.a2a_data or ():
            if key in part:
                return part[key]
        return None

    return get


def _user(req: AgentRequest) -> Any:
    return req.context.get("userId")


def _digits(n: int) -> Callable[[random.Random], str]:
    return lambda rnd: "".join(rnd.choice("0123456789") for _ in range(n))


BANK = ("bank-main", "bank-app")
CARD = ("card-app",)
INS = ("insure-claims", "insure-main")
HOSP = ("hospital-front",)
SHOP = ("shop-support",)

INTENTS_LIST: list[Intent] = [
    # bank
    Intent(
        "balance",
        "core-banking",
        "get_balance",
        (
            "잔액 조회해주세요",
            "제 통장 잔액이 얼마예요?",
            "잔액좀 알려줘",
            "계좌 잔고 확인하고 싶어요",
            "what's my balance",
            "check my account balance please",
        ),
        BANK,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "transactions",
        "core-banking",
        "list_transactions",
        (
            "최근 거래내역 조회",
            "거래 내역 보여주세요",
            "이번달 거래내역좀요",
            "입출금 내역 확인",
            "show my recent transactions",
        ),
        BANK,
        lambda r: {"customer_id": _user(r), "days": 30},
    ),
    Intent(
        "transfer_limit",
        "core-banking",
        "get_transfer_limit",
        ("이체한도 얼마예요", "이체 한도 조회해 주세요", "하루 이체한도 알려줘", "transfer limit?"),
        BANK,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "fx_rate",
        "fx",
        "get_rate",
        ("오늘 달러 환율 알려줘", "환율 조회 부탁해요", "엔화 환율 얼마에요", "usd exchange rate today"),
        BANK,
        lambda r: {"query": r.query},
    ),
    Intent(
        "loan_rate",
        "loans",
        "get_loan_rates",
        (
            "대출 금리 알려주세요",
            "주택담보대출 금리가 어떻게 돼요",
            "신용대출 이자율 문의",
            "mortgage interest rates",
        ),
        BANK,
        lambda r: {"product": "all"},
    ),
    Intent(
        "loan_status",
        "loans",
        "get_application_status",
        (
            "대출 신청번호 {app} 진행상황",
            "신청번호 {app} 심사 어디까지 됐나요",
            "loan application {app} status",
        ),
        BANK,
        lambda r: {"application_id": _found(r"LN-\d{7}")(r)},
        slots=lambda rnd: {"app": "LN-" + _digits(7)(rnd)},
    ),
    Intent(
        "account_open",
        "core-banking",
        "start_account_opening",
        ("통장 개설하고 싶어요", "계좌 새로 만들래요", "입출금통장 개설 방법", "open a new account"),
        BANK,
        lambda r: {"customer_id": _user(r), "channel": "chat"},
    ),
    Intent(
        "otp_reset",
        "auth",
        "reset_otp",
        ("OTP 재발급 해주세요", "otp 오류가 나요 초기화", "OTP 비밀번호 5회 오류"),
        BANK,
        lambda r: {"customer_id": _user(r)},
    ),
    # card
    Intent(
        "card_lost",
        "cards",
        "report_lost_card",
        ("카드 분실 신고요", "카드를 잃어버렸어요", "체크카드 분실했어요 정지해주세요", "I lost my card"),
        CARD,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "card_bill",
        "cards",
        "get_statement",
        ("이번달 카드값 얼마예요", "카드 명세서 조회", "결제 예정 금액 알려주세요", "card statement please"),
        CARD,
        lambda r: {"customer_id": _user(r), "period": "current"},
    ),
    Intent(
        "card_limit",
        "cards",
        "request_limit_increase",
        ("카드 한도 올려주세요", "한도상향 신청할게요", "카드한도 증액 가능한가요"),
        CARD,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "card_points",
        "cards",
        "get_points",
        ("포인트 얼마 쌓였어요", "카드 포인트 조회", "적립된 포인트 확인", "how many reward points"),
        CARD,
        lambda r: {"customer_id": _user(r)},
    ),
    # insurance
    Intent(
        "claim_status",
        "claims",
        "get_claim",
        (
            "청구번호 {claim} 처리 상태 알려주세요",
            "{claim} 보험금 언제 나와요",
            "보험금 청구 {claim} 조회",
            "claim {claim} status",
        ),
        INS,
        lambda r: {"claim_id": _found(r"CLM-\d{4}-\d{6}")(r)},
        slots=lambda rnd: {"claim": f"CLM-{rnd.randint(2023, 2026)}-{_digits(6)(rnd)}"},
    ),
    Intent(
        "claim_new",
        "claims",
        "start_claim",
        (
            "보험금 청구하려고요",
            "실손보험 청구 어떻게 해요",
            "병원비 청구하고 싶어요",
            "I want to file a claim",
        ),
        INS,
        lambda r: {"customer_id": _user(r), "channel": "chat"},
    ),
    Intent(
        "premium",
        "policies",
        "get_premium",
        (
            "이번달 보험료 얼마예요",
            "보험료 납입 내역 조회",
            "보험료 자동이체 날짜가 언제죠",
            "when is my premium due",
        ),
        INS,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "policy_cancel",
        "policies",
        "cancel_policy_quote",
        ("보험 해지하면 환급금 얼마에요", "해약환급금 조회", "계약 해지하고 싶어요"),
        INS,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "coverage",
        "policies",
        "get_coverage",
        (
            "제 보험 보장내용 알려주세요",
            "이거 보장되나요 보장 범위",
            "보장 내역 확인",
            "what does my policy cover",
        ),
        INS,
        lambda r: {"customer_id": _user(r), "query": r.query},
    ),
    # hospital (the patient id arrives as a DataPart)
    Intent(
        "appointment",
        "hospital",
        "book_appointment",
        ("진료 예약하고 싶어요", "내일 외래 예약 가능한가요", "예약 잡아주세요 내과", "book an appointment"),
        HOSP,
        lambda r: {"patient_id": _data("patientId")(r)},
        data=lambda rnd, s: [{"patientId": "P-" + _digits(4)(rnd)}],
    ),
    Intent(
        "appointment_cancel",
        "hospital",
        "cancel_appointment",
        ("예약 취소해주세요", "진료예약 취소할게요", "cancel my appointment"),
        HOSP,
        lambda r: {"patient_id": _data("patientId")(r)},
        data=lambda rnd, s: [{"patientId": "P-" + _digits(4)(rnd)}],
    ),
    Intent(
        "lab_results",
        "hospital",
        "get_lab_results",
        (
            "검사결과 나왔나요",
            "혈액검사 결과 조회",
            "피검사 결과 확인하고 싶어요",
            "are my lab results ready",
        ),
        HOSP,
        lambda r: {"patient_id": _data("patientId")(r)},
        data=lambda rnd, s: [{"patientId": "P-" + _digits(4)(rnd)}],
    ),
    Intent(
        "prescription",
        "hospital",
        "get_prescriptions",
        ("처방전 재발급 해주세요", "처방받은 약 뭐였죠", "약 처방 내역 조회"),
        HOSP,
        lambda r: {"patient_id": _data("patientId")(r)},
        data=lambda rnd, s: [{"patientId": "P-" + _digits(4)(rnd)}],
    ),
    Intent(
        "vitals_alert",
        "nurse-station",
        "page_on_call",
        ("숨이 차요", "가슴이 답답하고 어지러워요", "산소포화도가 낮게 나와요"),
        HOSP,
        lambda r: {"patient_id": _data("patientId")(r), "severity": "high"},
        data=lambda rnd, s: [{"patientId": "P-" + _digits(4)(rnd), "spo2": rnd.randint(80, 89)}],
    ),
    Intent(
        "parking",
        "hospital",
        "get_parking_info",
        ("주차 요금 얼마예요", "병원 주차 가능한가요", "주차장 위치"),
        HOSP,
        lambda r: {"site": "main"},
    ),
    # shop
    Intent(
        "order_status",
        "order-service",
        "get_order",
        (
            "주문번호 {order} 어디쯤 왔어요",
            "{order} 주문 조회해주세요",
            "주문 {order} 배송 언제 와요",
            "where is order {order}",
        ),
        SHOP,
        lambda r: {"order_id": _found(r"ORD-\d{6}")(r)},
        slots=lambda rnd: {"order": "ORD-" + _digits(6)(rnd)},
    ),
    Intent(
        "refund",
        "order-service",
        "request_refund",
        (
            "{order} 환불해주세요",
            "환불 신청할게요 주문번호 {order}",
            "{order} 반품하고 환불받고 싶어요",
            "refund for {order}",
        ),
        SHOP,
        lambda r: {"order_id": _found(r"ORD-\d{6}")(r)},
        slots=lambda rnd: {"order": "ORD-" + _digits(6)(rnd)},
    ),
    Intent(
        "exchange",
        "order-service",
        "request_exchange",
        ("{order} 사이즈 교환 원해요", "교환 신청 {order}", "{order} 다른 색상으로 교환되나요"),
        SHOP,
        lambda r: {"order_id": _found(r"ORD-\d{6}")(r)},
        slots=lambda rnd: {"order": "ORD-" + _digits(6)(rnd)},
    ),
    Intent(
        "coupon",
        "promotions",
        "list_coupons",
        ("쿠폰 있나요", "사용 가능한 쿠폰 보여줘", "할인쿠폰 조회", "any coupons for me"),
        SHOP,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "membership",
        "promotions",
        "get_membership",
        ("멤버십 등급이 뭐예요", "회원등급 확인", "VIP 등급 조건 알려줘"),
        SHOP,
        lambda r: {"customer_id": _user(r)},
    ),
    Intent(
        "search",
        "knowledge-base",
        "search_docs",
        ("영업시간 검색해줘", "공지사항 검색", "검색 해외결제 수수료", "search opening hours"),
        BANK + CARD + SHOP,
        lambda r: {"q": r.query},
    ),
    Intent(
        "address_change",
        "crm",
        "update_address_start",
        ("주소 변경하고 싶어요", "이사해서 주소 바꿔야 돼요", "배송지 변경", "change my address"),
        BANK + INS + SHOP,
        lambda r: {"customer_id": _user(r)},
    ),
    # already ruled: a rule calls these tools before the model
    Intent(
        "premium_profile",
        "customer-crm",
        "get_customer_profile",
        ("내 정보 알려줘", "제 등급 알려주세요", "내 계정 정보"),
        ("premium-support",),
        lambda r: {"customer_id": _user(r)},
        ruled=True,
    ),
    Intent(
        "order_lookup_seed",
        "order-service",
        "lookup_order_text",
        ("주문 조회 부탁해요", "주문 내역 조회"),
        ("shop-legacy",),
        lambda r: {"query": r.query},
        ruled=True,
    ),
    Intent(
        "faq_seed",
        "knowledge-base",
        "search_faq",
        ("자주 묻는 질문 검색", "FAQ 검색해줘"),
        ("faq-bot",),
        lambda r: {"q": r.query},
        ruled=True,
    ),
]
INTENTS = {i.name: i for i in INTENTS_LIST}
TOOLS = [(i.mcp_id, i.tool) for i in INTENTS_LIST]

CHATTER = (
    "안녕하세요",
    "고마워요",
    "상담원 연결해주세요",
    "네 알겠습니다",
    "ㅋㅋ 감사",
    "hello",
    "thanks!",
    "잠깐만요",
    "그럼 수고하세요",
    "다시 물어볼게요",
)
PREFIX = ("", "", "", "안녕하세요 ", "저기요 ", "혹시 ", "hi, ")
SUFFIX = ("", "", "", "?", " 부탁드려요", " ㅠㅠ", "!!", " 빨리요")


def _typo(rnd: random.Random, text: str) -> str:
    chars = list(text)
    spots = [i for i, c in enumerate(chars) if not c.isspace()]
    if len(spots) < 4:
        return text
    i = rnd.choice(spots)
    if rnd.random() < 0.5:
        del chars[i]  # a dropped syllable
    else:
        j = min(i + 1, len(chars) - 1)
        chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


def _turn(rnd: random.Random, tools: tuple[str, ...]) -> Turn:
    return Turn(
        ms=round(rnd.gauss(850, 120), 1),
        input_tokens=rnd.randint(900, 1500),
        output_tokens=rnd.randint(20, 90) if tools else rnd.randint(80, 300),
        tools=tools,
    )


def _run(
    rnd: random.Random, run_id: int, intents: list[Intent], noise: float
) -> tuple[Observation, str | None]:
    user = f"u{rnd.randint(1, 5000)}"
    if rnd.random() < SMALL_TALK:
        bot = rnd.choice(BANK + CARD + INS + HOSP + SHOP)
        req = AgentRequest(
            query=rnd.choice(CHATTER), context={"userId": user, "chatbotId": bot, "sessionId": f"s{run_id}"}
        )
        return Observation(run_id, req, turns=(_turn(rnd, ()),)), None
    intent = rnd.choice(intents)
    slots = intent.slots(rnd)
    text = rnd.choice(intent.phrasings)
    if rnd.random() < TYPO:
        text = _typo(rnd, text.replace("{", "\0").replace("}", "\1")).replace("\0", "{").replace("\1", "}")
    try:
        text = text.format(**slots)
    except (KeyError, IndexError, ValueError):  # the typo hit a slot's name: the phrasing as written
        text = rnd.choice(intent.phrasings).format(**slots)
    text = rnd.choice(PREFIX) + text + rnd.choice(SUFFIX)
    bot = rnd.choice(intent.chatbots)
    req = AgentRequest(
        query=text,
        context={"userId": user, "chatbotId": bot, "sessionId": f"s{run_id}"},
        a2a_data=intent.data(rnd, slots),
    )
    right = Call(intent.mcp_id, intent.tool, intent.args(req))
    rule_calls: tuple[Call, ...] = ()
    if intent.ruled:
        rule_calls = (right,)
        model: tuple[Call, ...] = (right,) if rnd.random() < 0.1 else ()  # called again now and then
    elif rnd.random() < noise:
        if rnd.random() < 0.5:
            other = rnd.choice([i for i in intents if i is not intent and not i.ruled])
            model = (Call(other.mcp_id, other.tool, {"query": text}),)
        else:
            model = ()
    else:
        model = (right,)
    turns = tuple(_turn(rnd, (c.tool,)) for c in model) + (_turn(rnd, ()),)
    return Observation(run_id, req, model_calls=model, rule_calls=rule_calls, turns=turns), intent.name


def generate(
    n: int, seed: int = 7, only: tuple[str, ...] = (), noise: float = NOISE
) -> tuple[list[Observation], dict[int, str | None]]:
    """``n`` runs (``only``: of these intents alone; ``noise``: the share of runs where the model
    calls a wrong tool or none). Tests learn from a few hundred runs an intent, where a 5 % noise
    makes a held-out precision of 99 % a matter of chance: they ask for less noise."""
    rnd = random.Random(seed)
    intents = [INTENTS[name] for name in only] if only else INTENTS_LIST
    observations: list[Observation] = []
    truth: dict[int, str | None] = {}
    for run_id in range(1, n + 1):
        obs, name = _run(rnd, run_id, intents, noise)
        observations.append(obs)
        truth[run_id] = name
    return observations, truth


def score(
    suggestions: list[Any], observations: list[Observation], truth: dict[int, str | None]
) -> dict[str, Any]:
    """Ground truth for each suggestion on the held-out runs: precision against the true intent,
    and the share of its calls on those runs with the right arguments."""
    from llamon_agent.compiled_rules import compile_rules
    from llamon_agent.expr import expression_rule
    from llamon_agent.prestep import StaticToolBackend, run_prestep

    by_tool = {(i.mcp_id, i.tool): i for i in INTENTS_LIST}
    rules = [
        expression_rule(
            name=f"s{k}",
            mcp_id=s.candidate.mcp_id,
            tool_name=s.candidate.tool,
            when=s.candidate.when,
            params=s.candidate.params,
        )
        for k, s in enumerate(suggestions)
    ]
    tools: dict[str, set[str]] = {}
    for i in INTENTS_LIST:
        tools.setdefault(i.mcp_id, set()).add(i.tool)
    backend = StaticToolBackend({k: sorted(v) for k, v in tools.items()})
    compiled = compile_rules(rules) if rules else None
    fired = [0] * len(rules)
    right = [0] * len(rules)
    args_right = [0] * len(rules)
    for obs in observations:
        if not obs.held_out() or compiled is None:
            continue
        outcome = run_prestep(compiled, obs.request, backend=backend, dry_run=True)
        for rec in outcome.fired:
            k = int(rec.rule[1:])
            fired[k] += 1
            intent = by_tool[(suggestions[k].candidate.mcp_id, suggestions[k].candidate.tool)]
            if truth[obs.run_id] == intent.name:
                right[k] += 1
                args_right[k] += rec.params == intent.args(obs.request)
    per = []
    for k, s in enumerate(suggestions):
        intent = by_tool[(s.candidate.mcp_id, s.candidate.tool)]
        per.append(
            {
                "intent": intent.name,
                "fired": fired[k],
                "precision": right[k] / fired[k] if fired[k] else 0.0,
                "args": args_right[k] / right[k] if right[k] else 0.0,
            }
        )
    wanted = sorted({name for name in truth.values() if name and not INTENTS[name].ruled})
    recovered = {p["intent"] for p in per if p["precision"] >= 0.99}
    calls = sum(right)
    return {
        "intents": len(wanted),
        "recovered": len(recovered & set(wanted)),
        "per_suggestion": per,
        "args_right": sum(args_right) / calls if calls else 0.0,
    }
