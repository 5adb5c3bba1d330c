"""The EconAgent economy (Li et al. 2024, ACL24-EconAgent at bfada09) as a Mesa 3 model.

One step is one month t = 1, 2, … (period 12). Components run in the original's order:

1. **Decisions.** Each household returns ``{work, consumption, investment}`` ∈ [0, 1] on the 0.02
   grid; it works (168 hours) with probability ``work``: ℓ_i = 1[U ≤ work]. The month's decisions
   are independent of each other and go to the backend as one batch (results applied in household
   order); so do the quarterly reflections.
2. **Labour.** A worker earns I_i = 168 s_i, W_i += I_i, production += I_i; supply
   S = G_{t−1} + 168·#workers goods (1 good per hour). Idle households have I_i = 0 and ℓ_i = 0
   (the original left both stale; see README). GDP and unemployment accumulate per year.
3. **Tax.** 2018 US federal single-filer brackets divided by 12, on this month's income:
   T_i = min(W_i, Σ_b rate_b · clip(I_i − cut_b, 0, size_b)); the revenue is redistributed equally,
   L = Σ T_i / n (n = the households taking part this month, all of them unless some are forced to
   the baseline action): money is conserved by the tax step.
4. **Consumption.** In random order, a household with rate c_i > 0 requests d_i = c_i W_i / P
   goods; it gets min(d_i, G) (shortage rationing: never more than the stock), pays C_i = P·goods.
   Imbalance φ = (D − S) / max(D, S) with D = Σ d_i. Wages s_i ← max(s_i (1 + U(0, 0.05 φ)), 1)
   (one draw per household), price P ← max(P (1 + U(0, 0.10 φ)), 1).
5. **Saving / monetary policy.** At t % 12 = 0: W_i += r · x̄_i · W_i (annual interest on the share
   of wealth invested, x̄_i the year's mean investment rate; x̄ ≡ 1 is the original), then for t > 12
   the Taylor rule r = max(0, r_n + π* + ½(π − π*) + ½(u_n − u)) with r_n = 0.01, π* = 0.02,
   u_n = 0.04, π the annual price inflation, u this year's unemployment rate.
6. **Offers.** Unemployed households get an offer from the salary band containing 168 s_i.

Features recorded per household after each month (the design card's seven): consumption C_i,
income I_i, consumption rate c_i, investment rate x_i, labour ℓ_i (hours), saving rate
σ_i = (Y_i − C_i) / max(Y_i, C_i) with Y_i = I_i − T_i + L (0 when both are 0), and wealth W_i.

A household flagged with :meth:`EconModel.force_baseline` takes the baseline action next month: no
work, no consumption, no investment, and its wealth preserved (no tax, no redistribution credit, no
interest), so its features become exactly :func:`~aumann.scenarios.econagent.indicator.baseline_features`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import mesa
import numpy as np

from aumann.errors import SimulationError
from aumann.scenarios.econagent.agents import HOURS, Household
from aumann.scenarios.econagent.prompts import BRACKET_CUTOFFS, BRACKET_RATES
from aumann.simulators.llm import decide_all

NAMES = (
    "Alice Walker", "Ben Carter", "Chloe Diaz", "David Kim", "Emma Lopez", "Frank Moore", "Grace Nguyen",
    "Henry Patel", "Isabel Reed", "Jack Stone", "Kara Young", "Liam Brooks", "Maya Chen", "Noah Evans",
    "Olivia Ford", "Paul Garcia", "Quinn Hayes", "Rosa Ito", "Sam Jones", "Tara Khan",
)
SALARY_BANDS = (0, 2454, 3812, 5284, 7124, 9580, 13032, 18308, 28054, 52370, 10_000_000)
BAND_JOBS = (
    ("Cashier", "Dishwasher"), ("Retail Salesperson", "Cook"), ("Warehouse Worker", "Receptionist"),
    ("Truck Driver", "Bookkeeper"), ("Electrician", "Paralegal"), ("Accountant", "Registered Nurse"),
    ("Software Developer", "Civil Engineer"), ("Pharmacist", "Data Scientist"),
    ("Physician", "Engineering Manager"), ("Surgeon", "Chief Executive"),
)
TAYLOR = {"natural_rate": 0.01, "target_inflation": 0.02, "natural_unemployment": 0.04}


def pareto_skills(n: int, rng: np.random.Generator, *, shape: float = 8.0, draws: int = 1000) -> np.ndarray:
    """The original's skills: mean order statistics of min(950, 949·Lomax(8) + 1), ascending (n,)."""
    x = rng.pareto(shape, size=(draws, n))
    clipped = np.minimum(950.0, 949.0 * x + 1.0)
    clipped.sort(axis=1)
    return clipped.mean(axis=0)


