"""Quadrature, substitution, adaptive K, baselines, alive masks, context and error paths."""

import numpy as np
import pytest
import torch

from aumann.attribution import AumannShapley, Panel, attribute, indicators, quadrature
from aumann.errors import BaselineError, ClosedFormUnavailable, IndicatorError, MethodError


@pytest.mark.parametrize("rule", ["gauss-legendre", "midpoint"])
@pytest.mark.parametrize("power", [1.0, 4.0])
def test_quadrature_integrates_polynomials(rule, power):
    nodes, w = quadrature(40, rule, power)
    assert np.all((nodes > 0) & (nodes < 1))
    assert w.sum() == pytest.approx(1.0, abs=5e-3 if rule == "midpoint" else 1e-12)
    assert (w * nodes**2).sum() == pytest.approx(1 / 3, abs=5e-3 if rule == "midpoint" else 1e-12)


def _heat_curve_third_derivative(z: np.ndarray) -> float:
    """sup over τ of |g'''(τ)| for g(τ) = f_heat(τ z): h = g' is the integrand of Σ_i φ_i."""
    h = float(np.prod(z.mean(axis=0)))
    tau = torch.linspace(0, 1, 4001, dtype=torch.float64, requires_grad=True)
    g = torch.log1p(tau**3 * h)
    (d1,) = torch.autograd.grad(g.sum(), tau, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), tau, create_graph=True)
    (d3,) = torch.autograd.grad(d2.sum(), tau)
    return float(d3.abs().max())


def test_midpoint_error_decays_as_one_over_k_squared_and_respects_bound(rng):
    z = np.abs(rng.normal(size=(1, 500, 3))) * 2
    panel = Panel(z)
    exact = attribute(indicators.get("heat"), panel)
    errors, gaps = [], []
    for k in (5, 10, 20, 40, 80):
        res = attribute(indicators.get("heat"), panel, method=AumannShapley(steps=k, rule="midpoint",
                                                                             closed_form=False))
        errors.append(np.abs(res.phi - exact.phi).sum() / np.abs(exact.phi).sum())
        gaps.append(res.max_efficiency_gap)
        bound = _heat_curve_third_derivative(z[0]) / (24 * k**2)
        assert res.max_efficiency_gap <= bound
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, 4.0, rtol=0.05)  # halving h divides the error by 4


def test_gauss_legendre_efficiency_gap_tiny(rng):
    panel = Panel(np.abs(rng.normal(size=(3, 300, 3))))
    res = attribute(indicators.get("heat"), panel, method=AumannShapley(steps=30, closed_form=False))
    assert (res.efficiency_gap / np.abs(res.delta_v)).max() <= 1e-12


def test_substitution_power_helps_log_type_integrands(rng):
    z = torch.as_tensor(np.abs(rng.normal(size=(1, 200, 3))))

    def logmean(x):  # sharp near τ = 0, like the DeepSet log-mean channel (Appendix Q)
        return torch.log(x.mean(dim=-2) + 1e-8).sum(dim=-1)

    plain = attribute(logmean, Panel(z), method=AumannShapley(steps=30, rule="midpoint"))
    sub = attribute(logmean, Panel(z), method=AumannShapley(steps=30, rule="midpoint", power=4))
    assert sub.relative_efficiency_gap.max() < 0.2 * plain.relative_efficiency_gap.max()


def test_adaptive_mode_raises_k_until_tolerance(rng):
    panel = Panel(np.abs(rng.normal(size=(1, 100, 3))) * 3)
    res = attribute(indicators.get("heat"), panel,
                    method=AumannShapley(steps=2, rule="midpoint", tol=1e-6, closed_form=False))
    hist = res.provenance["adaptive_history"]
    assert res.provenance["converged"] and hist[-1][1] <= 1e-6 and len(hist) > 2
    assert [k for k, _ in hist] == [2 * 2**i for i in range(len(hist))]


