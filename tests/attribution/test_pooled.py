"""Fast paths (running sums, quadratic forms) equal plain evaluation on the same draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import (
    AgentwiseIndicator,
    AumannShapley,
    ExactBanzhaf,
    ExactShapley,
    LeaveOneOut,
    MaskedIndicatorGame,
    Panel,
    Problem,
    QuadraticIndicator,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.attribution.games import pooled_check_step
from aumann.attribution.pooled import GenericKernel, QuadraticKernel
from aumann.errors import AumannWarning, IndicatorError
from tests.attribution.baseline_games import additive_indicator, positive_panel, quadratic_indicator, softplus_indicator

METHODS = [
    ("loo", LeaveOneOut),
    ("exact_shapley", ExactShapley),
    ("exact_banzhaf", ExactBanzhaf),
    ("shapley", lambda fast: SampledShapley(permutations=37, fast=fast)),
    ("shapley_anti", lambda fast: SampledShapley(permutations=38, antithetic=True, fast=fast)),
    ("banzhaf_msr", lambda fast: SampledBanzhaf(samples=60, fast=fast)),
    ("banzhaf_marginal", lambda fast: SampledBanzhaf(samples=25, estimator="marginal", fast=fast)),
]


def _indicators(rng, N, D):
    W = rng.normal(size=(N, D))
    C = rng.normal(size=(N, N))
    np.fill_diagonal(C, rng.normal(size=N))
    return {
        "heat": indicators.get("heat"), "var": indicators.get("var"), "lin": indicators.get("lin"),
        "f_add": additive_indicator(W), "f_nl": softplus_indicator(W),
        "f_quad": quadratic_indicator(rng.normal(size=(N, D)), C),
    }


@pytest.mark.parametrize("baseline", ["zero", "mean"])
@pytest.mark.parametrize("name", ["heat", "var", "lin", "f_add", "f_nl", "f_quad"])
@pytest.mark.parametrize("label,make", METHODS, ids=[m[0] for m in METHODS])
def test_fast_path_equals_generic_on_the_same_draws(label, make, name, baseline, rng):
    T, N, D = 2, 8, 3
    z = positive_panel(rng, T, N, D)
    f = _indicators(np.random.default_rng(3), N, D)[name]
    fast = attribute(f, Panel(z), method=make(fast=True), baseline=baseline, rng=11)
    slow = attribute(f, Panel(z), method=make(fast=False), baseline=baseline, rng=11)
    assert fast.provenance["per_step"]["path"] != "generic"
    assert slow.provenance["per_step"]["path"] == "generic"
    np.testing.assert_allclose(fast.phi, slow.phi, atol=1e-10, rtol=0)
    if slow.stderr is not None:
        np.testing.assert_allclose(fast.stderr, slow.stderr, atol=1e-10, rtol=0)
    assert fast.n_evals == slow.n_evals


@pytest.mark.parametrize("reverse", [False, True])
def test_quadratic_blocks_equal_generic_prefix_marginals(reverse, rng):
    N = 11
    z = positive_panel(rng, 1, N)
    C = rng.normal(size=(N, N))
    f = quadratic_indicator(rng.normal(size=(N, 3)), C)
    game = MaskedIndicatorGame(Problem.build(f, Panel(z), "mean"), 0)
    fast = game.kernel()
    assert isinstance(fast, QuadraticKernel)
    fast.block = 3  # several blocks, and a short last one
    slow = game.kernel(fast=False)
    assert isinstance(slow, GenericKernel)
    perms = np.stack([rng.permutation(N) for _ in range(4)])
    for a, b in zip(fast.prefix_marginals(perms, reverse), slow.prefix_marginals(perms, reverse)):
        if a is None:
            assert b is None
        else:
            np.testing.assert_allclose(a, b, atol=1e-12)
    masks = rng.random((5, N)) < 0.5
    np.testing.assert_allclose(fast.values(masks), slow.values(masks), atol=1e-12)
    np.testing.assert_allclose(fast.flip_marginals(masks), slow.flip_marginals(masks), atol=1e-12)


def test_declared_indicators_evaluate_their_formulas(rng):
    N, D = 6, 3
    z = torch.as_tensor(rng.uniform(-1, 1, size=(4, N, D)))
    W = rng.normal(size=(N, D))
    C = rng.normal(size=(N, N))
    Q = rng.normal(size=(N, D))
    s = z.sum(-1).numpy()
    Cs = (C + C.T) / 2
    np.testing.assert_allclose(additive_indicator(W)(z).numpy(), (W * z.numpy()).sum((1, 2)))
    expected_quad = (Q * z.numpy() ** 2).sum((1, 2)) + 0.5 * np.einsum("bi,ij,bj->b", s, Cs, s)
    np.testing.assert_allclose(quadratic_indicator(Q, C)(z).numpy(), expected_quad)
    sp = softplus_indicator(W, a=0.35)(z).numpy()
    np.testing.assert_allclose(sp, np.log1p(np.exp(0.35 * (W * z.numpy()).sum((1, 2)))) / 0.35)
    with pytest.raises(IndicatorError, match="square"):
        QuadraticIndicator(np.ones((2, 3)))
    with pytest.raises(IndicatorError, match="callables"):
        AgentwiseIndicator(3)  # type: ignore[arg-type]


def test_pooled_sampled_shapley_at_moderate_n_is_efficient(rng):
    z = positive_panel(rng, 2, 2000)
    res = attribute("heat", Panel(z), method=SampledShapley(permutations=20, antithetic=True), rng=0)
    assert res.provenance["per_step"]["path"] == "additive"
    assert res.max_efficiency_gap < 1e-12
    ours = attribute("heat", Panel(z))
    # Shapley and Aumann–Shapley differ on heat only by O(1/N²) interactions: same ranking at the top
    assert np.argmax(ours.phi[0]) == np.argmax(res.phi[0])


@pytest.mark.parametrize("make", [lambda fast: SampledShapley(permutations=20, fast=fast), ExactShapley, LeaveOneOut],
                         ids=["shapley", "exact", "loo"])
def test_a_pooled_form_that_cancels_falls_back_to_plain_evaluation(make):
    """var's pooled ρ(m) = m₂ − m₁² cancels catastrophically on features far from 0 next to their spread: with
    an offset of 1e8 and the mean baseline the running sums gave f(z) = 8 for a true 2.25 (and every coalition
    value with it), silently. The kernel checks its two corners against f itself and falls back to plain
    evaluation (with a warning); fast=True refuses."""
    z = 1e8 + np.random.default_rng(0).normal(size=(1, 8, 2))
    g = z[0].sum(axis=1)
    with pytest.warns(AumannWarning, match="pooled form"):
        res = attribute("var", Panel(z), method=make(fast=None), baseline="mean", rng=1)
    plain = attribute("var", Panel(z), method=make(fast=False), baseline="mean", rng=1)
    assert res.provenance["per_step"]["path"] == "generic"
    assert abs(res.delta_v[0] - np.var(g)) < 1e-6 * np.var(g)
    np.testing.assert_array_equal(res.phi, plain.phi)
    with pytest.raises(IndicatorError, match="loses the precision"):
        attribute("var", Panel(z), method=make(fast=True), baseline="mean", rng=1)
    # where the running sums keep the precision (no offset), the fast path stays
    ok = attribute("var", Panel(z - 1e8), method=make(fast=None), baseline="mean", rng=1)
    assert ok.provenance["per_step"]["path"] == "additive"


def test_the_precision_check_needs_no_coalition_memory():
    """The corner check evaluates f at z and z⁰ only: a fast path under a budget too small for one plain
    coalition (N = 3000 under 64 KiB) still runs (the check first went through the coalition batching and raised
    MemoryBudgetError there)."""
    z = positive_panel(np.random.default_rng(0), 1, 3000)
    res = attribute("heat", Panel(z), method=SampledShapley(permutations=4, memory_budget=2**16), rng=0)
    assert res.provenance["per_step"]["path"] == "additive"


def test_a_coalition_value_does_not_depend_on_its_batch():
    """The running-sum kernel's v(S) is the same bits whatever other coalitions share its batch: a matrix product
    rounded a row differently with the number of rows, so memory_budget (the batch size) moved MSR Banzhaf's and
    the exact enumeration's last bits."""
    rng = np.random.default_rng(0)
    N = 3000
    z = positive_panel(rng, 1, N) * np.logspace(-6, 6, N)[None, :, None]
    kernel = MaskedIndicatorGame(Problem.build(indicators.get("heat"), Panel(z)), 0).kernel()
    masks = rng.random((64, N)) < 0.5
    full = kernel.values(masks)
    for c in (1, 3, 7, 33):
        parts = np.concatenate([kernel.values(masks[s:s + c]) for s in range(0, 64, c)])
        assert parts.tobytes() == full.tobytes(), c
    flips = kernel.flip_marginals(masks[:5])
    assert np.concatenate([kernel.flip_marginals(masks[s:s + 1]) for s in range(5)]).tobytes() == flips.tobytes()
    small = np.abs(rng.normal(size=(1, 12, 3)))
    a = attribute("heat", Panel(small), method=ExactShapley())
    b = attribute("heat", Panel(small), method=ExactShapley(memory_budget=2**16))
    assert a.phi.tobytes() == b.phi.tobytes()


