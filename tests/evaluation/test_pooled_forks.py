"""Deletion forks of pooled indicators from what a re-simulated step changes (Scenario.resimulate_rows_fn):
the values of a full evaluation to rounding, a wrong pooled declaration caught, bad returns refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from aumann import scenarios
from aumann.attribution.indicators import FunctionIndicator, PooledForm
from aumann.errors import AumannWarning, IndicatorError, ScenarioCodeError
from aumann.evaluation.deletion import DeletionOracle, PooledForks

SC = scenarios.get("megascale-social")


@pytest.fixture(scope="module")
def case():
    cfg = SC.load_config(agents=3000, steps=6)
    run = SC.simulate(cfg, rng=4, keep_from=0)
    before = run.before(3)
    hubs = np.argsort(-before.world.network.follower_count())[:60]
    rng = np.random.default_rng(0)
    sets = [hubs[:k] for k in (1, 2, 7, 20, 60)] + [rng.choice(3000, k, replace=False) for k in (1, 30, 900, 2000)]
    return cfg, before, sets


def _oracles(sc, cfg, before, f, fo):
    fast = DeletionOracle(sc, cfg, before, f, fo)
    full = DeletionOracle(sc, cfg, before, f, fo)
    full._pooled = False  # every fork evaluated over N
    return fast, full


def test_pooled_forks_give_the_full_evaluation_to_rounding(case):
    cfg, before, sets = case
    f, fo = SC.indicators(cfg)
    fast, full = _oracles(SC, cfg, before, f, fo)
    got, want = np.array(fast.many(sets)), np.array(full.many(sets))
    assert isinstance(fast._pooled, PooledForks)  # used: both MegaScale indicators declare a pooled form
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=0)
    assert np.array_equal(got[-1], want[-1])  # 2000 of 3000 rows changed: evaluated over N, the same bits
    assert fast.forks == full.forks == len(sets)


def test_a_pooled_form_that_does_not_describe_the_indicator_is_refused(case):
    """A user's form that is not f at the factual step itself (it says mean, f is the mean's square) was quietly
    not used; it is now refused as the engine refuses it, naming the indicator."""
    cfg, before, sets = case
    f, _ = SC.indicators(cfg)
    liar = FunctionIndicator(lambda z: z[..., 0].mean(-1) ** 2, name="squared_mean_belief")
    liar.pooled = PooledForm(psi=lambda z: z[..., :1], rho=lambda m: m[..., 0])  # says mean, not its square
    fast = DeletionOracle(SC, cfg, before, f, liar)
    with pytest.raises(IndicatorError, match="indicator 'squared_mean_belief': its pooled form is not f"):
        fast.many(sets[:4])
    assert fast.forks == 0 and not fast.cached()


def _cube_right_at_the_factual_step(base):
    """f = mean(belief)³ declaring ρ(m) = m² M, M the factual step's mean belief: right at that step only."""
    M = float(base[:, 0].mean())
    cube = FunctionIndicator(lambda z: z[..., 0].mean(-1) ** 3, name="cube_belief")
    cube.pooled = PooledForm(psi=lambda z: z[..., :1], rho=lambda m: m[..., 0] ** 2 * M)
    return cube


def test_a_pooled_form_right_only_at_the_factual_step_is_refused(case):
    """The sums were checked against f at the factual step alone: a form right there but not at the forks' steps
    (ρ(m) = m² M for f = m³) gave deletion values off by 1-2.4% (f original 5.697e-05 for a full evaluation's
    5.641e-05 with 1 agent deleted, 5.539e-05 for 5.408e-05 with 20), silently. Now a user's form gets the engine's
    check between the factual step and the scenario's baseline (coalitions between the two) and is refused."""
    cfg, before, _ = case
    f, _ = SC.indicators(cfg)
    cube = _cube_right_at_the_factual_step(SC.step_rows(before, cfg, [])[0])
    fast = DeletionOracle(SC, cfg, before, f, cube)
    with pytest.raises(IndicatorError, match=r"indicator 'cube_belief': its pooled form is not f: at a coalition "
                                             r"between v\(∅\) and v\(N\)"):
        fast.values(list(range(1)))
    assert fast.forks == 0
    full = DeletionOracle(SC, cfg, before, f, cube)
    full._pooled = False  # the reference: every fork evaluated over N (f itself)
    ref = [v for _, v in full.many([[0], list(range(20))])]
    for k, want in zip((1, 20), ref):  # and f itself evaluated directly on the re-simulated step
        z = SC.step_state(before, cfg, list(range(k))).z
        assert want == pytest.approx(float(np.mean(np.asarray(z)[:, 0]) ** 3), rel=1e-12)


