"""Closed forms (Appendix F) against the autograd path integral at K = 300 (Table synthetic-accuracy)."""

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from aumann.attribution import AumannShapley, Panel, attribute, indicators
from aumann.attribution.indicators import average_ranks

NAMES = ["lin", "heat", "var", "gini", "pairwise"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [10, 100, 1000, 10_000, 100_000])
def test_closed_form_matches_autograd_path_integral(name, n):
    f = indicators.get(name)
    # five seeds, stacked as five steps of one panel (steps are attributed independently)
    z = np.stack([np.abs(np.random.default_rng([seed, n]).normal(size=(n, 3))) for seed in range(5)])
    panel = Panel(z, features=["a", "b", "c"])  # |N(0, I3)| features
    closed = attribute(f, panel)
    assert closed.provenance["closed_form"] is True
    # the paper's rule (midpoint, K = 300); Gauss-Legendre is checked in test_per_feature_closed_form...
    path = attribute(f, panel, method=AumannShapley(steps=300, rule="midpoint", closed_form=False))
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
    path = attribute(indicators.get(name), panel, method=AumannShapley(steps=64, closed_form=False),
                     per_feature=True)
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
