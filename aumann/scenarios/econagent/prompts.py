"""EconAgent's language interface: the decision schema, the monthly prompt, reflection, parsing.

The monthly prompt carries the same information as the original (Li et al. 2024, ``simulate.py``
``gpt_actions``; our own wording): identity (name, age, city), that US federal taxes are tiered and
redistributed evenly, the month ``YYYY.MM``, job status (offer or current job and expected monthly
income, up or down versus last month), last month's consumption (or "no consumption due to shortage
of goods"), tax paid and the redistribution credit with the bracket table, the price of essential
goods (inflation or deflation), savings and the bank interest rate, and the request for a JSON
object. We extend the requested object with ``investment`` (the share of savings placed at interest),
which the original does not have (see README, "Investment and saving").

Parsing never uses ``eval``: :func:`parse_decision` reads the reply with the bounded :func:`aumann.bounded.loads_json`
(falling back to the first ``{...}`` block in the text) and validates it with the
:class:`EconDecision` pydantic schema, which rounds every value to the 0.02 grid. The original
truncated with ``int(x / 0.02)``, so 0.58 became 0.56 and 0.94 became 0.92; we round (0.58 → 0.58).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aumann.errors import DecisionParseError

GRID = 0.02
N_GRID = 50  # rates are k·0.02 with k = 0 … 50

BRACKET_CUTOFFS = (0.0, 9700.0, 39475.0, 84200.0, 160725.0, 204100.0, 510300.0)
BRACKET_RATES = (0.10, 0.12, 0.22, 0.24, 0.32, 0.35, 0.37)


def snap_to_grid(value: float) -> float:
    """Round a rate in [0, 1] to the nearest multiple of 0.02 (0.58 → 0.58, 0.581 → 0.58, 0.59 → 0.6).

    Python's ``round`` breaks exact ties (…0.01) to the even multiple; ties are measure-zero for
    model outputs. The result is ``k / 50`` for an integer k, so it is exactly representable as the
    same float however it is computed.
    """
    k = round(float(value) / GRID)
    return min(max(k, 0), N_GRID) / N_GRID


def grid_index(value: float) -> int:
    """The action index k = value / 0.02 of a grid rate (what the original env receives)."""
    return round(float(value) / GRID)


class EconDecision(BaseModel):
    """One household's monthly decision; every field in [0, 1], rounded to the 0.02 grid.

    Attributes:
        work: willingness to work (the probability of working the 168 hours this month).
        consumption: share of all savings and income to spend on essential goods.
        investment: share of savings placed in the bank at interest (ours; the original has none).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    work: float = Field(ge=0.0, le=1.0)
    consumption: float = Field(ge=0.0, le=1.0)
    investment: float = Field(ge=0.0, le=1.0)

    @field_validator("work", "consumption", "investment", mode="before")
    @classmethod
    def _finite_number(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"must be a number in [0, 1]; got {v!r}")
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"must be finite; got {v!r}")
        return v

    @field_validator("work", "consumption", "investment", mode="after")
    @classmethod
    def _round(cls, v: float) -> float:
        return snap_to_grid(v)


class Reflection(BaseModel):
    """A quarterly reflection (free text, under 200 words in the original's request)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    text: str = Field(min_length=1, max_length=1000)


FALLBACK = EconDecision(work=1.0, consumption=0.5, investment=0.5)
"""The original's fallback ``[1, 0.5]`` on an invalid reply (investment: its constant 0.5)."""

_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def parse_decision(text: str) -> EconDecision:
    """Parse a model reply into an :class:`EconDecision` with ``json`` (never ``eval``).

    Accepts a bare JSON object or text containing one (e.g. in a code fence). Keys ``work``,
    ``consumption`` and ``investment`` are required; each value must be a number in [0, 1].

    Raises:
        DecisionParseError: no JSON object, a missing key, or a value outside [0, 1]; the message
            names what was given.
    """
    if not isinstance(text, str):
        raise DecisionParseError(f"a decision reply must be a string; got {type(text).__name__}")
    from aumann import bounded

    data: Any = None
    try:
        data = bounded.loads_json(text, what="the model's reply", error=ValueError, allow_nan=False)
    except ValueError:
        for block in _OBJECT.findall(text):
            try:
                data = bounded.loads_json(block, what="the model's reply", error=ValueError, allow_nan=False)
                break
            except ValueError:
                continue
    if not isinstance(data, dict):
        raise DecisionParseError(f"reply holds no JSON object with keys work/consumption/investment: {text[:200]!r}")
    try:
        return EconDecision.model_validate(data)
    except ValidationError as exc:
        raise DecisionParseError(
            f"invalid decision {json.dumps(data)[:200]}: each of work, consumption, investment must be a "
            f"number in [0, 1] (steps of 0.02): {exc.errors()[0]['msg']}"
        ) from None


