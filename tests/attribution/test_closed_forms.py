"""Closed forms (Appendix F) against the autograd path integral at K = 300 (Table synthetic-accuracy)."""

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from aumann.attribution import AumannShapley, Panel, attribute, indicators
from aumann.attribution.indicators import average_ranks
from aumann.attribution.streaming import _THREADED

NAMES = ["lin", "heat", "var", "gini", "pairwise"]


#: the largest N: the smallest size at which the five seeds' closed forms of lin and heat read T·N·D = 5·N·3
#: ≥ 2¹⁸ values, the threshold (aumann.attribution.streaming._THREADED) from which their column sums and
#: weighted rows are split into block tasks for the thread pool -- the last size-dependent path that N = 10⁵
#: reached here (the autograd side cuts each step's K = 300 points into chunks from N = 10⁴ on, under the
#: 256 MiB host budget; steps split into parts only from N = 2¹⁸; batching and threading are pinned bit for bit
#: by test_path_batching.py and test_streaming.py). The agreement measured does not depend on N: mean |Δφ|
#: relative to mean |φ| is ~1e-15 (heat: 1.1e-6, its midpoint error) and the relative efficiency gap
#: ≤ 1.2e-15 at N = 10⁴, 2·10⁴ and 10⁵ alike, while N = 10⁵ cost ~100 s of a 2-core CI's suite.
LARGEST_N = 20_000


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [10, 100, 1000, 10_000, LARGEST_N])
def test_closed_form_matches_autograd_path_integral(name, n):
    f = indicators.get(name)
    # five seeds, stacked as five steps of one panel (steps are attributed independently)
    z = np.stack([np.abs(np.random.default_rng([seed, n]).normal(size=(n, 3))) for seed in range(5)])
    if n == LARGEST_N:  # the threaded closed-form path (see LARGEST_N) is reached
        assert z.size >= _THREADED
    panel = Panel(z, features=["a", "b", "c"])  # |N(0, I3)| features
    closed = attribute(f, panel)
    assert closed.provenance["closed_form"] is True
    # the paper's rule (midpoint, K = 300); Gauss-Legendre is checked in test_per_feature_closed_form...
    path = attribute(f, panel, method=AumannShapley(steps=300, rule="midpoint", closed_form=False,
                                                    pooled_fast_path=False))
    assert path.provenance["integrator"] == "autograd"
    assert np.abs(path.phi - closed.phi).mean(axis=1).max() <= 1e-7
    for seed in range(5):
        assert spearmanr(path.phi[seed], closed.phi[seed]).statistic == pytest.approx(1.0)
    rel = closed.efficiency_gap / np.abs(closed.delta_v)
    assert rel.max() <= 1e-12
    np.testing.assert_allclose(closed.f_values, f(torch.as_tensor(z)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_per_feature_closed_form_matches_path(name, rng):
    panel = Panel(np.abs(rng.normal(size=(3, 40, 4))))
    closed = attribute(indicators.get(name), panel, per_feature=True)
    path = attribute(indicators.get(name), panel, method=AumannShapley(steps=64, closed_form=False,
                                                                        pooled_fast_path=False), per_feature=True)
    np.testing.assert_allclose(closed.phi_features, path.phi_features, atol=1e-10)
    np.testing.assert_allclose(closed.phi_features.sum(2), closed.phi, atol=1e-14)


def test_heat_small_h_limit_is_continuous():
    z = np.full((1, 5, 3), 1e-5)
    res = attribute(indicators.get("heat"), Panel(z))
    path = attribute(indicators.get("heat"), Panel(z), method=AumannShapley(steps=20, closed_form=False))
    np.testing.assert_allclose(res.phi, path.phi, rtol=1e-9)


def test_gini_ties_get_equal_attribution():
    z = np.array([[[1.0], [2.0], [2.0], [3.0]]])
    res = attribute(indicators.get("gini"), Panel(z))
    assert res.phi[0, 1] == res.phi[0, 2]
    assert res.max_efficiency_gap < 1e-15
    np.testing.assert_allclose(average_ranks(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1.0, 3.5, 2.0])


@pytest.mark.parametrize("name", ["lin", "heat", "var", "gini", "pairwise"])
def test_gradcheck_float64(name, rng):
    f = indicators.get(name)
    z = torch.tensor(np.abs(rng.normal(size=(2, 6, 3))) + 0.1, requires_grad=True)
    assert torch.autograd.gradcheck(f, (z,))
    if name != "gini":  # gini is piecewise linear in g: its second derivative is zero a.e.
        assert torch.autograd.gradgradcheck(f, (z,))


@pytest.mark.parametrize("name", ["lin", "heat"])
@pytest.mark.parametrize("baseline", ["zero", "mean", "pre-event", "previous", "array"])
@pytest.mark.parametrize("rule", ["gauss-legendre", "midpoint"])
def test_pooled_linear_fast_path_equals_autograd(name, baseline, rule, rng):
    z = np.abs(rng.normal(size=(3, 60, 3)))
    base = np.abs(rng.normal(size=(60, 3))) * 0.3 if baseline == "array" else baseline
    kw = {"steps": 13, "rule": rule, "closed_form": False}
    fast = attribute(indicators.get(name), Panel(z), baseline=base, method=AumannShapley(**kw), per_feature=True)
    slow = attribute(indicators.get(name), Panel(z), baseline=base, per_feature=True,
                     method=AumannShapley(**kw, pooled_fast_path=False))
    assert fast.provenance["integrator"] == "pooled-linear" and slow.provenance["integrator"] == "autograd"
    np.testing.assert_allclose(fast.phi_features, slow.phi_features, rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------ a user's declared closed form, spot-checked
class _SquaredMean(indicators.Indicator):
    """f = (mean_i g_i)², g_i = Σ_d z_{i,d}; its zero-baseline Aumann–Shapley value is φ_i = g_i ḡ / n. ``split``
    declares a wrong but efficient closed form instead: equal shares of f (Σ_i φ = Δv, no gap to see)."""

    name = "squared_mean"
    has_closed_form = True

    def __init__(self, split=False):
        self.split = split

    def forward(self, z, context=None):
        return z.sum(-1).mean(-1) ** 2

    def closed_form(self, values, *, per_feature=False):
        g = values.sum(-1)
        n = values.shape[1]
        f = g.mean(-1) ** 2
        w = np.repeat((f / n)[:, None], n, axis=1) / np.where(g == 0, 1, g) if self.split else (g.mean(-1) / n)[:, None]
        return (values * w[..., None] if per_feature else g * w), f, np.zeros_like(f)


@pytest.mark.parametrize("shape", [(1, 6, 2), (3, 500, 3)], ids=["whole_panel", "sampled_agents"])
def test_a_wrong_but_efficient_closed_form_is_refused(shape):
    """An efficient closed form that is not the path integral (equal shares of f) was used as φ — 0.2952 for every
    agent where the path integral gives 0.1016 … 0.5437 — with an efficiency gap of 2e-16, silently. It is now
    checked against the autograd path integral on the whole panel when small (T·N ≤ 64), else on 64 seeded agents of
    one seeded step as a panel of their own; the right closed form passes and equals the path integral."""
    z = np.abs(np.random.default_rng(0).normal(size=shape)) + 0.1
    with pytest.raises(indicators.IndicatorError, match=r"the closed form of indicator 'squared_mean' is not its "
                                                        r"Aumann–Shapley value: at step \d+, agent \d+ it gives φ = "):
        attribute(_SquaredMean(split=True), Panel(z))
    res = attribute(_SquaredMean(), Panel(z), per_feature=True)
    ref = attribute(_SquaredMean(), Panel(z), method=AumannShapley(closed_form=False))
    np.testing.assert_allclose(res.phi, ref.phi, rtol=1e-12)  # the independent reference: autograd quadrature
    g = z.sum(-1)
    np.testing.assert_allclose(res.phi, g * g.mean(-1, keepdims=True) / shape[1], rtol=1e-12)
    check = res.provenance["closed_form_check"]
    assert check["agents"] == min(64, shape[1]) and check["max_abs_diff"] <= check["tolerance"] < 1e-4


def test_a_surrogate_of_the_users_own_indicator_is_checked_like_it():
    """A Surrogate counted as aumann's own code (its class is aumann's), so a wrong closed form of the user's smooth
    indicator inside one skipped the spot check and was used silently; aumann's own surrogates stay trusted."""
    from aumann.attribution.smoothing import Surrogate, max_surrogate

    z = np.abs(np.random.default_rng(1).normal(size=(2, 300, 2))) + 0.1
    wrapped = Surrogate(lambda z: z.sum(-1).mean(-1) ** 2, _SquaredMean(split=True), "squared_mean~")
    assert not indicators.aumanns_own(wrapped) and indicators.aumanns_own(max_surrogate())
    with pytest.raises(indicators.IndicatorError, match=r"the closed form of indicator 'squared_mean~' is not its"):
        attribute(wrapped, Panel(z))
    right = attribute(Surrogate(lambda z: z.sum(-1).mean(-1) ** 2, _SquaredMean(), "squared_mean~"), Panel(z))
    g = z.sum(-1)
    np.testing.assert_allclose(right.phi, g * g.mean(-1, keepdims=True) / z.shape[1], rtol=1e-12)
    assert "closed_form_check" in right.provenance


def test_a_closed_form_of_an_indicator_with_a_kink_on_the_path_is_not_a_false_alarm():
    """f = mean_i max(g_i − c, 0) has a kink on every agent's path (τ = c / g_i), where quadrature converges only
    slowly; its closed form φ_i = max(g_i − c, 0) / n (separable) is right and must pass: the tolerance includes
    the integral's own quadrature error, |I_K − I_2K|."""
    class Hinge(indicators.Indicator):
        name = "hinge"
        has_closed_form = True

        def forward(self, z, context=None):
            return torch.relu(z.sum(-1) - 1.0).mean(-1)

        def closed_form(self, values, *, per_feature=False):
            g = values.sum(-1)
            phi = np.maximum(g - 1.0, 0) / values.shape[1]
            return (values * (phi / g)[..., None] if per_feature else phi), phi.sum(-1), np.zeros(values.shape[0])

    z = np.abs(np.random.default_rng(1).normal(size=(2, 300, 2))) + 0.2
    res = attribute(Hinge(), Panel(z))
    assert "max_abs_diff" in res.provenance["closed_form_check"]


def test_a_closed_form_check_that_cannot_run_is_recorded_not_raised():
    """An indicator whose forward has no gradient (numpy inside) but whose closed form is right: the check cannot
    integrate it, so it records why in the provenance and the closed form is used as before."""
    class NoGrad(_SquaredMean):
        def forward(self, z, context=None):
            return torch.as_tensor(z.detach().numpy().sum(-1).mean(-1) ** 2)

    z = np.abs(np.random.default_rng(0).normal(size=(2, 100, 2))) + 0.1
    res = attribute(NoGrad(), Panel(z))
    assert "no gradient" in res.provenance["closed_form_check"]["skipped"]
    g = z.sum(-1)
    np.testing.assert_allclose(res.phi, g * g.mean(-1, keepdims=True) / 100, rtol=1e-12)


def test_aumanns_own_closed_forms_do_not_pay_for_the_check(monkeypatch):
    from aumann.attribution import path

    def refuse(problem):
        raise AssertionError(f"checked {problem.f.name}")

    monkeypatch.setattr(path, "_check_closed_form", refuse)
    z = np.abs(np.random.default_rng(0).normal(size=(2, 100, 3)))
    combos = [indicators.get("lin") + 2 * indicators.get("heat"), indicators.get("var") - indicators.get("gini")]
    for f in [*NAMES, *combos]:
        res = attribute(f, Panel(z))
        assert res.provenance["closed_form"] and "closed_form_check" not in res.provenance
    with pytest.raises(AssertionError, match="checked squared_mean"):
        attribute(_SquaredMean(), Panel(z))


def test_the_closed_form_check_is_saved_with_the_result(tmp_path):
    """The check's record names its step in a form a saved result keeps (a date step was written as the text
    'datetime.date(2026, 1, 2)')."""
    from aumann.attribution.result import Attribution

    z = np.abs(np.random.default_rng(0).normal(size=(3, 100, 2)))
    steps = np.array(["2026-01-01", "2026-01-02", "2026-01-03"], dtype="datetime64[D]")
    res = attribute(_SquaredMean(), Panel(z, steps=steps))
    back = Attribution.load(res.save(tmp_path / "a.npz")).provenance["closed_form_check"]
    assert back == res.provenance["closed_form_check"] and back["step"] in {"2026-01-01", "2026-01-02", "2026-01-03"}
