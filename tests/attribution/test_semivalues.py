"""Exact Shapley/Banzhaf and leave-one-out: worked examples, additive games, axioms, errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aumann.attribution import (
    ExactBanzhaf,
    ExactShapley,
    FunctionGame,
    GameError,
    LeaveOneOut,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.errors import MethodError
from tests.attribution.baseline_games import additive_indicator, positive_panel


def test_appendix_a_pairwise_n3_by_hand():
    # f = (1/n²) Σ_{i<j} z_i z_j, z = (1, 1, 2), zero baseline: v(S) = (1/9) Σ_{i<j ∈ S} z_i z_j
    v = {(): 0.0, (1,): 0.0, (2,): 0.0, (3,): 0.0, (1, 2): 1 / 9, (1, 3): 2 / 9, (2, 3): 2 / 9, (1, 2, 3): 5 / 9}
    # Shapley by the permutation formula, written out: each of the 3! orders weighs 1/6
    phi = np.zeros(3)
    for order in itertools.permutations((1, 2, 3)):
        for k, i in enumerate(order):
            before = tuple(sorted(order[:k]))
            phi[i - 1] += (v[tuple(sorted((*before, i)))] - v[before]) / 6
    assert phi == pytest.approx([1 / 6, 1 / 6, 2 / 9], abs=1e-15)  # the paper's numbers
    res = attribute(indicators.get("pairwise"), Panel(np.array([[1.0], [1.0], [2.0]])), method=ExactShapley())
    np.testing.assert_allclose(res.phi[0], phi, atol=1e-15)
    assert res.delta_v[0] == pytest.approx(5 / 9)
    assert res.max_efficiency_gap < 1e-15
    assert res.method == "exact_shapley" and res.satisfies_efficiency and res.n_evals == 8


def test_exact_banzhaf_by_hand_n3():
    z = Panel(np.array([[1.0], [1.0], [2.0]]))
    res = attribute("pairwise", z, method=ExactBanzhaf())
    # Banzhaf of agent 3: ¼ [v(3) − v(∅) + v(13) − v(1) + v(23) − v(2) + v(123) − v(12)] = ¼ (0 + 2/9 + 2/9 + 4/9)
    assert res.phi[0, 2] == pytest.approx(2 / 9)
    assert res.phi[0, 0] == pytest.approx((1 / 9 + 2 / 9 + 3 / 9) / 4)
    assert res.method == "exact_banzhaf" and not res.satisfies_efficiency


@pytest.mark.parametrize("fast", [None, False], ids=["fast", "generic"])
@pytest.mark.parametrize("method", [ExactShapley(), ExactBanzhaf(), LeaveOneOut(), SampledShapley(permutations=20),
                                    SampledShapley(permutations=20, antithetic=True),
                                    SampledBanzhaf(samples=20, estimator="marginal")],
                         ids=lambda m: repr(m).split("(")[0] + ("-anti" if getattr(m, "antithetic", 0) else ""))
def test_additive_game_equals_analytic(method, fast, rng):
    T, N, D = 2, 7, 5
    z = rng.uniform(-1, 1, size=(T, N, D))
    W = rng.normal(size=(N, D))
    method.fast = fast
    res = attribute(additive_indicator(W), Panel(z), method=method, rng=rng)
    np.testing.assert_allclose(res.phi, (W * z).sum(axis=2), atol=1e-12, rtol=0)
    assert res.max_efficiency_gap < 1e-12


def test_loo_and_exact_counts(rng):
    z = positive_panel(rng, 3, 6)
    loo = attribute("heat", Panel(z), method=LeaveOneOut())
    assert loo.n_evals == 3 * (6 + 1) and loo.method == "leave_one_out" and not loo.satisfies_efficiency
    assert loo.stderr is None
    ex = attribute("heat", Panel(z), method=ExactShapley())
    assert ex.n_evals == 3 * 2**6 and ex.stderr is None
    # LOO by definition: v(N) − v(N∖i), with v evaluated directly
    f = indicators.get("heat")
    zt = torch.as_tensor(z[1])
    for i in range(6):
        masked = zt.clone()
        masked[i] = 0.0
        assert loo.phi[1, i] == pytest.approx(float(f(zt) - f(masked)), abs=1e-14)


def test_exact_shapley_matches_aumann_shapley_on_lin_and_is_efficient_with_mean_baseline(rng):
    z = positive_panel(rng, 2, 6)
    ex = attribute("lin", Panel(z), method=ExactShapley())
    ours = attribute("lin", Panel(z))
    np.testing.assert_allclose(ex.phi, ours.phi, atol=1e-14)
    for name in ("heat", "var", "gini"):
        res = attribute(name, Panel(z), method=ExactShapley(), baseline="mean")
        assert res.max_efficiency_gap < 1e-12
        assert res.provenance["baseline"] == "mean"


# ---------------------------------------------------------------------- axioms (hypothesis)
def _table_game(table: np.ndarray) -> FunctionGame:
    n = int(math.log2(len(table)))
    powers = 1 << np.arange(n)
    return FunctionGame(lambda m: table[(m * powers).sum(axis=1)], n_players=n)


tables = st.integers(2, 6).flatmap(
    lambda n: st.lists(st.floats(-10, 10, allow_nan=False, width=64), min_size=2**n, max_size=2**n))


@settings(max_examples=40, deadline=None)
@given(tables)
def test_axiom_efficiency(values):
    table = np.array(values)
    res = ExactShapley().attribute_game(_table_game(table))
    assert res.phi.sum() == pytest.approx(table[-1] - table[0], abs=1e-9)
    assert res.T == 1 and res.delta_v[0] == pytest.approx(table[-1] - table[0])


@settings(max_examples=40, deadline=None)
@given(tables)
def test_axiom_symmetry(values):
    h = np.array(values)
    n = int(math.log2(len(h)))
    codes = np.arange(2**n)
    b0, b1 = codes & 1, (codes >> 1) & 1
    swapped = (codes & ~3) | (b0 << 1) | b1  # exchange players 0 and 1
    table = h + h[swapped]  # symmetric in players 0 and 1
    for method in (ExactShapley(), ExactBanzhaf()):
        phi = method.attribute_game(_table_game(table)).phi[0]
        assert phi[0] == pytest.approx(phi[1], abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(tables, st.integers(0, 5))
def test_axiom_dummy_and_linearity(values, k):
    h = np.array(values)
    n = int(math.log2(len(h)))
    k = k % n
    codes = np.arange(2**n)
    table = h[codes & ~(1 << k)]  # player k never changes v
    res = ExactShapley().attribute_game(_table_game(table))
    assert res.phi[0, k] == pytest.approx(0.0, abs=1e-12)
    other = np.cos(np.arange(2**n))
    both = ExactShapley().attribute_game(_table_game(table + 2 * other)).phi
    lin = res.phi + 2 * ExactShapley().attribute_game(_table_game(other)).phi
    np.testing.assert_allclose(both, lin, atol=1e-9)


# ---------------------------------------------------------------------- user games and errors
def test_attribute_game_labels_and_torch_output():
    w = np.array([1.0, 2.0, 3.0])
    game = FunctionGame(lambda m: torch.as_tensor((m * w).sum(axis=1) ** 2), n_players=3,
                        player_ids=["a", "b", "c"], name="square")
    res = ExactShapley().attribute_game(game)
    assert list(res.agent_ids) == ["a", "b", "c"]
    # v = (Σ w_S)²: φ_i = w_i Σ_j w_j (quadratic split evenly)
    np.testing.assert_allclose(res.phi[0], w * w.sum(), atol=1e-12)
    assert res.provenance["game"] == "square" and res.provenance["path"] == "generic"


def test_exact_refuses_large_n_and_says_why(rng):
    with pytest.raises(MethodError, match=r"2\^N.*SampledShapley"):
        attribute("heat", Panel(positive_panel(rng, 1, 21)), method=ExactShapley())
    with pytest.raises(MethodError, match="SampledBanzhaf"):
        attribute("heat", Panel(positive_panel(rng, 1, 5)), method=ExactBanzhaf(max_players=4))


def test_game_errors():
    with pytest.raises(GameError, match="shape"):
        ExactShapley().attribute_game(FunctionGame(lambda m: np.zeros((len(m), 2)), n_players=3))
    with pytest.raises(GameError, match="NaN"):
        LeaveOneOut().attribute_game(FunctionGame(lambda m: np.full(len(m), np.nan), n_players=3))
    with pytest.raises(GameError, match="CoalitionGame"):
        LeaveOneOut().attribute_game(lambda m: m.sum(1))
    with pytest.raises(GameError, match="callable"):
        FunctionGame(3, n_players=2)
    with pytest.raises(GameError, match="player_ids"):
        FunctionGame(lambda m: m.sum(1), n_players=2, player_ids=[1, 2, 3])


def test_fast_true_without_structure_errors(rng):
    with pytest.raises(GameError, match="no fast path"):
        attribute("gini", Panel(positive_panel(rng, 1, 4)), method=SampledShapley(permutations=4, fast=True), rng=0)
    with pytest.raises(MethodError, match="per_feature"):
        attribute("heat", Panel(positive_panel(rng, 1, 4)), method=LeaveOneOut(), per_feature=True)
    with pytest.raises(MethodError, match="fast must be"):
        LeaveOneOut(fast="yes")  # type: ignore[arg-type]


def test_context_indicators_take_the_generic_path(rng):
    z = positive_panel(rng, 3, 5)
    ctx = {"scale": np.array([1.0, 2.0, 3.0])}

    def f(z, context):
        return context["scale"] * z.mean(-2).prod(-1)

    res = attribute(f, Panel(z, context=ctx), method=ExactShapley())
    assert res.provenance["per_step"]["path"] == "generic"
    assert res.max_efficiency_gap < 1e-12
    np.testing.assert_allclose(res.f_values, ctx["scale"] * z.mean(1).prod(-1))
