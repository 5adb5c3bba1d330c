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