def bracket_tax(income: np.ndarray, *, scale: float = 12.0) -> np.ndarray:
    """Σ_b rate_b · clip(z − cut_b, 0, size_b) with the 2018 single-filer brackets / ``scale``."""
    cuts = np.asarray(BRACKET_CUTOFFS) / scale
    sizes = np.append(np.diff(cuts), np.inf)
    z = np.asarray(income, dtype=np.float64)[..., None]
    return (np.asarray(BRACKET_RATES) * np.clip(z - cuts, 0.0, sizes)).sum(axis=-1)


class EconModel(mesa.Model):
    """The EconAgent economy with N households.

    Args:
        n_agents: number of households (the paper's scenario: 10; the original's run: 100).
        backend: a decision backend (``decide(messages, schema, *, context, seed)``); default the
            original's rule-based policy.
        rng: seed or ``numpy.random.Generator`` of the model (skills, work draws, orders, wage and
            price draws, decision seeds).
        max_wage_inflation: 0.05 in the original.
        max_price_inflation: 0.10 in the original.
        period: months per year (12).
        initial_rate: r_0 = 0.03.
    """

    def __init__(self, n_agents: int = 10, *, backend: Any = None, rng: Any = 0,
                 max_wage_inflation: float = 0.05, max_price_inflation: float = 0.10, period: int = 12,
                 initial_rate: float = 0.03) -> None:
        if isinstance(n_agents, bool) or not isinstance(n_agents, int) or n_agents < 2:
            raise SimulationError(f"EconAgent needs n_agents ≥ 2 households; got {n_agents!r}")
        if period < 1:
            raise SimulationError(f"period must be ≥ 1 month; got {period!r}")
        super().__init__(rng=rng)
        if backend is None:
            from aumann.scenarios.econagent.policy import offline_backend

            backend = offline_backend()
        if not callable(getattr(backend, "decide", None)):
            raise SimulationError(f"backend must have decide(messages, schema, ...); got {type(backend).__name__}")
        self.backend = backend
        self.usage = getattr(backend, "usage", None)  # the backend's account (shared by forks)
        self.max_wage_inflation = float(max_wage_inflation)
        self.max_price_inflation = float(max_price_inflation)
        self.period = int(period)
        skills = pareto_skills(n_agents, self.rng)
        ages = self.rng.integers(18, 60, size=n_agents)
        names = self.rng.permutation(len(NAMES) * max(1, math.ceil(n_agents / len(NAMES))))[:n_agents]
        rules = self.rng.integers(0, 2, size=n_agents)
        props = self.rng.uniform(0.2, 0.8, size=n_agents)
        for i in range(n_agents):
            base = NAMES[names[i] % len(NAMES)]
            name = base if names[i] < len(NAMES) else f"{base} {names[i] // len(NAMES) + 1}"
            a = Household(self, skill=skills[i], name=name, age=int(ages[i]), city="New York City",
                          rule=int(rules[i]), propensity=float(props[i]))
            a.offer = self._offer_for(a)
        self.households: list[Household] = sorted(self.agents, key=lambda a: a.unique_id)
        self.t = 0
        self.prices = [float(skills.mean())]
        self.interest_rate = float(initial_rate)
        self.rates = [self.interest_rate]
        self.stock = 0.0
        self.llm_errors = 0
        self.unemployment: dict[int, int] = {}
        self.nominal_gdp: dict[int, float] = {}
        self.real_gdp: dict[int, float] = {}
        self.mean_wages = [float(skills.mean())]
        self.annual_inflation: list[float] = []
        # per-month world record (the indicator's context)
        self.last: dict[str, float] = {}
        self._pred_h = 0.0  # predecessor's RiskMetrics variance h_t of inflation surprises
        self._pred_e: list[float] = []
        self.history: list[dict[str, float]] = []

    # ------------------------------------------------------------------ helpers
    @property
    def price(self) -> float:
        return self.prices[-1]

    @property
    def date(self) -> str:
        """The current month ``YYYY.MM`` (month t = 1 is 2001.01; during a step, the month being decided)."""
        m = max(self.t - 1, 0)
        return f"{2001 + m // 12}.{m % 12 + 1:02d}"

    def _offer_for(self, a: Household) -> str:
        band = int(np.searchsorted(SALARY_BANDS, a.skill * HOURS, side="right")) - 1
        band = min(max(band, 0), len(BAND_JOBS) - 1)
        jobs = BAND_JOBS[band]
        return jobs[int(self.rng.integers(len(jobs)))]

    def force_baseline(self, ids: Iterable[int]) -> None:
        """Make the households with these ``unique_id`` take the baseline action in the next month."""
        by_id = {a.unique_id: a for a in self.households}
        ids = list(ids)
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise SimulationError(f"force_baseline: unknown household id(s) {missing}; ids are {sorted(by_id)}")
        for i in ids:
            by_id[i].forced_baseline = True

    # ------------------------------------------------------------------ one month
    def step(self) -> None:
        """Advance one month (decisions, labour, tax, consumption, saving/policy, offers)."""
        hh = self.households
        n = len(hh)
        k = self.t  # 0-based decision index
        self.t += 1
        t = self.t
        year = (t - 1) // self.period
        price = self.price
        wage_scale = HOURS * float(np.mean([a.skill for a in hh]))
        carried = self.stock
        forced = np.array([a.forced_baseline for a in hh])
        money_before = self.money()

        # 1. decisions ---------------------------------------------------------------
        seeds = self.rng.integers(0, 2**31 - 1, size=n)
        works = np.zeros(n, dtype=bool)
        deciding = []
        for j, a in enumerate(hh):
            if forced[j]:
                a.decision = None
                a.consumption_rate = 0.0
                a.investment_rate = 0.0
            else:
                deciding.append(j)
        requests = [hh[j].decision_request(k, int(seeds[j])) for j in deciding]  # one batch: independent
        for j, out in zip(deciding, decide_all(self.backend, requests, return_exceptions=True)):
            d = hh[j].accept_decision(out)
            hh[j].consumption_rate = d.consumption
            hh[j].investment_rate = d.investment
        draws = self.rng.uniform(size=n)
        for j, a in enumerate(hh):
            w = 0.0 if forced[j] else a.decision.work
            works[j] = w >= 1.0 or (w > 0.0 and draws[j] <= w)

        # 2. labour --------------------------------------------------------------------
        for j in self.rng.permutation(n):
            a = hh[j]
            a.skill_last = a.skill
            if works[j]:
                a.income = HOURS * a.skill
                a.labor = HOURS
                a.production += a.income
                a.wealth += a.income
                a.income_seen = a.income
                a.job = a.offer
                a.months_worked_quarter += 1
            else:
                a.income = 0.0
                a.labor = 0.0
                a.job = "Unemployment"
                a.expected_skill *= 0.98
        produced = HOURS * int(works.sum())
        self.stock += produced
        supply = self.stock
        self.nominal_gdp[year] = self.nominal_gdp.get(year, 0.0) + produced * price
        self.real_gdp[year] = self.real_gdp.get(year, 0.0) + produced * self.prices[0]
        self.unemployment[year] = self.unemployment.get(year, 0) + int(n - works.sum())
        if t % self.period == 1 and t > self.period:
            for a in hh:
                a.age += 1

        # 3. tax and equal redistribution ------------------------------------------------
        incomes = np.array([a.income for a in hh])
        wealth = np.array([a.wealth for a in hh])
        taxes = np.minimum(wealth, bracket_tax(incomes))
        takers = ~forced
        lump = float(taxes.sum()) / max(1, int(takers.sum()))
        for j, a in enumerate(hh):
            a.tax_paid = float(taxes[j])
            a.redistribution = lump if takers[j] else 0.0
            a.wealth += a.redistribution - a.tax_paid

        # 4. consumption with shortage rationing ------------------------------------------
        demand = 0.0
        for j in self.rng.permutation(n):
            a = hh[j]
            c = a.consumption_rate
            a.consumption = 0.0
            a.requested = 0.0
            a.shortage = False
            if forced[j] or c <= 0.0:
                continue
            want = a.wealth * c / price
            a.requested = want
            demand += want
            got = min(want, self.stock)
            self.stock -= got
            spend = got * price if got < want else a.wealth * c
            a.consumption = spend
            a.wealth -= spend
            a.shortage = got <= 0.0
        top = max(demand, supply)
        imbalance = (demand - supply) / top if top > 0 else 0.0
        for a in hh:
            a.skill = max(a.skill * (1.0 + self.max_wage_inflation * imbalance * self.rng.random()), 1.0)
        self.mean_wages.append(float(np.mean([a.skill for a in hh])))
        # U(0, a) for a < 0 (numpy's legacy uniform(0, a)) is a·U(0, 1): draws in (a, 0]
        new_price = max(price * (1.0 + self.max_price_inflation * imbalance * self.rng.random()), 1.0)
        self.prices.append(new_price)

        # saving rate σ = (Y − C) / max(Y, C), Y = disposable income -------------------------
        for a in hh:
            y = a.income - a.tax_paid + a.redistribution
            top_yc = max(y, a.consumption)
            a.saving_rate = (y - a.consumption) / top_yc if top_yc > 0 else 0.0
            a.invested_sum += a.investment_rate

        # 5. annual interest on invested wealth and the Taylor rule ----------------------------
        interest_paid = 0.0
        if t % self.period == 0:
            months = self.period
            for j, a in enumerate(hh):
                share = a.invested_sum / months
                a.invested_sum = 0.0
                if forced[j]:
                    continue
                gain = self.interest_rate * share * a.wealth
                a.wealth += gain
                interest_paid += gain
            if t > self.period:
                p = np.asarray(self.prices[1:])
                infl = float(p[-months:].mean() / p[-2 * months:-months].mean() - 1.0)
                self.annual_inflation.append(infl)
                u = self.unemployment[year] / months / n
                r = (TAYLOR["natural_rate"] + TAYLOR["target_inflation"]
                     + 0.5 * (infl - TAYLOR["target_inflation"]) + 0.5 * (TAYLOR["natural_unemployment"] - u))
                self.interest_rate = max(0.0, r)
            self.rates.append(self.interest_rate)

        # 6. offers, reflection, bookkeeping -------------------------------------------------
        for a in hh:
            if a.labor == 0:
                a.offer = self._offer_for(a)
        if (k + 1) % 3 == 0:
            rseeds = self.rng.integers(0, 2**31 - 1, size=n)
            reflecting = [j for j in range(n) if not forced[j]]
            requests = [hh[j].reflection_request(int(rseeds[j])) for j in reflecting]
            for j, req, out in zip(reflecting, requests, decide_all(self.backend, requests, return_exceptions=True)):
                hh[j].accept_reflection(req, out)
        for a in hh:
            a.forced_baseline = False
        self._record(t, price=price, new_price=new_price, wage_scale=wage_scale, carried=carried, supply=supply,
                     demand=demand, imbalance=imbalance, lump=lump, interest_paid=interest_paid,
                     taxes=float(taxes.sum()), workers=int(works.sum()), money_before=money_before,
                     income_total=float(incomes.sum()), consumption_total=float(sum(a.consumption for a in hh)),
                     sold=float(supply - self.stock))

    def _record(self, t: int, **kw: float) -> None:
        """Keep the month's world state; update the predecessor's inflation-surprise variance h_t."""
        lam = 0.94
        infl_prev = self.last.get("inflation", 0.0)
        h_prev = self._pred_h
        # predecessor (Tang et al.): π_s = ln P_s − ln P_{s−1} (s ≥ 2), e_s = π_s − π_{s−1} (s ≥ 3),
        # h_3 = e_3², h_s = λ h_{s−1} + (1 − λ) e_{s−1}² (s ≥ 4); month s's price is the post-update one
        infl = math.log(kw["new_price"] / kw["price"]) if t >= 2 else 0.0
        if t >= 3:
            self._pred_e.append(infl - infl_prev)
        if t == 3:
            self._pred_h = self._pred_e[-1] ** 2
        elif t >= 4:
            self._pred_h = lam * self._pred_h + (1 - lam) * self._pred_e[-2] ** 2
        rec = {"t": float(t), **{k: float(v) for k, v in kw.items()}, "inflation": infl,
               "inflation_prev": infl_prev, "vol_prev": h_prev, "risk_h": self._pred_h,
               "rate": self.interest_rate}
        self.last = rec
        self.history.append(rec)

    def money(self) -> float:
        """Total money held by households Σ_i W_i."""
        return float(sum(a.wealth for a in self.households))


__all__ = ["BAND_JOBS", "NAMES", "SALARY_BANDS", "TAYLOR", "EconModel", "bracket_tax", "pareto_skills"]
