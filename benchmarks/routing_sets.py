"""Rule sets drawn the way authors of routing tables write them, and the requests they route.

A bank's, an insurer's and a hospital's rules in Korean and English: keywords (often shared by
many rules, narrowed by data), numeric thresholds and ranges on DataPart fields, memberships,
`len(query)`, `query.lower().startswith(...)`, FileParts presence, `tool_names`, context
equality, regex alternations, and a share of conditions no index can narrow (arithmetic across
fields). ``no_literal`` is the share of rules without any text literal tested against the query
with ``in``/``contains_any``/a regex.

Each generated rule is a :class:`Drawn`: its `when` and `params`, the servers' tools, and what a
hand-written index would key it on (``keys``: literals one of which must be in the query, and
whether in the lowered query; ``eq``: a context/DataPart equality); ``zen`` is the same condition
in zen-engine's expression language.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DOMAINS: dict[str, dict[str, Any]] = {
    "bank": {
        "ko": [
            "대출",
            "전세대출",
            "신용대출",
            "이체",
            "해외송금",
            "카드",
            "체크카드",
            "계좌",
            "적금",
            "예금",
            "환전",
            "연체",
        ],
        "en": [
            "loan",
            "mortgage",
            "transfer",
            "wire",
            "card",
            "debit card",
            "account",
            "savings",
            "deposit",
            "exchange",
        ],
        "tools": ["loan_info", "transfer_check", "card_block", "account_lookup", "fx_rate", "fraud_check"],
        "regex": [
            r"카드\s*(분실|도난|정지)",
            r"(?i)\b(chargeback|refund|dispute)\b",
            r"(?i)(lost|stolen)\s+card",
        ],
    },
    "insurer": {
        "ko": ["보험금", "청구", "해지", "갱신", "보장", "사고", "자동차보험", "실손", "보험료", "환급"],
        "en": ["claim", "cancel", "renewal", "coverage", "accident", "premium", "refund", "policy"],
        "tools": ["claim_status", "policy_lookup", "premium_quote", "accident_report", "fraud_check"],
        "regex": [
            r"(보험금|사고)\s*(청구|접수)",
            r"(?i)\b(car|auto)\s+(claim|accident)\b",
            r"증권번호\s*\d{6,}",
        ],
    },
    "hospital": {
        "ko": ["예약", "진료", "검사", "처방", "응급", "입원", "퇴원", "결과", "수술", "진단서"],
        "en": [
            "appointment",
            "prescription",
            "test result",
            "emergency",
            "admission",
            "discharge",
            "surgery",
        ],
        "tools": ["book_appointment", "lab_results", "prescription_refill", "er_triage", "records"],
        "regex": [
            r"(예약|진료)\s*(변경|취소)",
            r"(?i)\b(reschedule|cancel)\s+(my\s+)?appointment\b",
            r"차트\s*번호",
        ],
    },
}
SUFFIX_KO = ["", " 문의", " 신청", " 조회", " 변경", " 상담", " 한도", " 취소"]
PREFIX_EN = ["", "new ", "my ", "check ", "change ", "cancel "]
REGIONS = ["seoul", "busan", "incheon", "daegu", "gwangju", "daejeon", "ulsan", "jeju", "suwon", "overseas"]
CHANNELS = ["app", "web", "branch", "call"]
TIERS = ["gold", "silver", "bronze", "vip", "basic"]
AMOUNTS = [10_000, 50_000, 100_000, 120_000, 140_000, 500_000, 1_000_000, 3_000_000, 10_000_000, 50_000_000]
OPENERS = ["urgent", "긴급", "re:", "fw:", "question", "문의", "help", "안녕하세요"]
FILLER = [
    "안녕하세요",
    "문의",
    "드립니다",
    "확인",
    "부탁",
    "합니다",
    "어제",
    "오늘",
    "처리",
    "가능한가요",
    "please",
    "help",
    "with",
    "my",
    "account",
    "thanks",
    "when",
    "can",
    "I",
    "get",
    "the",
]


@dataclass
class Drawn:
    name: str
    mcp_id: str
    tool_name: str
    when: str
    params: str
    keys: tuple[str, ...] = ()  # one of these in the query (hand-written index); () = no literal
    lowered: bool = False  # keys are looked for in query.lower()
    eq: tuple[str, str, Any] | None = None  # ("context"|"data", key, value) for a literal-free rule
    zen: str = ""
    literal: bool = True


@dataclass
class RuleSet:
    rules: list[Drawn]
    tools: dict[str, list[str]]  # mcp_id -> tool names
    vocabulary: list[tuple[str, bool]] = field(default_factory=list)  # (keyword, lowered)
    patterns: list[str] = field(default_factory=list)


def _servers() -> dict[str, list[str]]:
    tools = {}
    for domain, spec in DOMAINS.items():
        for n in range(2):
            # each server lacks one tool of its domain: tool_names tests differ across servers
            names = list(spec["tools"])
            del names[n % len(names)]
            tools[f"{domain}-{n}"] = names
    return tools


def _zen_str(text: str) -> str:
    return '"' + text + '"'  # zen-engine strings keep backslashes as written; no text here has a quote


def draw_rules(
    n: int, no_literal: float, seed: int = 0, unindexable: float = 0.03, opaque_only: bool = False
) -> RuleSet:
    """``n`` rules; ``no_literal`` of them without a text literal, ``unindexable`` of all of them
    arithmetic across fields (a third of those outside every atom kind, all of them with
    ``opaque_only``)."""
    rng = random.Random(seed)
    tools = _servers()
    servers = list(tools)
    vocabulary: list[tuple[str, bool]] = []
    for spec in DOMAINS.values():
        vocabulary += [(w + s, False) for w in spec["ko"] for s in SUFFIX_KO]
        vocabulary += [(p + w, True) for w in spec["en"] for p in PREFIX_EN]
    patterns = [p for spec in DOMAINS.values() for p in spec["regex"]]
    rules: list[Drawn] = []
    for i in range(n):
        mcp_id = rng.choice(servers)
        domain = mcp_id.split("-")[0]
        tool = rng.choice(tools[mcp_id])
        name = f"{domain}_{i}"
        params = rng.choice(['{"q": query[:50]}', '{"amount": data_get("amount", 0)}', "{}"])
        roll = rng.random()
        if roll < unindexable:
            rules.append(_unindexable(rng, name, mcp_id, tool, params, opaque_only))
        elif roll < no_literal:
            rules.append(_no_literal(rng, name, mcp_id, tool, params, domain))
        else:
            rules.append(_with_literal(rng, name, mcp_id, tool, params, vocabulary, patterns))
    return RuleSet(rules, tools, vocabulary, patterns)


def _amount_test(rng: random.Random, narrow: bool = False) -> tuple[str, str]:
    """A threshold or a range on the amount, as authors write them (numbers differ per rule)."""
    low = rng.choice(AMOUNTS) + rng.randrange(0, 100) * 1_000
    if not narrow and rng.random() < 0.5:
        op = rng.choice([">", ">=", "<", "<="])
        return f'data_get("amount", 0) {op} {low}', f"data.amount {op} {low}"
    high = low + (rng.choice([5_000, 20_000]) if narrow else rng.choice([20_000, 100_000, 1_000_000]))
    return (
        f'data_get("amount", 0) > {low} and data_get("amount", 0) <= {high}',
        f"data.amount > {low} and data.amount <= {high}",
    )


def _regions(rng: random.Random) -> tuple[str, str]:
    chosen = rng.sample(REGIONS, rng.randint(1, 3))
    listed = ", ".join(f'"{r}"' for r in chosen)
    return f'data_get("region") in [{listed}]', f"data.region in [{listed}]"


def _with_literal(
    rng: random.Random,
    name: str,
    mcp_id: str,
    tool: str,
    params: str,
    vocabulary: list[tuple[str, bool]],
    patterns: list[str],
) -> Drawn:
    """A keyword test (often a word many rules share), narrowed by tests on the data: the way a
    table routes "대출" to a different tool by amount, region, tier or product."""
    word, lowered = rng.choice(vocabulary)
    where = "query.lower()" if lowered else "query"
    zwhere = "lower(query)" if lowered else "query"
    kind = rng.randrange(6)
    if kind == 0:  # a product code or a rare phrase alone
        code = f"{rng.choice(['PRD', 'PLN', 'DR'])}-{rng.randrange(10_000):04d}"
        return Drawn(
            name, mcp_id, tool, f'"{code}" in query', params, (code,), False, zen=f'contains(query, "{code}")'
        )
    if kind == 1:
        other, _ = rng.choice([v for v in vocabulary if v[1] == lowered])
        test = f'contains_any({where}, ["{word}", "{other}"])'
        ztest = f"(contains({zwhere}, {_zen_str(word)}) or contains({zwhere}, {_zen_str(other)}))"
        keys: tuple[str, ...] = (word, other)
    elif kind == 2:
        pattern = rng.choice(patterns)
        test, ztest, keys, lowered = (
            f're_search(r"{pattern}", query)',
            f"matches(query, {_zen_str(pattern)})",
            (),
            False,
        )
    else:
        test, ztest, keys = f'"{word}" in {where}', f"contains({zwhere}, {_zen_str(word)})", (word,)
    atoms = [
        _free_atom(rng, rng.choice([0, 1, 2, 6, 7, 8, 8]), mcp_id, name.split("_")[0])
        for _ in range(rng.choice([1, 1, 2]))
    ]
    return Drawn(
        name,
        mcp_id,
        tool,
        " and ".join([test, *(a[0] for a in atoms)]),
        params,
        keys,
        lowered,
        zen=" and ".join([ztest, *(a[1] for a in atoms)]),
    )


def _no_literal(rng: random.Random, name: str, mcp_id: str, tool: str, params: str, domain: str) -> Drawn:
    """A conjunction of two or three literal-free tests, the first one the rule's main point."""
    atoms = [_free_atom(rng, rng.choice([1, 3, 4, 8, 8]), mcp_id, domain)]  # a selective one first
    for _ in range(rng.choice([1, 1, 2])):
        atoms.append(_free_atom(rng, rng.choice([0, 2, 5, 6, 7]), mcp_id, domain))
    eq = atoms[0][2]
    return Drawn(
        name,
        mcp_id,
        tool,
        " and ".join(a[0] for a in atoms),
        params,
        eq=eq,
        literal=False,
        zen=" and ".join(a[1] for a in atoms),
    )