def test_baselines(rng):
    z = np.abs(rng.normal(size=(4, 30, 3)))
    panel = Panel(z)
    f = indicators.get("heat")
    prev = attribute(f, panel, baseline="previous")
    assert prev.provenance["closed_form"] is False
    np.testing.assert_allclose(prev.by_step()[1:], np.diff(prev.f_values), atol=1e-12)
    assert np.all(prev.phi[0] == 0)
    mean = attribute(f, panel, baseline="mean")
    np.testing.assert_allclose(mean.f_baseline, f(torch.as_tensor(z.reshape(-1, 3).mean(0))[None, None]
                                                  .expand(1, 30, 3)).item(), rtol=1e-12)
    pre = attribute(f, panel, baseline="pre-event")
    assert np.abs(pre.phi[0]).max() == 0
    for arr in (np.ones(3), np.ones((30, 3)), np.ones((4, 30, 3))):
        assert attribute(f, panel, baseline=arr).max_efficiency_gap < 1e-10
    with pytest.raises(BaselineError, match=r"\(D,\)"):
        attribute(f, panel, baseline=np.ones(5))
    with pytest.raises(BaselineError, match="unknown baseline"):
        attribute(f, panel, baseline="median")
    with pytest.raises(ClosedFormUnavailable, match="zero baseline"):
        attribute(f, panel, baseline="mean", method=AumannShapley(closed_form=True))


def test_dead_agents_get_zero_and_hold_the_baseline(rng):
    z = np.abs(rng.normal(size=(3, 10, 3)))
    alive = np.ones((3, 10), dtype=bool)
    alive[1, 4] = alive[2, 7] = False
    z[1, 4] = np.nan  # dead rows may hold anything
    res = attribute(indicators.get("var"), Panel(z, alive=alive))
    assert res.phi[1, 4] == 0 and res.phi[2, 7] == 0
    assert res.max_efficiency_gap < 1e-12


def test_context_is_passed_and_held_fixed(rng):
    z = np.abs(rng.normal(size=(3, 8, 2)))
    price = np.array([1.0, 2.0, 3.0])

    def spend(x, context):
        return context["price"] * x.sum(dim=(-1, -2))

    res = attribute(spend, Panel(z, context={"price": price}))
    np.testing.assert_allclose(res.phi, price[:, None] * z.sum(2), atol=1e-12)


def test_indicator_errors(rng):
    panel = Panel(np.abs(rng.normal(size=(2, 5, 3))))
    with pytest.raises(IndicatorError, match="returned shape"):
        attribute(lambda z: z.sum(-1), panel)
    with pytest.raises(IndicatorError, match="no gradient"):
        attribute(lambda z: z.sum((-1, -2)).detach(), panel)
    with pytest.raises(IndicatorError, match="NaN"):
        attribute(lambda z: torch.log(z.sum((-1, -2)) - 1e6), panel)
    with pytest.raises(MethodError):
        AumannShapley(steps=0)
    with pytest.raises(MethodError):
        attribute("heat", panel, method="closed")


def test_dummy_function_of_nothing_gives_zero(rng):
    res = attribute(lambda z: z.sum((-1, -2)) * 0 + 1.0, Panel(np.ones((4, 2))))
    assert np.all(res.phi == 0) and res.delta_v[0] == 0


def test_float32_panel_computes_in_float32(rng):
    panel = Panel(np.abs(rng.normal(size=(2, 100, 3))).astype(np.float32))
    res = attribute(indicators.get("heat"), panel, method=AumannShapley(closed_form=False))
    assert res.provenance["dtype"] == "float32"
    assert res.relative_efficiency_gap.max() < 1e-5


def test_large_batches_chunk_within_memory_budget(rng):
    panel = Panel(np.abs(rng.normal(size=(3, 2000, 3))))
    small = attribute(indicators.get("heat"), panel,
                      method=AumannShapley(steps=7, closed_form=False, memory_budget=100_000))
    big = attribute(indicators.get("heat"), panel, method=AumannShapley(steps=7, closed_form=False))
    np.testing.assert_allclose(small.phi, big.phi, rtol=1e-12, atol=1e-18)
