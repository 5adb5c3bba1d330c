"""ε of the best scalar rescaling (Theorem 1) and the exact residual law for f_var (Proposition 2).

References: the paper's N = 3 examples (Appendix A.3) as exact numbers, the engine's attributions
on random subsets, and the residual law computed from raw features only.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aumann.attribution import AumannShapley, Panel, attribute, indicators
from aumann.errors import ShapeError, ZeroDeltaVError
from aumann.studies.crossscale.residual import best_scalar, residual_law_var
from tests.oracles import closed_form_phi


def _shares(name: str, z: np.ndarray, method=None) -> np.ndarray:
    res = attribute(indicators.get(name), Panel(z[None]), method=method)
    return res.shares()[0]


@pytest.mark.parametrize("method", [None, AumannShapley(steps=8, closed_form=False)])
def test_quadratic_counterexample_numbers(method) -> None:
    z = np.array([[1.0], [1.0], [2.0]])
    full = _shares("pairwise", z, method)
    np.testing.assert_allclose(full, [3 / 10, 3 / 10, 4 / 10], atol=1e-12)
    sub = _shares("pairwise", z[[0, 2]], method)
    np.testing.assert_allclose(sub, [1 / 2, 1 / 2], atol=1e-12)
    demanded = sub / full[[0, 2]]
    np.testing.assert_allclose(demanded, [5 / 3, 5 / 4], atol=1e-12)
    assert best_scalar(sub, full[[0, 2]])[1] > 0.05


def test_var_remark_numbers() -> None:
    z = np.array([[1.0], [1.0], [2.0]])
    full = _shares("var", z)
    np.testing.assert_allclose(full, [-1 / 2, -1 / 2, 2], atol=1e-12)
    sub = _shares("var", z[[0, 2]])
    np.testing.assert_allclose(sub, [-1, 2], atol=1e-12)
    np.testing.assert_allclose(sub / full[[0, 2]], [2, 1], atol=1e-12)
    _, eps = best_scalar(sub, full[[0, 2]])
    assert eps == pytest.approx(residual_law_var(np.array([1.0, 2.0]), 4 / 3), abs=1e-12)
    assert eps > 0.1


@settings(max_examples=25, deadline=None)
@given(n=st.integers(5, 300), k=st.integers(2, 5), seed=st.integers(0, 2**31 - 1))
def test_lin_residual_is_zero_on_any_subset(n: int, k: int, seed: int) -> None:
    """Theorem 1 (i): a linear indicator is reconciled by one scalar, ε at float precision."""
    rng = np.random.default_rng(seed)
    z = np.abs(rng.normal(size=(n, 3))) * rng.random((n, 1))
    full = _shares("lin", z)
    idx = np.sort(rng.choice(n, size=min(k, n), replace=False))
    sub = _shares("lin", z[idx])
    c, eps = best_scalar(sub, full[idx])
    assert eps <= 1e-10
    assert c == pytest.approx(z.sum() / z[idx].sum(), rel=1e-10)  # Eq. (linear-c)


@pytest.mark.parametrize("name", ["heat", "var", "gini"])
def test_nonlinear_residual_positive_on_biased_subset(name: str, rng) -> None:
    z = np.abs(rng.normal(size=(2000, 3)))
    g = z.sum(1)
    idx = np.argsort(-g)[:50]  # a pool with a mean shift
    full = _shares(name, z)
    sub = _shares(name, z[idx])
    assert best_scalar(sub, full[idx])[1] > 1e-3


def test_residual_law_matches_measured_on_random_and_biased_subsets(rng) -> None:
    n = 5000
    z = np.abs(rng.lognormal(0.0, 1.0, size=(n, 3))) * (rng.random((n, 3)) < 0.4)
    full = _shares("var", z)
    g = z.sum(1)
    worst = 0.0
    for trial in range(40):
        size = int(rng.integers(2, 800))
        if trial % 2:
            idx = np.sort(rng.choice(n, size=size, replace=False))
        else:
            idx = np.sort(rng.choice(np.argsort(-g)[:1000], size=size, replace=False))
        if np.ptp(g[idx]) == 0:
            continue
        _, eps = best_scalar(_shares("var", z[idx]), full[idx])
        worst = max(worst, abs(eps - residual_law_var(g[idx], g.mean())))
    assert worst <= 1e-8


def test_closed_form_reference_agrees_with_engine(rng) -> None:
    z = np.abs(rng.normal(size=(400, 3)))
    z_tied = z.copy()
    z_tied[:40] = z_tied[40:80]  # 40 pairs of identical agents: gini's ranks must be average ranks
    for name in ("lin", "heat", "var", "gini"):
        for zz in (z, z_tied):
            np.testing.assert_allclose(closed_form_phi(name, zz), attribute(indicators.get(name), Panel(zz)).phi[0],
                                       rtol=1e-10, atol=1e-14)


def test_errors() -> None:
    with pytest.raises(ShapeError):
        best_scalar(np.ones(3), np.ones(4))
    with pytest.raises(ZeroDeltaVError):
        best_scalar(np.zeros(3), np.ones(3))
    with pytest.raises(ZeroDeltaVError):
        residual_law_var(np.ones(4), 1.0)