# ------------------------------------------------------------------ a user's pooled form, checked between the ends
def _shapley_by_hand(v, n):
    """Exact Shapley values of the set function v (by the permutation-weighted formula, no aumann)."""
    import itertools
    import math

    phi = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for k in range(n):
            w = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for S in itertools.combinations(others, k):
                phi[i] += w * (v({*S, i}) - v(set(S)))
    return phi


def _cube(z_one_step, wrong):
    """f = (mean_i g_i)³ with g_i = Σ_d z_{i,d}, declaring a pooled form: the right one (ρ(m) = m³) or a wrong one,
    ρ(m) = m² M with M = mean g of the step, which equals f at m = 0 and m = M only (v(∅) and v(N))."""
    M = float(z_one_step.sum(-1).mean())
    rho = (lambda m: m[..., 0] ** 2 * M) if wrong else (lambda m: m[..., 0] ** 3)
    return indicators.FunctionIndicator(lambda z: z.sum(-1).mean(-1) ** 3, name="cube_wrong" if wrong else "cube",
                                        pooled=indicators.PooledForm(lambda z: z.sum(-1, keepdim=True), rho))


@pytest.mark.parametrize("make", [ExactShapley, lambda: SampledShapley(permutations=50), LeaveOneOut,
                                  lambda: SampledBanzhaf(samples=40)], ids=["exact", "sampled", "loo", "banzhaf"])
