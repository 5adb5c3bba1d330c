"""MegaScale-Social's macro indicators: pooled propagation risk and network cascade pressure.

Features (columns of z): 0 ``belief`` b, 1 ``exposure``, 2 ``posted``, 3 ``reshared``,
4 ``influence`` w, 5 ``risk`` s = σ(κ(b − θ)). Activity a = posted + reshared.

**Propagation risk** (pooled, permutation-invariant; the indicator of the faithfulness table and of
the cross-scale comparison)::

    f_prop(z) = log(1 + c · m_w · m_s · m_a),   m_x = mean_i x_i

a heat-type triple product over pooled means (paper, App. F): ψ(z_i) = (w_i, s_i, a_i) is linear in
z_i, so the engine's path integral needs only the per-step means, and along the straight path from
any baseline the means are affine in τ: m_k(τ) = m⁰_k + τ Δ_k. Hence (:meth:`PropagationRisk.exact`)

    φ_i = Σ_k (ψ_k(z_i) − ψ_k(z⁰_i)) / n · I_k,   I_k = ∫₀¹ c Π_{l≠k} m_l(τ) / (1 + c Π_l m_l(τ)) dτ

three scalar integrals per step, evaluated to machine precision: O(N). Original (non-smooth): the
hard threshold s = 1[b > θ] computed from ``belief``.

**Cascade pressure** (network-coupled; beyond the paper)::

    r_i = w_i · s_i · a_i,      f_casc(z) = log(1 + c · rᵀ A r),   c = scale / nnz(A)

A = (F + Fᵀ)/2 the symmetrised follow graph without self-loops — *context*, held fixed along the
path and never attributed. It is a :class:`~aumann.attribution.network.NetworkQuadratic` (exact
attribution by p + 1 sparse mat-vecs, Gauss–Legendre on the analytic gradient, O(N + nnz) masking
game for sampled Shapley and LOO). **It is not permutation-invariant** (relabelling agents changes
the graph unless A is relabelled with them): its Aumann–Shapley value is efficient, dummy and
linear, symmetric only for agents exchangeable under a graph automorphism, and the paper's ASB
dichotomy — stated for pooled, permutation-invariant indicators — is claimed for f_prop only. On a
sub-population S it is valued on the induced subgraph A[S, S]. Original (non-smooth): the hard
threshold 1[b > θ] in place of s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from aumann.attribution import Indicator, PooledForm, jit_sampling
from aumann.attribution.jit_log1p import log1p, log1p_scalar
from aumann.attribution.network import NetworkQuadratic, converged_gauss_legendre
from aumann.attribution.pooled import GameKernel
from aumann.attribution.threads import idle_cores
from aumann.checks import as_torch
from aumann.scenarios.megascale_social.features import INFLUENCE, POSTED, RESHARED, RISK, B


# The feature columns are taken with one ``unbind`` rather than one ``z[..., k]`` each: the same values and
# gradients, but autograd's backward of a column selection writes a zero (…, N, D) tensor per column (about 2.5×
# the time of the whole backward at 10⁶ agents), where one ``unbind`` stacks the columns' gradients once.
def _psi_smooth(z: torch.Tensor) -> torch.Tensor:
    c = z.unbind(-1)
    return torch.stack([c[INFLUENCE], c[RISK], c[POSTED] + c[RESHARED]], dim=-1)


class PropagationRisk(Indicator):
    """f_prop = log(1 + c m_w m_s m_a) (``smooth=False``: s = 1[belief > θ], the original).

    Args:
        scale: c.
        threshold: θ (the original's hard threshold on ``belief``).
    """

    has_closed_form = True

    def __init__(self, *, scale: float = 10.0, threshold: float = 0.3, smooth: bool = True) -> None:
        self.scale = float(scale)
        self.threshold = float(threshold)
        self.smooth = smooth
        self.name = "propagation_risk" if smooth else "propagation_risk_original"
        if smooth:
            self.pooled = PooledForm(psi=_psi_smooth, rho=self._rho, linear_psi=True)
        else:
            self.pooled = PooledForm(psi=self._psi_original, rho=self._rho)
            self.has_closed_form = False

    def masking_kernel(self, x: np.ndarray, b: np.ndarray, *, memory_budget: int = 256 * 2**20) -> Any:
        """The masking game's kernel (:class:`ProductMeansKernel`) for the smooth indicator; the generic
        running-sum kernel for the original."""
        from aumann.attribution.pooled import AdditiveKernel

        n = x.shape[0]
        with torch.no_grad():
            a = self.pooled.psi(as_torch(np.asarray(x, dtype=np.float64))).double().numpy()
            b0 = self.pooled.psi(as_torch(np.array(np.broadcast_to(b, x.shape), dtype=np.float64))
                                 ).double().numpy()
        if not self.smooth:
            return AdditiveKernel(a=a / n, b=b0 / n, rho=self._rho, memory_budget=memory_budget)
        return ProductMeansKernel(a, b0, scale=self.scale, memory_budget=memory_budget)

    def _psi_original(self, z: torch.Tensor) -> torch.Tensor:
        c = z.unbind(-1)
        s = (c[B] > self.threshold).to(z.dtype)
        return torch.stack([c[INFLUENCE], s, c[POSTED] + c[RESHARED]], dim=-1)

    def _rho(self, m: torch.Tensor) -> torch.Tensor:
        return torch.log1p(self.scale * m[..., 0] * m[..., 1] * m[..., 2])

    def forward(self, z: torch.Tensor, context: Any = None) -> torch.Tensor:
        z = z.to(torch.float64)  # float32 panels are upcast here, one batch at a time
        return self._rho(self.pooled.psi(z).mean(dim=-2))

    # ------------------------------------------------------------------ closed forms
    @staticmethod
    def psi_numpy(z: np.ndarray) -> np.ndarray:
        """(…, N, 3) columns (w, s, a) in float64."""
        z = np.asarray(z)
        return np.stack([z[..., INFLUENCE], z[..., RISK], z[..., POSTED] + z[..., RESHARED]], axis=-1).astype(
            np.float64)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        """Zero baseline: φ_i = Σ_k ψ_k(z_i) · c Π_{l≠k} m_l / n · log(1 + cH)/(3cH), H = Π_k m_k (heat, App. F)."""
        if per_feature:
            from aumann.errors import IndicatorError

            raise IndicatorError(f"indicator {self.name!r}: its closed form is per agent (ψ mixes features)")
        T, n, _ = values.shape
        phi = np.empty((T, n))
        f = np.empty(T)
        for t in range(T):
            psi = self.psi_numpy(values[t])
            m = psi.mean(axis=0)
            x = self.scale * float(np.prod(m))
            f[t] = np.log1p(x)
            ratio = np.log1p(x) / (3.0 * x) if abs(x) > 1e-12 else (1.0 - x / 2.0) / 3.0  # log(1 + x)/(3x)
            others = np.array([np.prod(np.delete(m, k)) for k in range(3)])
            phi[t] = psi @ (self.scale * others / n * ratio)
        return phi, f, np.zeros(T)

    def exact(self, x: np.ndarray, b: np.ndarray, *, tol: float = 1e-14) -> tuple[np.ndarray, float, float, dict]:
        """φ (N,), f(x), f(b), diagnostics: the exact straight-path value from baseline ``b`` (N, D)."""
        psi = self.psi_numpy(x)
        psi0 = self.psi_numpy(np.broadcast_to(b, np.shape(x)))
        n = psi.shape[0]
        m0, m1 = psi0.mean(axis=0), psi.mean(axis=0)
        dm = m1 - m0

        def integrals(t: np.ndarray, w: np.ndarray) -> np.ndarray:
            m = m0[None, :] + t[:, None] * dm[None, :]  # (K, 3)
            h = np.prod(m, axis=1)
            den = 1.0 + self.scale * h
            return np.array([np.sum(w * self.scale * np.prod(np.delete(m, k, axis=1), axis=1) / den)
                             for k in range(3)])

        I, nodes, change = converged_gauss_legendre(integrals, tol)
        phi = (psi - psi0) @ I / n
        return phi, float(np.log1p(self.scale * np.prod(m1))), float(np.log1p(self.scale * np.prod(m0))), {
            "scalar_nodes": nodes, "scalar_change": change}


_POOL: Any = None
_SEGMENT = 1 << 16  # positions of a permutation walked at a time by the antithetic units (scratch stays in cache)


def _pool() -> Any:
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aumann-prodmeans")
    return _POOL


def _finisher() -> Any:
    """One thread per process that finishes a permutation's segments (ρ, marginals) behind its walk."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    pool = _FINISHERS.get(os.getpid())  # a forked child builds its own (threads do not survive fork)
    if pool is None:
        pool = _FINISHERS[os.getpid()] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aumann-prodmeans-seg")
    return pool


_FINISHERS: dict[int, Any] = {}


class ProductMeansKernel(GameKernel):
    """The masking game of f_prop: v(S) = log(1 + c Π_k m_k(S)), m_k(S) = (Σ_{i∈S} a_ik + Σ_{i∉S} b_ik) / n.

    A column whose a − b vanishes for every agent (influence: the baseline keeps it) is a constant
    factor; only the others are gathered along each permutation, accumulated in place and multiplied
    — two running sums at N = 10⁶ instead of three, no torch round trip. The permutations of one
    chunk are processed on two threads (numpy releases the GIL; each permutation's row is written by
    one thread, so the numbers do not depend on the threading). ``values``, ``flip_marginals`` and
    ``loo`` use the generic running-sum kernel; they agree to rounding (tested).
    """

    kind = "product-of-means"

    def __init__(self, a: np.ndarray, b: np.ndarray, *, scale: float, memory_budget: int = 256 * 2**20) -> None:
        from aumann.attribution.pooled import AdditiveKernel

        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        self.n, self.p = a.shape
        n = self.n
        self.c = float(scale)
        d = a - b
        moving = np.flatnonzero(np.any(d != 0, axis=0))
        fixed = np.setdiff1d(np.arange(self.p), moving)
        self.sum_b = b.sum(axis=0) / n
        self.sum_a = self.sum_b + d.sum(axis=0) / n
        self.moving = moving
        self.coef = self.c * float(np.prod(self.sum_b[fixed])) if fixed.size else self.c
        self.dm = np.ascontiguousarray(d[:, moving].T) / n  # (P_moving, N)
        self.memory_budget = int(memory_budget)
        self._table: np.ndarray | None = None
        self._generic = AdditiveKernel(a=a / n, b=b / n, rho=self._rho_torch, memory_budget=memory_budget)

    def _rho_torch(self, m: torch.Tensor) -> torch.Tensor:
        return torch.log1p(self.c * m.prod(dim=-1))

    def ends(self) -> tuple[float, float]:
        return log1p_scalar(self.c * np.prod(self.sum_b)), log1p_scalar(self.c * np.prod(self.sum_a))

    def values(self, masks: np.ndarray) -> np.ndarray:
        return self._generic.values(masks)

    def flip_marginals(self, masks: np.ndarray) -> np.ndarray:
        return self._generic.flip_marginals(masks)

    def loo(self, v_full: float) -> np.ndarray:
        return self._generic.loo(v_full)

    def chunk_permutations(self) -> int:
        per = 8 * self.n * (self.moving.size + 3)
        # two per thread: each thread walks a whole antithetic unit (a permutation and its reverse), or two
        # plain walks, start to end. One unit at a time left the second core to the segment pipeline below,
        # which only runs where a core is idle right now: at 10⁶ it ran on ~1 core (78 ms a unit, 45 ms in
        # pairs, the same bits). Memory stays ~200 MB.
        return int(max(1, min(4, self.memory_budget // max(1, per))))

    @property
    def permutation_dtypes(self) -> tuple[type, ...]:  # type: ignore[override]
        return (np.int32, np.int64) if jit_sampling.available() else (np.int64,)

    def _one(self, perm: np.ndarray, out_f: np.ndarray, out_r: np.ndarray | None) -> None:
        v0, vN = self.ends()
        if not self.moving.size:
            out_f[:] = 0.0
            if out_r is not None:
                out_r[:] = 0.0
            return
        if jit_sampling.available():
            self._one_compiled(perm, out_f, out_r, v0, vN)
            return
        g = np.take(self.dm, perm, axis=1)  # (P_moving, N) in permutation order
        g[:, 0] += self.sum_b[self.moving]
        np.cumsum(g, axis=1, out=g)  # running means of the moving columns
        h = np.array(g[0]) if self.moving.size > 1 else g[0].copy()
        for k in range(1, self.moving.size):
            h *= g[k]
        h *= self.coef
        log1p(h, out=h)
        marg = np.empty_like(h)
        marg[0] = h[0] - v0
        np.subtract(h[1:], h[:-1], out=marg[1:])
        out_f[perm] = marg
        if out_r is None:
            return
        # reversed permutation: the suffix π[k+1:] has means sum_a + sum_b − g[:, k]; π[k] joins it
        tot = (self.sum_a + self.sum_b)[self.moving][:, None]
        np.subtract(tot, g, out=g)
        h = g[0].copy()
        for k in range(1, self.moving.size):
            h *= g[k]
        h *= self.coef
        log1p(h, out=h)  # h[k] = v(π[k+1:])
        marg[0] = vN - h[0]
        np.subtract(h[:-1], h[1:], out=marg[1:])
        out_r[perm] = marg

    def _table_compiled(self) -> None:
        if self._table is None:
            self._table = np.ascontiguousarray(self.dm.T)  # (N, P_moving): one cache line per player
            self._start = np.ascontiguousarray(self.sum_b[self.moving])
            self._total = np.ascontiguousarray((self.sum_a + self.sum_b)[self.moving])

    def _one_compiled(self, perm: np.ndarray, out_f: np.ndarray, out_r: np.ndarray | None, v0: float,
                      vN: float) -> None:
        """:meth:`_one` in one pass over the permutation: the running means' products (forward and, for the
        reversed permutation, of the suffix means) from one random row read per player; the vectorised log1p
        (:mod:`~aumann.attribution.jit_log1p`) on them as before, then the marginals written straight to player
        order. The same operations in the same order as the numpy path (the same bits; tested)."""
        self._table_compiled()
        perm = np.ascontiguousarray(perm)[None]
        h = np.empty((1, self.n))
        hr = np.empty((1, self.n)) if out_r is not None else h
        jit_sampling.running_products_kernel(self.moving.size)(self._table, self._start, self._total, self.coef,
                                                                perm, h, hr, out_r is not None)
        log1p(h, out=h)
        jit_sampling.scatter_steps(h, v0, perm, out_f[None])
        if out_r is not None:
            log1p(hr, out=hr)  # hr[k] = v(π[k+1:])
            jit_sampling.scatter_steps_reversed(hr, vN, perm, out_r[None])

    def _pair(self, perm: np.ndarray, out: np.ndarray, pipeline: bool = False) -> None:
        """The antithetic unit of ``perm`` into ``out``: ½ (its marginals + its reverse's), the same bits as
        :meth:`_one` into two rows added and halved (compiled: the two walks' marginals combined as they are
        written, one random write per player)."""
        if not self.moving.size or not jit_sampling.available():
            rev = np.empty_like(out)
            self._one(perm, out, rev)
            out += rev
            out *= 0.5
            return
        v0, vN = self.ends()
        self._table_compiled()
        kernel = jit_sampling.running_products_segment(self.moving.size)
        perm = np.ascontiguousarray(perm)
        state = self._start.copy()
        seg = min(self.n, _SEGMENT)
        bufs = [(np.empty((1, seg)), np.empty((1, seg))) for _ in range(2)]
        carry = [v0, vN]

        def finish(b: int, lo: int, hi: int) -> None:  # ρ and the marginals of one segment, in order
            h, hr = bufs[b][0][:, :hi - lo], bufs[b][1][:, :hi - lo]
            log1p(h, out=h)
            log1p(hr, out=hr)  # hr[k] = v(π[k+1:])
            jit_sampling.scatter_antithetic(h, hr, carry[0], carry[1], perm[None, lo:hi], out[None])
            carry[0], carry[1] = float(h[0, -1]), float(hr[0, -1])

        # the walk in segments (O(segment) scratch, the same bits): the next segment's running products are
        # formed here while a helper finishes the last one, where a core is idle
        pool = _finisher() if pipeline and self.n >= 2 * _SEGMENT and idle_cores() > 0 else None
        pending = None
        for j, lo in enumerate(range(0, self.n, seg)):
            hi = min(self.n, lo + seg)
            b = j % 2
            kernel(self._table, state, self._total, self.coef, perm, lo, hi, bufs[b][0][0], bufs[b][1][0])
            if pending is not None:
                pending.result()
            if pool is None:
                finish(b, lo, hi)
            else:
                pending = pool.submit(finish, b, lo, hi)
        if pending is not None:
            pending.result()

    def antithetic_units(self, perms: np.ndarray) -> torch.Tensor:
        perms = np.asarray(perms)
        c = perms.shape[0]
        units = np.empty((c, self.n))
        if c == 1:  # one permutation: its segments pipelined on two threads
            self._pair(perms[0], units[0], pipeline=True)
        else:  # one permutation per thread
            list(_pool().map(lambda j: self._pair(perms[j], units[j]), range(c)))
        return as_torch(units)

    def prefix_marginals(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        perms = np.asarray(perms)
        c = perms.shape[0]
        fwd = np.empty((c, self.n))
        rev = np.empty((c, self.n)) if reverse else None
        jobs = [(perms[j], fwd[j], None if rev is None else rev[j]) for j in range(c)]
        if c == 1:
            self._one(*jobs[0])
        else:
            list(_pool().map(lambda job: self._one(*job), jobs))
        return fwd, rev


def _r_smooth(z: torch.Tensor) -> torch.Tensor:
    c = z.unbind(-1)  # one column split, not one selection per column (see _psi_smooth)
    return c[INFLUENCE] * c[RISK] * (c[POSTED] + c[RESHARED])


class CascadePressure(NetworkQuadratic):
    """f_casc = log(1 + c rᵀ A r), r = w · s · a (``smooth=False``: s = 1[belief > θ], the original).

    Args:
        A: the symmetrised follow graph (``Network.symmetric()``), float64 CSR, zero diagonal.
        scale: c · nnz(A) (so c = scale / nnz(A)).
        threshold: θ of the original.
        check: validate A (see :class:`~aumann.attribution.network.NetworkQuadratic`).
    """

    def __init__(self, A: Any, *, scale: float = 100.0, threshold: float = 0.3, smooth: bool = True,
                 check: bool = True) -> None:
        self.threshold = float(threshold)
        self.smooth = smooth
        r = _r_smooth if smooth else self._r_original
        super().__init__(A, r, scale=1.0, degree=3, check=check,
                         name="cascade_pressure" if smooth else "cascade_pressure_original")
        self.scale = float(scale) / max(1, self.A.nnz)
        self.total_scale = float(scale)

    def _r_original(self, z: torch.Tensor) -> torch.Tensor:
        c = z.unbind(-1)
        s = (c[B] > self.threshold).to(z.dtype)
        return c[INFLUENCE] * s * (c[POSTED] + c[RESHARED])


def indicator(config: Any, *, smooth: bool = True) -> PropagationRisk:
    """The faithfulness table's indicator f_prop (``smooth=False``: the original) for a config."""
    return PropagationRisk(scale=config.prop_scale, threshold=config.risk_threshold, smooth=smooth)


def cascade_indicator(world: Any, config: Any, *, smooth: bool = True) -> CascadePressure:
    """f_casc on a run's world (its symmetrised follow graph)."""
    return CascadePressure(world.network.symmetric(), scale=config.cascade_scale, threshold=config.risk_threshold,
                           smooth=smooth, check=False)


__all__ = ["CascadePressure", "ProductMeansKernel", "PropagationRisk", "cascade_indicator", "indicator"]
