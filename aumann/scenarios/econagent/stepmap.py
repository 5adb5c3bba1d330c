"""EconAgent's month (labour, tax, the rationed goods market, interest) as a torch map of intensities.

Every household decides its month from the state before the month (its own observation; the
decision seeds are drawn before anyone acts), and the month's random draws (work lotteries, the
shopping order) are the same in every fork of the month. So the within-month market is a
deterministic function of who takes part, and G below equals :meth:`EconModel.step` at every corner
of the cube (``exact``): the decisions (work or not, consumption rate c_i, investment rate x_i) and
the shopping order are read from a replay of the factual month. With intensities λ ∈ [0, 1]^N
(λ_i = 0: no work, no consumption, no investment, wealth kept — the baseline action):

* labour: income I_i = λ_i ℓ_i 168 s_i, hours λ_i ℓ_i 168; the goods produced join the stock;
* tax T_i = min(W_i + I_i, bracket_tax(I_i)); the revenue is shared among the participants,
  R_i = λ_i Σ_j T_j / max(1, Σ_j λ_j);
* the rationed market, in the recorded random order: household i requests d_i = λ_i c_i W_i / P,
  gets min(d_i, stock) and pays for it;
* saving rate λ_i (Y_i − C_i)/max(Y_i, C_i) and, in interest months, interest λ_i r x̄_i W_i. The
  factor λ_i on the saving rate is the model's own selection (a household at the baseline action has
  Y = C = 0 and σ = 0): the ratio alone tends to 1 as λ_i → 0+ (Y ∝ λ_i, C ∝ λ_i²), a jump at the
  start of the path that no quadrature of the derivative would see.

The world context the indicator reads (price, stock carried in, wage scale, last inflation and
volatility) is the state before the month, the same in every fork. Kinks declared as switching
functions: the tax brackets, the min with wealth, the rationing min, the max(1, ·) of the
participant count and the max(Y, C) of the saving rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from aumann.checks import as_torch
from aumann.scenarios.base import StepMap
from aumann.scenarios.econagent.agents import HOURS
from aumann.scenarios.econagent.prompts import BRACKET_CUTOFFS, BRACKET_RATES


def econ_step_map(model: Any, config: Any, context_fns: Any, factual: Callable[[Any], Any]) -> StepMap:
    """The month ``model`` (an :class:`EconModel` before some month) is about to take, as a StepMap;
    ``factual(model)`` returns a branch of ``model`` after the factual month (``model`` is not touched)."""
    replay = factual(model)  # to read the month's decisions and shopping order
    hh, rh = model.households, replay.households
    works = as_torch(np.asarray(replay.last_trace["works"], dtype=np.float64))
    order = [int(j) for j in replay.last_trace["consumption_order"]]

    def vec(values: Any) -> torch.Tensor:
        return as_torch(np.asarray(values, dtype=np.float64))

    skill, wealth, invested = vec([a.skill for a in hh]), vec([a.wealth for a in hh]), vec([a.invested_sum for a in hh])
    c_rate, x_rate = vec([a.consumption_rate for a in rh]), vec([a.investment_rate for a in rh])
    price, carried, rate = float(model.price), float(model.stock), float(model.interest_rate)
    interest_month = (model.t + 1) % model.period == 0
    cuts = vec(BRACKET_CUTOFFS) / 12.0
    sizes = torch.cat([cuts[1:] - cuts[:-1], torch.tensor([float("inf")], dtype=torch.float64)])
    rates = vec(BRACKET_RATES)
    context = {k: fn(replay) for k, fn in context_fns.items()}
    n = len(hh)

    def forward(lam: torch.Tensor, want_switches: bool = False) -> Any:
        income = lam * works * (HOURS * skill)
        labor = lam * works * HOURS
        w1 = wealth + income
        stock = carried + HOURS * (lam * works).sum(-1)
        over = income[..., None] - cuts
        bracket = (rates * torch.minimum(torch.clamp(over, min=0.0), sizes)).sum(-1)
        taxes = torch.minimum(w1, bracket)
        takers = lam.sum(-1)
        lump = taxes.sum(-1) / torch.clamp(takers, min=1.0)
        redistribution = lam * lump[..., None]
        w2 = w1 + (redistribution - taxes)
        c = lam * c_rate
        spend = [None] * n
        rationing = []
        for j in order:
            want = w2[..., j] * c[..., j] / price
            got = torch.minimum(want, stock)
            rationing.append(want - stock)
            stock = stock - got
            spend[j] = torch.where(got < want, got * price, w2[..., j] * c[..., j])
        consumption = torch.stack(spend, dim=-1)
        w3 = w2 - consumption
        y = income - taxes + redistribution
        top = torch.maximum(y, consumption)
        ok = top > 0
        ratio = torch.where(ok, (y - consumption) / torch.where(ok, top, torch.ones_like(top)), torch.zeros_like(top))
        saving = lam * ratio  # the baseline action selects σ = 0 (Y = C = 0); the ratio alone jumps as λ → 0+
        if interest_month:
            share = (invested + lam * x_rate) / model.period
            w3 = w3 + lam * (rate * share * w3)
        if want_switches:
            return torch.cat([over.flatten(-2), w1 - bracket, torch.stack(rationing, dim=-1),
                              (takers - 1.0)[..., None], y - consumption], dim=-1)
        return torch.stack([consumption, income, c, lam * x_rate, labor, saving, w3], dim=-1)

    return StepMap(fn=forward, n_agents=n, context=context, switches=lambda lam: forward(lam, True), exact=True,
                   holds="")


__all__ = ["econ_step_map"]
