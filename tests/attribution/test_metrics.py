"""Agreement and deletion metrics on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.attribution import ExactShapley, FunctionGame, Panel, attribute
from aumann.attribution import metrics as M
from aumann.attribution.result import Attribution


def _attr(phi, ids, delta_v=None):
    phi = np.atleast_2d(np.asarray(phi, dtype=float))
    dv = phi.sum(axis=1) if delta_v is None else np.asarray(delta_v, dtype=float)
    return Attribution(phi=phi, delta_v=dv, f_values=dv, f_baseline=np.zeros_like(dv), agent_ids=np.asarray(ids),
                       steps=np.arange(phi.shape[0]), features=("x",))


def test_mae_cosine_by_hand():
    assert M.mae([1.0, 2.0, 3.0], [1.0, 0.0, 4.0]) == pytest.approx((0 + 2 + 1) / 3)
    assert M.cosine([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 / np.sqrt(2))
    assert M.cosine([1.0, 2.0], [-2.0, -4.0]) == pytest.approx(-1.0)
    with pytest.raises(M.MetricError, match="all-zero"):
        M.cosine([0.0, 0.0], [1.0, 2.0])


def test_alignment_by_agent_id_and_mismatch_errors():
    a = _attr([1.0, 2.0, 3.0], ["x", "y", "z"])
    b = _attr([3.0, 1.0, 2.0], ["z", "x", "y"])  # same numbers, another order
    assert M.mae(a, b) == 0.0
    assert M.kendall_tau(a, b) == pytest.approx(1.0)
    with pytest.raises(M.MetricError, match=r"only in the first: \['y'\]"):
        M.mae(a, _attr([1.0, 2.0, 3.0], ["x", "w", "z"]))
    with pytest.raises(M.MetricError, match="shapes"):
        M.mae([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(M.MetricError, match="steps"):
        M.mae(a, _attr([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], ["x", "y", "z"]))
    with pytest.raises(M.MetricError, match="1-D"):
        M.spearman(np.ones((2, 3)), np.ones((2, 3)))


def test_rank_metrics_by_hand():
    ref = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    est = np.array([4.0, 5.0, 3.0, 2.0, 1.0])  # one discordant pair among 10
    assert M.kendall_tau(est, ref) == pytest.approx((9 - 1) / 10)
    # reference's top 3 = agents 0, 1, 2: pairs (0,1) discordant, (0,2), (1,2) concordant → τ = 1/3
    assert M.kendall_tau(est, ref, k=3) == pytest.approx(1 / 3)
    assert M.spearman(est, ref) == pytest.approx(1 - 6 * 2 / (5 * 24))
    assert M.topk_jaccard(est, ref, 2) == 1.0
    assert M.topk_jaccard([1.0, 0.0, 2.0], [3.0, 2.0, 1.0], 2) == pytest.approx(1 / 3)
    assert M.topk_jaccard([-9.0, 0.0, 2.0], [-3.0, 2.0, 1.0], 1, by="abs") == 1.0
    with pytest.raises(M.MetricError, match="k must be"):
        M.topk_jaccard(est, ref, 9)
    with pytest.raises(M.MetricError, match="k ≥ 2"):
        M.kendall_tau(est, ref, k=1)


def test_topk_jaccard_is_undefined_where_a_side_has_no_top_k():
    """A constant indicator (Δv = 0) gives φ = 0 for everyone: the top-k of either side is the tie-break
    (position order), and two all-zero attributions read Jaccard 1.0 — identical tie-breaking, not agreement —
    while Kendall τ was already undefined there. NaN now whenever τ is (one side all tied), unless k = N."""
    zeros, ramp = np.zeros(6), np.arange(6.0)
    assert np.isnan(M.kendall_tau(zeros, zeros))
    assert np.isnan(M.topk_jaccard(zeros, zeros, 2))  # was 1.0
    assert np.isnan(M.topk_jaccard(zeros, ramp, 2)) and np.isnan(M.topk_jaccard(ramp, zeros, 2))  # was 0.0
    assert np.isnan(M.topk_jaccard(np.full(6, 0.3), ramp, 3))
    assert np.isnan(M.topk_jaccard(1.0 + 1e-15 * ramp, ramp, 2))  # round-off is a tie, as for τ
    assert np.isnan(M.kendall_tau(1.0 + 1e-15 * ramp, ramp))
    assert np.isnan(M.topk_jaccard(np.array([1.0, -1.0, 1.0, -1.0]), np.arange(4.0), 2, by="abs"))  # |φ| all tie
    assert M.topk_jaccard(np.array([1.0, -1.0, 1.0, -1.0]), np.array([1.0, -1.0, 1.0, -1.0]), 2) == 1.0  # by value
    assert M.topk_jaccard(zeros, ramp, 6) == 1.0  # k = N: both top-k are every agent
    assert M.topk_jaccard(ramp, ramp, 2) == 1.0 and M.topk_jaccard(ramp, -ramp, 2) == 0.0
    big = np.zeros(M._KEEP_RUNS_FROM + 3)
    assert np.isnan(M.topk_jaccard(big, big, 10))
    assert M.topk_jaccard(big + np.arange(big.size), np.arange(big.size, dtype=float), 10) == 1.0


def test_step_selection_and_efficiency_error():
    a = _attr([[1.0, 2.0], [3.0, -1.0]], [0, 1], delta_v=[3.5, 2.0])
    np.testing.assert_allclose(M.efficiency_error(a), [0.5, 0.0])
    np.testing.assert_allclose(M.efficiency_error(a, relative=True), [0.5 / 3.5, 0.0])
    np.testing.assert_allclose(M.efficiency_error([1.0, 2.0], 4.0), [1.0])
    assert M.mae(a, np.array([[1.0, 2.0], [0.0, 0.0]]), step=0) == 0.0
    assert M.kendall_tau(a, a) == pytest.approx(1.0)  # on Φ_i = Σ_t φ
    with pytest.raises(M.MetricError, match="delta_v"):
        M.efficiency_error([1.0, 2.0])
    with pytest.raises(M.MetricError, match="outside"):
        M.mae(a, a, step=5)


def test_deletion_curve_by_hand():
    w = np.array([3.0, 1.0, 2.0])
    oracle = lambda deleted: float(w.sum() - w[np.asarray(deleted, dtype=int)].sum())  # noqa: E731
    curve = M.deletion_curve(w, oracle)
    np.testing.assert_array_equal(curve.ks, [0, 1, 2, 3])
    np.testing.assert_allclose(curve.values, [6.0, 3.0, 1.0, 0.0])
    np.testing.assert_allclose(curve.drop, [0.0, 0.5, 5 / 6, 1.0])
    # trapezoids over k/N: (0 + .5)/2 + (.5 + 5/6)/2 + (5/6 + 1)/2, each × 1/3
    assert curve.auc == pytest.approx((0.5 + 0.5 + 5 / 6 + 5 / 6 + 1) / 6)
    worst = M.deletion_auc(-w, oracle)  # the reverse ranking removes the change last
    assert worst < curve.auc
    assert M.drop_at_k(w, oracle, 1) == pytest.approx(0.5)
    with pytest.raises(M.MetricError, match="F\\(0\\) = F\\(N\\)"):
        M.deletion_curve(w, lambda d: 1.0)
    with pytest.raises(M.MetricError, match="between 0 and N"):
        M.deletion_curve(w, oracle, ks=[5])


def test_masking_oracle_matches_the_masked_game_and_passes_ids(rng):
    z = np.abs(rng.normal(size=(4, 2))) + 0.1
    panel = Panel(z, agent_ids=np.array([10, 20, 30, 40]))
    oracle = M.masking_oracle("heat", panel)
    kept = z[[0, 2]]
    expected = np.log1p(np.prod(np.vstack([kept, np.zeros((2, 2))]).mean(axis=0)))
    assert oracle(np.array([20, 40])) == pytest.approx(expected)
    res = attribute("heat", panel, method=ExactShapley())
    curve = M.deletion_curve(res, oracle)
    assert curve.drop[-1] == pytest.approx(1.0) and curve.values[0] == pytest.approx(res.f_values[0])


def test_metrics_on_a_user_game_attribution():
    game = FunctionGame(lambda m: (m * [1.0, 2.0, 3.0]).sum(1), n_players=3, player_ids=["a", "b", "c"])
    res = ExactShapley().attribute_game(game)
    assert M.mae(res, np.array([[1.0, 2.0, 3.0]])) == pytest.approx(0.0, abs=1e-15)
    assert M.efficiency_error(res)[0] < 1e-15


# ------------------------------------------------------------------ largest_first (the top-k without a full sort)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aumann.attribution.metrics import largest_first, rank_agents  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20_000), k=st.integers(1, 400), levels=st.integers(1, 50), seed=st.integers(0, 2**32 - 1),
       neg_zero=st.booleans())
def test_largest_first_is_the_stable_sort_prefix(n, k, levels, seed, neg_zero):
    """Exactly ``np.argsort(-key, kind="stable")[:k]``: ties (few distinct values), ±0, any k."""
    rng = np.random.default_rng(seed)
    key = rng.integers(-levels, levels + 1, size=n).astype(np.float64) / 7.0
    if neg_zero:
        key[rng.random(n) < 0.3] = -0.0
    k = min(k, n)
    np.testing.assert_array_equal(largest_first(key, k), np.argsort(-key, kind="stable")[:k])


def test_largest_first_large_n_continuous_and_nonfinite():
    rng = np.random.default_rng(3)
    key = rng.normal(size=200_000)
    for k in (1, 10, 100, 20_000):
        np.testing.assert_array_equal(largest_first(key, k), np.argsort(-key, kind="stable")[:k])
    key[[5, 77]] = np.inf
    key[9] = -np.inf
    np.testing.assert_array_equal(largest_first(key, 10), np.argsort(-key, kind="stable")[:10])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 12_000), top=st.integers(0, 13_000), levels=st.integers(1, 30), seed=st.integers(0, 2**32 - 1),
       by=st.sampled_from(["value", "abs"]))
def test_rank_agents_top_is_the_prefix_of_the_full_ranking(n, top, levels, seed, by):
    rng = np.random.default_rng(seed)
    x = rng.integers(-levels, levels + 1, size=n) / 3.0
    full = rank_agents(x, by)
    np.testing.assert_array_equal(rank_agents(x, by, top=top), full[:top])


# ---- Kendall τ-b from tie runs (the compiled counts) against scipy on the tie ranks ----------------------
def _scipy_tau(a: np.ndarray, b: np.ndarray, rtol: float = M.TIE_RTOL) -> float:
    from scipy.stats import kendalltau

    ra, rb = M.tie_ranks(a, rtol), M.tie_ranks(b, rtol)
    if np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return float("nan")
    return float(kendalltau(ra, rb).statistic)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(M._COMPILED_TAU, M._COMPILED_TAU + 3000), levels=st.sampled_from([0, 2, 7, 50]),
       zeros=st.floats(0.0, 0.95), noise=st.floats(0.0, 3.0), seed=st.integers(0, 2**31 - 1),
       flip=st.booleans())
def test_compiled_tau_b_is_scipys_float(n, levels, zeros, noise, seed, flip):
    """The compiled counts give the same τ-b, bit for bit, as scipy on the tie ranks: few or many distinct
    values (``levels``: rounded scores, heavy ties), a block of zeros (null players), near-ties below the
    tolerance, reversed rankings."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    if levels:
        a = np.round(a * levels / 3) / levels
    b = (-a if flip else a) + noise * rng.normal(size=n)
    dead = rng.random(n) < zeros
    a[dead] = 0.0
    b[dead & (rng.random(n) < 0.5)] = 0.0
    a[rng.random(n) < 0.05] += 1e-15  # within the tie tolerance of their neighbours
    assert M.kendall_tau(a, b) == pytest.approx(_scipy_tau(a, b), abs=0, rel=0, nan_ok=True)


