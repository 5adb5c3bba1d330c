"""Sampled standard errors stay honest where the draws did not vary (aumann.attribution.unseen): an agent whose
marginal differs only in orderings that m permutations rarely produce must not be reported as exact, while an
additive game, whose sampled Shapley value is exact, keeps a standard error of 0."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from aumann.attribution import (
    ExactBanzhaf,
    ExactShapley,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    SampledShapleyCV,
    attribute,
)
from aumann.attribution.unseen import unseen_floor

N = 8
Z = np.abs(np.random.default_rng(5).normal(size=(1, N, 3))) + 0.1


def _product(x: torch.Tensor) -> torch.Tensor:
    """Π_i x_i0: at the zero baseline, non-zero only with every agent present, so an agent's marginal is Δv when
    it is drawn last (probability 1/8) and 0 otherwise: with m = 8 an agent is never last in (7/8)⁸ = 34 % of
    runs, and then its m marginals are all 0."""
    return x[..., 0].prod(-1)


METHODS = {
    "plain": (lambda: SampledShapley(permutations=8), ExactShapley()),
    "antithetic": (lambda: SampledShapley(permutations=16, antithetic=True), ExactShapley()),
    "blocked": (lambda: SampledShapley(permutations=8, block_size=4), ExactShapley()),
    "control_variate": (lambda: SampledShapleyCV(permutations=8), ExactShapley()),
    # v(S ∪ i) − v(S ∖ i) ≠ 0 only when every other agent is in S (2⁻⁷ per sample); 24 samples leave some seeds
    # with no agent varied at all, which the floor cannot bound (module docstring): only seeds where one did count
    "banzhaf_marginal": (lambda: SampledBanzhaf(samples=24, estimator="marginal"), ExactBanzhaf()),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_an_agent_whose_marginal_was_never_drawn_non_zero_is_not_reported_exact(name):
    """Before the floor, 34 % of agents × seeds (plain and CV alike, m = 8) had a standard error of 0 with an error
    of Δv/8, and 95 % intervals covered 0.65 (CV 0.57); now no standard error of 0 comes with an error, and
    coverage over 40 seeds × 8 agents is ≥ 0.85 (measured 0.99 plain / 0.91 CV at m = 8 over 200 seeds)."""
    make, reference = METHODS[name]
    exact = attribute(_product, Panel(Z), method=reference).phi[0]
    scale = float(np.abs(exact).max())
    errs, ses, unseen = [], [], 0
    for seed in range(40):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = attribute(_product, Panel(Z), method=make(), rng=seed)
        if name == "banzhaf_marginal" and np.all(r.stderr[0] == 0):
            continue
        errs.append(np.abs(r.phi[0] - exact))
        ses.append(r.stderr[0])
        unseen += r.provenance["per_step"]["stderr_unseen"]
    e, se = np.array(errs), np.array(ses)
    missed = (se <= 1e-12 * scale) & (e > 1e-9 * scale)
    assert not missed.any(), f"{missed.sum()} agent(s) reported exact with errors up to {e[missed].max():.3g}"
    assert np.mean(e <= 1.96 * se) >= 0.85
    assert unseen > 0 and len(e) >= 20  # provenance counts the raised agents


def test_common_permutations_floor_each_step_as_it_is_floored_alone():
    z = np.concatenate([Z, Z[:, ::-1]])
    r = attribute(_product, Panel(z), method=SampledShapley(permutations=8, common_permutations=True), rng=1)
    unseen = r.provenance["per_step"]["stderr_unseen"]
    assert min(np.atleast_1d(unseen)) > 0
    for t in range(2):  # each step's numbers equal running it alone on the shared stream
        alone = attribute(_product, Panel(z[t:t + 1]),
                          method=SampledShapley(permutations=8, common_permutations=True), rng=1)
        np.testing.assert_allclose(r.stderr[t], alone.stderr[0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("method", [SampledShapley(permutations=16), SampledShapleyCV(permutations=16),
                                    SampledShapley(permutations=16, block_size=8)], ids=["plain", "cv", "blocked"])
def test_an_additive_game_keeps_its_exact_zero_standard_error(method):
    """lin's marginal is the same in every ordering: every agent is flat, so nothing is raised."""
    r = attribute("lin", Panel(Z), method=method, rng=0)
    assert np.all(r.stderr <= 1e-12 * np.abs(r.phi).max())
    assert r.provenance["per_step"]["stderr_unseen"] == 0


def test_the_floor_is_root_three_times_the_largest_standard_error():
    sd = np.array([0.0, 0.3, 0.5, 1e-18])
    floor = unseen_floor(np.array([0.0, 0.2, 0.4, 1.0]), sd, 12)
    np.testing.assert_allclose(floor, [np.sqrt(3) * 0.5 / np.sqrt(12), 0, 0, np.sqrt(3) * 0.5 / np.sqrt(12)])


@pytest.mark.parametrize("method", [SampledShapley, SampledShapleyCV], ids=["plain", "cv"])
def test_smooth_game_intervals_cover_the_exact_shapley_value(method):
    """heat, N = 8, m = 64, 60 seeds × 8 agents: 95 % intervals φ̂ ± 1.96 se cover exact Shapley in ≥ 0.88 of the
    cases (measured over 200 seeds: 0.946 plain, 0.948 CV; the bound is ~5 binomial sd below, counting the
    agents of one seed as one draw), and no interval is wider than needed by more than ×3 in median (|error|/se
    has median 0.674 for a normal error; measured 0.69/0.68)."""
    exact = attribute("heat", Panel(Z), method=ExactShapley()).phi[0]
    e, se = [], []
    for seed in range(60):
        r = attribute("heat", Panel(Z), method=method(permutations=64), rng=seed)
        e.append(np.abs(r.phi[0] - exact))
        se.append(r.stderr[0])
    e, se = np.array(e), np.array(se)
    assert np.mean(e <= 1.96 * se) >= 0.88
    assert 0.674 / 3 <= np.median(e / se) <= 0.674 * 3
