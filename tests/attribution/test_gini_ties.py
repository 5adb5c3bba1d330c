"""Gini at ties and near-ties (issue 21), and the scale-invariant Gini coefficient beside the paper's gini."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import (
    AumannShapley,
    ExactShapley,
    LeaveOneOut,
    Panel,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.attribution.indicators import evaluate
from aumann.errors import UndefinedIndicatorError

X = np.array([[1, 2], [0, 3], [3, 0], [2, 1], [4, 4], [0, 0]], dtype=float)  # the first four: g = 3, split apart

EXACT = [AumannShapley(), AumannShapley(steps=7), AumannShapley(rule="midpoint", steps=64),
         AumannShapley(power=2.0), ExactShapley(), LeaveOneOut()]


def gini_md(g):
    n = g.size
    return float(np.abs(g[:, None] - g[None, :]).sum() / (2 * n * n))


@pytest.mark.parametrize("method", EXACT, ids=repr)
def test_the_issues_example_gives_tied_agents_exactly_equal_phi(method):
    res = attribute("gini", Panel(X), method=method, baseline="mean")
    assert np.ptp(res.phi[0, :4]) == 0.0, res.phi[0, :4]  # exactly equal (was ±0.0021 through the path)
    assert not res.satisfies_efficiency or res.max_efficiency_gap < 1e-12


@pytest.mark.parametrize("method", EXACT, ids=repr)
def test_gini_coefficient_ties_are_equal_to_rounding(method):
    res = attribute("gini_coefficient", Panel(X), method=method, baseline="mean")
    # equal g, different feature splits: the per-feature sums round differently (≤ a few ulps)
    assert np.ptp(res.phi[0, :4]) <= 1e-15 * np.abs(res.phi[0]).max()
    assert not res.satisfies_efficiency or res.max_efficiency_gap < 1e-12


def test_identical_rows_are_bit_identical_by_every_exact_method(rng):
    z = np.abs(rng.normal(size=(9, 2)))
    z[3] = z[0]
    z[7] = z[0]
    for name in ("gini", "gini_coefficient"):
        for method in EXACT:
            phi = attribute(name, Panel(z), method=method, baseline="mean").phi[0]
            assert phi[0] == phi[3] == phi[7], (name, method)


def test_near_ties_along_the_path_share_their_rank(rng):
    """g equal in exact arithmetic but 1 ulp apart as floats: still one run of ties."""
    g = torch.tensor([0.3, 0.1 + 0.2, 0.7, 0.3], dtype=torch.float64)  # 0.1 + 0.2 = 0.30000000000000004
    ranks = indicators.average_ranks_torch(g)
    assert ranks[0] == ranks[1] == ranks[3] == 2.0
    np.testing.assert_array_equal(indicators.average_ranks(g.numpy()), ranks.numpy())
    far = torch.tensor([0.3, 0.3 + 1e-9, 0.7], dtype=torch.float64)  # a real difference is not a tie
    assert indicators.average_ranks_torch(far).tolist() == [1.0, 2.0, 3.0]


def test_sampled_shapley_is_symmetric_in_distribution_only():
    """A sampled estimate of identical agents differs by sampling noise (it is unbiased, so symmetric in
    distribution): within a few standard errors of exact Shapley, which gives them one value."""
    z = np.repeat(np.array([[1.0, 2.0], [5.0, 0.0]]), 4, axis=0)
    exact = attribute("gini", Panel(z), method=ExactShapley()).phi[0]
    assert np.ptp(exact[:4]) == 0 and np.ptp(exact[4:]) == 0
    est = attribute("gini", Panel(z), method=SampledShapley(permutations=400), rng=1)
    assert np.all(np.abs(est.phi[0] - exact) <= 5 * est.stderr[0] + 1e-12)


@pytest.mark.parametrize("alive_row", [None, [True, True, False, True, True, True]])
def test_gini_coefficient_value_over_the_living(alive_row, rng):
    z = np.abs(rng.normal(size=(6, 2))) + 0.1
    alive = None if alive_row is None else np.array(alive_row)
    got = float(evaluate("gini_coefficient", z, alive=alive))
    g = z.sum(axis=1) if alive is None else z[alive].sum(axis=1)
    assert got == pytest.approx(gini_md(g) / g.mean(), rel=1e-12)  # G = gini / mean
    assert got == pytest.approx(float(evaluate("gini", z, alive=alive)) / g.mean(), rel=1e-12)
    # scale-invariant, unlike the paper's gini
    assert float(evaluate("gini_coefficient", 7 * z, alive=alive)) == pytest.approx(got, rel=1e-12)
    assert float(evaluate("gini", 7 * z, alive=alive)) == pytest.approx(7 * float(evaluate("gini", z, alive=alive)))


def test_gini_coefficient_at_the_zero_baseline_is_a_typed_error_and_gini_is_zero(rng):
    panel = Panel(np.abs(rng.normal(size=(2, 6, 2))) + 0.1)
    with pytest.raises(UndefinedIndicatorError, match="0/0"):
        attribute("gini_coefficient", panel)  # f(0) = 0/0
    res = attribute("gini", panel)  # the paper's gini: f(0) = 0, closed form
    assert np.all(res.f_baseline == 0) and res.provenance["closed_form"]
    ok = attribute("gini_coefficient", panel, baseline="mean")  # any baseline with a non-zero mean works
    assert ok.max_efficiency_gap < 1e-10


def test_gini_coefficient_of_an_all_zero_panel_does_not_suggest_the_baseline_already_given():
    """From baseline='mean' an all-zero panel is still 0/0 (the panel's own mean is 0): the message names the panel's
    steps as a cause, not only the zero baseline (it told a user who had given baseline='mean' to use it)."""
    with pytest.raises(UndefinedIndicatorError, match=r"0/0 .*a panel step \(or a baseline\) whose living agents all "
                       r"have g = 0"):
        attribute("gini_coefficient", Panel(np.zeros((2, 3, 1))), baseline="mean")


def test_gini_coefficient_equals_exact_shapley_only_where_it_should(rng):
    """An independent check of the path integral: efficiency and symmetry against exact Shapley's total."""
    z = np.abs(rng.normal(size=(1, 7, 2))) + 0.2
    a = attribute("gini_coefficient", Panel(z), method=AumannShapley(steps=64), baseline="mean")
    e = attribute("gini_coefficient", Panel(z), method=ExactShapley(), baseline="mean")
    assert a.phi.sum() == pytest.approx(e.phi.sum(), rel=1e-10)
