"""Coalition games: baseline masking semantics and user games."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import CoalitionGame, FunctionGame, GameError, MaskedIndicatorGame, Panel, Problem, indicators
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