def _offset_var():
    """A user's variance of belief + 1e8 (two-pass, exact to rounding) declaring ψ = (g, g²), ρ = m₂ − m₁²: a right
    pooled form, whose sums cancel catastrophically at that offset."""
    def f(z):
        g = z[..., 0] + 1e8
        return ((g - g.mean(-1, keepdim=True)) ** 2).mean(-1)

    ind = FunctionIndicator(f, name="offset_var")
    ind.pooled = PooledForm(psi=lambda z: torch.stack([z[..., 0] + 1e8, (z[..., 0] + 1e8) ** 2], -1),
                            rho=lambda m: m[..., 1] - m[..., 0] ** 2)
    return ind


def test_a_pooled_form_that_loses_the_precision_of_f_is_not_used_and_says_why(case):
    cfg, before, sets = case
    f, _ = SC.indicators(cfg)
    fast, full = _oracles(SC, cfg, before, f, _offset_var())
    with pytest.warns(AumannWarning, match=r"deletion forks evaluate every fork in full.*'offset_var' loses the "
                                           r"precision of f"):
        got = np.array(fast.many(sets[:4]))
    assert np.array_equal(got, np.array(full.many(sets[:4])))  # every fork in full: f itself
    assert "loses the precision" in fast.pooled_fallback and full.pooled_fallback is None


