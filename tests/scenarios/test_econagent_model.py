"""EconAgent economy: determinism, the original's mechanics and invariants, the fixed quirks."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.errors import SimulationError
from aumann.scenarios.econagent.indicator import FEATURES, baseline_features
from aumann.scenarios.econagent.model import EconModel, bracket_tax, pareto_skills
from aumann.scenarios.econagent.policy import consumption_rule, investment_rule, work_propensity
from aumann.scenarios.econagent.scenario import EconAgentConfig, run_panel

F = {name: k for k, name in enumerate(FEATURES)}


@pytest.fixture(scope="module")
def run36():
    model = EconModel(10, rng=0)
    from aumann.scenarios.econagent.scenario import CONTEXT_FNS, make_recorder
    from aumann.simulators import simulate

    panel = simulate(model, steps=36, recorder=make_recorder(), context=CONTEXT_FNS)
    return model, panel


def test_same_seed_same_panel_and_different_seed_differs():
    cfg = EconAgentConfig(agents=5, steps=14)
    a, b, c = run_panel(cfg, rng=7), run_panel(cfg, rng=7), run_panel(cfg, rng=8)
    assert a.equals(b)
    assert not np.array_equal(a.values, c.values)
    for k in a.context:
        np.testing.assert_array_equal(a.context[k], b.context[k])


def test_skills_are_the_originals_mean_order_statistics():
    s = pareto_skills(10, np.random.default_rng(0))
    assert np.all(np.diff(s) >= 0)
    # spec check values for N = 10: 12.5 … 422, median 92.9 (mean order statistics; seed noise ~ few %)
    assert 11.0 < s[0] < 15.0 and 380.0 < s[-1] < 470.0 and 85.0 < np.median(s) < 100.0


def test_bracket_tax_matches_hand_computation():
    # 2018 single-filer brackets / 12 at a monthly income of 10 000
    cuts = np.array([0, 9700, 39475, 84200]) / 12
    expected = 0.10 * cuts[1] + 0.12 * (cuts[2] - cuts[1]) + 0.22 * (cuts[3] - cuts[2]) + 0.24 * (10_000 - cuts[3])
    assert bracket_tax(np.array([10_000.0]))[0] == pytest.approx(expected, rel=1e-12)
    assert bracket_tax(np.array([0.0]))[0] == 0.0
    top = bracket_tax(np.array([1e6]))[0]
    assert top == pytest.approx(bracket_tax(np.array([510300 / 12]))[0] + 0.37 * (1e6 - 510300 / 12))


def test_money_identity_tax_redistribution_and_rationing(run36):
    model, panel = run36
    for rec in model.history:
        # taxes are redistributed equally: the tax step moves no money in or out
        assert rec["lump"] * len(model.households) == pytest.approx(rec["taxes"], rel=1e-12, abs=1e-9)
        # rationing never sells more than the stock on offer
        assert rec["sold"] <= rec["supply"] + 1e-9
        assert rec["consumption_total"] / rec["price"] == pytest.approx(rec["sold"], rel=1e-9, abs=1e-9)
    # Σ W changes only by wages (money created), purchases (destroyed) and interest
    money_after = [r["money_before"] for r in model.history[1:]] + [model.money()]
    for rec, after in zip(model.history, money_after):
        change = rec["income_total"] - rec["consumption_total"] + rec["interest_paid"]
        assert after - rec["money_before"] == pytest.approx(change, rel=1e-10, abs=1e-6)
    assert np.all(panel.feature("wealth") >= 0)


def test_rates_on_the_grid_and_quirks_fixed(run36):
    _, panel = run36
    for name in ("consumption_rate", "investment_rate"):
        k = panel.feature(name) * 50
        np.testing.assert_allclose(k, np.round(k), atol=1e-9)
        assert np.all((k >= 0) & (k <= 50))
    labor, income = panel.feature("labor"), panel.feature("income")
    assert set(np.unique(labor)) <= {0.0, 168.0}
    assert (labor == 0).any(), "the seeded run should contain idle months"
    # fixed: no stale income or labour on idle months; no stale consumption without a consumption action
    np.testing.assert_array_equal(income[labor == 0], 0.0)
    assert np.all(income[labor > 0] > 0)
    cons, crate = panel.feature("consumption"), panel.feature("consumption_rate")
    np.testing.assert_array_equal(cons[crate == 0], 0.0)
    sav = panel.feature("saving_rate")
    assert np.all((sav >= -1) & (sav <= 1))


def test_seven_features_live_and_distinct(run36):
    _, panel = run36
    v = panel.values.reshape(-1, len(FEATURES))
    assert np.all(v.std(axis=0) > 0), "every feature varies"
    corr = np.corrcoef(v.T)
    off = corr[~np.eye(len(FEATURES), dtype=bool)]
    assert np.all(np.abs(off) < 0.999), "no feature is a copy (or affine copy) of another"


def test_baseline_action_preserves_wealth_and_matches_baseline_features(run36):
    model, panel = run36
    import copy

    m = copy.deepcopy(model)
    before = np.array([a.wealth for a in m.households])
    ids = [m.households[1].unique_id, m.households[4].unique_id]
    m.force_baseline(ids)
    m.step()
    for pos in (1, 4):
        a = m.households[pos]
        got = [getattr(a, name) for name in FEATURES]
        assert got == [0.0] * 6 + [before[pos]]
    # others are paid the whole redistribution: the tax step still conserves money
    assert m.last["lump"] * (len(m.households) - 2) == pytest.approx(m.last["taxes"])
    # the per-agent baseline of the panel is "zeros, wealth before the step"
    b = baseline_features(panel)
    np.testing.assert_array_equal(b[1:, :, F["wealth"]], panel.values[:-1, :, F["wealth"]])
    assert not b[:, :, :6].any()
    with pytest.raises(SimulationError, match="unknown household"):
        m.force_baseline([999])


def test_rule_policy_formulas():
    assert work_propensity(100.0, 0.0, 0.03) == 1.0
    assert work_propensity(100.0, 168_000.0, 0.03) == pytest.approx((0.1 / 1.03) ** 0.1)
    c0 = consumption_rule(0, price=100.0, wealth=9_900.0, income=100.0, income_prev=100.0, rate=0.03)
    assert c0 == np.floor((100.0 / 10_000.0) ** 0.1 / 0.02 + 1e-9) * 0.02
    # buffer stock with g = 0: c = [1 + d]·I/(W+I), d = W/I − 1/(1+r)
    c1 = consumption_rule(1, price=1.0, wealth=1000.0, income=1000.0, income_prev=1000.0, rate=0.0)
    assert c1 == pytest.approx(np.floor((1 + (1.0 - 1.0)) * 0.5 / 0.02 + 1e-9) * 0.02)
    assert investment_rule(0.5, 0.4, rate=0.04, inflation=0.0) == pytest.approx(0.34)  # 0.3 + 0.04
    assert investment_rule(0.5, 0.4, rate=0.0, inflation=0.2) == 0.0


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(SimulationError, match="n_agents"):
        EconModel(1)
    with pytest.raises(SimulationError, match="decide"):
        EconModel(3, backend=object())


def test_predecessor_inflation_surprise_variance(run36):
    """h_s of Tang et al. recomputed from the price path: π_s = Δ ln P_s (s ≥ 2), e_s = π_s − π_{s−1}
    (s ≥ 3), h_3 = e_3², h_s = λ h_{s−1} + (1 − λ) e_{s−1}² (s ≥ 4), λ = 0.94."""
    model, panel = run36
    P = np.asarray(model.prices)  # P_0 … P_T
    T = len(P) - 1
    pi = {s: np.log(P[s]) - np.log(P[s - 1]) for s in range(2, T + 1)}
    e = {s: pi[s] - pi[s - 1] for s in range(3, T + 1)}
    h = {1: 0.0, 2: 0.0, 3: e[3] ** 2}
    for s in range(4, T + 1):
        h[s] = 0.94 * h[s - 1] + 0.06 * e[s - 1] ** 2
    np.testing.assert_allclose(panel.context["risk_h"], [h[s] for s in range(1, T + 1)], rtol=1e-12, atol=0)
    np.testing.assert_allclose(panel.context["vol_prev"][1:], [h[s] for s in range(1, T)], rtol=1e-12, atol=0)


def test_rule_policy_draws_binary_work_with_the_propensity():
    from aumann.scenarios.econagent.policy import rule_policy
    from aumann.scenarios.econagent.prompts import EconDecision

    ctx = {"skill": 100.0, "wealth": 168_000.0, "interest_rate": 0.03, "price": 100.0, "price_prev": 100.0,
           "income_seen": 16_800.0, "rule": 1, "propensity": 0.5}
    p = (0.1 / 1.03) ** 0.1
    works = [rule_policy(ctx, EconDecision, np.random.default_rng(s)).work for s in range(4000)]
    assert set(works) == {0.0, 1.0}
    assert abs(np.mean(works) - p) < 4 * np.sqrt(p * (1 - p) / 4000)
    a = rule_policy(ctx, EconDecision, np.random.default_rng(5))
    assert a == rule_policy(ctx, EconDecision, np.random.default_rng(5))
    # buffer-stock rule with I = l·168s: an idle month (l = 0) plans no consumption, as in the original
    for s in range(20):
        d = rule_policy(ctx, EconDecision, np.random.default_rng(s))
        assert (d.consumption == 0.0) == (d.work == 0.0)
