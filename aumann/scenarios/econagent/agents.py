"""EconAgent households: state, perception (the monthly prompt), memory, reflection and decisions.

A household decides once a month through a :class:`DecisionBackend` (``decide(messages, schema, *,
context, seed)``): the rule-based policy of the original (offline default) or an OpenAI-compatible
LLM. The model asks all households at once (one batch per month, and one per quarterly reflection:
the households' requests do not depend on each other) through :meth:`Household.decision_request` /
:meth:`Household.accept_decision` and the reflection pair; :meth:`Household.decide` is the same for
one household. The messages follow the original's memory: a deque of the last 3 turns
``[u_{t−1}, a_{t−1}, u_t]``; in months with ``t % 3 == 0`` (t > 0) the last quarterly reflection is
inserted, ``[u_{t−1}, a_{t−1}, refl_q, refl_a, u_t]``; a reflection runs after months with
``(t + 1) % 3 == 0`` over the last 7 turns. A reply that fails validation (after the backend's own
retries) falls back to the original's ``work = 1, consumption = 0.5`` (investment 0.5) and is counted
in ``model.llm_errors``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import mesa

from aumann.scenarios.econagent.prompts import (
    FALLBACK,
    DecisionParseError,
    EconDecision,
    Reflection,
    decision_prompt,
    reflection_messages,
    render_decision,
)

HOURS = 168.0


def _invalid_reply_errors() -> tuple[type[Exception], ...]:
    from pydantic import ValidationError

    from aumann.errors import BackendUnavailableError, ResponseTooLargeError
    from aumann.simulators.llm import MalformedResponseError, PolicyError

    return (MalformedResponseError, PolicyError, DecisionParseError, ValidationError, ResponseTooLargeError,
            BackendUnavailableError)


INVALID_REPLY = _invalid_reply_errors()
"""Decisions without a usable answer (a reply still invalid after the backend's varied retry, or requests
that all failed): they fall back to the original's default decision and are counted (``llm_errors``).
Other backend errors (authentication, budget, cache miss, a server that is down) propagate: they are
not model answers."""


def _abstains(out: Any) -> bool:
    from aumann.errors import ServerDownError

    return isinstance(out, INVALID_REPLY) and not isinstance(out, ServerDownError)


class Household(mesa.Agent):
    """One household of the EconAgent economy.

    Attributes (the recorded features are listed in the README): ``skill`` (wage per hour), ``wealth``,
    ``income`` (this month's pre-tax labour income, 0 when idle), ``labor`` (hours, 0 or 168),
    ``consumption`` (money spent this month), ``consumption_rate``, ``investment_rate``,
    ``saving_rate``; plus ``tax_paid``, ``redistribution``, ``income_seen`` (the original's stale
    income field, read by the rule policy), demographics and LLM memory.
    """

    def __init__(self, model: mesa.Model, *, skill: float, name: str, age: int, city: str, rule: int,
                 propensity: float) -> None:
        super().__init__(model)
        self.skill = float(skill)
        self.expected_skill = float(skill)
        self.skill_last = float(skill)
        self.production = 0.0
        self.wealth = 0.0
        self.income = 0.0
        self.labor = 0.0
        self.consumption = 0.0
        self.consumption_rate = 0.0
        self.investment_rate = 0.0
        self.saving_rate = 0.0
        self.tax_paid = 0.0
        self.redistribution = 0.0
        self.income_seen = 0.0
        self.requested = 0.0
        self.shortage = False
        self.invested_sum = 0.0  # Σ of this year's monthly investment rates (annual interest uses the mean)
        self.name = name
        self.age = int(age)
        self.city = city
        self.job = "Unemployment"
        self.offer = ""
        self.rule = int(rule)
        self.propensity = float(propensity)
        self.decision: EconDecision | None = None
        self.works = False
        self.forced_baseline = False
        self._pending_user: dict[str, str] | None = None
        self.dialog: deque[dict[str, str]] = deque(maxlen=3)
        self.dialog4ref: deque[dict[str, str]] = deque(maxlen=7)
        self.reflection: list[dict[str, str]] = []
        self.months_worked_quarter = 0
        self.price_quarter_start = 0.0

    # ----------------------------------------------------------------- perception
    def observation(self) -> dict[str, Any]:
        """What the household sees at the start of the month (prompt fields and rule-policy inputs)."""
        m = self.model
        change = ""
        if self.skill > self.skill_last:
            change = "increased"
        elif self.skill < self.skill_last:
            change = "decreased"
        price, price_prev = m.price, m.prices[-2] if len(m.prices) > 1 else m.price
        return {
            "name": self.name, "age": self.age, "city": self.city, "date": m.date,
            "worked_last": self.labor > 0, "job": self.job, "offer": self.offer,
            "income_expected": self.skill * HOURS, "income_change": change,
            "consumption_last": self.consumption, "shortage": self.shortage,
            "tax_paid": self.tax_paid, "redistribution": self.redistribution,
            "price": price, "price_prev": price_prev,
            "price_change": "up" if price > price_prev else ("down" if price < price_prev else ""),
            "wealth": self.wealth, "interest_rate": m.interest_rate, "investment_last": self.investment_rate,
            # rule-policy inputs (the original's policy reads the stale income field)
            "skill": self.skill, "income_seen": self.income_seen, "rule": self.rule, "propensity": self.propensity,
        }

    def decision_request(self, step: int, seed: int) -> dict[str, Any]:
        """This month's request (``decide`` keyword arguments); appends the user turn to the memory."""
        obs = self.observation()
        user = {"role": "user", "content": decision_prompt(obs)}
        self.dialog.append(user)  # maxlen 3: [u_{t−1}, a_{t−1}, u_t]
        messages = list(self.dialog)
        if step % 3 == 0 and step > 0 and self.reflection:
            messages = [*messages[:-1], *self.reflection, user]
        self._pending_user = user
        return {"messages": messages, "schema": EconDecision, "context": obs, "seed": seed}

    def accept_decision(self, decision: Any) -> EconDecision:
        """Take the backend's answer (or its exception): an invalid reply falls back and is counted."""
        if _abstains(decision):
            decision = FALLBACK
            self.model.llm_errors += 1
        elif isinstance(decision, BaseException):
            raise decision
        elif not isinstance(decision, EconDecision):
            try:
                decision = EconDecision.model_validate(decision)
            except INVALID_REPLY:
                decision = FALLBACK
                self.model.llm_errors += 1
        user = self._pending_user
        answer = {"role": "assistant", "content": render_decision(decision)}
        self.dialog.append(answer)
        self.dialog4ref.extend([user, answer])
        self.decision = decision
        return decision

    def decide(self, step: int, seed: int) -> EconDecision:
        """Ask the backend for this month's decision; fall back (and count) on an invalid reply."""
        from aumann.simulators.llm import decide_all

        return self.accept_decision(decide_all(self.model.backend, [self.decision_request(step, seed)],
                                               return_exceptions=True)[0])

    def reflection_request(self, seed: int) -> dict[str, Any]:
        """The quarterly reflection request over the last 7 turns (``decide`` keyword arguments)."""
        ctx = {"price_start": self.price_quarter_start, "price": self.model.price, "wealth": self.wealth,
               "months_worked": self.months_worked_quarter, "interest_rate": self.model.interest_rate}
        return {"messages": reflection_messages(list(self.dialog4ref)), "schema": Reflection, "context": ctx,
                "seed": seed}

    def accept_reflection(self, request: dict[str, Any], out: Any) -> None:
        """Store the reflection (inserted into the next request); an invalid reply is counted."""
        if _abstains(out):
            text = ""
            self.model.llm_errors += 1
        elif isinstance(out, BaseException):
            raise out
        else:
            try:
                text = out.text if isinstance(out, Reflection) else Reflection.model_validate(out).text
            except INVALID_REPLY:
                text = ""
                self.model.llm_errors += 1
        self.reflection = [{"role": "user", "content": request["messages"][-1]["content"]},
                           {"role": "assistant", "content": text}]
        self.dialog4ref.extend(self.reflection)  # as in the original, later reflections see this one
        self.months_worked_quarter = 0
        self.price_quarter_start = self.model.price

    def reflect(self, seed: int) -> None:
        """The quarterly reflection over the last 7 turns (stored and inserted into the next request)."""
        from aumann.simulators.llm import decide_all

        req = self.reflection_request(seed)
        self.accept_reflection(req, decide_all(self.model.backend, [req], return_exceptions=True)[0])


__all__ = ["HOURS", "Household"]