def _money(x: float) -> str:
    return f"${x:,.2f}"


def brackets_text() -> str:
    """The monthly bracket table (2018 single-filer brackets divided by 12)."""
    cuts = [c / 12 for c in BRACKET_CUTOFFS]
    parts = []
    for k, rate in enumerate(BRACKET_RATES):
        hi = f"{_money(cuts[k + 1])}" if k + 1 < len(cuts) else "and above"
        parts.append(f"{_money(cuts[k])} – {hi}: {rate:.0%}")
    return "; ".join(parts)


def decision_prompt(obs: dict[str, Any]) -> str:
    """The monthly user message for one household (same fields as the original's prompt).

    Args:
        obs: the observation built by the agent: ``name, age, city, date, worked_last, job, offer,
            income_expected, income_change, consumption_last, shortage, tax_paid, redistribution,
            price, price_change, wealth, interest_rate, investment_last``.
    """
    lines = [
        f"You're {obs['name']}, a {obs['age']}-year-old individual living in {obs['city']}. As with all "
        "Americans, a portion of your monthly income is taxed by the federal government. This taxation "
        "system is tiered, income is taxed cumulatively within defined brackets, and the collected "
        "revenue is redistributed evenly to all citizens.",
        f"Now it's {obs['date']}.",
    ]
    change = obs.get("income_change", "")
    if obs["worked_last"]:
        job = f"Last month you worked as a(n) {obs['job']}. If you continue working this month, your expected "
        job += f"income will be {_money(obs['income_expected'])}"
        if change:
            cause = "inflation" if change == "increased" else "deflation"
            job += f", which is {change} compared to last month due to the {cause} of the labor market."
        else:
            job += "."
    else:
        job = (f"Currently you are unemployed, with an offer as a(n) {obs['offer']} with monthly salary "
               f"{_money(obs['income_expected'])}.")
    lines.append(job)
    if obs["shortage"]:
        lines.append("Last month you had no consumption due to shortage of goods.")
    else:
        lines.append(f"Besides, your consumption last month was {_money(obs['consumption_last'])}.")
    lines.append(
        f"Your tax deduction amounted to {_money(obs['tax_paid'])}. However, as part of the government's "
        f"redistribution program, you received a credit of {_money(obs['redistribution'])}. "
        f"The monthly tax brackets are: {brackets_text()}."
    )
    trend = {"up": "inflation", "down": "deflation"}.get(obs.get("price_change", ""), "")
    price = f"The price of essential goods is {_money(obs['price'])} per unit"
    lines.append(price + (f", reflecting {trend} compared to last month." if trend else "."))
    lines.append(
        f"Your current savings account balance is {_money(obs['wealth'])}. Interest rates, as set by your "
        f"bank, stand at {obs['interest_rate']:.2%} per year, paid at the end of each year on the share of "
        f"savings you keep invested (last month: {obs['investment_last']:.0%})."
    )
    lines.append(
        "With all these factors in play, and considering aspects like your living costs, any future "
        "aspirations, and the broader economic trends, how is your willingness to work this month? "
        "Furthermore, how would you plan your expenditures on essential goods, keeping in mind good "
        "price, and what share of your savings would you keep invested at the bank's interest rate? "
        "Please share your decisions in a JSON format. The format should have three keys: 'work' (a value "
        "between 0 and 1 with intervals of 0.02, indicating the willingness or propensity to work), "
        "'consumption' (a value between 0 and 1 with intervals of 0.02, indicating the proportion of all "
        "your savings and income you intend to spend on essential goods) and 'investment' (a value "
        "between 0 and 1 with intervals of 0.02, indicating the share of your savings kept invested)."
    )
    return " ".join(lines)


REFLECTION_PROMPT = (
    "Given the previous quarter's economic environment, reflect on the labor, consumption, and financial "
    "markets, as well as their dynamics. What conclusions have you drawn? Your answer must be less than "
    "200 words! Reply in JSON format: {\"text\": \"<your reflection>\"}."
)
"""The original's reflection request; the JSON envelope is ours (structured backends validate replies)."""


def reflection_messages(history: list[dict[str, str]]) -> list[dict[str, str]]:
    """Messages for the quarterly reflection: the last exchanges (``dialog4ref``) then the request."""
    return [*history, {"role": "user", "content": REFLECTION_PROMPT}]


def render_decision(decision: EconDecision) -> str:
    """The assistant turn stored in memory for a decision (JSON text)."""
    return json.dumps(decision.model_dump())


__all__ = [
    "BRACKET_CUTOFFS",
    "BRACKET_RATES",
    "FALLBACK",
    "GRID",
    "REFLECTION_PROMPT",
    "DecisionParseError",
    "EconDecision",
    "Reflection",
    "brackets_text",
    "decision_prompt",
    "grid_index",
    "parse_decision",
    "reflection_messages",
    "render_decision",
    "snap_to_grid",
]