def test_compiled_tau_b_edge_cases(monkeypatch):
    n = M._COMPILED_TAU
    rng = np.random.default_rng(3)
    x = rng.normal(size=n)
    assert M.kendall_tau(x, x) == 1.0 and M.kendall_tau(x, -x) == -1.0
    assert np.isnan(M.kendall_tau(np.ones(n), x))  # one side constant: undefined, as before
    assert np.isnan(M.kendall_tau(x, np.zeros(n)))
    two = np.where(x > 0, 1.0, 0.0)  # two runs against a continuous side
    assert M.kendall_tau(two, x) == _scipy_tau(two, x)
    # the numpy/scipy path (numba off) gives the same float
    y = np.round(x + rng.normal(size=n), 1)
    fast = M.kendall_tau(x, y)
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    assert M.kendall_tau(x, y) == fast


def test_kendall_tau_keeps_tie_runs_by_content_not_by_object():
    """The tie runs of large score vectors are kept between calls (a study compares one φ with several), keyed
    by the vector's bytes: an array changed in place is ranked afresh, and every τ equals scipy's on tie ranks."""
    from scipy.stats import kendalltau

    from aumann.attribution import metrics as mt
    from aumann.attribution.metrics import kendall_tau, tie_ranks

    rng = np.random.default_rng(3)
    n = mt._KEEP_RUNS_FROM + 7
    a = np.round(rng.normal(size=n), 2)  # many ties
    b = a + rng.normal(scale=0.5, size=n)
    mt._RUNS.clear()

    def scipy_tau(x, y):
        return float(kendalltau(tie_ranks(x), tie_ranks(y)).statistic)

    first = kendall_tau(a, b)
    assert len(mt._RUNS) == 2
    assert kendall_tau(a, b) == first == scipy_tau(a, b)
    assert len(mt._RUNS) == 2  # served from what was kept
    a[: n // 2] = -a[: n // 2]  # the same object, other values
    assert kendall_tau(a, b) == scipy_tau(a, b) != first
    assert len(mt._RUNS) == 3


def test_masking_oracle_does_not_match_a_number_to_a_text_id():
    """``oracle([1, "2"])`` on text ids deleted the agents "1" and "2": np.asarray made text of the mixed list before
    the lookup, so the number 1 matched the id "1" (``oracle([1])`` alone is refused)."""
    from aumann.errors import UnknownAgentError

    panel = Panel(np.array([[[1.0], [2.0], [4.0]]]), features=["x"], agent_ids=["1", "2", "3"])
    oracle = M.masking_oracle(lambda z: z[..., 0].sum(-1), panel)
    assert oracle(["1", "2"]) == pytest.approx(4.0)
    with pytest.raises(UnknownAgentError, match=r"e.g. \[1\]"):
        oracle([1, "2"])
