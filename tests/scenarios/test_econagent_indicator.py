"""EconAgent's macro-pressure indicator: C², reduction to the original, reference values, attribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import AumannShapley, attribute
from aumann.errors import IndicatorError
from aumann.scenarios.econagent.indicator import (
    CONTEXT,
    FEATURES,
    MacroPressure,
    baseline_features,
    smoothing_gap,
)
from aumann.scenarios.econagent.scenario import EconAgentConfig, run_panel
from aumann.simulators import indicator_values


@pytest.fixture(scope="module")
def panel():
    return run_panel(EconAgentConfig(agents=10, steps=36), rng=0)


def _small_input(rng: np.random.Generator, batch: int = 2, n: int = 3):
    z = np.empty((batch, n, len(FEATURES)))
    z[..., 0] = rng.uniform(0.2, 1.5, (batch, n))  # consumption
    z[..., 1] = rng.uniform(0.0, 1.5, (batch, n))  # income
    z[..., 2] = rng.uniform(0.1, 0.9, (batch, n))  # consumption rate
    z[..., 3] = rng.uniform(0.1, 0.9, (batch, n))  # investment rate
    z[..., 4] = rng.uniform(0.0, 168.0, (batch, n))  # labour hours
    z[..., 5] = rng.uniform(-0.5, 0.5, (batch, n))  # saving rate
    z[..., 6] = rng.uniform(0.5, 3.0, (batch, n))  # wealth
    ctx = {"price": torch.tensor([0.004, 0.006], dtype=torch.float64),
           "stock": torch.tensor([20.0, 0.0], dtype=torch.float64),
           "wage_scale": torch.tensor([1.0, 1.3], dtype=torch.float64),
           "inflation_prev": torch.tensor([0.01, -0.02], dtype=torch.float64),
           "vol_prev": torch.tensor([1e-4, 3e-4], dtype=torch.float64)}
    return torch.tensor(z, dtype=torch.float64, requires_grad=True), ctx


def test_surrogate_is_c2_gradcheck_gradgradcheck(rng):
    z, ctx = _small_input(rng)
    for tau in (0.05, 0.2):  # the default temperature and a blunter one
        f = MacroPressure(tau=tau)
        assert torch.autograd.gradcheck(lambda x, f=f: f(x, ctx), (z,), eps=1e-6, atol=1e-5)
        assert torch.autograd.gradgradcheck(lambda x, f=f: f(x, ctx), (z,), eps=1e-6, atol=1e-5)


def _reference_original(z: np.ndarray, ctx: dict[str, float], *, kappa=0.1, target=0.1, lam=0.94) -> float:
    """The non-smooth indicator written out with plain loops (independent of the torch code)."""
    n = z.shape[0]
    C, I, c, x, ell, sig, W = (z[:, k] for k in range(7))
    M, P = ctx["wage_scale"], ctx["price"]
    demand = sum(c[i] * (W[i] + C[i]) / P for i in range(n)) / (168 * n)
    supply = (ctx["stock"] + sum(ell)) / (168 * n)
    E = max(demand - supply, 0.0)
    B = sum(max((C[i] - I[i]) / ((1 - x[i]) * W[i] + C[i] + kappa * M), 0.0) for i in range(n)) / n
    Wbar = sum(W) / n
    K = sum(abs(W[i] - W[j]) for i in range(n) for j in range(n)) / (Wbar + kappa * M) / (2 * n * n)
    U = max(target - sum(sig) / n, 0.0)
    H = (lam * ctx["vol_prev"] + (1 - lam) * (0.05 * (demand - supply) - ctx["inflation_prev"]) ** 2) / 0.05**2
    return (1 + np.log1p(Wbar / M)) * (E + B + K + U + H)


def test_original_matches_a_loop_reference_on_the_recorded_panel(panel):
    fo = indicator_values(MacroPressure(tau=0.05).original(), panel)
    for t in (0, 7, 20, 35):
        ctx = {k: float(panel.context[k][t]) for k in CONTEXT}
        assert fo[t] == pytest.approx(_reference_original(panel.values[t], ctx), rel=1e-12)


def test_excess_demand_reconstructs_the_models_demand_and_supply(panel):
    f = MacroPressure()
    z = torch.as_tensor(panel.values)
    parts = f.parts(z, {k: torch.as_tensor(panel.context[k]) for k in CONTEXT})
    cap = 168.0 * panel.N
    months = np.arange(1, panel.T + 1)
    plain = months % 12 != 0  # year-end months add interest to wealth after shopping
    np.testing.assert_allclose(parts["demand"].numpy()[plain], panel.context["demand"][plain] / cap, rtol=1e-10)
    np.testing.assert_allclose(parts["supply"].numpy(), panel.context["supply"] / cap, rtol=1e-12)


def test_reduces_to_the_original_as_temperature_goes_to_zero(panel):
    gaps = []
    for tau in (0.05, 1e-2, 1e-4, 1e-6):
        rep = smoothing_gap(panel, MacroPressure(tau=tau))
        amp = 1 + np.log1p(panel.feature("wealth").mean(1) / panel.context["wage_scale"])
        bound = amp * tau * (3 * np.log(2) + 0.5)
        assert np.all(rep["abs_gap"] <= bound + 1e-12)
        gaps.append(rep["max_abs_gap"])
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 1e-5


def test_attribution_efficiency_and_all_features_live(panel):
    f = MacroPressure()
    z0 = baseline_features(panel)
    res = attribute(f, panel, method=AumannShapley(steps=256), baseline=z0, per_feature=True)
    rel = res.efficiency_gap / np.maximum(np.abs(res.delta_v), np.abs(res.f_values))
    assert rel.max() <= 1e-6
    assert np.all(res.delta_v > 0), "the baseline action lowers the risk at every step of this run"
    per_feature = np.abs(res.phi_features).sum(axis=(0, 1))
    assert np.all(per_feature > 1e-6 * per_feature.max()), dict(zip(FEATURES, per_feature))


def test_bad_inputs_raise_indicator_errors(rng):
    z, ctx = _small_input(rng)
    f = MacroPressure()
    with pytest.raises(IndicatorError, match="context"):
        f(z)
    with pytest.raises(IndicatorError, match="lacks"):
        f(z, {k: v for k, v in ctx.items() if k != "price"})
    with pytest.raises(IndicatorError, match="D = 7"):
        f(z[..., :5], ctx)
    with pytest.raises(IndicatorError, match="tau"):
        MacroPressure(tau=-1)
    with pytest.raises(IndicatorError, match="weights"):
        MacroPressure(weights=(1.0, 1.0))
