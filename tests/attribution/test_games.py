"""Coalition games: baseline masking semantics and user games."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import (
    CoalitionGame,
    ExactBanzhaf,
    ExactShapley,
    FunctionGame,
    GameError,
    LeaveOneOut,
    MaskedIndicatorGame,
    Panel,
    Problem,
    SampledBanzhaf,
    SampledShapley,
    indicators,
)
from tests.attribution.baseline_games import positive_panel


def test_masked_game_sets_non_members_to_the_baseline_and_keeps_n(rng):
    z = positive_panel(rng, 3, 5)
    problem = Problem.build(indicators.get("var"), Panel(z), "mean")
    game = MaskedIndicatorGame(problem, 2)
    b = problem.baseline_at(2)
    masks = np.array([[True, False, True, False, False], [False] * 5, [True] * 5])
    out = game.checked(masks)
    f = indicators.get("var")
    for row, m in zip(out, masks):
        zz = np.where(m[:, None], z[2], b)  # all N agents stay; non-members at the baseline
        assert row == pytest.approx(float(f(torch.as_tensor(zz))), abs=1e-14)
    assert game.full_value() == pytest.approx(problem.values_at("x", 1)[2])
    assert game.empty_value() == pytest.approx(problem.values_at("baseline", 1)[2])
    assert list(game.player_ids) == list(problem.panel.agent_ids)


def test_masked_game_batches_within_a_small_memory_budget(rng):
    z = positive_panel(rng, 1, 6)
    problem = Problem.build(indicators.get("heat"), Panel(z))
    small = MaskedIndicatorGame(problem, 0, memory_budget=1)  # one coalition per batch
    big = MaskedIndicatorGame(problem, 0)
    masks = rng.random((17, 6)) < 0.5
    np.testing.assert_array_equal(small.checked(masks), big.checked(masks))


def test_game_validation(rng):
    problem = Problem.build(indicators.get("heat"), Panel(positive_panel(rng, 2, 3)))
    with pytest.raises(GameError, match="outside"):
        MaskedIndicatorGame(problem, 5)
    game = FunctionGame(lambda m: m.sum(1).astype(float), n_players=3)
    with pytest.raises(GameError, match=r"\(B, 3\)"):
        game.checked(np.ones((2, 4), dtype=bool))
    with pytest.raises(GameError, match="at least one player"):
        FunctionGame(lambda m: m.sum(1), n_players=0)

    class Bare(CoalitionGame):
        n_players = 2
        player_ids = np.arange(2)

    with pytest.raises(TypeError, match="__call__"):  # abstract: a game without v(S) cannot exist
        Bare()
    with pytest.raises(GameError, match="no fast path"):
        game.kernel(fast=True)


def test_a_game_owns_one_coalition_cache_and_evaluates_each_coalition_once():
    """Issue 20's "one coalition cache": the game owns it (as shapiq's Game does); methods that revisit
    coalitions (exact enumeration twice, permutations sharing prefixes) pay for each coalition once."""
    from aumann.attribution import CoalitionCache, ExactShapley, FunctionGame, SampledShapley

    w = np.array([1.0, 2.0, 3.0, 4.0])
    seen: list[int] = []

    def v(masks):
        seen.append(len(masks))
        return (masks * w).sum(axis=1) ** 2

    game = FunctionGame(v, n_players=4, cache=True)
    a = ExactShapley().attribute_game(game)
    b = ExactShapley().attribute_game(game)  # every coalition is now stored
    np.testing.assert_array_equal(a.phi, b.phi)
    assert sum(seen) == 16 and len(game.cache) == 16 and game.cache.hits >= 16
    plain = ExactShapley().attribute_game(FunctionGame(v, n_players=4))
    np.testing.assert_allclose(a.phi, plain.phi, rtol=1e-15)
    shared = CoalitionCache()
    g1, g2 = FunctionGame(v, 4, cache=shared), FunctionGame(v, 4, cache=shared)
    seen.clear()
    SampledShapley(permutations=8).attribute_game(g1, rng=0)
    SampledShapley(permutations=8).attribute_game(g2, rng=0)
    assert sum(seen) <= 16 and len(shared) <= 16  # each coalition once; the second game found all of them stored
    assert CoalitionCache.key(np.array([True, False, True, False])) == frozenset({0, 2})


@pytest.mark.parametrize("method", [ExactShapley(), ExactBanzhaf(), SampledBanzhaf(samples=200), LeaveOneOut(),
                                    SampledShapley(permutations=8)],
                         ids=["exact_shapley", "exact_banzhaf", "sampled_banzhaf", "loo", "sampled_shapley"])
def test_a_game_that_writes_into_its_masks_is_refused_naming_it(method):
    # ExactShapley of v(S) = (Σ_{i∈S} w_i)² gave player 0 exactly 0 and the others 24.7, 36, 46.7 instead of
    # 10, 20, 30, 40 when v set m[:, 0] = True after computing; sampled Banzhaf blamed "fewer than two sampled
    # coalitions". The masks a game sees are read-only now.
    w = np.array([1.0, 2.0, 3.0, 4.0])

    def scribbles(m):
        out = (np.asarray(m, float) @ w) ** 2
        m[..., 0] = True
        return out

    with pytest.raises(GameError, match="game 'scribbles' wrote into the coalition masks"):
        method.attribute_game(FunctionGame(scribbles, n_players=4), rng=0)
    ok = ExactShapley().attribute_game(FunctionGame(lambda m: (m.astype(float) @ w) ** 2, n_players=4))
    np.testing.assert_allclose(ok.phi[0], [10.0, 20.0, 30.0, 40.0])
