"""The generic kernel (v evaluated on masks) keeps its masks within the memory budget at any N, with the same bits."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from aumann.attribution import FunctionGame, Panel, SampledBanzhaf, SampledShapley, attribute
from aumann.attribution.pooled import GenericKernel
from aumann.errors import MemoryBudgetError


def _count_game(n: int) -> FunctionGame:
    """A game that allocates (almost) nothing itself, so the peak is the kernel's own."""
    return FunctionGame(lambda m: np.count_nonzero(m, axis=1).astype(np.float64), n_players=n, name="count")


def _rowwise_game(n: int, seed: int = 0) -> FunctionGame:
    """A non-additive game whose value of a coalition depends on its own row only (one row at a time)."""
    w = np.random.default_rng(seed).normal(size=n)
    return FunctionGame(lambda m: np.array([np.tanh(w[r].sum()) * (1 + r[: n // 2].sum()) for r in m]),
                        n_players=n, name="rowwise")


def _reference_prefix_marginals(game: FunctionGame, perms: np.ndarray, reverse: bool):
    """Marginals along each permutation (and its reverse), coalition by coalition: the definition."""
    c, n = perms.shape
    fwd = np.empty((c, n))
    rev = np.empty((c, n))
    for p, perm in enumerate(perms):
        for out, order in ((fwd, perm), (rev, perm[::-1])):
            prev = float(game.checked(np.zeros((1, n), bool))[0])
            mask = np.zeros(n, bool)
            for j in order:
                mask[j] = True
                cur = float(game.checked(mask[None].copy())[0])
                out[p, j] = cur - prev
                prev = cur
    return fwd, rev if reverse else None


def test_one_permutation_of_a_large_n_is_evaluated_in_blocks_within_the_budget():
    """The chunk floor is one permutation: N − 1 mask rows of N bytes, forward and reverse. At N = 2000 under a
    1 MiB budget that was ~7.6 MiB held at once (N = 5000, 16 MiB: 48 MiB; N = 20,000 under the default 256 MiB:
    ~800 MB); the masks now come in blocks of consecutive coalitions that fit the budget."""
    n, budget = 2000, 2**20
    kernel = _count_game(n).kernel(memory_budget=budget)
    assert kernel.chunk_permutations() == 1
    perm = np.random.default_rng(3).permutation(n)[None]
    kernel.ends()
    tracemalloc.start()
    try:
        fwd, rev = kernel.prefix_marginals(perm, reverse=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 1.25 * budget, f"{peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"
    np.testing.assert_array_equal(fwd, np.ones((1, n)))  # |S| gains one per player, in any order
    np.testing.assert_array_equal(rev, np.ones((1, n)))


@pytest.mark.parametrize("rows", [1, 5, 11, 12, 13, 40])
def test_blocks_of_coalitions_give_the_same_bits_as_one_block(rows):
    """Blocks that split a permutation (5 of its 12 coalitions), end on its boundary (12), straddle two (13, 40) or
    hold one coalition: the marginals are those of one block (the chunk in one call, as before), bit for bit, and
    those of the definition."""
    n, c = 13, 4
    game = _rowwise_game(n)
    perms = np.stack([np.random.default_rng(k).permutation(n) for k in range(c)])
    whole = GenericKernel(game.checked, n, row_bytes=64, memory_budget=2**30)
    assert whole.block_rows() >= c * (n - 1)
    blocked = GenericKernel(game.checked, n, row_bytes=64, memory_budget=rows * (64 + n))
    assert blocked.block_rows() == rows
    for reverse in (False, True):
        a, b = whole.prefix_marginals(perms, reverse), blocked.prefix_marginals(perms, reverse)
        for x, y, z in zip(a, b, _reference_prefix_marginals(game, perms, reverse)):
            if x is None:
                assert y is None and z is None
                continue
            np.testing.assert_array_equal(x, y)
            np.testing.assert_allclose(x, z, rtol=0, atol=1e-12)


def test_sampled_shapley_on_masks_does_not_depend_on_the_blocks():
    """Through attribute(): a 256 KiB budget evaluates 7 coalitions at a time (N = 1000, 32 kB of the
    indicator's working memory plus a 1000-byte mask row each) against whole chunks under the default budget; φ is
    the same."""
    z = np.abs(np.random.default_rng(0).normal(size=(2, 1000, 1))) + 0.1

    def phi(budget):
        method = SampledShapley(permutations=4, antithetic=True, fast=False, memory_budget=budget)
        return attribute("var", Panel(z), method=method, rng=7).phi

    np.testing.assert_array_equal(phi(2**18), phi(None))


def test_a_coalition_that_alone_exceeds_the_budget_is_refused_naming_the_sizes():
    """A game declaring 65,000 bytes of working memory a coalition, at N = 1000: with its 1,000-byte mask row one
    coalition does not fit a 64 KiB budget (it ran over the budget before, without a word)."""
    game = _count_game(1000)
    game.row_bytes = 65_000
    method = SampledShapley(permutations=2, memory_budget=2**16)
    with pytest.raises(MemoryBudgetError, match=r"65,000 bytes .* 1,000-byte mask row \(66,000 bytes\).*65,536"):
        method.attribute_game(game, rng=1)


@pytest.mark.parametrize("rows", [1, 5, 13, 14, 30])
def test_flip_marginals_in_blocks_give_the_same_bits_as_one_block(rows):
    """S ∪ {i} and S ∖ {i} for every i, evaluated in blocks that split a sample (5 of its 13 coalitions), end on its
    boundary (13) or straddle two (14, 30): the same bits as all at once, and the definition's values."""
    n, c = 13, 3
    game = _rowwise_game(n, seed=1)
    masks = np.random.default_rng(2).random((c, n)) < 0.5
    whole = GenericKernel(game.checked, n, row_bytes=64, memory_budget=2**30)
    blocked = GenericKernel(game.checked, n, row_bytes=64, memory_budget=rows * (64 + n))
    assert blocked.block_rows() == rows
    got = blocked.flip_marginals(masks)
    np.testing.assert_array_equal(got, whole.flip_marginals(masks))
    ref = np.empty((c, n))
    for s in range(c):
        for i in range(n):
            w, o = masks[s].copy(), masks[s].copy()
            w[i], o[i] = True, False
            ref[s, i] = game.checked(w[None])[0] - game.checked(o[None])[0]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_one_sample_of_the_flip_marginals_at_a_large_n_stays_within_the_budget():
    """One sample's 2N flipped coalitions: ~4 N² bytes at once (both sides, the identity and a temporary: 15.3 MiB
    at N = 2000) whatever the budget; now in blocks within it."""
    n, budget = 2000, 2**20
    kernel = _count_game(n).kernel(memory_budget=budget)
    mask = np.random.default_rng(5).random((1, n)) < 0.5
    kernel.flip_marginals(mask[:, :])
    tracemalloc.start()
    try:
        got = kernel.flip_marginals(mask)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 1.25 * budget, f"{peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"
    np.testing.assert_array_equal(got, np.ones((1, n)))


def test_marginal_banzhaf_batches_as_many_samples_as_the_budget_holds():
    """A sample of the marginal estimator was declared 64 · N² bytes (N = 300: 5.8 MB, so a 4 MiB budget took one
    sample, 300 coalitions, a call) while its masks take N² (90 kB): 32 samples a chunk now, and what the chunk holds
    stays within the budget."""
    n, budget = 300, 4 * 2**20
    biggest = []

    def count(m):
        biggest.append(m.shape[0])
        return np.count_nonzero(m, axis=1).astype(np.float64)

    game = FunctionGame(count, n_players=n, name="count")
    method = SampledBanzhaf(samples=64, estimator="marginal", memory_budget=budget)
    method.attribute_game(game, rng=0)  # warm
    biggest.clear()
    tracemalloc.start()
    try:
        res = method.attribute_game(game, rng=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(biggest) == 32 * n  # one call per side of a chunk of 32 samples
    assert peak <= 1.25 * budget, f"{peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"
    np.testing.assert_array_equal(res.phi, np.ones((1, n)))


def test_marginal_banzhaf_does_not_depend_on_the_chunk():
    """Samples are drawn row by row and accumulated row by row: a 64 KiB budget (35 samples a chunk at N = 13) and the
    default (all 100 at once) give the same φ and standard errors, bit for bit."""
    w = np.random.default_rng(4).normal(size=13)
    calls = []

    def v(m):
        calls.append(m.shape[0])
        return np.array([np.tanh(w[r].sum()) * (1 + r[:6].sum()) for r in m])

    game = FunctionGame(v, n_players=13, name="rowwise")

    def run(budget):
        calls.clear()
        res = SampledBanzhaf(samples=100, estimator="marginal", memory_budget=budget).attribute_game(game, rng=3)
        return res.phi, res.stderr, max(calls)

    *chunked, most = run(2**16)
    *whole, most_whole = run(None)
    assert (most, most_whole) == (35 * 13, 100 * 13)
    for a, b in zip(chunked, whole):
        np.testing.assert_array_equal(a, b)


def _peak(call):
    tracemalloc.start()
    try:
        out = call()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_leave_one_out_and_the_deletion_curve_stay_within_the_budget_at_a_large_n():
    """loo built ~eye(N) at once, the deletion curve one N-byte row per size: 3.9 and 3.8 MiB at N = 2000 under a
    1 MiB budget (~400 MB each at N = 20,000); now in blocks, with the same values."""
    n, budget = 2000, 2**20
    kernel = _count_game(n).kernel(memory_budget=budget)
    kernel.loo(float(n))
    loo, peak = _peak(lambda: kernel.loo(float(n)))
    assert peak <= 1.25 * budget, f"loo: {peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"
    np.testing.assert_array_equal(loo, np.ones(n))
    order = np.random.default_rng(6).permutation(n)
    curve, peak = _peak(lambda: kernel.curve(order, range(n + 1)))
    assert peak <= 1.25 * budget, f"curve: {peak / 2**20:.1f} MiB for a budget of {budget / 2**20:.0f} MiB"
    np.testing.assert_array_equal(curve, n - np.arange(n + 1.0))


@pytest.mark.parametrize("rows", [1, 4, 13, 40])
def test_blocked_leave_one_out_and_curve_give_the_same_bits(rows):
    n = 13
    game = _rowwise_game(n, seed=7)
    whole = GenericKernel(game.checked, n, row_bytes=64, memory_budget=2**30)
    blocked = GenericKernel(game.checked, n, row_bytes=64, memory_budget=rows * (64 + n))
    vN = game.full_value()
    ref = np.array([vN - game.checked(~np.eye(n, dtype=bool)[i:i + 1])[0] for i in range(n)])
    np.testing.assert_array_equal(blocked.loo(vN), whole.loo(vN))
    np.testing.assert_array_equal(blocked.loo(vN), ref)
    order = np.random.default_rng(8).permutation(n)[:9]
    ks = [0, 3, 9, 1, 9]
    got = blocked.curve(order, ks)
    np.testing.assert_array_equal(got, whole.curve(order, ks))
    for k, value in zip(ks, got):
        m = np.ones(n, bool)
        m[order[:k]] = False
        assert value == game.checked(m[None])[0]