def test_a_pooled_form_that_is_not_f_between_the_ends_is_refused(make):
    """A pooled form checked only at v(∅) and v(N): ρ(m) = m² M for f = m³ gave exact Shapley values up to 0.033
    off ([0.135, 0.279, ...] for [0.146, 0.293, ...]), efficient, silently. Now a few seeded coalitions between
    the ends are checked against f itself; the right pooled form passes and gives the by-hand Shapley values."""
    z = np.abs(np.random.default_rng(0).normal(size=(1, 6, 2))) + 0.1
    with pytest.raises(IndicatorError, match=r"indicator 'cube_wrong': its pooled form is not f: at a coalition "
                                             r"between v\(∅\) and v\(N\) \(step index 0, \d of 6 agents at z"):
        attribute(_cube(z[0], wrong=True), Panel(z), method=make(), rng=0)
    res = attribute(_cube(z[0], wrong=False), Panel(z), method=ExactShapley())
    assert res.provenance["per_step"]["path"] == "additive"
    g = z[0].sum(-1)
    np.testing.assert_allclose(res.phi[0], _shapley_by_hand(lambda S: (sum(g[j] for j in S) / 6) ** 3, 6),
                               rtol=1e-12)


def _product(m_ref, rho):
    """f = m₁ m₂ (the means of the two features) declaring the linear-ψ pooled form ψ(z) = z with ``rho``."""
    return indicators.FunctionIndicator(lambda z: z.mean(-2)[..., 0] * z.mean(-2)[..., 1], name="product",
                                        pooled=indicators.PooledForm(lambda z: z, rho, linear_psi=True))


def test_the_pooled_linear_path_integral_checks_the_pooled_form_against_f():
    """The pooled-linear path integral takes f(z), f(z⁰) and every gradient from ρ, never evaluating f: a wrong ρ
    was attributed silently — ρ(q) = 3 q₁q₂ reported f = 1.304 for a true 0.4347, and ρ(q) = q₁² m₂/m₁ (equal to f
    along the whole ray from 0, wrong gradient) φ up to 0.047 off. Both now raise (the first was then warned about
    as a loss of precision and integrated through f: it misses f by far more than rounding explains); the right form
    keeps the fast path. Reference: from the zero baseline φ_i = z_{i,1} m₂ / (2N) + z_{i,2} m₁ / (2N)."""
    z = np.abs(np.random.default_rng(0).normal(size=(1, 6, 2))) + 0.1
    m = z[0].mean(0)
    want = z[0, :, 0] * m[1] / 12 + z[0, :, 1] * m[0] / 12
    with pytest.raises(IndicatorError, match="'product': its pooled form is not f"):
        attribute(_product(m, lambda q: q[..., 0] ** 2 * (m[1] / m[0])), Panel(z))
    with pytest.raises(IndicatorError, match=r"'product': its pooled form is not f: at v\(N\) .* the running sums "
                                             r"ρ\(mean ψ\) give 1.3041065\d* and f itself 0.4347021\d*"):
        attribute(_product(m, lambda q: 3 * q[..., 0] * q[..., 1]), Panel(z))
    ok = attribute(_product(m, lambda q: q[..., 0] * q[..., 1]), Panel(z))
    assert ok.provenance["integrator"] == "pooled-linear"
    np.testing.assert_allclose(ok.phi[0], want, rtol=1e-12)


