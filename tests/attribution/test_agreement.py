"""Rank agreement with ties, guarded relative gaps, efficiency-gap warnings and the noise-ceiling note
(issue 21)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

from aumann.attribution import AumannShapley, Panel, attribute, metrics
from aumann.errors import EfficiencyGapWarning


def test_kendall_tau_is_tau_b_with_round_off_ties():
    ref = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 3.0])
    est = np.array([1e-17, -1e-17, 0.0, 1.0, 2.0, 3.0])  # tied in exact arithmetic, split by round-off
    assert metrics.kendall_tau(est, ref) == pytest.approx(1.0)
    assert metrics.kendall_tau(est, ref, tie_rtol=0) < 1.0  # the raw floats rank the round-off
    # τ-b against scipy where nothing is that close
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=40), rng.normal(size=40)
    b[:10] = b[10:20]  # genuine ties on one side
    assert metrics.kendall_tau(a, b) == pytest.approx(kendalltau(a, b).statistic, abs=1e-15)
    assert math.isnan(metrics.kendall_tau(np.ones(5), a[:5]))


def test_tie_ranks_average_runs():
    np.testing.assert_array_equal(metrics.tie_ranks(np.array([3.0, 1.0, 1.0 + 1e-16, 2.0])), [4.0, 1.5, 1.5, 3.0])


def test_relative_gap_leaves_out_an_original_of_zero():
    f = np.array([1.0, 2.0, 1e-12, 4.0])
    orig = np.array([1.1, 2.0, 0.0, 4.0])
    rel, skipped = metrics.relative_gap(f, orig)
    assert rel == pytest.approx(0.1 / 1.1) and skipped == 1  # not 1e-12 / 1e-12 = 1e+0 … or 1e+10
    assert math.isnan(metrics.relative_gap(np.ones(3), np.zeros(3))[0])


def test_a_large_efficiency_gap_is_a_warning_and_a_provenance_flag(rng):
    z = np.abs(rng.normal(size=(2, 30, 2)))
    def sharp(z):  # far from linear along the path: one midpoint misses most of Δv
        return torch.exp(4 * z.sum(-1)).mean(-1)

    with pytest.warns(EfficiencyGapWarning, match="misses Δv"):
        res = attribute(sharp, Panel(z), method=AumannShapley(steps=1, rule="midpoint"))
    flag = res.provenance["efficiency_flag"]
    assert flag["worst_relative_gap"] > 0.01 and flag["steps"] >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", EfficiencyGapWarning)
        ok = attribute("var", Panel(z), method=AumannShapley(steps=8, closed_form=False), baseline="mean")
    assert "efficiency_flag" not in ok.provenance
    assert not ok.large_efficiency_gap().any()


def test_a_gap_where_delta_v_is_next_to_nothing_is_told_in_numbers_not_a_huge_percentage():
    """f(z) = f(z⁰) at the step (Δv = 0) but a coarse path misses: '3.99e+294 % of |Δv|' said nothing."""
    z = np.array([[[1.0], [2.0], [3.0]]])  # whole periods of sin(2π x): f(z) = f(0) = 0

    def periodic(z):
        return torch.sin(2 * torch.pi * z[..., 0]).sum(-1) ** 2 + z[..., 0].sum(-1) * 0

    want = r"misses Δv by [0-9.e+-]+ while Δv = [0-9.e+-]+ \(f barely changes"
    with pytest.warns(EfficiencyGapWarning, match=want) as w:
        res = attribute(periodic, Panel(z), method=AumannShapley(steps=3, rule="midpoint"))
    assert "% of |Δv|" not in str(w[0].message) and abs(res.delta_v[0]) < 1e-20 < res.efficiency_gap[0]


def test_reports_flag_the_gap_and_explain_agreement_above_the_ceiling():
    from aumann.studies.sections import above_ceiling, ceiling_explanation, efficiency_note

    assert above_ceiling({"kendall_tau": 0.717}, {"kendall_tau_ceiling": 0.531})
    assert not above_ceiling({"kendall_tau": 0.5}, {"kendall_tau_ceiling": 0.531})
    assert "noisy" in ceiling_explanation(["aumann_shapley"])
    note = efficiency_note(1.0, "run(s) 0")
    assert note.kind == "warn" and "100 %" in note.text
