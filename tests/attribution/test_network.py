"""Network-coupled indicators: the exact path value, the analytic-gradient quadrature, the custom sparse
backward and the O(N + nnz) masking kernel, each against an independent dense reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from aumann.attribution import (
    AumannShapley,
    ExactShapley,
    LeaveOneOut,
    MaskedIndicatorGame,
    NetworkQuadratic,
    Panel,
    Problem,
    SampledBanzhaf,
    SampledShapley,
    attribute,
)
from aumann.attribution.network import sparse_matvec
from aumann.errors import IndicatorError


def _graph(n: int, p: float, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < p, 1)
    w = rng.uniform(0.5, 2.0, (n, n))
    dense = np.where(upper, w, 0.0)
    return sp.csr_matrix(dense + dense.T)


def _r(z: torch.Tensor) -> torch.Tensor:  # a product of three features: degree 3 along a line
    return z[..., 0] * z[..., 1] * (z[..., 2] + z[..., 3])


def _dense_f(A: np.ndarray, c: float, z: np.ndarray) -> float:
    r = z[:, 0] * z[:, 1] * (z[:, 2] + z[:, 3])
    return float(np.log1p(c * r @ A @ r))


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    n = 12
    A = _graph(n, 0.35, 1)
    x = rng.uniform(0.0, 1.0, (n, 4))
    x[rng.random(n) < 0.25, 2:] = 0.0  # some inactive agents: null players of the masking game
    b = np.zeros_like(x)
    b[:, 0] = x[:, 0]  # like MegaScale: one factor kept, one at a neutral level, activity off
    b[:, 1] = 0.2
    return NetworkQuadratic(A, _r, scale=0.7), x, b, A.toarray()


def test_forward_matches_the_dense_quadratic_form(problem):
    f, x, _, A = problem
    assert f.value(x) == pytest.approx(_dense_f(A, 0.7, x), rel=1e-13)
    batch = torch.as_tensor(np.stack([x, 0.5 * x]))
    out = f(batch).numpy()
    assert out == pytest.approx([_dense_f(A, 0.7, x), _dense_f(A, 0.7, 0.5 * x)], rel=1e-13)


def test_exact_path_value_is_efficient_and_matches_fine_quadrature(problem):
    f, x, b, A = problem
    phi, f1, f0, info = f.exact(x, b)
    assert f1 == pytest.approx(_dense_f(A, 0.7, x)) and f0 == pytest.approx(_dense_f(A, 0.7, b))
    assert abs(phi.sum() - (f1 - f0)) < 1e-13
    # independent reference: autograd through the *dense* quadratic form, midpoint rule with K = 4000 points
    K, d = 4000, x - b
    t = torch.as_tensor((np.arange(K) + 0.5) / K)[:, None, None]
    z = (torch.as_tensor(b) + t * torch.as_tensor(d)).requires_grad_(True)
    r = z[..., 0] * z[..., 1] * (z[..., 2] + z[..., 3])
    (g,) = torch.autograd.grad(torch.log1p(0.7 * ((r @ torch.as_tensor(A)) * r).sum(-1)).sum(), z)
    ref = (g.numpy() * d).sum(axis=2).mean(axis=0)
    np.testing.assert_allclose(phi, ref, atol=2e-7)
    assert info["degree"] == 3 and info["scalar_change"] < 1e-13


def test_gauss_legendre_and_autograd_converge_to_the_closed_form(problem):
    f, x, b, _ = problem
    phi, *_ = f.exact(x, b)
    np.testing.assert_allclose(f.gauss_legendre(x, b, steps=48), phi, atol=1e-12)
    res = attribute(f, Panel(x[None]), method=AumannShapley(steps=48, closed_form=False), baseline=b)
    np.testing.assert_allclose(res.phi[0], phi, atol=1e-12)


class _NoForwardMode(torch.autograd.Function):
    """x ↦ x with a backward rule but no forward-mode (jvp) rule: torch.func.jvp cannot go through it."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


def test_gauss_legendre_takes_the_backward_route_for_an_r_without_forward_mode_rules(problem):
    """The Gauss–Legendre route takes r and ∇r · d in one forward-mode pass (torch.func.jvp); an r built from an
    operation with no forward-mode rule (a user's autograd.Function) goes through the backward pass instead, with
    the same result."""
    f, x, b, _ = problem
    g = NetworkQuadratic(f.A, lambda z: _NoForwardMode.apply(_r(z)), scale=0.7)
    with pytest.raises(RuntimeError):
        torch.func.jvp(g.r, (torch.as_tensor(x),), (torch.as_tensor(x - b),))
    phi, *_ = f.exact(x, b)
    np.testing.assert_allclose(g.gauss_legendre(x, b, steps=48), phi, atol=1e-12)
    np.testing.assert_allclose(g.gauss_legendre(x, b, steps=16), f.gauss_legendre(x, b, steps=16), rtol=1e-14,
                               atol=1e-17)


