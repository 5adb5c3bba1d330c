"""Structured games: running-sum fast paths for the coalition methods.

A coalition method needs four primitives of the game v (per step; N players):

* ``values(M)``           v(S) for a batch of coalitions given as boolean masks M[B, N];
* ``prefix_marginals(π)`` the marginal contribution of every player along permutations π[c, N]
  (and along the reversed permutations), returned in player order;
* ``flip_marginals(M)``   v(S ∪ {i}) − v(S ∖ {i}) for every player i and every mask;
* ``loo()``               v(N) − v(N ∖ {i}) for every player.

:class:`GenericKernel` computes them by evaluating v on masks (O(N) evaluations of an O(N) game
per permutation: O(N²)). Two structured games have cheaper forms:

**Additive terms** (:class:`AdditiveKernel`): v(S) = ρ(Σ_{i∈S} a_i + Σ_{i∉S} b_i) with a_i, b_i ∈ ℝ^P.
Pooled indicators f(z) = ρ(mean_i ψ(z_i)) under baseline masking are this with a_i = ψ(z_i)/N,
b_i = ψ(z⁰_i)/N; agent-specific sums ρ(Σ_i ψ_i(z_i)) (:class:`AgentwiseIndicator`) with
a_i = ψ_i(z_i), b_i = ψ_i(z⁰_i). Along a permutation π the first k members have the running sum
Σ_b + Σ_{l≤k} (a − b)_{π_l}: one gather and one cumulative sum, O(N·P) per permutation, vectorised
over a chunk of permutations. The reversed permutation reuses the same sums (its coalitions are the
suffixes of π). Leave-one-out is ρ(Σ_a − (a − b)_i): O(N·P).

**Quadratic forms** (:class:`QuadraticKernel`): f(z) = Σ_i q_i(z_i) + ½ sᵀ C s with s_i = s_i(z_i)
(:class:`QuadraticIndicator`). With u_S = s⁰ + Σ_{j∈S} δ_j e_j (δ = s − s⁰) the marginal of i joining S
is (q_i − q⁰_i) + δ_i (C u_S)_i + ½ C_ii δ_i². Along a permutation (C u) is updated block by block
(one row-gather and matrix–vector product per block), O(N²) per permutation with O(N·block) memory,
instead of O(N³) for N re-evaluations of the quadratic form.

All kernels compute in float64 and never evaluate f through torch autograd.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from aumann.attribution.indicators import Context, Indicator
from aumann.checks import as_real_array
from aumann.errors import IndicatorError

DEFAULT_MEMORY_BUDGET = 256 * 2**20


def _rho_numpy(rho: Callable[[torch.Tensor], torch.Tensor], s: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = rho(torch.from_numpy(np.ascontiguousarray(s)))
    return out.detach().to(torch.float64).numpy()


# ---------------------------------------------------------------------- declarations
class AgentwiseIndicator(Indicator):
    """f(z) = ρ(Σ_i ψ(z)_i): a sum of agent-specific terms through an outer function.

    Args:
        psi: ``psi(z[..., N, D]) -> [..., N, P]``; row i may depend on agent i's features only (and on
            i itself, e.g. agent-specific weights).
        rho: ``rho(s[..., P]) -> [...]``; default sums over P (so P = 1 gives f = Σ_i ψ_i(z_i)).
        name: the indicator's name.

    Example (Appendix D's f_add and f_nl with weights W of shape (N, D)):
        >>> import torch
        >>> W = torch.randn(5, 3, dtype=torch.float64)
        >>> f_add = AgentwiseIndicator(lambda z: (W * z).sum(-1, keepdim=True), name="f_add")
        >>> f_nl = AgentwiseIndicator(lambda z: (W * z).sum(-1, keepdim=True),
        ...                           rho=lambda s: torch.nn.functional.softplus(0.35 * s[..., 0]) / 0.35)
    """

    def __init__(self, psi: Callable[[torch.Tensor], torch.Tensor],
                 rho: Callable[[torch.Tensor], torch.Tensor] | None = None, *, name: str = "agentwise") -> None:
        if not callable(psi) or (rho is not None and not callable(rho)):
            raise IndicatorError("AgentwiseIndicator needs callables psi(z[..., N, D]) -> [..., N, P] and "
                                 "rho(s[..., P]) -> [...]")
        self.psi = psi
        self.rho = rho if rho is not None else (lambda s: s.sum(dim=-1))
        self.name = name

    def forward(self, z: torch.Tensor, context: Context = None) -> torch.Tensor:
        return self.rho(self.psi(z).sum(dim=-2))


class QuadraticIndicator(Indicator):
    """f(z) = Σ_i q(z)_i + ½ s(z)ᵀ C s(z): agent terms plus a quadratic form in per-agent scalars.

    Args:
        C: (N, N) matrix (symmetrised as (C + Cᵀ)/2; only the symmetric part enters f).
        s: ``s(z[..., N, D]) -> [..., N]``; default Σ_d z_{i,d}.
        q: ``q(z[..., N, D]) -> [..., N]``; default zero.
        name: the indicator's name.

    Example (Appendix D's f_quad): ``QuadraticIndicator(C, q=lambda z: (Q * z**2).sum(-1))``.
    """

    def __init__(self, C: np.ndarray | torch.Tensor, *, s: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 q: Callable[[torch.Tensor], torch.Tensor] | None = None, name: str = "quadratic") -> None:
        C = torch.as_tensor(as_real_array(C, "QuadraticIndicator C", error=IndicatorError, dtype=np.float64))
        if not torch.isfinite(C).all():
            raise IndicatorError("QuadraticIndicator C contains NaN or inf")
        if C.ndim != 2 or C.shape[0] != C.shape[1]:
            raise IndicatorError(f"QuadraticIndicator needs a square (N, N) matrix C; got shape {tuple(C.shape)}")
        self.C = (C + C.T) / 2
        self.s = s if s is not None else (lambda z: z.sum(dim=-1))
        self.q = q
        self.name = name

    def forward(self, z: torch.Tensor, context: Context = None) -> torch.Tensor:
        s = self.s(z)
        C = self.C.to(s.dtype)
        out = 0.5 * ((s @ C) * s).sum(dim=-1)
        if self.q is not None:
            out = out + self.q(z).sum(dim=-1)
        return out


# ---------------------------------------------------------------------- kernels
class GameKernel(ABC):
    """The four primitives a coalition method needs (see the module docstring)."""

    n: int
    kind: str = "generic"

    @abstractmethod
    def values(self, masks: np.ndarray) -> np.ndarray:
        """v(S) for a batch of coalitions (B, N) → (B,)."""

    def ends(self) -> tuple[float, float]:
        """(v(∅), v(N))."""
        e = self.values(np.array([[False] * self.n, [True] * self.n]))
        return float(e[0]), float(e[1])

    def chunk_permutations(self) -> int:
        """How many permutations ``prefix_marginals`` should get at once."""
        return 1

    @abstractmethod
    def prefix_marginals(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(c, N) marginals in player order along ``perms`` (and along the reversed perms, or None)."""

    @abstractmethod
    def flip_marginals(self, masks: np.ndarray) -> np.ndarray:
        """v(S ∪ {i}) − v(S \\ {i}) for every player i and coalition in ``masks`` (B, N) → (B, N)."""

    @abstractmethod
    def loo(self, v_full: float) -> np.ndarray:
        """v(N) − v(N \\ {i}) for every player i → (N,)."""


def _to_player_order(perms: np.ndarray, marg_pos: np.ndarray) -> np.ndarray:
    c, n = perms.shape
    out = np.empty_like(marg_pos)
    flat = perms + (np.arange(c, dtype=perms.dtype) * n)[:, None] if c > 1 else perms
    out.reshape(-1)[flat.reshape(-1)] = marg_pos.reshape(-1)  # rows are permutations: one scatter
    return out


class GenericKernel(GameKernel):
    """Evaluates the game on masks; works for any v."""

    kind = "generic"

    def __init__(self, v: Callable[[np.ndarray], np.ndarray], n: int, *, row_bytes: int,
                 memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self.v = v
        self.n = n
        self.row_bytes = max(1, row_bytes)  # working bytes per evaluated coalition
        self.memory_budget = memory_budget

    def values(self, masks: np.ndarray) -> np.ndarray:
        return self.v(masks)

    def chunk_permutations(self) -> int:
        return max(1, self.memory_budget // (self.row_bytes * max(1, self.n)))

    def prefix_marginals(self, perms, reverse):
        c, N = perms.shape
        ranks = np.argsort(perms, axis=1)  # ranks[p, j]: position of player j in π_p
        ks = np.arange(1, N)
        # interior prefixes k = 1..N−1 (v(∅) and v(N) are shared by every permutation)
        fwd = (ranks[:, None, :] < ks[None, :, None]).reshape(-1, N)  # (c·(N−1), N)
        v0, vN = self._ends()
        vals = self.v(fwd).reshape(c, N - 1)
        full = np.concatenate([np.full((c, 1), v0), vals, np.full((c, 1), vN)], axis=1)
        out_f = _to_player_order(perms, np.diff(full, axis=1))
        if not reverse:
            return out_f, None
        rev = (ranks[:, None, :] >= (N - ks)[None, :, None]).reshape(-1, N)  # last k of π
        rvals = self.v(rev).reshape(c, N - 1)
        rfull = np.concatenate([np.full((c, 1), v0), rvals, np.full((c, 1), vN)], axis=1)
        # reversed order σ = π[::-1]: position k of σ is π[N−1−k]
        out_r = _to_player_order(perms[:, ::-1], np.diff(rfull, axis=1))
        return out_f, out_r

    def _ends(self) -> tuple[float, float]:
        if not hasattr(self, "_v_ends"):
            self._v_ends = self.ends()
        return self._v_ends

    def flip_marginals(self, masks):
        c, N = masks.shape
        with_i = np.repeat(masks[:, None, :], N, axis=1)  # (c, N, N)
        eye = np.eye(N, dtype=bool)
        without_i = with_i & ~eye
        with_i = with_i | eye
        vw = self.v(with_i.reshape(-1, N)).reshape(c, N)
        vo = self.v(without_i.reshape(-1, N)).reshape(c, N)
        return vw - vo

    def loo(self, v_full):
        masks = ~np.eye(self.n, dtype=bool)
        return v_full - self.v(masks)


@dataclass
class AdditiveKernel(GameKernel):
    """v(S) = ρ(Σ_{i∈S} a_i + Σ_{i∉S} b_i); a, b of shape (N, P)."""

    a: np.ndarray
    b: np.ndarray
    rho: Callable[[torch.Tensor], torch.Tensor]
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    kind: str = "additive"

    def __post_init__(self) -> None:
        self.a = np.ascontiguousarray(self.a, dtype=np.float64)
        self.b = np.ascontiguousarray(self.b, dtype=np.float64)
        self.n, self.p = self.a.shape
        self.delta = self.a - self.b
        self._delta_t: np.ndarray | None = None
        self.sum_b = np.einsum("ij->j", self.b)  # column sums; 4× faster than .sum(axis=0) on (N, P)
        self.sum_a = self.sum_b + np.einsum("ij->j", self.delta)

    @property
    def delta_t(self) -> np.ndarray:
        """(P, N) copy of a − b, made on first use (permutation sampling only)."""
        if self._delta_t is None:
            self._delta_t = np.ascontiguousarray(self.delta.T)
        return self._delta_t

    def ends(self):
        e = self._rho(np.stack([self.sum_b, self.sum_a]))
        return float(e[0]), float(e[1])

    def _rho(self, s: np.ndarray) -> np.ndarray:
        return _rho_numpy(self.rho, s)

    def values(self, masks):
        return self._rho(self.sum_b + masks.astype(np.float64) @ self.delta)

    def chunk_permutations(self):
        return max(1, self.memory_budget // (4 * 8 * self.n * self.p))

    def prefix_marginals(self, perms, reverse):
        v0, vN = self.ends()
        # (P, c, N) layout: the gather and the cumulative sum run over contiguous agent rows
        g = np.take(self.delta_t, perms, axis=1)
        g[:, :, 0] += self.sum_b[:, None]
        np.cumsum(g, axis=2, out=g)  # g[:, p, k] = sums of the coalition π_p[:k+1]
        vals = self._rho_t(g)  # (c, N)
        marg = np.empty_like(vals)
        marg[:, 0] = vals[:, 0] - v0
        np.subtract(vals[:, 1:], vals[:, :-1], out=marg[:, 1:])
        out_f = _to_player_order(perms, marg)
        if not reverse:
            return out_f, None
        # the suffix π[k+1:] has sums Σ_a + Σ_b − g[:, k]; π[k] joins it, reaching π[k:]
        np.subtract((self.sum_a + self.sum_b)[:, None, None], g, out=g)
        u = self._rho_t(g)  # u[:, k] = v(π[k+1:])
        marg[:, 0] = vN - u[:, 0]
        np.subtract(u[:, :-1], u[:, 1:], out=marg[:, 1:])
        return out_f, _to_player_order(perms, marg)

    def _rho_t(self, g: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self.rho(torch.from_numpy(g).permute(1, 2, 0))
        return out.detach().to(torch.float64).numpy()

    def flip_marginals(self, masks):
        m = masks.astype(np.float64)
        s = self.sum_b + m @ self.delta  # (c, P)
        with_i = s[:, None, :] + (1.0 - m)[..., None] * self.delta[None]
        without_i = s[:, None, :] - m[..., None] * self.delta[None]
        return self._rho(with_i) - self._rho(without_i)

    def loo(self, v_full):
        return v_full - self._rho(self.sum_a[None, :] - self.delta)


@dataclass
class QuadraticKernel(GameKernel):
    """v(S) = Σ_{i∈S} q_i + Σ_{i∉S} q⁰_i + ½ u_Sᵀ C u_S with u_S = s⁰ + Σ_{j∈S} (s − s⁰)_j e_j."""

    q: np.ndarray
    q0: np.ndarray
    s: np.ndarray
    s0: np.ndarray
    C: np.ndarray
    block: int = 64  # small blocks keep the b×b triangle in cache
    kind: str = "quadratic"

    def __post_init__(self) -> None:
        self.n = self.s.shape[0]
        self.dq = self.q - self.q0
        self.ds = self.s - self.s0
        self.diag = np.diag(self.C).copy()
        self.own = self.dq + 0.5 * self.diag * self.ds**2  # the part of i's marginal that ignores S
        self.Cs0 = self.C @ self.s0

    def values(self, masks):
        m = masks.astype(np.float64)
        u = self.s0 + m * self.ds
        return self.q0.sum() + m @ self.dq + 0.5 * ((u @ self.C) * u).sum(axis=1)

    def _along(self, order: np.ndarray) -> np.ndarray:
        """Marginals, in player order, of the players joining in ``order`` (one permutation)."""
        w = self.Cs0.copy()  # (C u)_i for the current coalition
        out = np.empty(self.n)
        for k0 in range(0, self.n, self.block):
            blk = order[k0:k0 + self.block]
            d = self.ds[blk]
            rows = self.C[blk]  # (b, N), C symmetric: rows = columns
            inner = np.tril(rows[:, blk] * d[None, :], -1).sum(axis=1)
            out[blk] = self.own[blk] + d * (w[blk] + inner)
            w += d @ rows
        return out

    def prefix_marginals(self, perms, reverse):
        fwd = np.stack([self._along(p) for p in perms])
        rev = np.stack([self._along(p[::-1]) for p in perms]) if reverse else None
        return fwd, rev

    def flip_marginals(self, masks):
        m = masks.astype(np.float64)
        Cu = (self.s0 + m * self.ds) @ self.C  # (c, N)
        Cu_without = Cu - m * self.diag * self.ds  # (C u_{S∖i})_i
        return self.own + self.ds * Cu_without

    def loo(self, v_full):
        return self.own + self.ds * (self.C @ self.s - self.diag * self.ds)


__all__ = [
    "AdditiveKernel", "AgentwiseIndicator", "GameKernel", "GenericKernel", "QuadraticIndicator",
    "QuadraticKernel",
]
