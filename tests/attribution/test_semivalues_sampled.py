"""Sampled Shapley and Banzhaf converge to the exact values with calibrated standard errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from aumann.attribution import (
    ExactBanzhaf,
    ExactShapley,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.errors import MethodError
from tests.attribution.baseline_games import positive_panel, random_torch_fn

T, N = 2, 7
ALPHA = 1e-3  # family-wise error rate of one convergence test


def _games(seed: int):
    rng = np.random.default_rng(seed)
    return {
        "heat": indicators.get("heat"),
        "var": indicators.get("var"),
        "gini": indicators.get("gini"),
        "pairwise": indicators.get("pairwise"),
        "torch_fn": random_torch_fn(rng),
    }


SAMPLERS = {
    "shapley": (lambda m: SampledShapley(permutations=m), ExactShapley()),
    "shapley-antithetic": (lambda m: SampledShapley(permutations=m, antithetic=True), ExactShapley()),
    "banzhaf-msr": (lambda m: SampledBanzhaf(samples=4 * m, estimator="msr"), ExactBanzhaf()),
    "banzhaf-marginal": (lambda m: SampledBanzhaf(samples=m, estimator="marginal"), ExactBanzhaf()),
}


@pytest.mark.parametrize("game", ["heat", "var", "gini", "pairwise", "torch_fn"])
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_converges_within_bonferroni_standard_errors(game, sampler, rng):
    f = _games(1)[game]
    z = positive_panel(rng, T, N)
    make, exact_method = SAMPLERS[sampler]
    exact = attribute(f, Panel(z), method=exact_method)
    est = attribute(f, Panel(z), method=make(400), rng=rng)
    crit = norm.isf(ALPHA / (2 * T * N))  # Bonferroni over every (step, agent)
    err = np.abs(est.phi - exact.phi)
    assert np.all(err <= crit * est.stderr + 1e-12), (err / est.stderr).max()
    assert est.stderr.shape == (T, N) and np.all(np.isfinite(est.stderr))
    if "shapley" in sampler:
        assert est.max_efficiency_gap < 1e-12 and est.satisfies_efficiency
    else:
        assert not est.satisfies_efficiency


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("game", ["heat", "torch_fn"])
def test_standard_errors_are_calibrated_and_shrink(sampler, game):
    f = _games(2)[game]
    rng = np.random.default_rng(7)
    z = positive_panel(rng, 1, 6)
    make, exact_method = SAMPLERS[sampler]
    exact = attribute(f, Panel(z), method=exact_method).phi
    z2, se_small, se_big = [], [], []
    for rep in range(25):
        est = attribute(f, Panel(z), method=make(60), rng=rep)
        z2.append(((est.phi - exact) / est.stderr) ** 2)
        se_small.append(est.stderr)
        se_big.append(attribute(f, Panel(z), method=make(240), rng=1000 + rep).stderr)
    mean_z2 = float(np.mean(z2))
    assert 0.5 <= mean_z2 <= 2.0, mean_z2
    ratio = float(np.mean(se_big) / np.mean(se_small))  # 4× the samples → half the standard error
    assert 0.4 <= ratio <= 0.6, ratio


def test_antithetic_counts_pairs_as_two_permutations(rng):
    z = positive_panel(rng, 1, 5)
    res = attribute("heat", Panel(z), method=SampledShapley(permutations=10, antithetic=True), rng=0)
    assert res.provenance["per_step"]["permutations"] == 10
    assert res.n_evals == 10 * 4 + 2
    with pytest.raises(MethodError, match="even"):
        SampledShapley(permutations=5, antithetic=True)


def test_budget_stopping_counts_evaluations_exactly(rng):
    z = positive_panel(rng, 3, 6)
    res = attribute("var", Panel(z), method=SampledShapley(permutations=1000, max_evals=103), rng=0)
    # 103 evaluations buy (103 − 2) // 5 = 20 permutations per step
    assert res.n_evals == 3 * (20 * 5 + 2)
    assert res.provenance["per_step"]["stopped"] == "max_evals"
    b = attribute("var", Panel(z), method=SampledBanzhaf(samples=1000, estimator="marginal", max_evals=71), rng=0)
    assert b.n_evals == 3 * 10 * 7 and b.provenance["per_step"]["samples"] == 10
    m = attribute("var", Panel(z), method=SampledBanzhaf(samples=1000, max_evals=300), rng=0)
    assert m.n_evals == 900
    with pytest.raises(MethodError, match="max_evals"):
        attribute("var", Panel(z), method=SampledShapley(permutations=100, max_evals=8), rng=0)


def test_stderr_tolerance_stops_early(rng):
    z = positive_panel(rng, 1, 6)
    res = attribute("heat", Panel(z), method=SampledShapley(permutations=100_000, stderr_tol=2e-3, round_size=50),
                    rng=0)
    used = res.provenance["per_step"]["permutations"]
    assert res.provenance["per_step"]["stopped"] == "stderr_tol"
    assert used < 100_000 and used % 50 == 0
    assert res.stderr.max() < 2e-3
    b = attribute("heat", Panel(z), method=SampledBanzhaf(samples=100_000, stderr_tol=5e-3), rng=0)
    assert b.provenance["per_step"]["stopped"] == "stderr_tol" and b.stderr.max() < 5e-3


@pytest.mark.parametrize("block_size", [None, 2])
def test_a_stderr_from_a_few_units_never_stops_the_estimate(block_size):
    """At N = 2 two random orderings agree half the time, so two units could give a sample variance of 0 and
    stop a tiny-round estimate after 2 permutations at one ordering's marginals (not Shapley). The rule is
    checked from 16 units on; with 16 different-or-not orderings the estimate is the sampled one it should be."""
    z = np.array([[[1.0, 0.2, 0.5], [3.0, 0.1, 2.0]]])  # heat has interactions: the two orderings differ
    exact = attribute("heat", Panel(z), method=ExactShapley()).phi
    for seed in range(40):
        res = attribute("heat", Panel(z), method=SampledShapley(
            permutations=64, stderr_tol=1e-12, round_size=1, antithetic=False, block_size=block_size), rng=seed)
        assert res.provenance["per_step"]["permutations"] >= 16, seed
        assert np.abs(res.phi - exact).max() < 0.5 * np.abs(exact).max(), seed
    b = attribute("heat", Panel(z), method=SampledBanzhaf(samples=64, stderr_tol=1e-12, round_size=2), rng=0)
    assert b.provenance["per_step"]["samples"] >= 16


def test_same_seed_same_numbers_and_parameter_errors(rng):
    z = positive_panel(rng, 2, 6)
    for method in (SampledShapley(permutations=30), SampledBanzhaf(samples=50)):
        a = attribute("heat", Panel(z), method=method, rng=5)
        b = attribute("heat", Panel(z), method=method, rng=5)
        np.testing.assert_array_equal(a.phi, b.phi)
        assert a.provenance["seed"] == 5
        # a seed given as a sequence of ints was recorded as "Generator": the run looked unreproducible
        c = attribute("heat", Panel(z), method=method, rng=[5, 7])
        assert c.provenance["seed"] == [5, 7]
        np.testing.assert_array_equal(c.phi, attribute("heat", Panel(z), method=method,
                                                       rng=np.random.SeedSequence([5, 7])).phi)
    with pytest.raises(MethodError, match="≥ 2"):
        SampledShapley(permutations=1)
    with pytest.raises(MethodError, match="estimator"):
        SampledBanzhaf(samples=10, estimator="kernel")  # type: ignore[arg-type]
    with pytest.raises(MethodError, match="stderr_tol"):
        SampledShapley(permutations=10, stderr_tol=0)
    with pytest.raises(MethodError, match="raise samples"):
        attribute("heat", Panel(positive_panel(rng, 1, 40)), method=SampledBanzhaf(samples=3), rng=0)


@pytest.mark.parametrize("method", [
    lambda b: SampledShapley(permutations=64, memory_budget=b),
    lambda b: SampledShapley(permutations=64, antithetic=True, memory_budget=b),
    lambda b: SampledBanzhaf(samples=300, memory_budget=b),
    lambda b: SampledBanzhaf(samples=30, estimator="marginal", memory_budget=b),
], ids=["shapley", "antithetic", "msr", "marginal"])
@pytest.mark.parametrize("f", ["heat", "var"])
def test_the_memory_budget_never_changes_the_numbers(method, f):
    """A budget that cuts the draws into many chunks gives the same bytes as one chunk (MSR took the first
    chunk's mean as its shift and summed each chunk by a matrix product: last-bit differences)."""
    z = np.abs(np.random.default_rng(1).normal(size=(2, 120, 2))) * 0.1 + 0.01
    one = attribute(f, Panel(z), method=method(None), rng=7)
    many = attribute(f, Panel(z), method=method(2**16), rng=7)
    assert one.phi.tobytes() == many.phi.tobytes() and one.stderr.tobytes() == many.stderr.tobytes()


@pytest.mark.parametrize("bits", [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.MT19937,
                                  np.random.SFC64])
def test_coalition_masks_are_the_bits_of_one_bytes_call_per_row(bits):
    """The vectorised draw of sampled Banzhaf's coalitions gives, row for row, what a loop of ``rng.bytes(⌈n/8⌉)``
    calls gave (the seeds' results of earlier versions), and leaves the generator where that loop left it."""
    from aumann.attribution.distributed import coalition_masks

    for n in (1, 2, 7, 8, 9, 31, 32, 33, 100, 1000):
        a, b = np.random.Generator(bits(11)), np.random.Generator(bits(11))
        got = np.concatenate([coalition_masks(a, c, n) for c in (1, 3, 17)])
        want = np.stack([np.unpackbits(np.frombuffer(b.bytes((n + 7) // 8), dtype=np.uint8), count=n)
                         for _ in range(21)]).astype(bool)
        np.testing.assert_array_equal(got, want)
        assert str(a.bit_generator.state) == str(b.bit_generator.state)