def test_sparse_matvec_backward_is_the_transpose_product():
    rng = np.random.default_rng(0)
    A = sp.random(7, 7, density=0.4, random_state=1, format="csr")
    x = torch.as_tensor(rng.normal(size=(2, 7)), dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: sparse_matvec(A, v), (x,))
    S = (A + A.T).tocsr()
    assert torch.autograd.gradcheck(lambda v: sparse_matvec(S, v, symmetric=True), (x,))


def test_masking_kernel_matches_plain_evaluation(problem):
    f, x, b, _ = problem
    game = MaskedIndicatorGame(Problem.build(f, Panel(x[None]), b), 0)
    fast, slow = game.kernel(), game.kernel(fast=False)
    assert fast.kind == "network-quadratic"
    rng = np.random.default_rng(5)
    masks = rng.random((6, x.shape[0])) < 0.5
    np.testing.assert_allclose(fast.values(masks), slow.values(masks), rtol=1e-12)
    perms = np.stack([rng.permutation(x.shape[0]) for _ in range(4)])
    ff, fr = fast.prefix_marginals(perms, reverse=True)
    sf, sr = slow.prefix_marginals(perms, reverse=True)
    np.testing.assert_allclose(ff, sf, atol=1e-12)
    np.testing.assert_allclose(fr, sr, atol=1e-12)
    np.testing.assert_allclose(fast.flip_marginals(masks), slow.flip_marginals(masks), atol=1e-12)
    v_full = float(slow.values(np.ones((1, x.shape[0]), bool))[0])
    np.testing.assert_allclose(fast.loo(v_full), slow.loo(v_full), atol=1e-12)


def test_null_players_get_exact_zeros_and_shapley_matches_enumeration(problem):
    f, x, b, _ = problem
    panel = Panel(x[None])
    exact = attribute(f, panel, method=ExactShapley(fast=False), baseline=b).phi[0]
    reduced = attribute(f, panel, method=ExactShapley(), baseline=b)
    np.testing.assert_allclose(reduced.phi[0], exact, atol=1e-12)
    nulls = reduced.provenance["per_step"]["null_players"]
    inactive = (x[:, 2] + x[:, 3]) == 0
    assert nulls == int(inactive.sum()) > 0
    ss = attribute(f, panel, method=SampledShapley(permutations=4000), baseline=b, rng=0)
    assert np.all(ss.phi[0][inactive] == 0) and np.all(ss.stderr[0][inactive] == 0)
    np.testing.assert_allclose(ss.phi[0], exact, atol=5 * ss.stderr[0].max() + 1e-12)
    loo = attribute(f, panel, method=LeaveOneOut(), baseline=b).phi[0]
    np.testing.assert_allclose(loo, attribute(f, panel, method=LeaveOneOut(fast=False), baseline=b).phi[0],
                               atol=1e-12)


def test_not_permutation_invariant_unless_the_graph_is_relabelled(problem):
    f, x, _, A = problem
    perm = np.random.default_rng(2).permutation(x.shape[0])
    moved = f.value(x[perm])
    assert moved != pytest.approx(f.value(x))  # relabelling agents alone changes who neighbours whom
    relabelled = NetworkQuadratic(sp.csr_matrix(A[np.ix_(perm, perm)]), _r, scale=0.7)
    assert relabelled.value(x[perm]) == pytest.approx(f.value(x), rel=1e-13)


def test_subset_uses_the_induced_subgraph(problem):
    f, x, _, A = problem
    S = np.array([0, 2, 3, 7, 9])
    assert f.subset(S).value(x[S]) == pytest.approx(_dense_f(A[np.ix_(S, S)], 0.7, x[S]), rel=1e-13)


def test_bad_interaction_matrices_are_rejected():
    with pytest.raises(IndicatorError, match="sparse"):
        NetworkQuadratic(np.eye(3), _r)
    with pytest.raises(IndicatorError, match="diagonal"):
        NetworkQuadratic(sp.eye(3, format="csr"), _r)
    with pytest.raises(IndicatorError, match="symmetric"):
        NetworkQuadratic(sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 0.0]])), _r)
    f = NetworkQuadratic(_graph(4, 0.9, 0), _r)
    with pytest.raises(IndicatorError, match="subset"):
        f(torch.zeros(3, 4, dtype=torch.float64))