def test_aumanns_own_pooled_forms_ask_for_no_baseline(case, monkeypatch):
    """The check costs the scenario's baseline step and a few evaluations of f over N: only a user's form pays."""
    cfg, before, sets = case
    f, fo = SC.indicators(cfg)
    calls = []
    real = type(SC).baseline_features
    monkeypatch.setattr(type(SC), "baseline_features", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    oracle = DeletionOracle(SC, cfg, before, f, fo)
    oracle.many(sets[:3])
    assert isinstance(oracle._pooled, PooledForks) and oracle.pooled_fallback is None and calls == []
    user = FunctionIndicator(lambda z: fo(z), name="user_original")
    user.pooled = fo.pooled
    mine = DeletionOracle(SC, cfg, before, f, user)
    np.testing.assert_allclose(np.array(mine.many(sets[:3])), np.array(oracle.many(sets[:3])), rtol=1e-14)
    assert calls == [1] and mine.pooled_fallback is None


def test_a_scenario_without_rows_or_an_unpooled_indicator_keeps_the_full_path(case):
    cfg = case[0]
    f, fo = SC.indicators(cfg)
    assert PooledForks.of(dataclasses.replace(SC, resimulate_rows_fn=None), f, fo) is None
    plain = FunctionIndicator(lambda z: torch.as_tensor(z)[..., 0].mean(-1), name="mean_belief")
    assert PooledForks.of(SC, f, plain) is None


@pytest.mark.parametrize("bad", [
    lambda m, c, p: "nope",
    lambda m, c, p: (np.zeros((4, 2)), np.array([1]), np.zeros((2, 2))),
    lambda m, c, p: (np.zeros((4, 2)), np.array([9]), np.zeros((1, 2))),
    lambda m, c, p: (np.zeros((4, 2), np.float32), np.array([1]), np.zeros((1, 2))),
    lambda m, c, p: (np.zeros((4, 2)), np.array([3, 1, 3]), np.ones((3, 2))),  # row 3 twice: counted twice
])
def test_bad_rows_are_refused_naming_the_function(bad):
    sc = dataclasses.replace(SC, resimulate_rows_fn=bad)
    with pytest.raises(ScenarioCodeError, match="resimulate_rows_fn"):
        sc.step_rows(None, None, [1])


def test_a_repeated_row_is_refused_and_no_changed_rows_may_be_an_empty_list(case):
    cfg, before, sets = case
    real = SC.resimulate_rows_fn

    def twice(m, c, p):  # the first changed row again: PooledForks added its change twice (a silent wrong f)
        base, rows, values = real(m, c, p)
        return base, np.concatenate([rows, rows[:1]]), np.concatenate([values, values[:1]])

    f, fo = SC.indicators(cfg)
    with pytest.raises(ScenarioCodeError, match="each changed row once"):
        DeletionOracle(dataclasses.replace(SC, resimulate_rows_fn=twice), cfg, before, f, fo).values(sets[1])
    base = np.zeros((4, 2))
    none = dataclasses.replace(SC, resimulate_rows_fn=lambda m, c, p: (base, [], np.zeros((0, 2))))
    out = none.step_rows(None, None, [1])
    assert out[0] is base and out[1].dtype == np.int64 and out[1].size == 0


@pytest.mark.parametrize("fault", ["stale base", "a changed row left out", "another agent order"])
def test_a_rows_hook_that_is_not_the_re_simulated_step_is_caught_before_any_value(case, fault):
    """The pooled form's own check reads the base alone, so a base that is not the factual step (an array from
    another step, rows in another order) or a change left out gave deletion values that were silently wrong.
    The first fork of each oracle compares the hook's step with the re-simulated one (resimulate_fn)."""
    cfg, before, sets = case
    real = SC.resimulate_rows_fn
    stale = real(before, cfg, [])[0] + 0.01  # e.g. the step before's features

    def hook(m, c, p):
        base, rows, values = real(m, c, p)
        if fault == "stale base":
            return stale, rows, values
        if fault == "a changed row left out":
            return base, rows[1:], values[1:]
        return base[::-1].copy(), rows, values  # the agents in reverse order

    f, fo = SC.indicators(cfg)
    oracle = DeletionOracle(dataclasses.replace(SC, resimulate_rows_fn=hook), cfg, before, f, fo)
    with pytest.raises(ScenarioCodeError, match=r"resimulate_rows_fn of scenario 'megascale-social' disagrees with "
                                                r"the re-simulated step \(with 20 agent\(s\).*row \d+, feature \d"):
        oracle.values(sets[3])  # 20 hubs at the baseline action
    assert oracle.forks == 0 and not oracle.cached()


def test_a_faithful_rows_hook_is_checked_once_per_oracle(case, monkeypatch):
    cfg, before, sets = case
    f, fo = SC.indicators(cfg)
    calls = []
    real = SC.step_state
    monkeypatch.setattr(type(SC), "step_state", lambda self, *a, **k: calls.append(1) or real(*a, **k))
    oracle = DeletionOracle(SC, cfg, before, f, fo)
    oracle.many(sets[:5])
    assert isinstance(oracle._pooled, PooledForks) and oracle._rows_checked and len(calls) == 1


def test_a_user_form_that_cannot_be_checked_is_not_used_and_says_why(case):
    """A scenario whose baseline features fail (a typed scenario error) leaves a user's pooled form unchecked: every
    fork is evaluated in full (f itself), with the reason, instead of the deletion study stopping there."""
    cfg, before, sets = case
    f, fo = SC.indicators(cfg)
    user = FunctionIndicator(lambda z: fo(z), name="user_original")
    user.pooled = fo.pooled

    def broken(m, c):
        raise RuntimeError("no baseline today")

    sc = dataclasses.replace(SC, baseline_features_fn=broken)
    fast, full = _oracles(sc, cfg, before, f, user)
    with pytest.warns(AumannWarning, match=r"'user_original' could not be checked against f: .*no baseline today"):
        got = np.array(fast.many(sets[:3]))
    assert np.array_equal(got, np.array(full.many(sets[:3])))
    assert "could not be checked" in fast.pooled_fallback


def _cube_right_early(limit: float, late_mean: float):
    """f = mean(z₀)³ declaring ρ(m) = m³ up to m = ``limit`` and m² M beyond, M the later step's mean: right at
    every coalition of an early step (means below the limit), right at the later step itself, wrong at its forks."""
    cube = FunctionIndicator(lambda z: z[..., 0].mean(-1) ** 3, name="cube_late")
    cube.pooled = PooledForm(psi=lambda z: z[..., :1], rho=lambda m: torch.where(
        m[..., 0] <= limit, m[..., 0] ** 3, m[..., 0] ** 2 * late_mean))
    return cube


def test_a_user_form_is_checked_at_every_distinct_step_not_only_the_first():
    """PooledForks keeps one base per factual step, but checked a user's form at the first step only: a form right
    there and wrong at a later step gave that step's fork values off, silently (f = 0.8798 for a full
    evaluation's 0.8696 with 3 rows halved). Now each distinct step gets the check (once per step, not per fork)."""
    rng = np.random.default_rng(3)
    N = 400
    early = np.abs(rng.normal(size=(N, 2))) * 0.2  # mean of z₀ ≈ 0.16
    late = early + 0.8  # ≈ 0.96, beyond the limit
    cube = _cube_right_early(0.5, float(late[:, 0].mean()))
    calls = []
    forks = PooledForks(cube, cube, baseline=lambda: calls.append(1) or np.zeros((N, 2)))
    rows = np.arange(3)
    for _ in range(2):  # the same step twice: checked once, its forks from the sums
        z = early.copy()
        z[rows] = early[rows] * 0.5
        got = forks.values(early, rows, z[rows])
        assert got is not None and got[0] == pytest.approx(float(z[:, 0].mean()) ** 3, rel=1e-12)
    assert calls == [1]
    with pytest.raises(IndicatorError, match="indicator 'cube_late': its pooled form is not f"):
        forks.values(late, rows, late[rows] * 0.5)