def _free_atom(rng: random.Random, kind: int, mcp_id: str, domain: str) -> tuple[str, str, Any]:
    """(when, zen, equality for a hand-written index) of one test without a text literal."""
    if kind in (0, 1):
        test, ztest = _amount_test(rng, narrow=kind == 1)
        return test, ztest, None
    if kind == 2:
        test, ztest = _regions(rng)
        return test, ztest, None
    if kind == 3:
        limit = rng.choice([5, 8, 120, 160, 200])
        op = "<" if limit <= 10 else ">"
        return f"len(query) {op} {limit}", f"qlen {op} {limit}", None  # zen counts bytes: qlen is given
    if kind == 4:
        opener = rng.choice(OPENERS)
        return f'query.lower().startswith("{opener}")', f'startsWith(lower(query), "{opener}")', None
    if kind == 5:
        return "len(a2a_files or []) > 0", "len(files) > 0", None
    if kind == 6:
        channel = rng.choice(CHANNELS)
        return (
            f'context.get("channel") == "{channel}"',
            f'context.channel == "{channel}"',
            ("context", "channel", channel),
        )
    if kind == 7:
        risk = rng.randrange(80, 100, 5)
        server = mcp_id.replace("-", "_")
        return (
            f'"fraud_check" in tool_names and data_get("risk", 0) >= {risk}',
            f'contains(tools.{server}, "fraud_check") and data.risk >= {risk}',
            None,
        )
    product = f"{domain[:1].upper()}{rng.randrange(500):03d}"
    return f'data_get("product") == "{product}"', f'data.product == "{product}"', ("data", "product", product)


