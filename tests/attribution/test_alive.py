"""Indicators over the living (issue 11): alive-aware indicators, f_values and φ independent of dead rows,
every method respecting the mask; and the symmetric (average-rank) subgradient of sorting built-ins."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aumann.attribution import (
    AumannShapley,
    ExactBanzhaf,
    ExactShapley,
    Indicator,
    LeaveOneOut,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.attribution.indicators import evaluate
from aumann.attribution.smoothing import top_k_share
from aumann.errors import IndicatorError, NoLivingAgentsError
from aumann.simulators import indicator_values

BUILTINS = ["lin", "heat", "var", "gini", "pairwise"]


# ---------------------------------------------------------------- independent numpy references
def np_indicator(name: str, z: np.ndarray) -> float:
    """f on the (n, D) living rows only, straight from the definitions (no torch, no sorting)."""
    g = z.sum(axis=1)
    n = g.size
    if name == "lin":
        return float(g.mean())
    if name == "heat":
        return float(np.log1p(np.prod(z.mean(axis=0))))
    if name == "var":
        return float(np.var(g))
    if name == "gini":
        return float(np.abs(g[:, None] - g[None, :]).sum() / (2 * n * n))
    if name == "pairwise":
        return float(sum(g[i] * g[j] for i in range(n) for j in range(i + 1, n)) / n**2)
    raise AssertionError(name)


def brute_shapley(v, players: list[int]) -> dict[int, float]:
    """Shapley values over ``players`` by enumerating every permutation (tiny n only)."""
    phi = dict.fromkeys(players, 0.0)
    perms = list(itertools.permutations(players))
    for perm in perms:
        coalition: list[int] = []
        before = v(coalition)
        for p in perm:
            coalition.append(p)
            after = v(coalition)
            phi[p] += after - before
            before = after
    return {p: s / len(perms) for p, s in phi.items()}


def panel_with_dead(seed: int = 0, T: int = 4, N: int = 7, D: int = 2, dead_value: float = 0.0):
    rng = np.random.default_rng(seed)
    z = rng.gamma(2.0, size=(T, N, D))
    alive = rng.random((T, N)) < 0.6
    alive[:, 0] = True
    alive[:, 1] = True
    alive[0, 2:] = np.arange(2, N) % 2 == 0  # a fixed mixed step
    z = np.where(alive[..., None], z, dead_value)
    return z, alive


def with_dead(z, alive, dead_value):
    return np.where(alive[..., None], z, dead_value)


def living_baseline(shape, alive, seed: int, dead_value: float):
    """A (T, N, D) baseline: fixed living rows, ``dead_value`` on dead rows."""
    b = np.abs(np.random.default_rng(seed).normal(size=shape)) * 0.5
    return np.where(alive[..., None], b, dead_value)


# ---------------------------------------------------------------- the motivating bug: f_values
@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("baseline", ["zero", "mean", "pre-event", "previous", "array"])
def test_f_values_are_the_indicator_over_the_living(name, baseline):
    z, alive = panel_with_dead(1, dead_value=-7.0)
    base = living_baseline(z.shape, alive, 5, 3.0) if baseline == "array" else baseline
    res = attribute(name, Panel(z, alive=alive), baseline=base)
    expected = [np_indicator(name, z[t][alive[t]]) for t in range(z.shape[0])]
    np.testing.assert_allclose(res.f_values, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(res.phi[~alive], 0.0)  # dead rows still get φ = 0
    if name != "gini" or baseline in ("zero", "mean"):  # gini's path may cross kinks (quadrature error)
        np.testing.assert_allclose(res.phi.sum(axis=1), res.delta_v, atol=1e-9)  # efficiency


def test_mean_energy_at_t0_does_not_depend_on_the_baseline():
    # the issue's symptom on a small panel: dead rows held at the baseline entered the mean
    energy = np.array([[[20.0], [10.0], [0.0], [0.0]]])
    alive = np.array([[True, True, False, False]])
    for baseline in ("zero", "mean", np.full((1,), 50.0)):
        res = attribute("lin", Panel(energy, alive=alive), baseline=baseline)
        assert res.f_values[0] == pytest.approx(15.0)
        assert res.phi[0, 2:].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", BUILTINS)
def test_evaluate_and_indicator_values_pass_the_mask(name):
    z, alive = panel_with_dead(2, dead_value=123.0)
    panel = Panel(z, alive=alive)
    expected = [np_indicator(name, z[t][alive[t]]) for t in range(z.shape[0])]
    np.testing.assert_allclose(evaluate(name, z, alive=alive), expected, rtol=1e-12)
    np.testing.assert_allclose(indicator_values(indicators.get(name), panel), expected, rtol=1e-12)
    # an (N,) mask broadcasts over the leading dimensions
    np.testing.assert_allclose(evaluate(name, z, alive=alive[0]),
                               [np_indicator(name, z[t][alive[0]]) for t in range(z.shape[0])], rtol=1e-12)


# ---------------------------------------------------------------- φ independent of the dead rows
METHODS = {
    "closed-form": lambda: AumannShapley(),
    "autograd": lambda: AumannShapley(steps=24, closed_form=False, pooled_fast_path=False),
    "pooled": lambda: AumannShapley(steps=24, closed_form=False),
    "exact-shapley": lambda: ExactShapley(),
    "exact-shapley-plain": lambda: ExactShapley(fast=False),
    "exact-banzhaf": lambda: ExactBanzhaf(),
    "loo": lambda: LeaveOneOut(),
    "loo-plain": lambda: LeaveOneOut(fast=False),
    "sampled-shapley": lambda: SampledShapley(permutations=16),
    "sampled-banzhaf": lambda: SampledBanzhaf(samples=32),
}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("name", BUILTINS)
def test_phi_does_not_depend_on_what_dead_rows_hold(name, method):
    z, alive = panel_with_dead(3, T=3, N=6)
    out = []
    for dead in (0.0, 5.0, -2.5):
        zz = with_dead(z, alive, dead)
        base = "zero" if method == "closed-form" else living_baseline(z.shape, alive, 9, dead + 1.0)
        res = attribute(name, Panel(zz, alive=alive), method=METHODS[method](), baseline=base, rng=4)
        np.testing.assert_array_equal(res.phi[~alive], 0.0)
        out.append(res)
    for res in out[1:]:
        np.testing.assert_allclose(res.phi, out[0].phi, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(res.f_values, out[0].f_values, rtol=1e-12)
        np.testing.assert_allclose(res.f_baseline, out[0].f_baseline, rtol=1e-12)


@pytest.mark.parametrize("name", BUILTINS)
def test_closed_form_equals_the_autograd_path_integral_with_a_mask(name):
    z, alive = panel_with_dead(4, T=5, N=9, D=3, dead_value=2.0)  # dead rows held at 0 by the zero baseline
    panel = Panel(z, alive=alive)
    closed = attribute(name, panel, per_feature=True)
    assert closed.provenance["closed_form"] is True
    autograd = attribute(name, panel, per_feature=True,
                         method=AumannShapley(steps=40, closed_form=False, pooled_fast_path=False))
    pooled = attribute(name, panel, per_feature=True, method=AumannShapley(steps=40, closed_form=False))
    for other in (autograd, pooled):
        np.testing.assert_allclose(other.phi, closed.phi, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(other.phi_features, closed.phi_features, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(other.f_values, closed.f_values, rtol=1e-12)
    np.testing.assert_array_equal(closed.phi_features[~alive], 0.0)


@pytest.mark.parametrize("name", BUILTINS)
def test_exact_shapley_is_shapley_over_the_living_players(name):
    z, alive = panel_with_dead(5, T=2, N=6, dead_value=4.0)
    base = living_baseline(z.shape, alive, 2, -1.0)
    res = attribute(name, Panel(z, alive=alive), method=ExactShapley(), baseline=base)
    for t in range(z.shape[0]):
        players = np.flatnonzero(alive[t]).tolist()

        def v(coalition, t=t, players=players):
            rows = np.stack([z[t, i] if i in coalition else base[t, i] for i in players])
            return np_indicator(name, rows)

        ref = brute_shapley(v, players)
        np.testing.assert_allclose(res.phi[t, players], [ref[p] for p in players], rtol=1e-9, atol=1e-12)
        assert res.phi[t, ~alive[t]].tolist() == [0.0] * int((~alive[t]).sum())
        # and the same as attributing the living sub-panel alone
        sub = attribute(name, Panel(z[t:t + 1, players]), method=ExactShapley(), baseline=base[t:t + 1, players])
        np.testing.assert_allclose(res.phi[t, players], sub.phi[0], rtol=1e-10, atol=1e-13)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), dead=st.floats(-50, 50, allow_nan=False), name=st.sampled_from(BUILTINS),
       n=st.integers(2, 7))
def test_property_dead_rows_never_matter(seed, dead, name, n):
    rng = np.random.default_rng(seed)
    z = rng.gamma(2.0, size=(2, n, 2))
    alive = rng.random((2, n)) < 0.6
    alive[:, rng.integers(n)] = True
    base = np.abs(rng.normal(size=(2, n, 2)))
    ref = attribute(name, Panel(with_dead(z, alive, 0.0), alive=alive), baseline=with_dead(base, alive, 0.0),
                    method=AumannShapley(steps=16, closed_form=False))
    res = attribute(name, Panel(with_dead(z, alive, dead), alive=alive), baseline=with_dead(base, alive, dead),
                    method=AumannShapley(steps=16, closed_form=False))
    np.testing.assert_allclose(res.phi, ref.phi, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(res.f_values, [np_indicator(name, z[t][alive[t]]) for t in range(2)], rtol=1e-10)
    assert np.all(res.phi[~alive] == 0.0)
    if name != "gini":  # gini is piecewise linear: the quadrature of a kinked path is not exact
        np.testing.assert_allclose(res.phi.sum(axis=1), res.delta_v, atol=1e-8)


# ---------------------------------------------------------------- user indicators
def test_user_indicator_without_the_keyword_works_as_before():
    z, alive = panel_with_dead(6, dead_value=0.0)
    panel = Panel(z, alive=alive)
    res = attribute(lambda q: q.sum(-1).mean(-1), panel, baseline=np.full(2, 1.5))
    held = np.where(alive[..., None], z, 1.5)  # dead rows at the baseline, all N rows enter f
    np.testing.assert_allclose(res.f_values, held.sum(-1).mean(-1), rtol=1e-12)
    assert not indicators.as_indicator(lambda q: q.sum(-1).mean(-1)).accepts_alive
    assert not indicators.as_indicator(lambda q, context: q.sum(-1).mean(-1)).accepts_alive


def test_user_function_opts_in_with_the_alive_keyword():
    seen = []

    def mean_of_the_living(z, alive=None):
        seen.append(None if alive is None else tuple(alive.shape))
        g = z[..., 0]
        if alive is None:
            return g.mean(-1)
        return torch.where(alive, g, 0.0).sum(-1) / alive.sum(-1)

    ind = indicators.as_indicator(mean_of_the_living)
    assert ind.accepts_alive and not ind.uses_context
    z, alive = panel_with_dead(7, D=1, dead_value=-9.0)
    res = attribute(mean_of_the_living, Panel(z, alive=alive), baseline="mean",
                    method=AumannShapley(steps=4, closed_form=False))
    np.testing.assert_allclose(res.f_values, [z[t, alive[t], 0].mean() for t in range(z.shape[0])], rtol=1e-12)
    assert all(s is not None and s[-1] == z.shape[1] for s in seen)
    np.testing.assert_allclose(res.phi.sum(1), res.delta_v, atol=1e-12)
    np.testing.assert_array_equal(res.phi[~alive], 0.0)
    # without dead rows the mask is not passed at all (the indicator sees alive=None, as before)
    seen.clear()
    attribute(mean_of_the_living, Panel(z), method=AumannShapley(steps=2, closed_form=False))
    assert set(seen) == {None}


def test_user_subclass_with_context_and_alive():
    class LivingShare(Indicator):
        name = "living_share_above"
        uses_context = True

        def forward(self, z, context=None, alive=None):
            above = torch.sigmoid(z[..., 0] - context["threshold"][..., None])
            mask, n = indicators.living(above, alive)
            return above.mean(-1) if mask is None else torch.where(mask, above, 0.0).sum(-1) / n

    z, alive = panel_with_dead(8, D=1, dead_value=100.0)
    ctx = {"threshold": np.linspace(1.0, 2.0, z.shape[0])}
    ind = LivingShare()
    assert ind.accepts_alive
    res = attribute(ind, Panel(z, alive=alive, context=ctx), method=AumannShapley(steps=30))
    sig = 1 / (1 + np.exp(-(z[..., 0] - ctx["threshold"][:, None])))
    np.testing.assert_allclose(res.f_values, [sig[t, alive[t]].mean() for t in range(z.shape[0])], rtol=1e-12)
    np.testing.assert_array_equal(res.phi[~alive], 0.0)


def test_linear_combination_mixes_aware_and_unaware_terms():
    z, alive = panel_with_dead(9, dead_value=0.0)
    panel = Panel(z, alive=alive)
    plain = indicators.as_indicator(lambda q: q.sum(-1).sum(-1))  # a sum over all rows (dead rows are 0)
    combo = 2.0 * indicators.get("var") + indicators.get("lin") - plain
    assert combo.accepts_alive
    res = attribute(combo, panel)
    expected = [2 * np_indicator("var", z[t][alive[t]]) + np_indicator("lin", z[t][alive[t]]) - z[t].sum()
                for t in range(z.shape[0])]
    np.testing.assert_allclose(res.f_values, expected, rtol=1e-12)
    auto = attribute(combo, panel, method=AumannShapley(steps=20, closed_form=False))
    np.testing.assert_allclose(auto.phi, res.phi, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- nobody alive
def test_nobody_alive_is_said_truly_of_an_indicator_that_sums_over_the_living():
    """The message said "averages over the living" of every alive-aware indicator, a sum over the living too."""
    from aumann.attribution.indicators import FunctionIndicator

    def total(z, alive=None):
        g = z[..., 0]
        return torch.where(torch.as_tensor(alive, dtype=torch.bool), g, 0.0).sum(-1) if alive is not None \
            else g.sum(-1)

    alive = np.ones((3, 4), bool)
    alive[1] = False
    panel = Panel(np.ones((3, 4, 1)), features=["x"], alive=alive, steps=[5, 6, 7])
    with pytest.raises(NoLivingAgentsError, match=r"'total' takes the alive mask .* step 6 \(index 1") as info:
        attribute(FunctionIndicator(total, name="total"), panel)
    assert "averag" not in str(info.value) and "n_t = 0" in str(info.value)


def test_a_step_with_nobody_alive_raises_naming_the_step():
    z, alive = panel_with_dead(10)
    alive[2] = False
    panel = Panel(z, alive=alive, steps=[10, 20, 30, 40])
    with pytest.raises(NoLivingAgentsError, match=r"step 30 .*index 2"):
        attribute("lin", panel)
    with pytest.raises(NoLivingAgentsError, match="index 2"):
        evaluate("var", z, alive=alive)
    with pytest.raises(NoLivingAgentsError):
        indicator_values(indicators.get("gini"), panel)
    assert issubclass(NoLivingAgentsError, IndicatorError)
    # an indicator that does not average over the living is unaffected, as before
    assert attribute(lambda q: q.sum(-1).sum(-1), panel).f_values.shape == (4,)


def test_a_mask_that_does_not_fit_is_a_typed_error():
    z, alive = panel_with_dead(11)
    with pytest.raises(IndicatorError, match="does not broadcast"):
        evaluate("lin", z, alive=alive[:, :3])


# ---------------------------------------------------------------- ties: the symmetric subgradient
def test_gini_ties_the_issue_case():
    panel = Panel(np.array([[[0.0], [0.0], [0.0], [3.0], [1.0]]]))
    res = attribute("gini", panel, baseline="mean")
    np.testing.assert_allclose(res.phi[0, :3], [0.064, 0.064, 0.064], atol=1e-12)
    exact = attribute("gini", panel, baseline="mean", method=ExactShapley())
    np.testing.assert_allclose(exact.phi[0, :3], [0.064, 0.064, 0.064], atol=1e-12)
    auto = attribute("gini", panel, method=AumannShapley(closed_form=False))  # zero baseline, integrated
    closed = attribute("gini", panel)
    np.testing.assert_allclose(auto.phi, closed.phi, atol=1e-12)


def test_gini_gradient_at_a_tie_is_the_average_of_the_tied_ranks():
    g = torch.tensor([[2.0, 5.0, 2.0, 2.0, 1.0]], dtype=torch.float64, requires_grad=True)
    indicators.get("gini")(g[..., None]).sum().backward()
    n = 5
    avg_ranks = np.array([3.0, 5.0, 3.0, 3.0, 1.0])  # ranks 2, 3, 4 shared by the three 2's
    np.testing.assert_allclose(g.grad[0].numpy(), (2 * avg_ranks - n - 1) / n**2, atol=1e-15)
    np.testing.assert_allclose(indicators.average_ranks_torch(g.detach())[0].numpy(), avg_ranks)


def _sorting_builtins():
    topk = top_k_share(2)
    return {"gini": indicators.get("gini"),
            "top_k_share": indicators.as_indicator(lambda z: topk.original(z + 0.5))}


@pytest.mark.parametrize("which", ["gini", "top_k_share"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_identical_agents_get_identical_phi(which, data):
    f = _sorting_builtins()[which]
    values = data.draw(st.lists(st.integers(0, 4), min_size=2, max_size=6))
    copies = data.draw(st.integers(2, 3))
    g = np.array(values + [values[0]] * (copies - 1), dtype=np.float64)  # agent 0 and its copies at the end
    perm = np.random.default_rng(len(values)).permutation(g.size)
    g = g[perm]
    twins = np.flatnonzero(g == values[0])
    panel = Panel(g.reshape(1, -1, 1))
    runs = [("zero", AumannShapley(steps=12, closed_form=False)), ("mean", AumannShapley(steps=12, closed_form=False))]
    if which == "gini":
        runs.append(("zero", AumannShapley(closed_form=True)))
    for base, method in runs:
        res = attribute(f, panel, method=method, baseline=base)
        np.testing.assert_allclose(res.phi[0, twins], res.phi[0, twins[0]], atol=1e-12)


def test_top_k_share_keeps_its_value_and_shares_the_boundary_tie():
    f = top_k_share(2).original
    x = torch.tensor([[3.0, 1.0, 1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    out = f(x[..., None])
    assert float(out.detach()) == pytest.approx(4.0 / 5.0)
    out.sum().backward()
    assert float(x.grad[0, 1]) == float(x.grad[0, 2])  # the two 1's tie for the second slot
    assert float(f(torch.tensor([[[1.0], [2.0], [3.0]]]))) == pytest.approx(5 / 6)
    assert math.isclose(float(top_k_share(9).original(torch.tensor([[[1.0], [2.0]]]))), 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (GPU tests run only where one exists)")
@pytest.mark.parametrize("name", BUILTINS)
def test_the_mask_on_cuda_equals_cpu(name):
    z, alive = panel_with_dead(12, T=3, N=40, D=2, dead_value=3.0)
    panel = Panel(z, alive=alive)
    for method in (AumannShapley(steps=12, closed_form=False, pooled_fast_path=False), SampledShapley(permutations=8)):
        cpu = attribute(name, panel, method=method, baseline="mean", rng=3)
        gpu = attribute(name, panel, method=method, baseline="mean", rng=3, device="cuda")
        np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(gpu.f_values, cpu.f_values, rtol=1e-12)
