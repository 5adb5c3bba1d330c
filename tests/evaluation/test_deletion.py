"""The re-simulation game and deletion oracle of :mod:`aumann.evaluation.deletion`."""

from __future__ import annotations

import pytest

from aumann.attribution.indicators import evaluate
from aumann.evaluation.deletion import scenario_resimulation_game
from tests.tiny import tiny_config


def test_resimulation_game_values_are_forks():
    sc, cfg = tiny_config("social-llm", agents=6, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    game = scenario_resimulation_game(sc, run.before(3), cfg)
    f = sc.indicator(cfg)
    full = game.full_value()
    assert full == pytest.approx(float(evaluate(f, run.panel.values[3])))  # nobody removed: the factual step
    z_empty, ctx = sc.step_with_baseline(run.before(3), cfg, range(6))
    assert game.empty_value() == pytest.approx(float(evaluate(f, z_empty, ctx)))


def test_masking_oracle_sets_rows_to_the_baseline_and_re_simulates_nothing(rng):
    import numpy as np

    from aumann.attribution.metrics import masking_oracle
    from aumann.evaluation.deletion import MaskingOracle

    sc, cfg = tiny_config("midscale-social", agents=10, steps=4)
    run = sc.simulate(cfg, rng=2, keep_from=0)
    f, fo = sc.indicators(cfg)
    z, z0 = run.panel.values[3], sc.baseline_features(run.before(3), cfg)
    ctx = {k: np.asarray(v)[3] for k, v in run.panel.context.items()}
    order = rng.permutation(10)
    curve = MaskingOracle(f, fo, z, z0, ctx).curve(order, 6)
    # the same values from the attribution layer's masking oracle (the game the feature methods explain)
    ref = masking_oracle(f, run.panel.select_steps([3]), baseline=z0)
    np.testing.assert_allclose(curve[:, 0], [ref(order[:k]) for k in range(1, 7)], rtol=1e-12)
    zk = z.copy()
    zk[order[:2]] = z0[order[:2]]
    assert curve[1, 1] == pytest.approx(float(evaluate(fo, zk, ctx)))


def test_the_resimulation_game_forks_every_coalition_and_keeps_none():
    import numpy as np

    from aumann.evaluation.deletion import DeletionOracle, resimulation_game

    sc, cfg = tiny_config("social-llm", agents=6, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    oracle = DeletionOracle(sc, cfg, run.before(3), *sc.indicators(cfg))
    game = resimulation_game(oracle, 6)
    masks = np.array([[True] * 6, [True] * 6, [False] + [True] * 5])
    vals = game.checked(masks)
    assert oracle.forks == 3 and oracle.cached() == {} and vals[0] == vals[1]
    oracle.values([0])  # the deletion curves do cache
    assert oracle.cached()[frozenset({0})][0] == pytest.approx(vals[2])


def test_the_resimulation_game_holds_a_chunk_of_deleted_sets_not_the_whole_batch():
    """A sampled game's batch is m permutations × (N − 1) coalitions: ``many(cache=False)`` read every deleted set
    of it as a key before the first fork (N = 1000, 200 permutations: 2·10⁵ sets of ~500 agents, ~7 GB held for
    the whole re-simulation reference). The sets are read a chunk at a time, each chunk forked before the next."""
    import numpy as np

    from aumann.evaluation import deletion
    from aumann.evaluation.deletion import DeletionOracle

    sc, cfg = tiny_config("midscale-social", agents=6, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    oracle = DeletionOracle(sc, cfg, run.before(3), *sc.indicators(cfg))
    n, size, count = 100, 50, 30_000  # 30 000 sets of 50 agents: 1.74·10⁶ members with the 8 a set
    seen = {"read": 0, "forked": 0, "held": 0}

    def sets():
        rng = np.random.default_rng(0)
        for _ in range(count):
            seen["read"] += 1
            yield rng.choice(n, size, replace=False)

    def fork(key):  # a stand-in fork: its value says which set it was given
        seen["held"] = max(seen["held"], seen["read"] - seen["forked"])
        seen["forked"] += 1
        return float(len(key)), float(sum(key))

    oracle._compute = fork
    vals = oracle.many(sets(), cache=False)
    first = np.random.default_rng(0).choice(n, size, replace=False)
    assert len(vals) == count and oracle.forks == count and oracle.cached() == {}
    assert vals[0] == (float(size), float(first.sum()))  # in order, one value a set
    assert seen["held"] <= deletion.FORK_KEYS_CHUNK // (size + 8) + 1 < count


def test_the_resimulation_game_values_do_not_depend_on_the_chunk(monkeypatch):
    import numpy as np

    from aumann.evaluation import deletion
    from aumann.evaluation.deletion import DeletionOracle, resimulation_game

    sc, cfg = tiny_config("midscale-social", agents=8, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    masks = np.random.default_rng(3).random((40, 8)) < 0.5

    def values() -> tuple[np.ndarray, int]:
        oracle = DeletionOracle(sc, cfg, run.before(3), *sc.indicators(cfg))
        return resimulation_game(oracle, 8).checked(masks), oracle.forks

    whole, forks = values()
    monkeypatch.setattr(deletion, "FORK_KEYS_CHUNK", 20)  # a chunk of 2 or 3 sets
    chunked, forks_chunked = values()
    assert forks == forks_chunked == 40
    np.testing.assert_array_equal(chunked, whole)


def test_a_chunk_of_sampled_permutations_holds_its_masks_within_the_budget():
    """The generic kernel holds one mask row (N bools) per coalition of a chunk while the game evaluates them;
    the chunk was sized by the game's declared 64 bytes a coalition alone, so the re-simulation game's sampled
    Shapley held N/64 times the budget (N = 300, 4 MiB: 218 permutations, ~39 MB of masks; N = 1000 under the
    default 256 MiB: ~2 GB). Measured (tracemalloc) on the kernel's own work, with a game that allocates nothing."""
    import tracemalloc

    import numpy as np

    from aumann.attribution import FunctionGame

    n, budget = 300, 4 * 2**20
    game = FunctionGame(lambda m: np.count_nonzero(m, axis=1).astype(np.float64), n_players=n, name="count")
    kernel = game.kernel(memory_budget=budget)
    units = kernel.chunk_permutations() // 2  # what sampled Shapley passes at once with antithetic pairs
    perms = np.array([np.random.default_rng(k).permutation(n) for k in range(units)])
    kernel.prefix_marginals(perms[:2], reverse=True)  # warm (the ends, lazy imports)
    tracemalloc.start()
    try:
        kernel.prefix_marginals(perms, reverse=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 1.25 * budget, f"{peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"


def test_the_resimulation_game_sampled_shapley_does_not_depend_on_the_memory_budget():
    """Chunks sized by the masks' true cost are smaller; the permutations and the forks are the same, so φ is too,
    bit for bit."""
    import numpy as np

    from aumann.attribution import SampledShapley
    from aumann.evaluation.deletion import DeletionOracle, resimulation_game

    n = 80
    sc, cfg = tiny_config("midscale-social", agents=n, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)

    def phi(budget: int | None) -> np.ndarray:
        oracle = DeletionOracle(sc, cfg, run.before(3), *sc.indicators(cfg))
        game = resimulation_game(oracle, n)
        assert game.kernel(memory_budget=budget or 2**28).chunk_permutations() == (3 if budget else 16131)
        return SampledShapley(permutations=8, memory_budget=budget).attribute_game(game, rng=5).phi

    np.testing.assert_array_equal(phi(2**16), phi(None))  # one antithetic pair a chunk against all at once