# Arithmetic across fields: (when, the same in zen-engine, the rule's number). The sum against a
# threshold and the two products compared are narrowed by the request index since its arithmetic
# terms (a term many rules share is computed once per request); `abs(...)` of a difference is
# outside every atom kind: always evaluated.
_ARITHMETIC: list[tuple[str, str, Callable[[random.Random], int]]] = [
    (
        'abs(data_get("a", 0) - data_get("b", 0)) < {}',
        "abs(data.a - data.b) < {}",
        lambda rng: rng.randrange(1, 4),
    ),
    ('data_get("a", 0) + data_get("b", 0) > {}', "data.a + data.b > {}", lambda rng: rng.randrange(200, 236)),
    (
        'data_get("premium", 0) * 12 > data_get("income", 1) * {}',
        "data.premium * 12 > data.income * {}",
        lambda rng: rng.choice([3, 4]),
    ),
]


def _unindexable(
    rng: random.Random, name: str, mcp_id: str, tool: str, params: str, opaque_only: bool = False
) -> Drawn:
    """One of _ARITHMETIC, a third each (the `abs` one only with ``opaque_only``)."""
    roll = 0.0 if opaque_only else rng.random()
    when, zen, number = _ARITHMETIC[0 if roll < 1 / 3 else 1 if roll < 2 / 3 else 2]
    n = number(rng)
    return Drawn(name, mcp_id, tool, when.format(n), params, literal=False, zen=zen.format(n))


