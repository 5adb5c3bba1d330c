"""MegaScale-Social indicators on a simulated panel: closed forms against the engine's path integral,
the originals, masking curves, tier shares and the ASB-relevant permutation invariance of f_prop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann import scenarios
from aumann.attribution import AumannShapley, ExactShapley, LeaveOneOut, Panel, SampledShapley, attribute
from aumann.attribution.indicators import evaluate
from aumann.scenarios.megascale_social.features import baseline_features
from aumann.scenarios.megascale_social.indicators import PropagationRisk, cascade_indicator
from aumann.studies.megascale.measures import cascade_masking_curve
from aumann.studies.megascale.scale import tier_shares
from aumann.tiers import tier_codes, tiers_by_rank

SC = scenarios.get("megascale-social")


@pytest.fixture(scope="module")
def state():
    cfg = SC.load_config(agents=800, steps=6)
    run = SC.simulate(cfg, rng=3)
    x = np.asarray(run.panel.values[5], dtype=np.float64)
    return cfg, run, x, baseline_features(run.model, cfg)


def test_propagation_risk_closed_forms_match_the_path_integral(state):
    cfg, _, x, z0 = state
    f = SC.indicator(cfg)
    phi, f1, f0, info = f.exact(x, z0)
    assert info["scalar_change"] < 1e-13
    assert f1 == pytest.approx(float(evaluate(f, x))) and abs(phi.sum() - (f1 - f0)) < 1e-13
    engine = attribute(f, Panel(x[None]), method=AumannShapley(steps=64, closed_form=False), baseline=z0)
    assert engine.provenance["integrator"] == "pooled-linear"
    np.testing.assert_allclose(phi, engine.phi[0], atol=1e-15)
    # generic autograd (no pooled fast path) as an independent route
    auto = attribute(f, Panel(x[None]), method=AumannShapley(steps=64, closed_form=False, pooled_fast_path=False),
                     baseline=z0)
    np.testing.assert_allclose(phi, auto.phi[0], atol=1e-13)
    zero = attribute(f, Panel(x[None]))  # zero baseline: the heat-type closed form
    assert zero.provenance["closed_form"]
    np.testing.assert_allclose(zero.phi[0], attribute(f, Panel(x[None]), method=AumannShapley(
        steps=64, closed_form=False)).phi[0], atol=1e-14)


def test_float32_panel_is_upcast_step_by_step(state):
    cfg, run, _, z0 = state
    f = SC.indicator(cfg)
    assert run.panel.values.dtype == np.float32
    res = attribute(f, run.panel, method=AumannShapley(steps=32, closed_form=False), baseline=z0)
    assert res.phi.dtype == np.float64 and res.max_efficiency_gap < 1e-12
    ref = np.stack([f.exact(np.asarray(run.panel.values[t], np.float64), z0)[0] for t in range(run.panel.T)])
    np.testing.assert_allclose(res.phi, ref, atol=1e-12)


def test_originals_are_hard_thresholds(state):
    cfg, _, x, _ = state
    f, f_orig = SC.indicators(cfg)
    b = x[:, 0]
    m_w, m_a = x[:, 4].mean(), (x[:, 2] + x[:, 3]).mean()
    assert float(evaluate(f_orig, x)) == pytest.approx(np.log1p(cfg.prop_scale * m_w * (b > 0.3).mean() * m_a))
    assert float(evaluate(f, x)) == pytest.approx(np.log1p(cfg.prop_scale * m_w * x[:, 5].mean() * m_a))


def test_propagation_risk_is_permutation_invariant_cascade_is_not(state):
    cfg, run, x, _ = state
    perm = np.random.default_rng(0).permutation(x.shape[0])
    f = SC.indicator(cfg)
    assert float(evaluate(f, x[perm])) == pytest.approx(float(evaluate(f, x)), rel=1e-13)
    fc = cascade_indicator(run.model.world, cfg)
    assert fc.value(x[perm]) != pytest.approx(fc.value(x))


def test_cascade_pressure_routes_agree_and_match_enumeration(state):
    cfg, run, x, z0 = state
    fc = cascade_indicator(run.model.world, cfg)
    r = x[:, 4] * x[:, 5] * (x[:, 2] + x[:, 3])
    A = run.model.world.network.symmetric()
    assert fc.value(x) == pytest.approx(np.log1p(cfg.cascade_scale / A.nnz * r @ (A @ r)), rel=1e-13)
    phi, f1, f0, _ = fc.exact(x, z0)
    assert abs(phi.sum() - (f1 - f0)) < 1e-12
    np.testing.assert_allclose(fc.gauss_legendre(x, z0, steps=96), phi, atol=1e-10)
    # on a 12-agent sub-population (induced subgraph) the sampled Shapley value converges to enumeration
    hubs = np.argsort(-run.model.world.network.follower_count())[:12]
    sub = fc.subset(hubs)
    xs, bs = x[hubs], z0[hubs]
    exact = attribute(sub, Panel(xs[None]), method=ExactShapley(), baseline=bs).phi[0]
    ss = attribute(sub, Panel(xs[None]), method=SampledShapley(permutations=3000), baseline=bs, rng=1)
    np.testing.assert_allclose(ss.phi[0], exact, atol=5 * ss.stderr[0].max() + 1e-12)
    loo = attribute(sub, Panel(xs[None]), method=LeaveOneOut(), baseline=bs).phi[0]
    ref = np.array([sub.value(xs) - sub.value(np.where(np.arange(12)[:, None] == i, bs, xs)) for i in range(12)])
    np.testing.assert_allclose(loo, ref, atol=1e-12)


def test_cascade_masking_curve_equals_direct_evaluation(state):
    cfg, run, x, z0 = state
    fc = cascade_indicator(run.model.world, cfg)
    order = np.argsort(-x[:, 4])
    ks = [1, 3, 10, 30, 100, 3, 1]
    got = cascade_masking_curve(fc, x, z0, order, ks)
    want = []
    for k in ks:
        z = x.copy()
        z[order[:k]] = z0[order[:k]]
        want.append(fc.value(z))
    np.testing.assert_allclose(got, want, atol=1e-13)


def test_tiers_and_shares():
    w = np.array([5.0, 1, 1, 2, 3, 0, 0, 9, 1, 1] * 10)
    labels = tiers_by_rank(w)  # the one tier split (aumann.tiers), one label set
    tier = tier_codes(labels)
    assert (tier == 0).sum() == 1 and (tier == 1).sum() == 9 and (tier == 2).sum() == 90
    assert w[tier == 0].min() >= w[tier == 1].max() >= w[tier == 2].max()
    shares = tier_shares(np.ones(100), labels)
    assert shares == pytest.approx({"top": 0.01, "mid": 0.09, "tail": 0.90})
    assert np.isnan(tier_shares(np.zeros(100), labels)["top"])


def test_indicators_take_float32_batches(state):
    cfg, _, x, _ = state
    f = SC.indicator(cfg)
    out32 = f(torch.as_tensor(x.astype(np.float32))[None])
    assert out32.dtype == torch.float64
    assert float(out32[0]) == pytest.approx(float(evaluate(f, x)), rel=1e-6)
    assert isinstance(f, PropagationRisk)


def test_visibility_biased_draws_follow_the_weights():
    from aumann.studies.megascale.scale import _draw

    p = np.array([0.5, 0.3, 0.15, 0.05])
    rng = np.random.default_rng(0)
    first = np.bincount([_draw(rng, 4, 1, p)[0] for _ in range(20_000)], minlength=4) / 20_000
    np.testing.assert_allclose(first, p, atol=0.015)  # a single draw picks i with probability p_i
    two = [tuple(_draw(rng, 4, 2, p)) for _ in range(2000)]
    assert all(len(set(t)) == 2 for t in two)  # without replacement


def _product_means_case(kernel_type, *, seed, n, columns):
    """(rng, n, an f_prop masking kernel over n players): the first column is kept by the baseline (a constant
    factor), the second and third are moved to 0.2 and 0, a fourth (if any) halved."""
    rng = np.random.default_rng(seed)
    a = np.abs(rng.normal(size=(n, columns)))
    b = a.copy()
    b[:, 1], b[:, 2] = 0.2, 0.0
    if columns > 3:
        b[:, 3] *= 0.5
    return rng, n, kernel_type(a, b, scale=10.0)


def test_product_means_kernel_compiled_is_bit_identical(monkeypatch):
    """f_prop's masking kernel: the compiled one-pass kernel and the numpy path give the same bits."""
    from aumann.attribution import jit_sampling
    from aumann.scenarios.megascale_social.indicators import ProductMeansKernel

    if not jit_sampling.available():
        pytest.skip("numba is not installed")
    rng, n, kernel = _product_means_case(ProductMeansKernel, seed=0, n=30_011, columns=3)
    perms = np.stack([rng.permutation(n) for _ in range(2)])
    fwd, rev = kernel.prefix_marginals(perms.astype(np.int32), True)
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    ref_f, ref_r = kernel.prefix_marginals(perms, True)
    np.testing.assert_array_equal(fwd, ref_f)
    np.testing.assert_array_equal(rev, ref_r)
    # the antithetic unit, written once per player: the same bits as the two directions added and halved
    units = kernel.antithetic_units(perms).numpy()  # numpy path (AUMANN_NUMBA=0 here)
    np.testing.assert_array_equal(units, (ref_f + ref_r) * 0.5)
    monkeypatch.delenv("AUMANN_NUMBA")
    for dtype in (np.int32, np.int64):
        np.testing.assert_array_equal(kernel.antithetic_units(perms.astype(dtype)).numpy(), (ref_f + ref_r) * 0.5)
        np.testing.assert_array_equal(kernel.antithetic_units(perms[:1].astype(dtype)).numpy(),
                                      (ref_f[:1] + ref_r[:1]) * 0.5)


