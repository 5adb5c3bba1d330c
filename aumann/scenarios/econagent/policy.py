"""The original's rule-based household policy (``--policy_model complex``): EconAgent's offline default.

With β = 0.1, γ = 0.1, h = 1, wealth W, interest rate r, last month's price P, skill s, and the
incomes the original policy uses (I = l·168s this month's income given the labour draw l, and
I₋ = the household's ``income`` field, which the original leaves stale; see below):

* work: ℓ = 1[U < p], p = min(1, (s·168 / (W(1 + r) + 1e-8))^γ), drawn here from the backend's
  seeded generator as in the original (so the returned ``work`` is 0 or 1, not a grid-rounded p);
* consumption, by a rule fixed per agent at initialisation:
    - rule 0:  c = (P / (W + I + 1e-8))^β;
    - rule 1 (buffer stock): g = I/(I₋ + 1e-8) − 1, d = W/(I₋ + 1e-8) − h/(1+r),
      c = [1 + (d − g·h/(1+r)) / (1 + g + 1e-8)] · I / (W + I + 1e-8);
  then discretised as the original does, ⌊c / 0.02⌋ clipped to 0 … 50 (a floor by design of the
  rule, not the LLM-parsing truncation bug);
* investment (ours; the original has no investment decision):
  x = clip(κ_i (1 − c) + (r − 12 π_m), 0, 1) rounded to the 0.02 grid, where κ_i ∈ [0.2, 0.8] is a
  per-agent propensity drawn at initialisation and π_m = ln(P_t / P_{t−1}) last month's price
  inflation: a household invests a share of what it does not plan to spend, more when the real
  rate r − 12 π_m is high.

The income field: the original never resets ``income`` on months without work, and its policy reads
that stale value as I₋. Our model resets the recorded income to 0 (README, "Deviations") but keeps
the original's stale value as ``income_seen`` for this policy, so the rule behaves as before.

The policy is deterministic given its inputs and the generator the backend derives from the decision
seed (which the model draws from its own seeded generator), so a run is reproducible from the seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from aumann.scenarios.econagent.prompts import N_GRID, EconDecision, Reflection, snap_to_grid

BETA = 0.1
GAMMA = 0.1
HORIZON = 1.0
EPS = 1e-8


def work_propensity(skill: float, wealth: float, rate: float, *, gamma: float = GAMMA) -> float:
    """p = min(1, (168 s / (W (1 + r) + 1e-8))^γ)."""
    ratio = 168.0 * skill / (wealth * (1.0 + rate) + EPS)
    return float(min(1.0, ratio**gamma))


def consumption_rule(rule: int, *, price: float, wealth: float, income: float, income_prev: float, rate: float,
                     beta: float = BETA, horizon: float = HORIZON) -> float:
    """The original's consumption rate (rule 0: price-to-resources; rule 1: buffer stock), on the grid."""
    if rule == 0:
        c = (price / (wealth + income + EPS)) ** beta
    else:
        h1 = horizon / (1.0 + rate)
        g = income / (income_prev + EPS) - 1.0
        d = wealth / (income_prev + EPS) - h1
        c = (1.0 + (d - h1 * g) / (1.0 + g + EPS)) * income / (wealth + income + EPS)
    if not math.isfinite(c):
        c = 0.0 if c != c else (1.0 if c > 0 else 0.0)
    k = min(max(math.floor(c / 0.02 + 1e-9), 0), N_GRID)
    return k / N_GRID


def investment_rule(propensity: float, consumption: float, *, rate: float, inflation: float) -> float:
    """x = clip(κ (1 − c) + (r − 12 π_m), 0, 1), rounded to the 0.02 grid (ours; see module docstring)."""
    x = propensity * (1.0 - consumption) + (rate - 12.0 * inflation)
    return snap_to_grid(min(1.0, max(0.0, x)))


def rule_policy(context: Mapping[str, Any] | None, schema: type, rng: np.random.Generator | None = None) -> Any:
    """The offline policy ``policy(context, schema, rng)`` for :class:`OfflineBackend`.

    Args:
        context: the household's observation (``skill, wealth, interest_rate, price, price_prev,
            income_seen, rule, propensity``; plus the quarter's numbers for a reflection).
        schema: :class:`EconDecision` or :class:`Reflection`.
        rng: the generator of the work draw (``OfflineBackend`` seeds it from the decision seed).

    Returns:
        An instance of ``schema``.
    """
    ctx = dict(context or {})
    if schema is Reflection:
        return Reflection(text=reflection_text(ctx))
    rate = float(ctx["interest_rate"])
    wealth = float(ctx["wealth"])
    # the original draws the binary labour action inside the policy: l = 1[U < p] (U from the seeded rng)
    p = work_propensity(float(ctx["skill"]), wealth, rate)
    gen = rng if rng is not None else np.random.default_rng(0)
    work = float(gen.uniform() < p)
    # the original feeds the consumption rule this month's prospective income l·168s as I and the
    # (stale) income field as I₋
    income = work * 168.0 * float(ctx["skill"])
    cons = consumption_rule(int(ctx["rule"]), price=float(ctx["price"]), wealth=wealth, income=income,
                            income_prev=float(ctx["income_seen"]), rate=rate)
    infl = math.log(float(ctx["price"]) / float(ctx["price_prev"]))
    inv = investment_rule(float(ctx["propensity"]), cons, rate=rate, inflation=infl)
    return EconDecision(work=work, consumption=cons, investment=inv)


def reflection_text(ctx: Mapping[str, Any]) -> str:
    """A deterministic quarterly note (what an offline household 'reflects'): the quarter's numbers."""
    return (
        f"Over the last quarter the price of essential goods moved from ${ctx.get('price_start', 0):,.2f} to "
        f"${ctx.get('price', 0):,.2f}; I worked {ctx.get('months_worked', 0)} of 3 months and my savings are "
        f"${ctx.get('wealth', 0):,.2f} at an interest rate of {ctx.get('interest_rate', 0):.2%}."
    )


def offline_backend():
    """The offline default: :class:`~aumann.simulators.llm.OfflineBackend` serving :func:`rule_policy`."""
    from aumann.simulators.llm import OfflineBackend

    return OfflineBackend(rule_policy, name="econagent-rule-policy")


__all__ = [
    "BETA",
    "GAMMA",
    "consumption_rule",
    "investment_rule",
    "offline_backend",
    "reflection_text",
    "rule_policy",
    "work_propensity",
]
