"""Appendix A worked examples, exactly (closed forms and path integral)."""

from fractions import Fraction

import numpy as np
import pytest

from aumann.attribution import AumannShapley, Panel, attribute, indicators

Z = Panel(np.array([[1.0], [1.0], [2.0]]), agent_ids=[1, 2, 3])
S = Z.subset([1, 3])
METHODS = [None, AumannShapley(steps=8, closed_form=False)]


def best_scalar(small, full):
    c = float(small @ full / (full @ full))
    return c, float(np.linalg.norm(small - c * full) / np.linalg.norm(small))


@pytest.mark.parametrize("method", METHODS, ids=["closed", "path"])
def test_quadratic_counterexample(method):
    f = indicators.get("pairwise")
    full = attribute(f, Z, method=method)
    np.testing.assert_allclose(full.phi[0], [1 / 6, 1 / 6, 2 / 9], atol=1e-15)
    assert full.delta_v[0] == pytest.approx(5 / 9, abs=1e-15)
    np.testing.assert_allclose(full.shares()[0], [3 / 10, 3 / 10, 4 / 10], atol=1e-15)
    sub = attribute(f, S, method=method)
    np.testing.assert_allclose(sub.phi[0], [1 / 4, 1 / 4], atol=1e-15)
    assert sub.delta_v[0] == pytest.approx(1 / 2, abs=1e-15)
    np.testing.assert_allclose(sub.shares()[0], [1 / 2, 1 / 2], atol=1e-15)
    demanded = sub.shares()[0] / full.shares()[0][[0, 2]]
    assert Fraction(demanded[0]).limit_denominator(100) == Fraction(5, 3)
    assert Fraction(demanded[1]).limit_denominator(100) == Fraction(5, 4)
    _, eps = best_scalar(sub.shares()[0], full.shares()[0][[0, 2]])
    assert eps > 0.05


@pytest.mark.parametrize("method", METHODS, ids=["closed", "path"])
def test_variance_remark(method):
    f = indicators.get("var")
    full = attribute(f, Z, method=method)
    np.testing.assert_allclose(full.phi[0], [-1 / 9, -1 / 9, 4 / 9], atol=1e-15)
    assert full.delta_v[0] == pytest.approx(2 / 9, abs=1e-15)
    np.testing.assert_allclose(full.shares()[0][[0, 2]], [-1 / 2, 2], atol=1e-14)
    sub = attribute(f, S, method=method)
    np.testing.assert_allclose(sub.phi[0], [-1 / 4, 1 / 2], atol=1e-15)
    assert sub.delta_v[0] == pytest.approx(1 / 4, abs=1e-15)
    np.testing.assert_allclose(sub.shares()[0], [-1, 2], atol=1e-14)
    np.testing.assert_allclose(sub.shares()[0] / full.shares()[0][[0, 2]], [2, 1], atol=1e-13)


def test_linear_indicator_reconciles_with_one_scalar(rng):
    """Theorem 1 (i): for lin, the subset shares are a rescaling of the full shares (ε = 0)."""
    panel = Panel(np.abs(rng.normal(size=(200, 3))))
    ids = rng.choice(200, size=20, replace=False)
    full = attribute(indicators.get("lin"), panel).shares()[0]
    sub = attribute(indicators.get("lin"), panel.subset(ids)).shares()[0]
    _, eps = best_scalar(sub, full[panel.agent_index(ids)])
    assert eps < 1e-12
    _, eps_var = best_scalar(attribute(indicators.get("var"), panel.subset(ids)).shares()[0],
                             attribute(indicators.get("var"), panel).shares()[0][panel.agent_index(ids)])
    assert eps_var > 1e-3