@pytest.mark.parametrize("segment", [1000, 4096, 1 << 20])
@pytest.mark.parametrize("idle", [0, 1])
def test_product_means_antithetic_units_in_segments_are_the_whole_walks_bits(segment, idle, monkeypatch):
    """The antithetic units walk a permutation in segments (running sums carried across, ρ and marginals per
    segment, pipelined on a helper thread where a core is idle): the bits of the numpy path's whole rows."""
    from aumann.attribution import jit_sampling
    from aumann.scenarios.megascale_social import indicators as ind

    if not jit_sampling.available():
        pytest.skip("numba is not installed")
    rng, n, kernel = _product_means_case(ind.ProductMeansKernel, seed=3, n=20_011, columns=4)
    perms = np.stack([rng.permutation(n) for _ in range(3)])
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    ref_f, ref_r = kernel.prefix_marginals(perms, True)
    monkeypatch.delenv("AUMANN_NUMBA")
    monkeypatch.setattr(ind, "_SEGMENT", segment)
    monkeypatch.setattr(ind, "idle_cores", lambda: idle)
    for p in range(3):
        np.testing.assert_array_equal(kernel.antithetic_units(perms[p:p + 1].astype(np.int32)).numpy()[0],
                                      (ref_f[p] + ref_r[p]) * 0.5)