def draw_request(rng: random.Random, rule_set: RuleSet, query_chars: int | None = None) -> dict[str, Any]:
    """One request: query, context, one DataPart (every field set), FileParts sometimes."""
    words = rng.choices(FILLER, k=rng.randint(4, 12))
    if rng.random() < 0.3:
        words.insert(0, rng.choice(OPENERS).capitalize() if rng.random() < 0.5 else rng.choice(OPENERS))
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        word, lowered = rng.choice(rule_set.vocabulary)
        words.insert(rng.randrange(len(words) + 1), word.upper() if lowered and rng.random() < 0.3 else word)
    if rng.random() < 0.2:
        words.append(f"{rng.choice(['PRD', 'PLN', 'DR'])}-{rng.randrange(10_000):04d}")
    if rng.random() < 0.05:
        words.append(
            rng.choice(["카드 분실", "lost card", "보험금 청구", "예약 변경", "car accident", "차트 번호"])
        )
    query = " ".join(words)
    if query_chars is not None:
        while len(query) < query_chars:
            word, _ = rng.choice(rule_set.vocabulary)
            query += " " + " ".join(rng.choices(FILLER, k=5)) + " " + word
        query = query[:query_chars]
    data = {
        "amount": rng.choice(AMOUNTS) + rng.randrange(0, 100) * 1_000,
        "region": rng.choice(REGIONS),
        "risk": rng.randrange(0, 100),
        "a": rng.randrange(0, 120),
        "b": rng.randrange(0, 120),
        "premium": rng.randrange(10_000, 500_000, 10_000),
        "income": rng.randrange(1_000_000, 10_000_000, 100_000),
        "product": f"{rng.choice('BIH')}{rng.randrange(500):03d}",
    }
    files = [{"name": "scan.pdf", "mimeType": "application/pdf"}] if rng.random() < 0.3 else None
    context = {
        "channel": rng.choice(CHANNELS),
        "tier": rng.choice(TIERS),
        "userId": f"u-{rng.randrange(1000)}",
    }
    return {"query": query, "context": context, "a2a_data": [data], "a2a_files": files}
