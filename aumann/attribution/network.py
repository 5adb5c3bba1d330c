"""Network-coupled indicators: a quadratic form over a sparse graph, held fixed along the path.

:class:`NetworkQuadratic` is f(z) = log(1 + c · r(z)ᵀ A r(z)) with r(z)_i = r(z_i) a per-agent scalar
(a declared polynomial of degree ≤ p in agent i's features) and A a symmetric sparse matrix with a
zero diagonal (scipy CSR; the *context* — it is never attributed and stays fixed on the path). Such
an f is **not permutation-invariant**: relabelling agents changes who neighbours whom unless A is
permuted with them. Its Aumann–Shapley value keeps efficiency, dummy and linearity; symmetry holds
for agents exchangeable under an automorphism of the graph; results that assume a pooled,
permutation-invariant f (the paper's ASB dichotomy) do not apply to it. A subset S of agents is
valued on the induced subgraph A[S, S] (:meth:`NetworkQuadratic.subset`).

What it offers at N = 10⁶ and beyond (all O(N + nnz) per evaluation, never O(N²)):

* :func:`sparse_matvec` — y = A x as a torch autograd op whose backward is another sparse mat-vec
  (Aᵀ g; A g for symmetric A). torch's built-in sparse backward is about 10× slower on this shape.
  So the generic path integral (:class:`~aumann.attribution.AumannShapley`) runs on it.
* :meth:`NetworkQuadratic.exact` — the exact Aumann–Shapley value along the straight path from any
  baseline. r is a polynomial of degree ≤ p in τ on the path, r(τ) = Σ_k c_k τ^k (coefficients from
  p + 1 evaluations), so Q(τ) = r(τ)ᵀ A r(τ) = Σ_{k,l} τ^{k+l} c_kᵀ A c_l and

      φ_i = Σ_{k ≥ 1, l} k c_{k,i} (A c_l)_i J_{k−1+l},   J_m = ∫₀¹ 2c τ^m / (1 + c Q(τ)) dτ

  — p + 1 sparse mat-vecs and 2p scalar integrals of a rational function of τ, computed with
  Gauss–Legendre to machine precision (the node count doubles until two estimates agree to 1e-15).
* :meth:`NetworkQuadratic.gauss_legendre` — the same value by K-point Gauss–Legendre on the analytic
  gradient ∇_{z_i} f = 2c (A r)_i ∇r_i / (1 + cQ) (one sparse mat-vec per node; autograd only
  through the per-agent r), a check of the closed form and a reference implementation.
* :class:`NetworkQuadraticKernel` — the baseline-masking game v(S) = log(1 + c u_Sᵀ A u_S),
  u_S = r⁰ + 1_S ⊙ (r − r⁰), for the coalition methods: when player i joins a prefix its term is
  ΔQ_i = 2 δr_i (A r⁰)_i + Σ_{j before i} 2 A_ij δr_i δr_j, i.e. every edge enters the coalition at
  the *later* of its two endpoints' positions — one ``bincount`` and one ``cumsum`` per permutation:
  O(N + nnz). Players with δr_i = 0 are null players (exactly zero for every semivalue); the kernel
  reports them, so sampled methods permute only the others. Leave-one-out is closed form,
  LOO_i = log(1 + cQ) − log(1 + c(Q − 2 δr_i (A r)_i)), one sparse mat-vec.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from aumann.attribution import jit_sampling
from aumann.attribution.csr import matvec, matvec_pair
from aumann.attribution.indicators import Context, Indicator, living
from aumann.attribution.jit_log1p import log1p
from aumann.attribution.pooled import DEFAULT_MEMORY_BUDGET, GameKernel, curve_args
from aumann.attribution.threads import run_items
from aumann.checks import as_torch
from aumann.errors import IndicatorError


class _SparseMatVec(torch.autograd.Function):
    """y = A x over the last axis (x of shape (..., N)); backward g ↦ Aᵀ g (a sparse mat-vec too)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, A: sp.csr_matrix, AT: sp.csr_matrix) -> torch.Tensor:
        ctx.AT = AT
        return _apply(A, x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _apply(ctx.AT, g), None, None


def _apply(A: sp.csr_matrix, x: torch.Tensor) -> torch.Tensor:
    """A x on the host (scipy / the compiled CSR kernel); on a device, with A's copy there (:func:`_csr_on`):
    a path integral on the GPU never sends its (K, N) batch to the host and back."""
    lead = x.shape[:-1]
    n = x.shape[-1]
    if x.device.type != "cpu":
        xs = x.detach().reshape(-1, n).to(torch.float64).T
        y = (_csr_on(A, x.device) @ xs).T
        return y.to(dtype=x.dtype).reshape(*lead, n)
    xn = x.detach().reshape(-1, n).to(torch.float64).numpy()
    y = (A @ xn.T).T if xn.shape[0] > 1 else matvec(A, xn[0])[None]
    return as_torch(np.ascontiguousarray(y)).to(dtype=x.dtype).reshape(*lead, n)


_ON_DEVICE: OrderedDict[tuple, tuple[tuple[np.ndarray, ...], torch.Tensor]] = OrderedDict()
_ON_DEVICE_KEEP = 2  # graphs kept on devices (10⁷ agents, 10⁸ edges: 1.2 GB each)


def _csr_on(A: sp.csr_matrix, device: torch.device) -> torch.Tensor:
    """A (float64 CSR) as a torch sparse CSR tensor on ``device``, copied once per graph and device.

    Keyed by the addresses of A's three arrays (each indicator wraps the one graph in its own matrix object);
    the entry holds those arrays, so their memory cannot be reused by another graph while it is cached. A
    graph is context, fixed once built: changing its arrays in place afterwards is not seen here.
    """
    import warnings

    arrays = (A.indptr, A.indices, A.data)
    key = (*(a.ctypes.data for a in arrays), A.shape, A.nnz, str(device))
    hit = _ON_DEVICE.get(key)
    if hit is not None:
        _ON_DEVICE.move_to_end(key)
        return hit[1]
    idx = np.int64 if A.indptr.dtype == np.int64 or A.indices.dtype == np.int64 else np.int32
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)
        warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)  # torch < 2.13
        t = torch.sparse_csr_tensor(as_torch(A.indptr.astype(idx, copy=False)),
                                    as_torch(A.indices.astype(idx, copy=False)),
                                    as_torch(np.asarray(A.data, dtype=np.float64)), size=A.shape,
                                    dtype=torch.float64, check_invariants=False).to(device)
    _ON_DEVICE[key] = (arrays, t)
    while len(_ON_DEVICE) > _ON_DEVICE_KEEP:
        _ON_DEVICE.popitem(last=False)
    return t