def test_product_means_sampled_shapley_walks_two_units_at_once_with_the_same_bits(monkeypatch):
    """Plain sampled Shapley on f_prop's kernel takes two antithetic units per chunk (one whole walk per thread;
    one unit at a time left the second core idle wherever a core was busy) — and the chunk never changes a bit."""
    from aumann.attribution import SampledShapley
    from aumann.scenarios.megascale_social import indicators as ind

    _, _, kernel = _product_means_case(ind.ProductMeansKernel, seed=5, n=20_011, columns=3)
    assert kernel.chunk_permutations() == 4  # two antithetic units: a permutation and its reverse each
    v0, vN = kernel.ends()
    method = SampledShapley(permutations=12, antithetic=True)
    taken: list[int] = []
    units = kernel.antithetic_units
    monkeypatch.setattr(kernel, "antithetic_units", lambda perms: (taken.append(len(perms)), units(perms))[1])
    phi = method.estimate(kernel, v0, vN, np.random.default_rng(2)).phi
    assert taken == [2, 2, 2]
    for chunk in (1, 2, 6):
        monkeypatch.setattr(kernel, "chunk_permutations", lambda c=chunk: c)
        np.testing.assert_array_equal(method.estimate(kernel, v0, vN, np.random.default_rng(2)).phi, phi)
