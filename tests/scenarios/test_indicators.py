"""The scenario indicators are C² (gradcheck / gradgradcheck in float64), their pooled forms agree
with the direct forward, and the smoothing-gap report works."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann import scenarios
from aumann.scenarios.midscale_social.scenario import PropagationRisk
from aumann.scenarios.social_llm.scenario import RiskyExpression


def _z(name: str, n: int = 5, batch: int = 2, seed: int = 0) -> torch.Tensor:
    g = np.random.default_rng(seed)
    z = np.empty((batch, n, 5))
    z[..., 0] = g.uniform(-1, 1, size=(batch, n))  # belief
    z[..., 1:] = g.uniform(0.05, 3.0, size=(batch, n, 4))  # non-negative activity features
    return torch.tensor(z, dtype=torch.float64, requires_grad=True)


INDICATORS = {
    "risky_expression": (lambda: RiskyExpression(sharpness=5.0, eps=0.1), "social-llm"),
    "propagation_risk": (lambda: PropagationRisk(sharpness=5.0, eps=0.1), "midscale-social"),
}


@pytest.mark.parametrize("key", sorted(INDICATORS))
def test_surrogate_is_c2(key):
    f = INDICATORS[key][0]()
    z = _z(key)
    assert torch.autograd.gradcheck(lambda x: f(x), (z,))
    assert torch.autograd.gradgradcheck(lambda x: f(x), (z,))


@pytest.mark.parametrize("name", ["social-llm", "midscale-social"])
def test_aggregators_are_c2_and_pooled_forms_match(name):
    sc = scenarios.get(name)
    cfg = sc.load_config(agents=5, steps=4)
    z = _z(name, seed=1)
    f = sc.indicator(cfg)
    with torch.no_grad():
        pooled = f.pooled.rho(f.pooled.psi(z).mean(dim=-2))
        torch.testing.assert_close(pooled, f(z))
    for agg in sc.aggregators(cfg).values():
        assert torch.autograd.gradcheck(lambda x, agg=agg: agg(x), (z,))
        assert torch.autograd.gradgradcheck(lambda x, agg=agg: agg(x), (z,))
        with torch.no_grad():
            torch.testing.assert_close(agg.pooled.rho(agg.pooled.psi(z).mean(dim=-2)), agg(z))


def test_pairwise_aggregator_matches_its_double_sum():
    sc = scenarios.get("social-llm")
    cfg = sc.load_config(agents=5, steps=4)
    agg = sc.aggregators(cfg)["pairwise_interaction"]
    z = _z("x", seed=2)[0].detach()
    r = agg.score(z)
    o = agg.opinion(z)
    n = z.shape[0]
    brute = r.mean() + sum(r[i] * r[j] * (o[i] - o[j]) ** 2 for i in range(n) for j in range(i + 1, n)) / n**2
    torch.testing.assert_close(agg(z), brute)


def test_original_is_the_hinge_and_the_surrogate_is_close():
    f_s, f_o = RiskyExpression(), RiskyExpression(smooth=False)
    z = torch.zeros(1, 2, 5, dtype=torch.float64)
    z[0, :, 0] = torch.tensor([0.9, -0.2])
    z[0, :, 1] = 1.0  # both posted
    # original: Var(b) + (1/2) * (0.9 - 0.5): the neutral-ish agent contributes no extremity
    var = float(torch.var(z[0, :, 0], unbiased=False))
    assert float(f_o(z)) == pytest.approx(var + 0.5 * 0.4)
    # 0 ≤ e_β − e ≤ log 2/β + ε per agent
    gap = float(f_s(z) - f_o(z))
    assert 0 <= gap <= np.log(2) / 20 + 0.01


@pytest.mark.parametrize("name", ["social-llm", "midscale-social"])
def test_gap_report_on_a_recorded_panel(name):
    from tests.tiny import tiny_config

    sc, cfg = tiny_config(name, steps=4)
    panel = sc.simulate(cfg, rng=0).panel
    rep = sc.gap_report(cfg, panel)
    f, f_o = sc.indicators(cfg)
    from aumann.simulators import indicator_values as step_values

    np.testing.assert_allclose(rep.abs_gap, np.abs(step_values(f, panel) - step_values(f_o, panel)), atol=1e-12)
    assert rep.max_gap >= rep.mean_gap >= 0
    ranked = sc.gap_report(cfg, panel.select_steps([3]), ranks=True, k=3)
    assert ranked.kendall_tau is not None and -1 <= float(ranked.kendall_tau[0]) <= 1
