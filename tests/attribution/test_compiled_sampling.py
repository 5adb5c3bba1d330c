"""The compiled sampling kernels (numba) against the numpy/torch path they replace: the same permutations
from the same generator (and the same generator state after), and the same bits in every estimate (the
declared log1p-of-a-product form and the standard errors: to rounding)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from aumann.attribution import AgentwiseIndicator, Panel, SampledShapley, attribute, indicators, jit_sampling
from aumann.attribution.network import NetworkQuadraticKernel
from aumann.attribution.pooled import GameKernel

pytestmark = pytest.mark.skipif(not jit_sampling.available(), reason="numba is not installed")


@pytest.mark.parametrize("bits", [np.random.PCG64, np.random.Philox, np.random.SFC64, np.random.MT19937])
@pytest.mark.parametrize("n", [1, 2, 3, 1000, 1025, 100_003])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_permutations_are_numpys(bits, n, dtype):
    ours, ref = np.random.Generator(bits(11)), np.random.Generator(bits(11))
    out = np.empty((3, n), dtype=dtype)
    jit_sampling.draw_permutations(ours, out)
    np.testing.assert_array_equal(out, np.stack([ref.permutation(n) for _ in range(3)]))
    assert ours.integers(2**62) == ref.integers(2**62)  # the stream goes on where numpy's does


@pytest.mark.parametrize("n", [2, 1000, 70_001])
def test_compiled_pcg64_continues_numpys_stream_and_state(n):
    """PCG64 is stepped inline (not through numpy's pointer): from a state with a buffered 32-bit half
    (left by an earlier 32-bit draw), the same permutations, the same full state after, the same stream on;
    and the generic path (another bit generator type) is not taken for it."""
    ours, ref = np.random.default_rng(5), np.random.default_rng(5)
    for g in (ours, ref):
        g.random(3)
        g.integers(0, 10, size=1, dtype=np.uint32)  # leaves has_uint32 = 1
    assert ours.bit_generator.state["has_uint32"] == 1
    out = np.empty((4, n), dtype=np.int32)
    jit_sampling.draw_permutations(ours, out)
    np.testing.assert_array_equal(out, np.stack([ref.permutation(n) for _ in range(4)]))
    assert ours.bit_generator.state == ref.bit_generator.state
    assert ours.integers(0, 2**32, size=5, dtype=np.uint32).tolist() == \
        ref.integers(0, 2**32, size=5, dtype=np.uint32).tolist()
    assert ours.random() == ref.random()


def _five(z: torch.Tensor) -> torch.Tensor:  # P = 5: the running sums keep the (P, c, N) layout
    return torch.stack([z[..., 0], z[..., 1] * z[..., 2], z[..., 0] ** 2, z[..., 1], z[..., 2]], -1)


@pytest.mark.parametrize("n", [50, 1000, 100_001])
@pytest.mark.parametrize("kw", [{"permutations": 6}, {"permutations": 8, "antithetic": True},
                                {"permutations": 6, "common_permutations": True}])
def test_sampled_shapley_is_bit_identical_with_and_without_the_compiled_kernels(n, kw, monkeypatch, rng):
    z = np.abs(rng.normal(size=(2, n, 3)))
    for f in (indicators.get("heat"), indicators.get("lin"), AgentwiseIndicator(_five, name="five")):
        compiled = attribute(f, Panel(z), method=SampledShapley(**kw), rng=3)
        monkeypatch.setenv("AUMANN_NUMBA", "0")
        plain = attribute(f, Panel(z), method=SampledShapley(**kw), rng=3)
        monkeypatch.delenv("AUMANN_NUMBA")
        if f.name == "heat":  # ρ = log1p(Π m) declared: numpy's log1p on the products instead of torch's
            np.testing.assert_allclose(compiled.phi, plain.phi, rtol=1e-9, atol=1e-14 * np.abs(plain.phi).max())
            np.testing.assert_allclose(compiled.stderr, plain.stderr, rtol=1e-6, atol=1e-12 * plain.stderr.max())
            continue
        np.testing.assert_array_equal(compiled.phi, plain.phi)  # the same sums, ρ and differences: the same bits
        # standard errors: torch's vectorised addcmul fuses d·d into the addition, the compiled pass does not
        np.testing.assert_allclose(compiled.stderr, plain.stderr, rtol=1e-12)


@pytest.mark.parametrize("estimator", ["msr", "marginal"])
def test_banzhaf_and_exact_are_bit_identical_with_and_without_the_compiled_kernels(estimator, monkeypatch, rng):
    """The masked sums of a coalition (a row at a time, players in order) and MSR's per-sample sums: the
    compiled loops make the additions the torch/numpy scans make."""
    from aumann.attribution import ExactShapley, SampledBanzhaf

    z = np.abs(rng.normal(size=(2, 300, 3))) * np.logspace(-4, 4, 300)[None, :, None]
    small = z[:, :10]
    for f in (indicators.get("lin"), indicators.get("var"), AgentwiseIndicator(_five, name="five")):
        compiled = attribute(f, Panel(z), method=SampledBanzhaf(samples=40, estimator=estimator), rng=3)
        exact = attribute(f, Panel(small), method=ExactShapley())
        monkeypatch.setenv("AUMANN_NUMBA", "0")
        plain = attribute(f, Panel(z), method=SampledBanzhaf(samples=40, estimator=estimator), rng=3)
        exact_plain = attribute(f, Panel(small), method=ExactShapley())
        monkeypatch.delenv("AUMANN_NUMBA")
        assert compiled.phi.tobytes() == plain.phi.tobytes() and exact.phi.tobytes() == exact_plain.phi.tobytes()
        if estimator == "msr":
            assert compiled.stderr.tobytes() == plain.stderr.tobytes()
        else:  # the marginal units' moments: torch's addcmul fuses d·d (as for sampled Shapley above)
            np.testing.assert_allclose(compiled.stderr, plain.stderr, rtol=1e-12)


def test_network_kernel_is_bit_identical(monkeypatch, rng):
    n = 5000
    A = sp.random(n, n, density=6 / n, random_state=1, format="csr")
    A = (A + A.T).tolil()
    A.setdiag(0)
    A = A.tocsr()
    A.eliminate_zeros()
    r = np.abs(rng.normal(size=n))
    r0 = np.where(rng.random(n) < 0.5, 0.1, r)
    sub, _ = NetworkQuadraticKernel(A, r, r0, scale=0.01).restricted()
    perms = np.stack([rng.permutation(sub.n) for _ in range(3)])
    fwd, rev = sub.prefix_marginals(perms.astype(np.int32), True)
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    ref_f, ref_r = sub.prefix_marginals(perms, True)
    np.testing.assert_array_equal(fwd, ref_f)
    np.testing.assert_array_equal(rev, ref_r)



@pytest.mark.parametrize("restricted", [True, False])
@pytest.mark.parametrize("n", [2, 3, 1000, 4_000])
def test_network_antithetic_units_walk_both_directions_in_one_pass_with_the_same_bits(restricted, n, monkeypatch,
                                                                                       rng):
    """The fused walk (forward and reversed order from one pass over the edges, the unit scattered once) against
    the generic unit: each direction's marginals separately, added and halved; compiled and numpy alike."""
    A = sp.random(n, n, density=min(1.0, 8 / n), random_state=2, format="csr")
    A = (A + A.T).tolil()
    A.setdiag(0)
    A = A.tocsr()
    A.eliminate_zeros()
    r = np.abs(rng.normal(size=n))
    r0 = np.where(rng.random(n) < 0.4, 0.1, r)  # ~40 % null players: the walk skips them
    full = NetworkQuadraticKernel(A, r, r0, scale=0.01)
    kernel = full.restricted()[0] if restricted else full
    perms = np.stack([rng.permutation(kernel.n) for _ in range(4)])
    generic = GameKernel.antithetic_units(kernel, perms).numpy()  # fwd += rev; fwd *= 0.5 on prefix_marginals
    for dtype in (np.int32, np.int64):
        fused = kernel.antithetic_units(perms.astype(dtype)).numpy()
        np.testing.assert_array_equal(fused, generic)
    assert n < 1000 or np.abs(generic).max() > 0  # not a vacuous comparison
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    np.testing.assert_array_equal(kernel.antithetic_units(perms).numpy(), generic)


def _first(s: torch.Tensor) -> torch.Tensor:  # ρ a view of the running sums (P = 1): the suffix sums overwrite them
    return s[..., 0]


def _additive_kernel(name: str, z: np.ndarray):
    from aumann.attribution.pooled import AdditiveKernel

    x, b = torch.as_tensor(z), torch.zeros(z.shape, dtype=torch.float64)
    if name in ("five", "first"):
        f = AgentwiseIndicator(_five, name="five") if name == "five" else \
            AgentwiseIndicator(lambda v: v[..., :1], rho=_first, name="first")
        return AdditiveKernel(f.psi(x), f.psi(b), f.rho)
    pool = indicators.get(name).pooled
    n = z.shape[0]
    return AdditiveKernel(pool.psi(x) / n, pool.psi(b) / n, pool.rho,
                          log1p_product=getattr(pool, "log1p_product", None))


@pytest.mark.parametrize("n", [2, 3, 1000, 70_001])
@pytest.mark.parametrize("name", ["heat", "lin", "var", "five", "first"])
def test_additive_antithetic_units_scatter_once_with_the_same_bits(name, n, rng, monkeypatch):
    """The additive kernel's compiled antithetic unit (both directions' values, one scatter of the pair) against
    the generic unit (each direction's marginals scattered separately, then ``fwd += rev; fwd *= 0.5``): the same
    bits, for ρ = log1p(c Π m) (heat's declared product), torch ρ's with P = 1 … 5 (the (P, c, N) layout above 4),
    and a ρ that returns a view of the running sums, which the suffix sums then overwrite; and both against the
    numpy/torch path (the same bits, but for the last bit of heat's log1p: ours vs torch's)."""
    kernel = _additive_kernel(name, np.abs(rng.normal(size=(n, 3))) + 0.1)
    assert (kernel.log1p_product is not None) == (name == "heat")
    perms = np.stack([rng.permutation(n) for _ in range(3)])
    generic = GameKernel.antithetic_units(kernel, perms).numpy()
    for dtype in (np.int32, np.int64):
        np.testing.assert_array_equal(kernel.antithetic_units(perms.astype(dtype)).numpy(), generic)
    monkeypatch.setenv("AUMANN_NUMBA", "0")
    plain = kernel.antithetic_units(perms).numpy()
    if name == "heat":
        np.testing.assert_allclose(generic, plain, rtol=1e-9, atol=1e-14 * np.abs(plain).max())
    else:
        np.testing.assert_array_equal(generic, plain)
    assert np.abs(plain).max() > 0  # not a vacuous comparison


def test_edge_running_sums_reversed_walk_is_the_reversed_orders_walk(rng):
    n, ne = 3000, 9000
    ei, ej = rng.integers(0, n, size=ne), rng.integers(0, n, size=ne)
    we, own = rng.normal(size=ne), rng.normal(size=n)
    order = rng.permutation(n)
    q, q_rev, q_ref, q_ref_rev = (np.empty(n) for _ in range(4))
    jit_sampling.edge_running_sums(order, ei, ej, we, own, 0.25, np.empty(n, dtype=np.int64), q, q_rev)
    jit_sampling.edge_running_sums(order, ei, ej, we, own, 0.25, np.empty(n, dtype=np.int64), q_ref)
    jit_sampling.edge_running_sums(np.ascontiguousarray(order[::-1]), ei, ej, we, own, 0.25,
                                   np.empty(n, dtype=np.int64), q_ref_rev)
    np.testing.assert_array_equal(q, q_ref)
    np.testing.assert_array_equal(q_rev, q_ref_rev)
    # and the compiled walk is numpy's bincount + cumsum
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    dq = np.bincount(np.maximum(pos[ei], pos[ej]), weights=we, minlength=n) + own[order]
    np.testing.assert_array_equal(q, np.cumsum(dq) + 0.25)


@pytest.mark.parametrize("antithetic", [True, False])
def test_network_walks_on_two_threads_give_the_same_estimate(antithetic, monkeypatch, rng):
    """Big network games walk their permutations in pairs on two threads (helpers forced on here): the
    estimate is bit for bit the one-at-a-time walk's."""
    from aumann.attribution import network, threads
    from aumann.attribution.network import NetworkQuadratic

    n = 120_000
    i, j = rng.integers(0, n, size=(2, 3 * n))
    keep = i != j
    A = sp.coo_matrix((np.ones(keep.sum()), (i[keep], j[keep])), shape=(n, n)).tocsr()
    A = (A + A.T).tocsr()
    f = NetworkQuadratic(A, lambda z: z[..., 0] * z[..., 1], scale=1e-4, check=False)
    z = np.abs(rng.normal(size=(1, n, 2))) * (rng.random((1, n, 1)) < 0.7)  # ~84 k active players
    method = SampledShapley(permutations=8, antithetic=antithetic)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(threads, "idle_cores", lambda: 1)
        called = []
        real = threads.run_items
        monkeypatch.setattr(network, "run_items", lambda fn, items, **kw: called.append(len(items)) or
                            real(fn, items, **kw))
        paired = attribute(f, Panel(z), method=method, rng=5)
        assert max(called) > 1  # the walks really ran as pairs
        monkeypatch.setattr(network, "_THREADED_PLAYERS", 10**9)  # one permutation at a time, this thread
        single = attribute(f, Panel(z), method=method, rng=5)
    finally:
        torch.set_num_threads(old)
    np.testing.assert_array_equal(paired.phi, single.phi)
    np.testing.assert_array_equal(paired.stderr, single.stderr)


@pytest.mark.skipif(not jit_sampling.available(), reason="numba is not installed")
def test_background_draws_do_not_hold_a_core_against_the_walks(monkeypatch):
    """The permutation drawer's work is background work: while it runs, idle_cores still offers the core
    it runs on to the foreground's items (counted, one draw kept every walk of a batch on one core)."""
    import io
    import threading

    from aumann.attribution import sampled, threads

    monkeypatch.setattr(threads, "_CPUS", 2)
    monkeypatch.setattr(threads, "open", lambda *a, **k: io.BytesIO(b"1.00 1.00 1.00 2/90 4242\n"), raising=False)
    assert threads.idle_cores() == 0  # this thread and one more runnable: no core idle
    with threads.background_work():
        assert threads.idle_cores() == 1  # the other runnable thread is our background work
        with threads.background_work():
            assert threads.idle_cores() == 1  # never more than the cores less this thread
    assert threads.idle_cores() == 0

    seen: list[int] = []
    started, release = threading.Event(), threading.Event()
    real = jit_sampling.draw_permutations

    def slow_draw(rng, out):  # the drawer, caught in the middle of a draw
        seen.append(threads.idle_cores())
        started.set()
        release.wait(5)
        return real(rng, out)

    monkeypatch.setattr(jit_sampling, "draw_permutations", slow_draw)
    perms = sampled._Permutations(np.random.default_rng(0), 50, batch=2, limit=4, dtype=np.int32)
    assert started.wait(5)
    assert threads.idle_cores() == 1  # seen from this thread while the drawer draws
    release.set()
    first, second = perms.take(2), perms.take(2)  # the second batch: drawn in the background too
    assert seen == [1, 1] and first.shape == second.shape == (2, 50)
    assert threads._BACKGROUND[0] == 0  # no draw at work any more: nothing left marked


@pytest.mark.parametrize("p", range(1, 9))
def test_every_compiled_walk_template_makes_cumsums_additions_at_every_width(p):
    """The unrolled templates (running sums in both layouts, running products both ways, the segmented walk)
    at every row width P they are generated for — each prefetches its rows differently by P — against numpy's
    gather + cumsum, bit for bit."""
    rng = np.random.default_rng(p)
    n, c = 5000, 3
    table, start = rng.normal(size=(n, p)), rng.normal(size=p)
    perms = np.stack([rng.permutation(n) for _ in range(c)]).astype(np.int32)
    g = table[perms]
    g[:, 0] += start
    ref = np.cumsum(g, axis=1)  # (c, n, p): start + the rows along each permutation, added in order
    out = np.empty((c, n, p))
    jit_sampling.running_sums_kernel(p, False)(table, start, perms, out)
    np.testing.assert_array_equal(out, ref)
    out_t = np.empty((p, c, n))
    jit_sampling.running_sums_kernel(p, True)(table, start, perms, out_t)
    np.testing.assert_array_equal(out_t, ref.transpose(2, 0, 1))
    total = table.sum(axis=0) + start
    fwd, rev = np.empty((c, n)), np.empty((c, n))
    jit_sampling.running_products_kernel(p)(table, start, total, 0.7, perms, fwd, rev, True)
    pf, pr = ref[..., 0].copy(), total[0] - ref[..., 0]
    for q in range(1, p):
        pf, pr = pf * ref[..., q], pr * (total[q] - ref[..., q])
    np.testing.assert_array_equal(fwd, pf * 0.7)
    np.testing.assert_array_equal(rev, pr * 0.7)
    state, f1, r1 = start.copy(), np.empty(n), np.empty(n)
    segment = jit_sampling.running_products_segment(p)
    for lo in range(0, n, 777):
        hi = min(n, lo + 777)
        segment(table, state, total, 0.7, perms[0], lo, hi, f1[lo:hi], r1[lo:hi])
    np.testing.assert_array_equal(f1, fwd[0])
    np.testing.assert_array_equal(r1, rev[0])