def _mean_square(linear_psi, psi=lambda z: z[..., :1] ** 2):
    """f = mean_i z_{i,0}², declaring the (right) pooled form ψ(z) = z₀², ρ(m) = m — and whether ψ is linear."""
    return indicators.FunctionIndicator(lambda z: (z[..., 0] ** 2).mean(-1), name="mean_square",
                                        pooled=indicators.PooledForm(psi, lambda m: m[..., 0], linear_psi=linear_psi))


def test_a_pooled_psi_declared_linear_that_is_not_is_refused_by_the_path_integral():
    """ψ(z) = z₀² declared linear: the pooled-linear integral takes ψ(e_d) for A and integrates ρ(mean z A), so f,
    Δv and φ all came from mean(z)² instead of mean(z²): φ up to 0.58 off, efficient to 2e-16, silently (the check
    against f compares ρ(mean_i ψ(z_i)), which this ψ passes). Reference: f is homogeneous of degree 2, so from the
    zero baseline φ_i = z_{i,0}² / N."""
    z = np.abs(np.random.default_rng(0).normal(size=(3, 6, 2))) + 0.1
    with pytest.raises(IndicatorError, match=r"'mean_square' declares PooledForm\(linear_psi=True\), but its psi "
                                             r"is not linear"):
        attribute(_mean_square(True), Panel(z))
    ok = attribute(_mean_square(False), Panel(z))  # the honest declaration: f itself is integrated
    np.testing.assert_allclose(ok.phi, z[..., 0] ** 2 / 6, rtol=1e-10)


def test_a_pooled_psi_that_raises_is_an_indicator_error_naming_the_pooled_form():
    z = np.abs(np.random.default_rng(0).normal(size=(2, 5, 2))) + 0.1
    with pytest.raises(IndicatorError, match=r"the pooled form of indicator 'mean_square' raised ZeroDivisionError"):
        attribute(_mean_square(True, psi=lambda z: 1 / 0), Panel(z))


def test_aumanns_own_pooled_forms_are_checked_at_the_ends_only(monkeypatch):
    """The seeded coalitions cost one O(N) evaluation of f each: built-in pooled forms (trusted) skip them, and the
    pooled-linear path integral of lin and heat evaluates f nowhere, as before; a user's form pays for them at one
    seeded step of the problem, not at every step."""
    calls = []
    real = Problem.evaluate
    monkeypatch.setattr(Problem, "evaluate", lambda self, z, t: calls.append(z.shape[0]) or real(self, z, t))
    z = positive_panel(np.random.default_rng(0), 1, 50)
    for name, ends in (("var", [2]), ("heat", [2])):
        calls.clear()
        MaskedIndicatorGame(Problem.build(indicators.get(name), Panel(z)), 0).kernel()
        assert calls == ends, name
    calls.clear()
    res = attribute("heat", Panel(z), method=AumannShapley(closed_form=False))
    assert res.provenance["integrator"] == "pooled-linear"
    assert calls == []
    user = indicators.FunctionIndicator(lambda z: indicators.get("var")(z), name="user_var",
                                        pooled=indicators.get("var").pooled)
    z3 = positive_panel(np.random.default_rng(0), 3, 50)
    problem = Problem.build(user, Panel(z3))
    for t in range(3):  # the corners at every step, the coalitions between them at one seeded step per problem
        calls.clear()
        MaskedIndicatorGame(problem, t).kernel()
        assert calls == ([2, 1, 1, 1] if t == pooled_check_step(3) else [2]), t


# ------------------------------------------------------------------ a wrong pooled form against a lost precision
def _cube_squared():
    """f = (mean_i g_i)³ declaring ρ(m) = m²: plainly wrong (1.77 for f's 2.36 at v(N) of the panel below)."""
    return indicators.FunctionIndicator(lambda z: z.sum(-1).mean(-1) ** 3, name="cube_sq",
                                        pooled=indicators.PooledForm(lambda z: z.sum(-1, keepdim=True),
                                                                     lambda m: m[..., 0] ** 2))


def _user_var():
    """A user's variance declaring var's own pooled form ρ(m) = m₂ − m₁² (right, but it cancels at large offsets)."""
    var = indicators.get("var")
    return indicators.FunctionIndicator(lambda z: var(z), name="user_var", pooled=var.pooled)


