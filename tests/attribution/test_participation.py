"""The diagonal Aumann–Shapley value of a participation game (kink-aware adaptive quadrature)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from aumann.attribution import DiagonalIntegral, ExactShapley, FunctionGame, diagonal_path_integral
from aumann.errors import IndicatorError, MethodError


def _shapley(v, n):
    """Exact Shapley of the game S ↦ v(1_S) (enumeration, via the library's ExactShapley)."""
    game = FunctionGame(lambda m: v(torch.as_tensor(m, dtype=torch.float64)).numpy(), n_players=n)
    return ExactShapley().attribute_game(game).phi[0]


def test_multilinear_game_equals_exact_shapley(rng):
    # v(λ) = Σ w_i λ_i + Σ_{i<j} c_ij λ_i λ_j + c_012 λ_0 λ_1 λ_2: multilinear, so the diagonal
    # Aumann–Shapley value is the Shapley value (Owen 1972): w_i + ½ Σ_j c_ij + ⅓ c_012 [i ≤ 2]
    n = 6
    w = torch.as_tensor(rng.normal(size=n))
    c = torch.as_tensor(np.triu(rng.normal(size=(n, n)), 1))

    def v(lam):
        return lam @ w + torch.einsum("bi,ij,bj->b", lam, c, lam) + 0.7 * lam[:, 0] * lam[:, 1] * lam[:, 2]

    res = diagonal_path_integral(v, n, steps=4)
    closed = (w + 0.5 * (c + c.T).sum(1)).numpy() + np.array([0.7 / 3] * 3 + [0.0] * 3)
    np.testing.assert_allclose(res.phi, closed, atol=1e-12)
    np.testing.assert_allclose(res.phi, _shapley(v, n), atol=1e-12)
    assert res.efficiency_gap < 1e-12 and res.converged and res.grad_evals == 4


def test_a_game_that_is_not_multilinear_differs_from_shapley_and_stays_efficient():
    # v = (Σ_i w_i λ_i)³ (not multilinear: λ_i² and λ_i³ terms): φ_i^AS = w_i W² with W = Σ w; the
    # Shapley value of S ↦ (Σ_S w)³ is a different efficient split of the same Δv = W³
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    W = float(w.sum())

    def v(lam):
        return (lam @ w) ** 3

    res = diagonal_path_integral(v, 3, steps=3)
    np.testing.assert_allclose(res.phi, (w * W**2).numpy(), atol=1e-10)
    sh = _shapley(v, 3)
    assert sh.sum() == pytest.approx(res.phi.sum())
    assert np.abs(sh - res.phi).max() > 0.1  # genuinely different values of the same game


def test_kinks_are_located_and_put_on_panel_boundaries():
    a = torch.tensor([0.5, 2.0, 4.0, -3.0], dtype=torch.float64)  # clamp(a_i λ, -1, 1) kinks at 1/|a_i|

    def inner(lam):
        return torch.clamp(a * lam, -1.0, 1.0)

    def v(lam):
        s = inner(lam).sum(-1)
        return s + 0.3 * s**2

    def switches(lam):
        x = a * lam
        return torch.cat([x - 1.0, x + 1.0], dim=-1)

    plain = diagonal_path_integral(v, 4, steps=8)
    kinked = diagonal_path_integral(v, 4, steps=8, switches=switches, tol=1e-12)
    np.testing.assert_allclose(np.sort(kinked.kinks), [0.25, 1 / 3, 0.5], atol=1e-12)
    assert kinked.relative_efficiency_gap < 1e-12 < plain.relative_efficiency_gap
    # reference: the same integral by a dense midpoint rule whose cells end on the kinks (multiples of 1/12)
    taus = (np.arange(120_000) + 0.5) / 120_000
    lam = torch.as_tensor(taus)[:, None].expand(-1, 4).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(v(lam).sum(), lam)
    np.testing.assert_allclose(kinked.phi, g.mean(0).numpy(), atol=1e-8)


def test_adaptive_refinement_meets_the_budget_on_a_kink_it_was_not_told_about():
    def v(lam):
        return torch.relu(lam.sum(-1) - 1.3) + 0.1 * lam.sum(-1) ** 2

    res = diagonal_path_integral(v, 3, steps=8, tol=1e-9)
    assert res.converged and res.relative_efficiency_gap <= 1e-9
    assert len(res.panels) > 2 and res.history[0][1] > res.history[-1][1]
    # φ is symmetric and sums to Δv = v(1) − v(0)
    np.testing.assert_allclose(res.phi, res.phi[0], atol=1e-9)
    assert res.delta_v == pytest.approx(1.7 + 0.9)


def test_budget_exhaustion_and_a_jump_at_the_origin_are_reported_not_hidden():
    def v(lam):  # v(0) = 0 but v(τ·1) → 1 as τ → 0+: no derivative integral can see the jump
        s = lam.sum(-1)
        return torch.where(s > 0, 1.0 + s, torch.zeros_like(s))

    res = diagonal_path_integral(v, 2, steps=4, tol=1e-6, max_evals=64)
    assert not res.converged
    assert res.relative_efficiency_gap == pytest.approx(1 / 3, rel=1e-6)  # Σφ = 2 of Δv = 3


@pytest.mark.parametrize("kw", [dict(steps=0), dict(tol=0.0), dict(max_evals=0), dict(rule="simpson")])
def test_bad_parameters_are_method_errors(kw):
    with pytest.raises(MethodError):
        diagonal_path_integral(lambda lam: lam.sum(-1), 2, **kw)


def test_a_value_without_gradient_or_with_a_wrong_shape_is_an_indicator_error():
    with pytest.raises(IndicatorError, match="no gradient"):
        diagonal_path_integral(lambda lam: lam.sum(-1).detach(), 2)
    with pytest.raises(IndicatorError, match="leading dimension"):
        diagonal_path_integral(lambda lam: lam.sum(), 2)
    with pytest.raises(IndicatorError, match="NaN"):
        diagonal_path_integral(lambda lam: torch.log(lam.sum(-1) - 5.0), 2)


def test_result_type_and_every_point_is_counted():
    res = diagonal_path_integral(lambda lam: (lam**2).sum(-1), 3, steps=5)
    assert isinstance(res, DiagonalIntegral)
    assert res.grad_evals == 5 and res.value_evals == 2  # the two ends
    np.testing.assert_allclose(res.phi, [1.0, 1.0, 1.0], atol=1e-12)
    assert list(itertools.pairwise(res.panels)) == [(0.0, 1.0)]
