r"""EconAgent's macro indicator: the wealth-amplified macro-pressure risk (C² surrogate and original).

The paper names the parts (excess demand, budget stress, concentration, systemic gap, instability)
but gives no formula; this is ours. Per step, with agent features z_i = (C_i, I_i, c_i, x_i, ℓ_i,
σ_i, W_i) (consumption, income, consumption rate, investment rate, labour hours, saving rate,
wealth) and world context held fixed (not attributed): the month's goods price P, the stock carried
into the month G, the money scale M = 168 · mean skill (the mean monthly wage), last month's realised
log inflation π₋ and the predecessor's inflation-surprise variance h₋ (Tang et al., RiskMetrics,
λ = 0.94) up to last month:

* excess demand  E = ⌈D − S⌉₊ in units of full-employment output 168N:
  D = Σ_i c_i (W_i + C_i) / (P · 168N) the goods requested (W_i + C_i is the wealth before shopping,
  so c_i (W_i + C_i) is exactly the household's request) and S = (G + Σ_i ℓ_i) / (168N) the goods on
  offer. (The model's own imbalance φ = (D − S)/max(D, S) is a ratio that is discontinuous where
  D = S = 0, which the baseline action reaches when the stock is empty, so f uses the difference.)
* budget stress  B = (1/N) Σ_i ⌈(C_i − I_i) / R_i⌉₊,  R_i = (1 − x_i) W_i + C_i + κM: spending beyond
  own earnings as a share of the liquid resources held before shopping (wealth not placed at
  interest; κM keeps it finite), so investing more raises the stress of a household that dissaves;
* concentration  K = (1/(2N²)) Σ_{i,j} |W_i − W_j| / (W̄ + κM)  (Gini of wealth; κ keeps it finite);
* systemic gap   U = ⌈σ* − σ̄⌉₊,  σ̄ = (1/N) Σ_i σ_i, σ* = 0.1: the population's saving rate
  below a prudent level (the original's money is created only by wages and destroyed by purchases,
  so a low aggregate saving rate drains the money stock);
* instability    H = [λ h₋ + (1 − λ)(π̂ − π₋)²] / s_π²,  π̂ = a_π (D − S), a_π = 0.05 the expected
  monthly price change per unit of excess demand (E U(0, 0.1 φ) = 0.05 φ, φ ≈ D − S near full
  employment), s_π = 0.05: the predecessor's inflation-surprise variance with this month's surprise
  predicted from the households' excess demand;

  f = (1 + ln(1 + W̄ / M)) · (w_E E + w_B B + w_K K + w_U U + w_H H),   W̄ = (1/N) Σ_i W_i.

**Original (non-smooth)**: ⌈x⌉₊ = max(x, 0) and |x| as written. **C² surrogate** (temperature
τ > 0; every piece is C^∞): ⌈x⌉₊ → τ softplus(x/τ) and |x| → √(x² + τ²) − τ (x the wealth
difference in units of W̄ + κM). Each surrogate converges uniformly to the original as τ → 0, with
gaps at most τ ln 2 (hinge) and τ (abs), so |f_τ − f_0| ≤ A·τ(ln 2 (w_E + w_B + w_U) + w_K / 2).
:func:`smoothing_gap` reports the realised gap on a panel.

Attribution baseline (the card's baseline action: no work, no consumption, no investment at the
target step, wealth preserved): z⁰_{i,t} = (0, 0, 0, 0, 0, 0, W_{i,t−1}); see
:func:`baseline_features`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from aumann.attribution import smoothing
from aumann.attribution.indicators import Indicator
from aumann.checks import as_torch
from aumann.errors import IndicatorError
from aumann.simulators import indicator_values

FEATURES = ("consumption", "income", "consumption_rate", "investment_rate", "labor", "saving_rate", "wealth")
CONTEXT = ("price", "stock", "wage_scale", "inflation_prev", "vol_prev")
PARTS = ("excess_demand", "budget_stress", "concentration", "systemic_gap", "instability")
HOURS = 168.0


def _hinge(x: torch.Tensor, tau: float) -> torch.Tensor:
    return torch.clamp(x, min=0.0) if tau == 0 else smoothing.softplus(x, beta=1.0 / tau)


def _abs(x: torch.Tensor, tau: float) -> torch.Tensor:
    return x.abs() if tau == 0 else smoothing.smooth_abs(x, eps=tau) - tau


class MacroPressure(Indicator):
    """The wealth-amplified macro-pressure risk (module docstring); ``tau = 0`` is the original.

    Args:
        tau: temperature of the smooth surrogates (0 gives the non-smooth original).
        weights: (w_E, w_B, w_K, w_U, w_H), non-negative.
        kappa: κ, the money floor (in units of M) in the budget-stress and Gini denominators.
        target_saving: σ*, the aggregate saving rate below which the systemic gap opens.
        lam: λ of the RiskMetrics variance.
        price_response: a_π (half the original's maximum monthly price change).
        inflation_scale: s_π.
        name: registry name.
    """

    uses_context = True

    def __init__(self, *, tau: float = 0.05, weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0),
                 kappa: float = 0.1, target_saving: float = 0.1, lam: float = 0.94,
                 price_response: float = 0.05, inflation_scale: float = 0.05, name: str | None = None) -> None:
        if not (tau >= 0 and math.isfinite(tau)):
            raise IndicatorError(f"tau must be a finite number ≥ 0; got {tau!r}")
        if len(weights) != len(PARTS) or any(w < 0 for w in weights):
            raise IndicatorError(f"weights must be {len(PARTS)} non-negative numbers for {PARTS}; got {weights!r}")
        if kappa <= 0:
            raise IndicatorError(f"kappa must be > 0 (it keeps denominators positive); got {kappa!r}")
        self.tau = float(tau)
        self.weights = tuple(float(w) for w in weights)
        self.kappa = float(kappa)
        self.target_saving = float(target_saving)
        self.lam = float(lam)
        self.price_response = float(price_response)
        self.inflation_scale = float(inflation_scale)
        self.name = name or ("econagent_pressure" if tau > 0 else "econagent_pressure_original")

    def _context(self, z: torch.Tensor, context: Mapping[str, Any] | None) -> dict[str, torch.Tensor]:
        if context is None:
            raise IndicatorError(f"{self.name} needs the per-step world context {list(CONTEXT)}; got none")
        missing = [k for k in CONTEXT if k not in context]
        if missing:
            raise IndicatorError(f"{self.name}: context lacks {missing}; it has {sorted(context)}")
        batch = z.shape[:-2]
        out = {}
        for k in CONTEXT:
            v = as_torch(context[k], dtype=z.dtype, device=z.device)
            if v.ndim > len(batch):
                raise IndicatorError(f"{self.name}: context {k!r} has shape {tuple(v.shape)}; expected a scalar "
                                     f"per batch element, batch shape {tuple(batch)}")
            out[k] = v.reshape(v.shape + (1,) * (len(batch) - v.ndim)).expand(batch) if batch else v
        return out

    def parts(self, z: torch.Tensor, context: Mapping[str, Any] | None = None) -> dict[str, torch.Tensor]:
        """The five parts and the amplification, each of shape z.shape[:-2]."""
        if z.shape[-1] != len(FEATURES):
            raise IndicatorError(f"{self.name} expects D = {len(FEATURES)} features {FEATURES}; got z of shape "
                                 f"{tuple(z.shape)}")
        ctx = self._context(z, context)
        tau = self.tau
        n = z.shape[-2]
        C, I, c, x, ell, sigma, W = z.unbind(-1)  # each (..., N)
        M = ctx["wage_scale"][..., None]
        P = ctx["price"][..., None]
        cap = HOURS * n
        demand = (c * (W + C) / P).sum(-1) / cap
        supply = (ctx["stock"] + ell.sum(-1)) / cap
        excess = _hinge(demand - supply, tau)
        liquid = (1.0 - x) * W + C + self.kappa * M
        stress = _hinge((C - I) / liquid, tau).mean(-1)
        scale = W.mean(-1, keepdim=True) + self.kappa * M  # (..., 1)
        dW = (W[..., :, None] - W[..., None, :]) / scale[..., None]
        gini = _abs(dW, tau).sum((-1, -2)) / (2 * n * n)
        gap = _hinge(self.target_saving - sigma.mean(-1), tau)
        pi_hat = self.price_response * (demand - supply)
        inst = (self.lam * ctx["vol_prev"] + (1 - self.lam) * (pi_hat - ctx["inflation_prev"]) ** 2)
        inst = inst / self.inflation_scale**2
        amp = 1.0 + torch.log1p(W.mean(-1) / M[..., 0])
        return {"excess_demand": excess, "budget_stress": stress, "concentration": gini, "systemic_gap": gap,
                "instability": inst, "amplification": amp, "demand": demand, "supply": supply}

    def forward(self, z: torch.Tensor, context: Mapping[str, Any] | None = None) -> torch.Tensor:
        p = self.parts(z, context)
        pressure = sum(w * p[k] for w, k in zip(self.weights, PARTS))
        return p["amplification"] * pressure

    def original(self) -> MacroPressure:
        """The same indicator with the non-smooth original operations (τ = 0)."""
        return MacroPressure(tau=0.0, weights=self.weights, kappa=self.kappa,
                             target_saving=self.target_saving, lam=self.lam,
                             price_response=self.price_response, inflation_scale=self.inflation_scale)


def agent_score(z: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """A per-household, context-free risk score r_i ≥ 0 for the f-sensitivity aggregators (…, N).

    r_i = ⌈(C_i − I_i) / ((1 − x_i) W_i + C_i + 1)⌉₊ + c_i: the household's budget stress (money floor
    of one dollar instead of κM, which needs the context) plus its consumption propensity.
    """
    C, I, c, x, _ell, _s, W = z.unbind(-1)
    return _hinge((C - I) / ((1.0 - x) * W + C + 1.0), tau) + c


def wealth_position(z: torch.Tensor) -> torch.Tensor:
    """The 'opinion' coordinate of the pairwise aggregator: log wealth, o_i = log(1 + W_i / 1000)."""
    return torch.log1p(z[..., FEATURES.index("wealth")] / 1000.0)


def _panel_context(panel: Any) -> dict[str, torch.Tensor]:
    missing = [k for k in CONTEXT if k not in panel.context]
    if missing:
        raise IndicatorError(f"panel context lacks {missing}; record it with the scenario's context functions")
    return {k: as_torch(np.asarray(panel.context[k], dtype=np.float64)) for k in CONTEXT}


def smoothing_gap(panel: Any, surrogate: MacroPressure | None = None) -> dict[str, Any]:
    """The gap between the C² surrogate and the original on a recorded panel.

    Returns:
        ``{"tau", "smooth" (T,), "original" (T,), "abs_gap" (T,), "rel_gap" (T,), "max_abs_gap",
        "max_rel_gap"}`` with rel_gap = |f_smooth − f_orig| / max(|f_orig|, 1e-12).
    """
    surrogate = surrogate or MacroPressure()
    _panel_context(panel)  # a clear error when the panel was recorded without the scenario's context
    fs = indicator_values(surrogate, panel)
    fo = indicator_values(surrogate.original(), panel)
    gap = np.abs(fs - fo)
    rel = gap / np.maximum(np.abs(fo), 1e-12)
    return {"tau": surrogate.tau, "smooth": fs, "original": fo, "abs_gap": gap, "rel_gap": rel,
            "max_abs_gap": float(gap.max()), "max_rel_gap": float(rel.max())}


def baseline_features(panel: Any, *, initial_wealth: np.ndarray | float = 0.0) -> np.ndarray:
    """Per-agent baseline z⁰ (T, N, D): the features under the baseline action at each step.

    No work, no consumption, no investment, wealth preserved: every feature 0 except wealth, which
    stays at its value before the step (W_{i,t−1}; ``initial_wealth`` for the first step, 0 in the
    original). A household forced to the baseline action in the model records exactly these values.
    """
    values = np.asarray(panel.values, dtype=np.float64)
    features = list(panel.features)
    if tuple(features) != FEATURES:
        raise IndicatorError(f"an EconAgent panel has features {FEATURES}; got {tuple(features)}")
    w = FEATURES.index("wealth")
    base = np.zeros_like(values)
    base[0, :, w] = initial_wealth
    base[1:, :, w] = values[:-1, :, w]
    return base


__all__ = [
    "CONTEXT",
    "FEATURES",
    "PARTS",
    "MacroPressure",
    "agent_score",
    "baseline_features",
    "smoothing_gap",
    "wealth_position",
]