@pytest.mark.parametrize("compiled", [False, True])
def test_value_pair_is_the_two_values(compiled, monkeypatch):
    """Two indicators on one graph evaluated together (one float64 conversion, one pass over A): the same
    floats as each alone, with and without a living mask, float32 input included; another graph: each alone."""
    from aumann.attribution import csr
    from aumann.attribution.evalcontext import EvalContext

    if compiled:
        monkeypatch.setattr(csr, "_MIN_NNZ", 0)  # the paired kernel at this size
    rng = np.random.default_rng(11)
    n = 400
    A = _graph(n, 0.05, 2)
    f = NetworkQuadratic(A, _r, scale=0.3)
    g = NetworkQuadratic(A, lambda z: z[..., 1] * (z[..., 0] > 0.5).to(z.dtype) * z[..., 3], scale=0.9)
    x = rng.uniform(0.0, 1.0, (n, 4)).astype(np.float32)
    alive = rng.random(n) < 0.8
    assert f.value_pair(g, x) == (f.value(x), g.value(x))
    assert f.value_pair(g, x, alive) == (f.value(x, alive), g.value(x, alive))
    assert f.value_pair(g, EvalContext(z=x, alive=alive)) == (f.value(x, alive), g.value(x, alive))
    other = NetworkQuadratic(_graph(n, 0.05, 3), _r, scale=0.3)
    assert f.value_pair(other, x) == (f.value(x), other.value(x))
    assert f.value(x) != other.value(x)


@pytest.mark.parametrize("compiled", [False, True])
def test_evaluate_pair_is_evaluate_twice(compiled, monkeypatch):
    """evaluate_pair of two network indicators on one graph (one pass over A): bit for bit the two evaluate
    calls, with and without a living mask; a batch, another graph or a plain indicator: each alone."""
    from aumann.attribution import csr
    from aumann.attribution.evalcontext import EvalContext
    from aumann.attribution.indicators import Heat, evaluate, evaluate_pair

    if compiled:
        monkeypatch.setattr(csr, "_MIN_NNZ", 0)
    rng = np.random.default_rng(12)
    n = 300
    A = _graph(n, 0.06, 4)
    f = NetworkQuadratic(A, _r, scale=0.3)
    g = NetworkQuadratic(f.A, lambda z: z[..., 1] * (z[..., 0] > 0.5).to(z.dtype) * z[..., 3], scale=0.9)
    other = NetworkQuadratic(_graph(n, 0.06, 5), _r, scale=0.3)
    x = rng.uniform(0.0, 1.0, (n, 4)).astype(np.float32)
    alive = rng.random(n) < 0.7
    calls = []
    real = csr.matvec_pair
    monkeypatch.setattr("aumann.attribution.network.matvec_pair", lambda *a: calls.append(1) or real(*a))
    for state in (EvalContext(x), EvalContext(x, alive=alive), EvalContext(np.stack([x, x / 2]))):
        for a, b in ((f, g), (g, f), (f, other), (f, Heat())):
            got = evaluate_pair(a, b, state)
            want = (evaluate(a, state), evaluate(b, state))
            assert [w.tobytes() for w in got] == [w.tobytes() for w in want]
    assert len(calls) == 4  # the two one-step states × both orders of (f, g) shared the pass over A


def test_the_graph_copy_for_a_device_is_a_and_is_made_once_per_graph():
    """What a GPU path integral multiplies by (the graph as a torch CSR tensor, built by the code the CUDA path
    runs; checked here on the host): A x to 1e-12 of scipy's for a batch (torch and scipy sum a row in another
    order on some processors), one copy for two wrappers of one
    graph, another for another graph, and a cache of at most two graphs."""
    from aumann.attribution import network as nw

    nw._ON_DEVICE.clear()
    cpu = torch.device("cpu")
    A, B, C = _graph(300, 0.05, 1), _graph(300, 0.05, 2), _graph(200, 0.05, 3)
    x = torch.randn(7, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = nw._csr_on(A, cpu)
    np.testing.assert_allclose((t @ x.T).T.numpy(), (A @ x.numpy().T).T, rtol=1e-12, atol=1e-14)
    assert nw._csr_on(sp.csr_matrix(A), cpu) is t  # another wrapper of the same three arrays
    tb = nw._csr_on(B, cpu)
    assert tb is not t
    np.testing.assert_array_equal(tb.to_dense().numpy(), B.toarray())
    nw._csr_on(C, cpu)
    assert len(nw._ON_DEVICE) == 2 and nw._csr_on(B, cpu) is tb  # A, the oldest, went
    nw._ON_DEVICE.clear()


@pytest.mark.parametrize("method", [SampledShapley(permutations=8), SampledBanzhaf(samples=16)], ids=repr)
def test_a_first_step_with_no_active_player_keeps_the_other_steps_notes(method):
    """Under the "previous" baseline nobody moved at step 0, so no player is active there and that step's estimate
    has no notes. The per-step provenance took its keys from the first step alone, so ``permutations``, ``stopped``
    and ``stderr_unseen`` of every other step were dropped (``{'null_players': [10, None, None], 'path': …}``)."""
    z = np.abs(np.random.default_rng(0).normal(size=(3, 10, 4)))
    f = NetworkQuadratic(_graph(10, 0.5, 3), _r, scale=2.0)
    res = attribute(f, Panel(z), method=method, baseline="previous", rng=0)
    per_step = res.provenance["per_step"]
    count = "permutations" if isinstance(method, SampledShapley) else "samples"
    assert per_step[count][1:] == [method.params()[count]] * 2
    assert per_step["stopped"] == ["no active player", count, count] and per_step["null_players"][0] == 10
