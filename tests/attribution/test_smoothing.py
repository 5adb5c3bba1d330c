"""Smoothing primitives: first and second derivatives (gradcheck/gradgradcheck in float64),
convergence to the original as the temperature goes to 0 within the documented bounds, and surrogates
with their gap report."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.attribution.smoothing import (
    Surrogate,
    fraction_above,
    gap_report,
    gini_surrogate,
    max_surrogate,
    smooth_abs,
    smooth_indicator,
    smooth_max,
    smooth_min,
    smooth_step,
    soft_rank,
    soft_sort,
    softplus,
    top_k_share,
)
from aumann.errors import IndicatorError

PRIMITIVES = {
    "smooth_max": lambda x: smooth_max(x, temperature=0.3),
    "smooth_min": lambda x: smooth_min(x, dim=0, temperature=0.3),
    "smooth_step": lambda x: smooth_step(x, 0.3),
    "smooth_abs": lambda x: smooth_abs(x, 0.2),
    "softplus": lambda x: softplus(x, 3.0),
    "soft_rank": lambda x: soft_rank(x, 0.3),
    "soft_sort": lambda x: soft_sort(x, 0.3),
    "soft_sort_desc": lambda x: soft_sort(x, 0.3, descending=True),
}


@pytest.mark.parametrize("name", list(PRIMITIVES))
def test_gradcheck_and_gradgradcheck_float64(name):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 5, dtype=torch.float64, generator=g).requires_grad_()
    x0 = torch.zeros(1, 5, dtype=torch.float64).requires_grad_()  # ties and kinks of the originals
    for inp in (x, x0):
        assert torch.autograd.gradcheck(PRIMITIVES[name], (inp,))
        assert torch.autograd.gradgradcheck(PRIMITIVES[name], (inp,))


@pytest.mark.parametrize("make", [max_surrogate, lambda: fraction_above(0.5), lambda: top_k_share(2),
                                  gini_surrogate], ids=["max", "share_above", "top_k_share", "gini"])
def test_surrogates_are_twice_differentiable(make):
    s = make()
    z = (torch.rand(2, 6, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.1)
    z.requires_grad_()
    assert torch.autograd.gradcheck(s, (z,)) and torch.autograd.gradgradcheck(s, (z,))


TEMPS = [1.0, 0.3, 0.1, 0.03, 0.01]


def _errors(fn, ref, temps=TEMPS):
    return [float((fn(t) - ref).abs().max()) for t in temps]


def _decreasing(errs):
    """Strictly decreasing until it reaches exactly 0 (float underflow), and positive at the start."""
    return errs[0] > 0 and all(b < a or b == 0.0 for a, b in itertools.pairwise(errs))


def test_smooth_max_min_within_t_log_n():
    x = torch.randn(4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    n = x.shape[-1]
    for t in TEMPS:
        gap_max = smooth_max(x, temperature=t) - x.amax(-1)
        gap_min = x.amin(-1) - smooth_min(x, temperature=t)
        for gap in (gap_max, gap_min):
            assert (gap >= 0).all() and (gap <= t * math.log(n) + 1e-12).all()
    assert _decreasing(_errors(lambda t: smooth_max(x, temperature=t), x.amax(-1)))


def test_smooth_step_abs_softplus_bounds():
    x = torch.linspace(-2, 2, 41, dtype=torch.float64)
    x = x[x.abs() > 1e-9]
    for t in TEMPS:
        step_err = (smooth_step(x, t) - (x > 0).double()).abs()
        assert (step_err <= torch.exp(-x.abs() / t) + 1e-15).all()
        abs_gap = smooth_abs(x, t) - x.abs()
        assert (abs_gap >= 0).all() and (abs_gap <= t + 1e-15).all()
        sp_gap = softplus(x, 1 / t) - x.clamp(min=0)
        assert (sp_gap >= -1e-12).all() and (sp_gap <= t * math.log(2) + 1e-15).all()
    assert _decreasing(_errors(lambda t: smooth_abs(x, t), x.abs()))
    assert _decreasing(_errors(lambda t: softplus(x, 1 / t), x.clamp(min=0)))
    assert _decreasing(_errors(lambda t: smooth_step(x, t), (x > 0).double()))


def test_soft_rank_and_soft_sort_converge_to_the_exact_ones():
    x = torch.tensor([[0.3, -1.2, 2.0, 0.9, 0.1, -0.4]], dtype=torch.float64)
    exact_rank = torch.argsort(torch.argsort(x, dim=-1), dim=-1).double() + 1
    n = x.shape[-1]
    delta = float(torch.diff(torch.sort(x).values).min())  # smallest gap: 0.2
    for t in TEMPS:
        err = (soft_rank(x, t) - exact_rank).abs().max()
        assert err <= (n - 1) * math.exp(-delta / t) + 1e-12
    rank_err = _errors(lambda t: soft_rank(x, t), exact_rank)
    sort_err = _errors(lambda t: soft_sort(x, t), torch.sort(x).values)
    assert _decreasing(rank_err) and _decreasing(sort_err)
    assert sort_err[-1] < 1e-8
    torch.testing.assert_close(soft_sort(x, 0.01, descending=True), torch.sort(x, descending=True).values)
    # ties: soft ranks split the difference (average rank), as for scipy's rankdata
    tied = torch.tensor([1.0, 1.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(soft_rank(tied, 0.01), torch.tensor([1.5, 1.5, 3.0], dtype=torch.float64))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_bad_temperatures_are_typed_errors(bad):
    with pytest.raises(IndicatorError, match="must be a positive finite number"):
        smooth_max(torch.zeros(3), temperature=bad)


def test_gap_report_on_a_recorded_panel():
    from aumann.attribution import Panel

    rng = np.random.default_rng(0)
    values = rng.gamma(2.0, 1.0, size=(5, 20, 1))
    panel = Panel(values, features=["wealth"])
    for make, bound in [(lambda t: max_surrogate(0, t), lambda t: t * math.log(20)),
                        (lambda t: gini_surrogate(0, t), None), (lambda t: top_k_share(2, 0, t), None)]:
        reports = [gap_report(make(t), panel) for t in (0.3, 0.1, 0.03, 0.01)]
        maxes = [r.max_gap for r in reports]
        assert _decreasing(maxes), maxes
        r = reports[-1]
        assert r.f_original.shape == (5,) and r.abs_gap.shape == (5,)
        np.testing.assert_allclose(r.abs_gap, np.abs(r.f_smooth - r.f_original))
        assert r.mean_gap <= r.max_gap
        if bound is not None:
            assert all(rep.max_gap <= bound(t) for rep, t in zip(reports, (0.3, 0.1, 0.03, 0.01)))
    # the exact originals, computed independently in numpy
    r = gap_report(gini_surrogate(0, 1e-4), values)
    x = values[..., 0]
    gini_np = np.abs(x[:, :, None] - x[:, None, :]).sum((1, 2)) / (2 * 20 * 20 * x.mean(1))
    np.testing.assert_allclose(r.f_original, gini_np)
    np.testing.assert_allclose(r.f_smooth, gini_np, atol=1e-3)
    share = np.sort(x, axis=1)[:, ::-1][:, :2].sum(1) / x.sum(1)
    np.testing.assert_allclose(gap_report(top_k_share(2), values).f_original, share)


def test_gap_report_passes_panel_context_and_checks_shapes():
    from aumann.attribution import Panel

    panel = Panel(np.ones((3, 4, 1)), context={"price": np.array([1.0, 2.0, 3.0])})
    s = smooth_indicator(lambda z, ctx: z[..., 0].sum(-1) * ctx["price"],
                         lambda z, ctx: z[..., 0].sum(-1) * ctx["price"] + 0.5, "priced")
    r = gap_report(s, panel)
    np.testing.assert_allclose(r.f_original, [4.0, 8.0, 12.0])
    assert r.max_gap == pytest.approx(0.5) and r.kendall_tau is None
    with pytest.raises(IndicatorError, match="one value per step"):
        gap_report(Surrogate(lambda z: z.sum(), lambda z: z.sum(), "scalar"), np.ones((3, 4, 1)))
    with pytest.raises(IndicatorError, match=r"\(T, N, D\)"):
        gap_report(max_surrogate(), np.ones((4, 1)))


@pytest.mark.parametrize("shape", [(0, 4, 1), (3, 0, 1), (3, 4, 0)])
def test_gap_report_on_an_empty_array_is_a_typed_error(shape):
    with pytest.raises(IndicatorError, match="at least one step, agent and feature"):  # was numpy's ValueError
        gap_report(max_surrogate(), np.ones(shape))


def test_gap_report_refuses_k_zero_instead_of_reporting_the_default_k():
    from aumann.attribution import Panel

    panel = Panel(np.random.default_rng(0).gamma(2.0, 1.0, size=(2, 20, 1)))
    with pytest.raises(IndicatorError, match=r"k \(top-k Jaccard size\) must be an integer ≥ 1; got 0"):
        gap_report(max_surrogate(), panel, ranks=True, k=0)
    assert gap_report(max_surrogate(), panel, ranks=True, k=3).k == 3
    assert gap_report(max_surrogate(), panel, ranks=True).k == 2  # the default ⌈N/10⌉


def test_rank_metrics():
    a = np.array([0.1, 0.5, 0.3, 0.9])
    assert kendall_tau(a, a) == pytest.approx(1.0) and kendall_tau(a, -a) == pytest.approx(-1.0)
    assert topk_jaccard(a, a, 2, by="abs") == 1.0
    assert topk_jaccard(a, np.array([0.9, 0.1, 0.3, 0.2]), 1, by="abs") == 0.0  # {3} vs {0}
    assert topk_jaccard(a, np.array([0.0, 0.5, 0.1, 0.9]), 2, by="abs") == 1.0


def test_gap_report_ranks_of_an_all_tied_attribution_are_undefined_without_a_numpy_warning():
    # mesa-examples' forest fire once the fire is out: φ = 0 for every tree at every step, so every per-step τ is
    # undefined; as_dict() averaged them with np.nanmean and printed "RuntimeWarning: Mean of empty slice"
    # twice into every `aumann run` of such a model
    import warnings

    from aumann.attribution import Panel

    panel = Panel(np.zeros((3, 6, 1)), features=["burned"])
    s = Surrogate(lambda z: z[..., 0].mean(-1), lambda z: z[..., 0].mean(-1), "burned share")
    r = gap_report(s, panel, ranks=True)
    assert np.isnan(r.kendall_tau).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = r.as_dict()
    # the top-k Jaccard of two all-tied attributions read 1.0 (the same tie-break twice, not agreement): undefined
    # too, as τ is, and left out of the mean like τ
    assert np.isnan(r.top_k_jaccard).all()
    assert math.isnan(out["mean_kendall_tau"]) and math.isnan(out["mean_top_k_jaccard"])
