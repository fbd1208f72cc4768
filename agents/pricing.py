"""What an LLM call cost: token counts times the operator's per-model price table.

The table is the setting ``LLAMON_MODEL_PRICES``, a JSON object mapping a model name (as the
trace records it: the LLM step's name) to its prices in USD per million tokens::

    {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}

A model that is not in the table, or a call that reported no token counts, has an unknown
cost: the trace says so and never guesses. A malformed table is a start-up error (the system
check ``agents.E001``), not a wrong bill shown later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core import checks

PER_TOKENS = Decimal(1_000_000)
PRICE_KEYS = ("input", "output")
MAX_MODELS = 1000
EXAMPLE = '{"gpt-4o-mini": {"input": 0.15, "output": 0.6}}'


class PriceTableError(ValueError):
    """The price setting is not a table this module can read; the message says what is wrong."""


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens."""

    input: Decimal
    output: Decimal

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        return (self.input * input_tokens + self.output * output_tokens) / PER_TOKENS


def parse_prices(raw: str) -> dict[str, Price]:
    """The table in ``raw`` (empty: no prices); PriceTableError with a sentence when malformed."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    except ValueError as exc:
        raise PriceTableError(f"LLAMON_MODEL_PRICES is not valid JSON ({exc}). Example: {EXAMPLE}") from None
    if not isinstance(data, dict):
        raise PriceTableError(
            f"LLAMON_MODEL_PRICES must be a JSON object of model name -> prices, not {type(data).__name__}. "
            f"Example: {EXAMPLE}"
        )
    if len(data) > MAX_MODELS:
        raise PriceTableError(
            f"LLAMON_MODEL_PRICES lists {len(data)} models; at most {MAX_MODELS} are allowed."
        )
    table: dict[str, Price] = {}
    for model, prices in data.items():
        if not model.strip():
            raise PriceTableError("LLAMON_MODEL_PRICES has an empty model name.")
        if not isinstance(prices, dict) or set(prices) != set(PRICE_KEYS):
            raise PriceTableError(
                f"LLAMON_MODEL_PRICES[{model!r}] must be an object with exactly the keys "
                f'"input" and "output" (USD per million tokens), e.g. {{"input": 0.15, "output": 0.6}}.'
            )
        values = []
        for key in PRICE_KEYS:
            value = prices[key]
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise PriceTableError(
                    f"LLAMON_MODEL_PRICES[{model!r}][{key!r}] must be a number of USD per million tokens, "
                    f"0 or more; it is {value if isinstance(value, Decimal) else json.dumps(value)}."
                )
            values.append(value)
        table[model] = Price(*values)
    return table


@lru_cache(maxsize=4)
def _table(raw: str) -> dict[str, Price]:
    return parse_prices(raw)


def model_prices() -> dict[str, Price]:
    """The configured table (parsed once per value of the setting)."""
    return _table(getattr(settings, "LLAMON_MODEL_PRICES", "") or "")


def usage_counts(tokens: Any) -> dict[str, int] | None:
    """``{"input_tokens", "output_tokens", "total_tokens"}`` of a step's stored usage, or None if it has none."""
    if not isinstance(tokens, dict):
        return None
    found = {key: tokens.get(key) for key in ("input_tokens", "output_tokens")}
    counts: dict[str, int] = {
        key: value
        for key, value in found.items()
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0
    }
    if len(counts) != len(found):
        return None
    total = tokens.get("total_tokens")
    counts["total_tokens"] = (
        total if isinstance(total, int) and not isinstance(total, bool) else sum(counts.values())
    )
    return counts


@checks.register()
def prices_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """agents.E001: a malformed LLAMON_MODEL_PRICES stops start-up with what is wrong in it."""
    try:
        parse_prices(getattr(settings, "LLAMON_MODEL_PRICES", "") or "")
    except PriceTableError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix or unset LLAMON_MODEL_PRICES (docs/observability.md, 'What a run cost').",
                id="agents.E001",
            )
        ]
    return []