@pytest.mark.parametrize("make", [ExactShapley, lambda: SampledShapley(permutations=20), LeaveOneOut,
                                  lambda: SampledBanzhaf(samples=40)], ids=["exact", "sampled", "loo", "banzhaf"])
def test_a_wrong_pooled_form_is_refused_and_a_lost_precision_falls_back_to_f(make):
    """Ends that disagree with f were all taken for a loss of precision: ρ(m) = m² for f = m³ (v(N) 1.771 by the
    running sums, 2.357 by f) was warned about as "loses the precision of f ... features far from 0 next to their
    spread" and f used instead. The disagreement is now measured against what rounding the sums can move ρ by
    (2.6e-14 there): a wrong form raises, naming the indicator; a user's variance at an offset of 1e8 (running sums
    2 for f's 0.4913, where rounding reaches 528) still loses its precision honestly: warned, f itself used, and
    its exact Shapley values those of f evaluated directly on every coalition."""
    z = np.abs(np.random.default_rng(0).normal(size=(1, 6, 2))) + 0.1
    with pytest.raises(IndicatorError, match=r"indicator 'cube_sq': its pooled form is not f: at v\(N\) \(step "
                                             r"index 0, every agent at z\) the running sums ρ\(mean ψ\) give "
                                             r"1.77123\d* and f itself 2.35729\d*"):
        attribute(_cube_squared(), Panel(z), method=make(), rng=0)
    zz = 1e8 + np.random.default_rng(1).normal(size=(1, 8, 1))
    base = np.full((1, 8, 1), zz.mean())
    with pytest.warns(AumannWarning, match=r"'user_var': its pooled form \(running sums\) loses the precision"):
        res = attribute(_user_var(), Panel(zz), method=make(), baseline=base, rng=0)
    assert res.provenance["per_step"]["path"] == "generic"
    plain = make()
    plain.fast = False  # f evaluated on masks from the start
    np.testing.assert_array_equal(res.phi, attribute(_user_var(), Panel(zz), method=plain, baseline=base, rng=0).phi)
    if isinstance(make(), ExactShapley):
        g = zz[0, :, 0]
        v = lambda S: float(np.var(np.where(np.isin(np.arange(8), list(S)), g, base[0, 0, 0])))  # noqa: E731
        np.testing.assert_allclose(res.phi[0], _shapley_by_hand(v, 8), rtol=1e-6, atol=1e-9)


def test_the_pooled_linear_path_integral_falls_back_to_f_on_a_lost_precision_only():
    """f = mean(z₁ − z₂) declared as ρ(q) = q₁ − q₂ of the means: right, but the means of features at 1e8 cancel
    (running sums 0.0250164 for f's 0.0250163). Warned, integrated through f, φ_i = (z_{i,1} − z_{i,2}) / N."""
    z = 1e8 + np.random.default_rng(0).normal(size=(1, 6, 2))
    gap = indicators.FunctionIndicator(lambda z: (z[..., 0] - z[..., 1]).mean(-1), name="gap",
                                       pooled=indicators.PooledForm(lambda z: z, lambda q: q[..., 0] - q[..., 1],
                                                                    linear_psi=True))
    with pytest.warns(AumannWarning, match=r"'gap': its pooled form does not reproduce f at step index 0"):
        res = attribute(gap, Panel(z), method=AumannShapley())
    assert res.provenance["integrator"] == "autograd"
    np.testing.assert_allclose(res.phi[0], (z[0, :, 0] - z[0, :, 1]) / 6, rtol=0, atol=1e-7)  # z's ulp: 1.5e-8


def test_a_wrong_rho_written_for_one_leading_dimension_is_refused_too():
    """ρ(m) = m[:, 0]² serves the kernel (sums (B, P)); the rounding reach stacked its points as (K, 1 + 2P, P), ρ
    failed there, and the unknown reach let the wrong form pass as a loss of precision (warned, f used)."""
    z = np.abs(np.random.default_rng(0).normal(size=(1, 6, 2))) + 0.1
    wrong = indicators.FunctionIndicator(lambda z: z.sum(-1).mean(-1) ** 3, name="cube_1d",
                                         pooled=indicators.PooledForm(lambda z: z.sum(-1, keepdim=True),
                                                                      lambda m: m[:, 0] ** 2))
    with pytest.raises(IndicatorError, match=r"indicator 'cube_1d': its pooled form is not f: at v\(N\)"):
        attribute(wrong, Panel(z), method=ExactShapley())