def sparse_matvec(A: sp.spmatrix, x: torch.Tensor, *, symmetric: bool | None = None) -> torch.Tensor:
    """A x over the last axis of ``x`` with a sparse-mat-vec backward (``symmetric``: reuse A as Aᵀ)."""
    A = sp.csr_matrix(A)
    if symmetric is None:
        symmetric = False
    return _SparseMatVec.apply(x, A, A if symmetric else A.T.tocsr())


@functools.lru_cache(maxsize=16)
def _gl(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(nodes)  # O(nodes³): keep nodes ≤ 1024
    return (x + 1.0) / 2.0, w / 2.0


def converged_gauss_legendre(integrals: Any, tol: float, *, start: int = 16,
                             cap: int = 1024) -> tuple[np.ndarray, int, float]:
    """``integrals(t, w)`` — an array of ∫₀¹ quadratures given Gauss–Legendre nodes ``t`` and weights ``w``
    on [0, 1] — at ``start``, 2·start, … nodes until its largest relative change is ≤ ``tol`` or ``cap``
    nodes are reached: (value, nodes used, last relative change)."""
    nodes, value = start, integrals(*_gl(start))
    change = np.inf
    while nodes < cap:
        nxt = integrals(*_gl(2 * nodes))
        change = float(np.max(np.abs(nxt - value)) / max(float(np.max(np.abs(nxt))), 1e-300))
        nodes, value = 2 * nodes, nxt
        if change <= tol:
            break
    return value, nodes, change


def _check_adjacency(A: Any) -> sp.csr_matrix:
    if not sp.issparse(A):
        raise IndicatorError(f"a network indicator needs a scipy sparse matrix; got {type(A).__name__}")
    A = sp.csr_matrix(A, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        raise IndicatorError(f"the interaction matrix must be square; got shape {A.shape}")
    if A.diagonal().any():
        raise IndicatorError("the interaction matrix must have a zero diagonal (no self-interaction)")
    if (abs(A - A.T) > 1e-12 * max(1.0, abs(A).max())).nnz:
        raise IndicatorError("the interaction matrix must be symmetric; use (F + Fᵀ)/2 for a directed graph")
    A.sort_indices()
    return A


def _same_matrix(A: Any, B: Any) -> bool:
    """Whether two CSR matrices are one matrix: the same object, or wrappers of the same three arrays (each
    indicator validates its own wrapper of the graph it is given)."""
    if A is B:
        return True
    if A.shape != B.shape or A.dtype != B.dtype:
        return False
    return all(x.dtype == y.dtype and x.shape == y.shape and x.ctypes.data == y.ctypes.data
               for x, y in ((A.indptr, B.indptr), (A.indices, B.indices), (A.data, B.data)))


class NetworkQuadratic(Indicator):
    """f(z) = log(1 + scale · r(z)ᵀ A r(z)), r(z)_i a per-agent scalar; A symmetric, zero diagonal.

    Args:
        A: the (N, N) interaction matrix (scipy sparse); held fixed (context), never attributed.
        r: ``r(z[..., N, D]) -> [..., N]``, row i depending on z_i only; a polynomial of degree
            ≤ ``degree`` in z_i along straight lines (needed by :meth:`exact`).
        scale: c.
        degree: the polynomial degree p of r along a line (e.g. 3 for a product of three features).
        name: the indicator's name.
        check: validate A (sparse, square, symmetric, zero diagonal); ``False`` trusts a float64 CSR
            matrix built that way (e.g. ``Network.symmetric()``), skipping an O(nnz) comparison.
    """

    def __init__(self, A: Any, r: Callable[[torch.Tensor], torch.Tensor], *, scale: float = 1.0, degree: int = 3,
                 name: str = "network_quadratic", check: bool = True) -> None:
        self.A = _check_adjacency(A) if check else A
        self.r = r
        self.scale = float(scale)
        self.degree = int(degree)
        self.name = name

    @property
    def n(self) -> int:
        return self.A.shape[0]

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        """f on the living: a dead agent's r is 0, which (A has a zero diagonal) removes its edges — the value
        on the subgraph induced by the living rows, whatever the dead rows hold."""
        if z.shape[-2] != self.n:
            raise IndicatorError(f"indicator {self.name!r} is bound to a graph of {self.n} agents; got a batch with "
                                 f"{z.shape[-2]} (use .subset(ids) for a sub-population)")
        r = self._living_r(z, alive)
        return self._of(r, sparse_matvec(self.A, r, symmetric=True))

    def _living_r(self, z: torch.Tensor, alive: torch.Tensor | None) -> torch.Tensor:
        r = self.r(z.to(torch.float64))
        mask, _ = living(r, alive)
        if mask is not None:
            r = torch.where(mask, r, torch.zeros((), dtype=r.dtype))
        return r

    def _of(self, r: torch.Tensor, Ar: torch.Tensor) -> torch.Tensor:
        q = (r * Ar).sum(dim=-1)
        return torch.log1p(self.scale * q)

    def forward_pair(self, other: Any, z: torch.Tensor, context: Context = None,
                     alive: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(self(z, context, alive), other(z, context, alive))`` — the same tensors. For another network
        indicator on the same graph (the same matrix), one step on the CPU and no gradient, both products come from
        one pass over A (:func:`~aumann.attribution.csr.matvec_pair`): a deletion fork of a 10⁷-agent run
        evaluates f_casc and its original on one state, 1.4 GB of graph read once instead of twice."""
        if (not isinstance(other, NetworkQuadratic) or not _same_matrix(self.A, other.A) or z.ndim != 2
                or z.requires_grad or z.shape[-2] != self.n or z.device.type != "cpu"):
            return self(z, context, alive), other(z, context, alive)
        r, s = self._living_r(z, alive), other._living_r(z, alive)
        Ar, As = matvec_pair(self.A, r.detach().numpy(), s.detach().numpy())  # the bits of sparse_matvec's
        return self._of(r, as_torch(Ar)), other._of(s, as_torch(As))

    def subset(self, positions: Any) -> NetworkQuadratic:
        """The indicator on the sub-population at ``positions``: the induced subgraph A[S, S]."""
        idx = np.asarray(positions, dtype=np.int64)
        sub = type(self).__new__(type(self))
        sub.__dict__.update(self.__dict__)
        sub.A = self.A[idx][:, idx].tocsr()
        sub.A.sort_indices()
        return sub

    # ------------------------------------------------------------------ numpy helpers
    def r_numpy(self, z: np.ndarray) -> np.ndarray:
        """r(z) (N,) in float64 for an (N, D) array (no autograd graph)."""
        arr = np.asarray(z, dtype=np.float64)
        if not arr.flags.writeable:
            arr = arr.copy()
        with torch.no_grad():
            return self.r(as_torch(arr)).double().numpy()

    def value(self, z: Any, alive: np.ndarray | None = None) -> float:
        """f at one (N, D) array or :class:`~aumann.attribution.indicators.EvalContext` (float64, no torch graph);
        ``alive``: the living mask (N,) — dead agents' r is 0, as in :meth:`forward`."""
        from aumann.attribution.evalcontext import EvalContext

        if isinstance(z, EvalContext):
            z, alive = z.z, z.alive
        r = self._living_r_numpy(z, alive)
        return self._value_of(r, matvec(self.A, r))

    def _living_r_numpy(self, z: np.ndarray, alive: np.ndarray | None) -> np.ndarray:
        r = self.r_numpy(z)
        return r if alive is None else np.where(np.asarray(alive, dtype=bool), r, 0.0)

    def _value_of(self, r: np.ndarray, Ar: np.ndarray) -> float:
        return float(np.log1p(self.scale * (r @ Ar)))

    def value_pair(self, other: NetworkQuadratic, z: Any, alive: np.ndarray | None = None) -> tuple[float, float]:
        """``(self.value(z, alive), other.value(z, alive))`` — the same two floats — for another indicator on the
        same graph (the same matrix): the step is converted to float64 once and both products come from
        one pass over A (:func:`~aumann.attribution.csr.matvec_pair`). A series of a smooth indicator and its
        original over every step of a 10⁷-agent run reads the graph (1.4 GB) half as often."""
        from aumann.attribution.evalcontext import EvalContext

        if isinstance(z, EvalContext):
            z, alive = z.z, z.alive
        if not _same_matrix(self.A, other.A):
            return self.value(z, alive), other.value(z, alive)
        z64 = np.asarray(z, dtype=np.float64)
        if z64 is z and not z64.flags.writeable:
            z64 = z64.copy()
        r, s = self._living_r_numpy(z64, alive), other._living_r_numpy(z64, alive)
        Ar, As = matvec_pair(self.A, r, s)
        return self._value_of(r, Ar), other._value_of(s, As)

    def _coefficients(self, x: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(p + 1, N): r along τ ↦ b + τ (x − b) as Σ_k c_k τ^k (exact for a polynomial of degree ≤ p)."""
        p = self.degree
        taus = 0.5 - 0.5 * np.cos(np.pi * (np.arange(p + 1) + 0.5) / (p + 1))  # Chebyshev nodes on (0, 1)
        d = x - b
        vals = np.stack([self.r_numpy(b + t * d) for t in taus])  # (p + 1, N)
        V = np.vander(taus, p + 1, increasing=True)  # V[j, k] = τ_j^k
        return np.linalg.solve(V, vals)

    def exact(self, x: np.ndarray, b: np.ndarray, *, tol: float = 1e-14) -> tuple[np.ndarray, float, float, dict]:
        """Exact Aumann–Shapley φ (N,) of the straight path from ``b`` to ``x`` (both (N, D)), with
        f(x), f(b) and diagnostics (nodes used by the scalar integrals, their last change)."""
        x = np.asarray(x, dtype=np.float64)
        b = np.broadcast_to(np.asarray(b, dtype=np.float64), x.shape)
        c = self._coefficients(x, b)  # (p + 1, N)
        rows = [np.ascontiguousarray(ck) for ck in c]
        Ac = np.stack([prod for k in range(0, len(rows), 2)  # (p + 1, N): two products per pass over A
                       for prod in (matvec_pair(self.A, *rows[k:k + 2]) if k + 1 < len(rows)
                                    else (matvec(self.A, rows[k]),))])
        p = c.shape[0] - 1
        M = c @ Ac.T  # M[k, l] = c_kᵀ A c_l
        qcoef = np.zeros(2 * p + 1)
        for k in range(p + 1):
            for l in range(p + 1):
                qcoef[k + l] += M[k, l]

        def J(t: np.ndarray, w: np.ndarray) -> np.ndarray:
            Q = np.polyval(qcoef[::-1], t)
            base = 2.0 * self.scale * w / (1.0 + self.scale * Q)
            return np.array([np.sum(base * t**m) for m in range(2 * p)])

        Jv, nodes, change = converged_gauss_legendre(J, tol)
        phi = np.zeros(x.shape[0])
        for k in range(1, p + 1):
            for l in range(p + 1):
                phi += k * c[k] * Ac[l] * Jv[k - 1 + l]
        q1, q0 = float(qcoef.sum()), float(qcoef[0])
        return phi, float(np.log1p(self.scale * q1)), float(np.log1p(self.scale * q0)), {
            "scalar_nodes": nodes, "scalar_change": change, "degree": p}

    def gauss_legendre(self, x: np.ndarray, b: np.ndarray, steps: int = 16) -> np.ndarray:
        """φ (N,) by ``steps``-point Gauss–Legendre on the analytic gradient (see the module docstring)."""
        x = np.asarray(x, dtype=np.float64)
        b = np.broadcast_to(np.asarray(b, dtype=np.float64), x.shape)
        d = x - b
        t_nodes, w_nodes = _gl(steps)

        dt = as_torch(d)
        _forward_mode_ready()

        def at(t: float) -> tuple[np.ndarray, np.ndarray]:  # r and ∇r · d at the node
            z = as_torch(b + t * d)
            try:  # forward mode: r and its derivative along d in one pass (no (N, D) gradient to scatter)
                r, rd = torch.func.jvp(self.r, (z,), (dt,))
                return r.detach().numpy(), rd.detach().numpy()
            except (RuntimeError, NotImplementedError):  # an r with an operation that has no forward-mode rule
                z.requires_grad_(True)
                r = self.r(z)
                (gr,) = torch.autograd.grad(r.sum(), z)  # row i: ∇_{z_i} r_i (r_i depends on z_i only)
                return r.detach().numpy(), np.einsum("nd,nd->n", gr.numpy(), d)

        acc = np.zeros(x.shape[0])
        for k in range(0, len(t_nodes), 2):  # nodes two by two: their products from one pass over A
            pts = [at(t) for t in t_nodes[k:k + 2]]
            prods = matvec_pair(self.A, pts[0][0], pts[1][0]) if len(pts) == 2 else (matvec(self.A, pts[0][0]),)
            for (rn, grad_d), Ar, w in zip(pts, prods, w_nodes[k:k + 2], strict=True):
                outer = 2.0 * self.scale * Ar / (1.0 + self.scale * float(rn @ Ar))
                acc += w * outer * grad_d
        return acc

    def masking_kernel(self, x: np.ndarray, b: np.ndarray, *, memory_budget: int = DEFAULT_MEMORY_BUDGET,
                       alive: np.ndarray | None = None) -> NetworkQuadraticKernel:
        """The O(N + nnz) kernel of the baseline-masking game on (N, D) features ``x`` / baseline ``b``
        (``alive``: the step's living mask; dead players have r = r⁰ = 0, null players of the game)."""
        r, r0 = self.r_numpy(x), self.r_numpy(np.broadcast_to(b, x.shape))
        if alive is not None:
            live = np.asarray(alive, dtype=bool)
            r, r0 = np.where(live, r, 0.0), np.where(live, r0, 0.0)
        return NetworkQuadraticKernel(self.A, r, r0, scale=self.scale)


_JVP_LOCK = threading.Lock()
_jvp_ready = False


def _forward_mode_ready() -> None:
    """Import torch's forward-mode rules once: the import (0.5 s) scripts some of them with ``torch.jit.script``,
    which torch ≥ 2.12 itself calls deprecated; that warning says nothing to our user and is silenced here."""
    global _jvp_ready
    if _jvp_ready:
        return
    with _JVP_LOCK:
        if not _jvp_ready:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=DeprecationWarning)
                import torch._decomp.decompositions_for_jvp  # noqa: F401
            _jvp_ready = True


_THREADED_PLAYERS = 1 << 16  # active players from which permutations are walked in pairs on two threads


class NetworkQuadraticKernel(GameKernel):
    """v(S) = log(1 + c u_Sᵀ A u_S), u_S = r⁰ + 1_S ⊙ (r − r⁰); A symmetric with a zero diagonal."""

    kind = "network-quadratic"
    permutation_dtypes = (np.int32, np.int64)  # used as numpy/numba indices only

    def __init__(self, A: sp.csr_matrix, r: np.ndarray, r0: np.ndarray, *, scale: float) -> None:
        self.A = A
        self.n = A.shape[0]
        self.r = np.asarray(r, dtype=np.float64)
        self.r0 = np.asarray(r0, dtype=np.float64)
        self.c = float(scale)
        self.dr = self.r - self.r0
        self.Ar0, self.Ar = matvec_pair(A, self.r0, self.r)
        self.Q0 = float(self.r0 @ self.Ar0)
        self.Q1 = float(self.r @ self.Ar)
        self.active = np.flatnonzero(self.dr != 0)
        # edges among active players, each unordered pair once: weight 2 A_ij δr_i δr_j
        sub = A[self.active][:, self.active].tocoo()
        upper = sub.row < sub.col
        self.ei, self.ej = sub.row[upper].astype(np.int64), sub.col[upper].astype(np.int64)
        da = self.dr[self.active]
        self.we = 2.0 * sub.data[upper] * da[self.ei] * da[self.ej]
        self.own = 2.0 * da * self.Ar0[self.active]  # the part of ΔQ_i that ignores the order

    def null_players(self) -> np.ndarray:
        """Boolean mask of players with δr_i = 0 (null players of this game)."""
        mask = np.ones(self.n, dtype=bool)
        mask[self.active] = False
        return mask

    def _rho(self, q: np.ndarray) -> np.ndarray:
        return log1p(np.asarray(self.c * q, dtype=np.float64))  # the vectorised log1p: a value per player and walk

    def ends(self) -> tuple[float, float]:
        return float(self._rho(np.array(self.Q0))), float(self._rho(np.array(self.Q1)))

    def values(self, masks: np.ndarray) -> np.ndarray:
        m = np.asarray(masks, dtype=np.float64)
        u = self.r0[None, :] + m * self.dr[None, :]
        q = np.einsum("bn,bn->b", u, (self.A @ u.T).T)
        return self._rho(q)

    def chunk_permutations(self) -> int:
        # big games: permutations in pairs of items, walked on two threads where a core is idle (each walk
        # writes only its own row: the same numbers); small ones one at a time
        return 4 if self.active.size >= _THREADED_PLAYERS else 1

    def _marginals_active(self, order: np.ndarray) -> np.ndarray:
        """Marginals (in active-player order) when the active players join in ``order`` (local indices)."""
        na = self.active.size
        if na == 0:
            return np.empty(0)
        if jit_sampling.available():  # one pass over the edges, no temporaries; the same bits
            order = np.ascontiguousarray(order)
            q = np.empty(na)
            jit_sampling.edge_running_sums(order, self.ei, self.ej, self.we, self.own, self.Q0,
                                           np.empty(na, dtype=order.dtype), q)
            v = self._rho(q)
            out = np.empty(na)
            jit_sampling.scatter_steps(v[None], float(self._rho(np.array(self.Q0))), order[None], out[None])
            return out
        pos = np.empty(na, dtype=np.int64)
        pos[order] = np.arange(na)
        later = np.maximum(pos[self.ei], pos[self.ej])
        dq = np.bincount(later, weights=self.we, minlength=na).astype(np.float64, copy=False)  # int64 if no edges
        dq += self.own[order]
        q = np.cumsum(dq)
        q += self.Q0
        v = self._rho(q)
        marg = np.empty(na)
        marg[0] = v[0] - self._rho(np.array(self.Q0))
        np.subtract(v[1:], v[:-1], out=marg[1:])
        out = np.empty(na)
        out[order] = marg
        return out

    def _pair_active(self, order: np.ndarray, out: np.ndarray) -> None:
        """½ (the marginals along ``order`` + those along its reverse), in active-player order, into ``out``:
        both walks from one pass over the edges (the same bits as two :meth:`_marginals_active` calls, added
        and halved)."""
        na = self.active.size
        if not jit_sampling.available():
            out[:] = self._marginals_active(order)
            out += self._marginals_active(order[::-1])
            out *= 0.5
            return
        order = np.ascontiguousarray(order)
        qf, qr = np.empty(na), np.empty(na)
        jit_sampling.edge_running_sums(order, self.ei, self.ej, self.we, self.own, self.Q0,
                                       np.empty(na, dtype=order.dtype), qf, qr)
        jit_sampling.scatter_pair(self._rho(qf), self._rho(qr), float(self._rho(np.array(self.Q0))), order, out)

    def prefix_marginals(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        perms = np.asarray(perms)
        c = perms.shape[0]
        local = np.full(self.n, -1, dtype=np.int64)
        local[self.active] = np.arange(self.active.size)
        fwd = np.zeros((c, self.n))
        rev = np.zeros((c, self.n)) if reverse else None

        def walk(p: int) -> None:
            order = local[perms[p]]
            order = order[order >= 0]
            fwd[p, self.active] = self._marginals_active(order)
            if rev is not None:
                rev[p, self.active] = self._marginals_active(order[::-1])

        run_items(walk, list(range(c)))
        return fwd, rev

    def antithetic_units(self, perms: np.ndarray) -> torch.Tensor:
        perms = np.asarray(perms)
        local = np.full(self.n, -1, dtype=np.int64)
        local[self.active] = np.arange(self.active.size)
        units = np.zeros((perms.shape[0], self.n))

        def walk(p: int) -> None:
            order = local[perms[p]]
            row = np.empty(self.active.size)
            self._pair_active(order[order >= 0], row)
            units[p, self.active] = row

        run_items(walk, list(range(perms.shape[0])))
        return as_torch(units)

    def restricted(self) -> tuple[GameKernel, np.ndarray]:
        """(the game on the non-null players only, their indices): every semivalue of a null player is 0
        and the others' values are unchanged, so coalition methods need only sample these."""
        return _ActiveKernel(self), self.active

    def flip_marginals(self, masks: np.ndarray) -> np.ndarray:
        m = np.asarray(masks, dtype=np.float64)
        u = self.r0[None, :] + m * self.dr[None, :]
        Au = (self.A @ u.T).T  # (B, N)
        q = np.einsum("bn,bn->b", u, Au)
        # u with i in / out: Q changes by 2 (u_i' − u_i)(A u)_i (zero diagonal)
        q_in = q[:, None] + 2.0 * (1.0 - m) * self.dr[None, :] * Au
        q_out = q[:, None] - 2.0 * m * self.dr[None, :] * Au
        return self._rho(q_in) - self._rho(q_out)

    def loo(self, v_full: float) -> np.ndarray:
        return v_full - self._rho(self.Q1 - 2.0 * self.dr * self.Ar)

    def curve(self, order: np.ndarray, ks: Any) -> np.ndarray:
        """v(N ∖ order[:k]) for each k in ``ks`` in one pass along the order: deleting player i changes Q by
        −2 δ_i (A u)_i (zero diagonal; (A u)_i read off row i of the CSR matrix, u the current vector), so the
        whole curve costs O(k_max + Σ deg)."""
        order, ks = curve_args(order, ks, self.n)
        if not ks.size:
            return np.empty(0)
        A = self.A
        u = self.r.copy()
        q = float(self.Q1)
        uniq = np.unique(ks)
        at = np.empty(uniq.size)
        indptr, indices, data = A.indptr, A.indices, A.data
        nxt = 0
        if uniq[0] == 0:
            at[0] = float(self._rho(np.array(q)))
            nxt = 1
        for k, i in enumerate(order[: int(uniq[-1])], start=1):
            d = u[i] - self.r0[i]
            if d != 0.0:
                lo, hi = indptr[i], indptr[i + 1]
                q -= 2.0 * d * float(data[lo:hi] @ u[indices[lo:hi]])
                u[i] = self.r0[i]
            if nxt < uniq.size and k == uniq[nxt]:
                at[nxt] = float(self._rho(np.array(q)))
                nxt += 1
        return at[np.searchsorted(uniq, ks)]


class _ActiveKernel(GameKernel):
    """A :class:`NetworkQuadraticKernel` restricted to its active (non-null) players."""

    kind = "network-quadratic"
    permutation_dtypes = (np.int32, np.int64)

    def __init__(self, parent: NetworkQuadraticKernel) -> None:
        self.parent = parent
        self.n = parent.active.size

    def _full(self, masks: np.ndarray) -> np.ndarray:
        m = np.zeros((masks.shape[0], self.parent.n), dtype=bool)
        m[:, self.parent.active] = masks
        return m

    def ends(self) -> tuple[float, float]:
        return self.parent.ends()

    def values(self, masks: np.ndarray) -> np.ndarray:
        return self.parent.values(self._full(np.asarray(masks, dtype=bool)))

    def prefix_marginals(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        perms = np.asarray(perms)
        fwd = np.empty(perms.shape)
        rev = np.empty(perms.shape) if reverse else None

        def walk(p: int) -> None:
            fwd[p] = self.parent._marginals_active(perms[p])
            if rev is not None:
                rev[p] = self.parent._marginals_active(perms[p][::-1])

        run_items(walk, list(range(perms.shape[0])))
        return fwd, rev

    def chunk_permutations(self) -> int:
        return self.parent.chunk_permutations()

    def antithetic_units(self, perms: np.ndarray) -> torch.Tensor:
        perms = np.asarray(perms)
        units = np.empty(perms.shape, dtype=np.float64)
        run_items(lambda p: self.parent._pair_active(perms[p], units[p]), list(range(perms.shape[0])))
        return as_torch(units)

    def flip_marginals(self, masks: np.ndarray) -> np.ndarray:
        return self.parent.flip_marginals(self._full(np.asarray(masks, dtype=bool)))[:, self.parent.active]

    def loo(self, v_full: float) -> np.ndarray:
        return self.parent.loo(v_full)[self.parent.active]


__all__ = ["NetworkQuadratic", "NetworkQuadraticKernel", "converged_gauss_legendre", "sparse_matvec"]

