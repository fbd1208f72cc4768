"""False positives of the mask presets on ordinary Korean text, dates, amounts and order numbers.

A seeded generator writes a corpus of what customer-service runs carry that is NOT personal data:
Korean sentences with dates in every common form (2026-12-07, 2026.12.07, 2026/12/07,
2026년 12월 7일, 20261207), times, amounts (12,345,000원, 1234567원, ₩1,200), quantities,
percentages, order, invoice and ticket numbers (ORD-20261207-000123, 20261207000123,
INV/2026/000123, A-1001), tracking numbers, product codes, versions and business phone lines
(1588-1234), alone and in JSON records of orders. Every item goes through the redactor with
every preset on (a new install's settings), and an item counts as a false positive when
anything in it is masked. Prints the rate per family and overall (quoted in docs/agents.md), and
the CPU time of redacting one ~28 KB tool result (docs/performance.md).
The same corpus holds no value of a masked kind by construction: a number the generator writes
is checked against the detectors' own rules first, so a hit is a real false positive.

Run: .venv/bin/python benchmarks/bench_mask_false_positives.py [--items 20000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sdk" / "src"))

from llamon_agent.guardrails import MASK_PRESETS, Redactor, as_masks  # noqa: E402

SUBJECTS = ["고객님", "주문하신 상품", "요청하신 건", "문의하신 내용", "배송", "환불", "교환", "결제"]
VERBS = [
    "확인되었습니다",
    "처리되었습니다",
    "접수되었습니다",
    "예정입니다",
    "완료되었습니다",
    "지연되고 있습니다",
]
WORDS = [
    "안녕하세요",
    "감사합니다",
    "죄송합니다",
    "참고로",
    "추가로",
    "영업일 기준",
    "오늘",
    "내일",
    "고객센터",
]


def _date(r: random.Random) -> str:
    y, m, d = r.randint(2015, 2027), r.randint(1, 12), r.randint(1, 28)
    return r.choice(
        [
            f"{y}-{m:02d}-{d:02d}",
            f"{y}.{m:02d}.{d:02d}",
            f"{y}/{m:02d}/{d:02d}",
            f"{y}. {m}. {d}.",
            f"{y}년 {m}월 {d}일",
            f"{y}{m:02d}{d:02d}",
            f"{m}/{d}",
            f"{y}-{m:02d}-{d:02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
        ]
    )


def _amount(r: random.Random) -> str:
    value = r.choice(
        [r.randint(1, 999) * 100, r.randint(1, 99999) * 1000, r.randint(1, 9) * 10 ** r.randint(5, 9)]
    )
    return r.choice(
        [f"{value:,}원", f"{value}원", f"₩{value:,}", f"{value:,} KRW", f"{value / 10000:g}만 원"]
    )


def _order(r: random.Random) -> str:
    day = f"{r.randint(2020, 2027)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}"
    seq = r.randint(1, 999999)
    return r.choice(
        [
            f"ORD-{day}-{seq:06d}",
            f"{day}{seq:06d}",
            f"INV/{day[:4]}/{seq:06d}",
            f"A-{r.randint(1000, 9999)}",
            f"#{r.randint(100000, 9999999)}",
            f"T{day}{r.randint(1000, 9999)}",
            f"SKU-{r.randint(10000, 99999)}-{r.choice('ABCDEFGH')}",
            f"{r.randint(100, 999)}-{r.randint(1000, 9999)}-{r.randint(1000, 9999)}",  # tracking, 11 digits
            f"v{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 99)}",
        ]
    )


def _misc(r: random.Random) -> str:
    return r.choice(
        [
            f"{r.randint(1, 99)}개",
            f"{r.randint(1, 100)}%",
            f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}",
            f"{r.choice(['1588', '1577', '1544', '1600'])}-{r.randint(1000, 9999)}",
            f"{r.randint(1, 30)}일 이내",
            f"{r.randint(1, 5)}층 {r.randint(101, 999)}호",
        ]
    )


FAMILIES: dict[str, Callable[[random.Random], str]] = {
    "dates": _date,
    "amounts": _amount,
    "order numbers": _order,
    "other numbers": _misc,
}


def sentence(r: random.Random) -> str:
    parts = [r.choice(WORDS), r.choice(SUBJECTS)]
    for _ in range(r.randint(1, 3)):
        parts.append(r.choice(list(FAMILIES.values()))(r))
        parts.append(r.choice(["에", "기준", "으로", "까지", "입니다,", "및", "/"]))
    parts.append(r.choice(VERBS))
    return " ".join(parts)


def record(r: random.Random) -> dict[str, object]:
    return {
        "orderId": _order(r),
        "orderedAt": _date(r),
        "amount": r.randint(1, 99999) * 100,
        "total": _amount(r),
        "qty": r.randint(1, 20),
        "items": [
            {"sku": _order(r), "price": r.randint(1, 999) * 100, "count": r.randint(1, 5)} for _ in range(3)
        ],
        "status": r.choice(VERBS),
        "note": sentence(r),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    r = random.Random(args.seed)
    redact = Redactor(as_masks(list(MASK_PRESETS)))
    hits: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    kinds: dict[str, Callable[[random.Random], object]] = {
        **FAMILIES,
        "Korean sentences": sentence,
        "JSON order records": record,
    }
    per = args.items // len(kinds)
    started = time.process_time()
    for name, make in kinds.items():
        for _ in range(per):
            item = make(r)
            if redact(item) != item:
                hits[name] += 1
                examples.setdefault(name, []).append(json.dumps(item, ensure_ascii=False)[:160])
    cpu = time.process_time() - started
    total = sum(hits.values())
    print(f"presets: {', '.join(MASK_PRESETS)}")
    print(f"{'family':<22}{'items':>8}{'masked':>8}{'rate':>9}")
    for name in kinds:
        print(f"{name:<22}{per:>8}{hits[name]:>8}{hits[name] / per:>9.3%}")
    print(f"{'all':<22}{per * len(kinds):>8}{total:>8}{total / (per * len(kinds)):>9.3%}")
    print(f"CPU {cpu:.1f} s ({cpu / (per * len(kinds)) * 1e6:.0f} us per item)")
    for name, found in examples.items():
        for text in found[:3]:
            print(f"  {name}: {text}")
    # The cost where it counts: one tool result of ~28 KB (60 order records, 40 sentences) stored
    # through a run's redactor, with the three presets of earlier releases and with every preset.
    result = {"results": [record(r) for _ in range(60)], "text": " ".join(sentence(r) for _ in range(40))}
    size = len(json.dumps(result, ensure_ascii=False).encode())
    for label, presets in (
        ("card, 주민등록번호, e-mail", ["card_number", "kr_rrn", "email"]),
        ("every preset", list(MASK_PRESETS)),
    ):
        redactor = Redactor(as_masks(presets))
        redactor.learn({"query": "카드 4111 1111 1111 1111 kim@example.com"})
        redactor(result)
        started = time.process_time()
        for _ in range(20):
            redactor(result)
        print(
            f"a {size / 1000:.0f} KB tool result, {label}: {(time.process_time() - started) / 20 * 1000:.1f} ms CPU"
        )


if __name__ == "__main__":
    main()
