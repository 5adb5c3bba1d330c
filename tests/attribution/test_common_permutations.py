"""SampledShapley(common_permutations=True): one permutation stream for every step."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy.stats import norm

from aumann.attribution import (
    ExactShapley,
    MaskedIndicatorGame,
    Panel,
    Problem,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.seeding import spawn
from tests.attribution.baseline_games import positive_panel, quadratic_indicator, softplus_indicator


def _per_step_on_the_shared_stream(f, z, method, seed, baseline="zero"):
    """Each step's own running-sum kernel, fed the stream the common mode draws from."""
    problem = Problem.build(f, Panel(z), baseline)
    shared = spawn(seed, 1)[0]
    phis, ses = [], []
    for t in range(z.shape[0]):
        kernel = MaskedIndicatorGame(problem, t).kernel()
        est = method.estimate(kernel, *kernel.ends(), copy.deepcopy(shared))
        phis.append(est.phi)
        ses.append(est.stderr)
    return np.array(phis), np.array(ses)


@pytest.mark.parametrize("name", ["heat", "var", "lin", "f_nl"])
@pytest.mark.parametrize("antithetic", [False, True])
@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_lockstep_equals_each_step_alone_on_the_shared_stream(name, antithetic, baseline, rng):
    z = positive_panel(rng, 3, 40)
    f = softplus_indicator(rng.normal(size=(40, 3))) if name == "f_nl" else indicators.get(name)
    method = SampledShapley(permutations=24, antithetic=antithetic, common_permutations=True,
                            memory_budget=2**16)  # chunks of a few permutations
    res = attribute(f, Panel(z), method=method, baseline=baseline, rng=5)
    assert res.provenance["per_step"]["path"] == "additive"
    phi, se = _per_step_on_the_shared_stream(f, z, SampledShapley(permutations=24, antithetic=antithetic), 5,
                                             baseline)
    np.testing.assert_array_equal(res.phi, phi)
    np.testing.assert_array_equal(res.stderr, se)
    assert res.max_efficiency_gap <= 1e-12 * np.abs(res.delta_v).max()
    assert res.n_evals == 3 * (24 * 39 + 2)


def test_per_step_stopping_rules_still_apply(rng):
    z = positive_panel(rng, 2, 20)
    z[1] *= 50  # the second step's standard errors are far larger
    pilot = attribute("heat", Panel(z), method=SampledShapley(permutations=400, common_permutations=True), rng=4)
    tol = 1.5 * float(pilot.stderr[0].max())  # reached by step 0 around 180 permutations, never by step 1
    method = SampledShapley(permutations=400, stderr_tol=tol, round_size=16, common_permutations=True)
    res = attribute("heat", Panel(z), method=method, rng=4)
    assert res.provenance["per_step"]["stopped"] == ["stderr_tol", "permutations"]
    used = res.provenance["per_step"]["permutations"]
    assert used[0] < 400 and used[1] == 400 and res.stderr[0].max() < tol
    alone = SampledShapley(permutations=400, stderr_tol=tol, round_size=16)
    phi, se = _per_step_on_the_shared_stream(indicators.get("heat"), z, alone, 4)
    np.testing.assert_array_equal(res.phi, phi)
    np.testing.assert_array_equal(res.stderr, se)


def test_identical_steps_get_identical_estimates_only_with_common_permutations(rng):
    z = positive_panel(rng, 1, 12)
    z = np.concatenate([z, z])  # two identical steps
    f = quadratic_indicator(rng.normal(size=(12, 3)), rng.normal(size=(12, 12)))
    common = attribute(f, Panel(z), method=SampledShapley(permutations=30, common_permutations=True), rng=1)
    assert common.provenance["per_step"]["path"] == "quadratic"
    np.testing.assert_array_equal(common.phi[0], common.phi[1])
    heat = attribute("heat", Panel(z), method=SampledShapley(permutations=30, common_permutations=True), rng=1)
    np.testing.assert_array_equal(heat.phi[0], heat.phi[1])
    indep = attribute("heat", Panel(z), method=SampledShapley(permutations=30), rng=1)
    assert not np.allclose(indep.phi[0], indep.phi[1])


def test_common_permutations_converge_to_exact_shapley(rng):
    z = positive_panel(rng, 3, 7)
    exact = attribute("heat", Panel(z), method=ExactShapley())
    res = attribute("heat", Panel(z), method=SampledShapley(permutations=4000, common_permutations=True), rng=3)
    zscores = (res.phi - exact.phi) / res.stderr
    assert np.abs(zscores).max() < norm.isf(1e-3 / (2 * zscores.size))


def test_lockstep_with_null_players_equals_each_step_alone(rng):
    """Issue 21: a network indicator's null players (δr = 0) — each step alone samples its active players
    only; lockstep does the same (steps grouped by their number of active players), so the numbers agree."""
    import scipy.sparse as sp

    from aumann.attribution import NetworkQuadratic

    T, N = 4, 12
    A = sp.random(N, N, density=0.4, random_state=3)
    A = sp.csr_matrix(((A + A.T) / 2).toarray() * (1 - np.eye(N)))
    f = NetworkQuadratic(A, lambda z: z[..., 0] * z[..., 1], degree=2)
    z = np.abs(rng.normal(size=(T, N, 2))) + 0.1
    base = 0.5 * z
    base[0, :3] = z[0, :3]  # step 0: three null players
    base[1, :6] = z[1, :6]  # step 1: six
    base[3, :3] = z[3, :3]  # step 3: three again (shares step 0's draws); step 2: none
    method = SampledShapley(permutations=16, common_permutations=True)
    res = attribute(f, Panel(z), method=method, baseline=base, rng=7)
    problem = Problem.build(f, Panel(z), base)
    shared = spawn(7, 1)[0]
    for t in range(T):
        est, _, _ = SampledShapley(permutations=16)._run(MaskedIndicatorGame(problem, t), copy.deepcopy(shared))
        np.testing.assert_array_equal(res.phi[t], est.phi)
        np.testing.assert_array_equal(res.stderr[t], est.stderr)
    assert np.all(res.phi[0, :3] == 0) and np.all(res.phi[1, :6] == 0)
    alone = attribute(f, Panel(z[1:2]), method=SampledShapley(permutations=16, common_permutations=True),
                      baseline=base[1:2], rng=7)
    np.testing.assert_array_equal(alone.phi[0], res.phi[1])
    assert res.provenance["per_step"]["null_players"] == [3, 6, None, 3]
