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

All kernels compute in float64 and never evaluate f through torch autograd. The additive kernel
runs in torch on the method's device (``device="cuda"``); the quadratic kernel runs on the host.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aumann.attribution import jit_sampling
from aumann.attribution.device import CPU
from aumann.attribution.indicators import HALF, Context, Indicator
from aumann.attribution.jit_log1p import log1p
from aumann.attribution.streaming import fresh
from aumann.checks import as_real_array, as_torch
from aumann.errors import IndicatorError, MemoryBudgetError

DEFAULT_MEMORY_BUDGET = 256 * 2**20
#: bytes per player one sample of the flip marginals holds besides any masks (its marginals, both sides' values)
FLIP_SAMPLE_BYTES = 64


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

    calls_user_code = True

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

    calls_user_code = True

    def __init__(self, C: np.ndarray | torch.Tensor, *, s: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 q: Callable[[torch.Tensor], torch.Tensor] | None = None, name: str = "quadratic") -> None:
        C = as_torch(as_real_array(C, "QuadraticIndicator C", error=IndicatorError, dtype=np.float64))
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

    def flip_sample_bytes(self) -> int:
        """Working bytes one sample of :meth:`flip_marginals` holds (for sizing chunks of the marginal Banzhaf
        estimator): its (N,) marginals and the running sums behind them."""
        return FLIP_SAMPLE_BYTES * max(1, self.n)

    #: the integer dtypes of permutations this kernel takes without a copy (int32 halves the memory the
    #: permutation draws touch; a kernel that indexes torch tensors with them needs int64)
    permutation_dtypes: tuple[type, ...] = (np.int64,)

    #: the players whose membership can change v, when the game knows the others are null players (a masking
    #: game's agents whose row equals their baseline row: every dead agent, and anyone unchanged); ``None``: all
    players: np.ndarray | None = None

    def restricted(self) -> tuple[GameKernel, np.ndarray | None]:
        """(the game on :attr:`players` only, their indices), or (self, None) where every player can matter.

        Every semivalue of a null player is 0 and leaving null players out changes no one else's value, so the
        coalition methods sample (and the control variate's positions count) the other players only: a null
        player's place in a permutation says nothing, but it shifted where the others stood on the diagonal."""
        if self.players is None or len(self.players) == self.n:
            return self, None
        return self._on(self.players), self.players

    def _on(self, players: np.ndarray) -> GameKernel:
        """This game on ``players`` only (the others out of every coalition: they are null players), evaluated
        through :meth:`values`."""
        parent, n = self, self.n

        def v(masks: np.ndarray) -> np.ndarray:
            full = np.zeros((masks.shape[0], n), dtype=bool)
            full[:, players] = masks
            return parent.values(full)

        return GenericKernel(v, len(players), row_bytes=getattr(self, "row_bytes", 64),
                             memory_budget=getattr(self, "memory_budget", DEFAULT_MEMORY_BUDGET))

    @abstractmethod
    def prefix_marginals(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(c, N) marginals in player order along ``perms`` (and along the reversed perms, or None)."""

    def prefix_marginals_tensor(self, perms: np.ndarray, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`prefix_marginals` as float64 tensors on the kernel's device (where the method accumulates)."""
        fwd, rev = self.prefix_marginals(perms, reverse)
        return as_torch(fwd), None if rev is None else as_torch(rev)

    def units(self, perms: np.ndarray, antithetic: bool) -> torch.Tensor:
        """(c, N) float64 sampled-Shapley units of ``perms``: each permutation's marginals, or with ``antithetic``
        the mean of its marginals and its reverse's (:meth:`antithetic_units`)."""
        if antithetic:
            return self.antithetic_units(perms)
        return self.prefix_marginals_tensor(perms, reverse=False)[0]

    def antithetic_units(self, perms: np.ndarray) -> torch.Tensor:
        """(c, N) float64 on the kernel's device: ½ (marginals along each permutation + along its reverse),
        the unit antithetic sampling averages. Computed as ``fwd += rev; fwd *= 0.5`` on
        :meth:`prefix_marginals_tensor`; a kernel that walks both directions at once overrides it with the
        same bits."""
        fwd, rev = self.prefix_marginals_tensor(perms, reverse=True)
        assert rev is not None
        fwd += rev
        fwd *= 0.5
        return fwd

    @property
    def device(self) -> torch.device:
        """Where the kernel computes (host numpy unless a subclass runs torch on a device)."""
        return CPU

    @abstractmethod
    def flip_marginals(self, masks: np.ndarray) -> np.ndarray:
        """v(S ∪ {i}) − v(S \\ {i}) for every player i and coalition in ``masks`` (B, N) → (B, N)."""

    @abstractmethod
    def loo(self, v_full: float) -> np.ndarray:
        """v(N) − v(N \\ {i}) for every player i → (N,)."""

    def curve(self, order: np.ndarray, ks: np.ndarray | list[int] | range) -> np.ndarray:
        """The masking deletion curve: v(N ∖ order[:k]) for each k in ``ks`` → (len(ks),) float64.

        The first k players of ``order`` are put at their baseline, everyone else stays as they are
        (the deletion oracle on the game the coalition methods explain). By default one batch of
        ``values``; kernels with running sums override it (O(k_max) after the first call)."""
        order, ks = curve_args(order, ks, self.n)
        if not ks.size:
            return np.empty(0)
        rank = np.full(self.n, self.n, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return np.asarray(self.values(~(rank[None, :] < ks[:, None])), dtype=np.float64)


def curve_args(order: Any, ks: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``order`` and ``ks`` of a deletion curve as int64 arrays, checked: players in [0, n), 0 ≤ k ≤ len(order)."""
    order = np.asarray(order, dtype=np.int64).reshape(-1)
    ks = np.asarray(list(ks) if isinstance(ks, range) else ks, dtype=np.int64).reshape(-1)
    if order.size and (order.min() < 0 or order.max() >= n):
        raise IndicatorError(f"a deletion order names players outside 0 … {n - 1}: {order.min()} … {order.max()}")
    if ks.size and (ks.min() < 0 or ks.max() > order.size):
        raise IndicatorError(f"deletion sizes must lie in 0 … {order.size} (the length of the order); got "
                             f"{ks.min()} … {ks.max()}")
    return order, ks


def _to_player_order(perms: np.ndarray, marg_pos: np.ndarray) -> np.ndarray:
    c, n = perms.shape
    out = np.empty_like(marg_pos)
    flat = perms + (np.arange(c, dtype=perms.dtype) * n)[:, None] if c > 1 else perms
    out.reshape(-1)[flat.reshape(-1)] = marg_pos.reshape(-1)  # rows are permutations: one scatter
    return out


def _walk_perms(perms: Any) -> np.ndarray:
    """Permutations as the compiled walks take them: a contiguous int32 or int64 (c, N) array."""
    perms = np.asarray(perms)
    return np.ascontiguousarray(perms if perms.dtype in (np.int32, np.int64) else perms.astype(np.int64))


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
        """Permutations per chunk: each brings N − 1 coalitions, and each coalition costs the game's
        ``row_bytes`` plus its own mask row here (N bools: :meth:`prefix_marginals` holds the (c·(N − 1), N)
        masks of a chunk's one direction while the game evaluates them; past the budget, at the floor of one
        permutation, in blocks of :meth:`block_rows`). Counting ``row_bytes`` alone (64 for a
        :class:`~aumann.attribution.games.FunctionGame`) batched N/64 times the budget: at N = 1000 the
        re-simulation game's sampled Shapley held ~2 GB of masks under the default 256 MiB budget."""
        n = max(1, self.n)
        return max(1, self.memory_budget // ((self.row_bytes + n) * n))

    def block_rows(self) -> int:
        """Coalitions evaluated at once: as many as the budget holds at ``row_bytes`` plus an N-byte mask row each.

        Raises:
            MemoryBudgetError: not even one coalition fits.
        """
        per = self.row_bytes + max(1, self.n)
        if per > self.memory_budget:
            raise MemoryBudgetError(
                f"one coalition of the game needs {self.row_bytes:,} bytes of working memory plus its {self.n:,}-byte "
                f"mask row ({per:,} bytes), more than memory_budget={self.memory_budget:,} bytes; pass a larger "
                "memory_budget=")
        return self.memory_budget // per

    def prefix_marginals(self, perms, reverse):
        c = perms.shape[0]
        ranks = np.argsort(perms, axis=1)  # ranks[p, j]: position of player j in π_p
        v0, vN = self._ends()
        vals = self._prefix_values(ranks, suffix=False)  # (c, N − 1)
        full = np.concatenate([np.full((c, 1), v0), vals, np.full((c, 1), vN)], axis=1)
        out_f = _to_player_order(perms, np.diff(full, axis=1))
        if not reverse:
            return out_f, None
        rvals = self._prefix_values(ranks, suffix=True)  # the last k of π
        rfull = np.concatenate([np.full((c, 1), v0), rvals, np.full((c, 1), vN)], axis=1)
        # reversed order σ = π[::-1]: position k of σ is π[N−1−k]
        out_r = _to_player_order(perms[:, ::-1], np.diff(rfull, axis=1))
        return out_f, out_r

    def _prefix_values(self, ranks: np.ndarray, suffix: bool) -> np.ndarray:
        """(c, N − 1): v of the interior prefixes k = 1 … N − 1 of each permutation (``suffix``: of its last k
        players; v(∅) and v(N) are shared by every permutation), in blocks (:meth:`_evaluate_blocks`): one
        permutation alone brings N − 1 mask rows of N bytes (~400 MB at N = 20,000, as much again for its reverse),
        past any budget at large N."""
        N = ranks.shape[1]
        ks = np.arange(1, N)
        bound = N - ks if suffix else ks  # coalition k: ranks ≥ N − k (suffix), ranks < k (prefix)

        def fill(seg: np.ndarray, p: int, k0: int, k1: int) -> None:
            if suffix:
                np.greater_equal(ranks[p][None, :], bound[k0:k1, None], out=seg)
            else:
                np.less(ranks[p][None, :], bound[k0:k1, None], out=seg)

        return self._evaluate_blocks(ranks.shape[0], N - 1, fill)

    def _evaluate_blocks(self, groups: int, width: int,
                         fill: Callable[[np.ndarray, int, int, int], None]) -> np.ndarray:
        """(groups, width): v of ``groups`` × ``width`` coalitions, ``fill(seg, g, a, b)`` writing the masks of
        coalitions a … b − 1 of group g into ``seg`` (b − a, N). They are built and evaluated in blocks of
        :meth:`block_rows` consecutive coalitions (crossing group boundaries), so their masks stay within the budget
        at any N. All of them within the budget are one block, one call of v (as before blocks existed)."""
        N = self.n
        total = groups * width
        out = np.empty(total, dtype=np.float64)
        if not total:
            return out.reshape(groups, width)
        rows = min(total, self.block_rows())
        for j0 in range(0, total, rows):
            j1 = min(total, j0 + rows)
            block = np.empty((j1 - j0, N), dtype=bool)  # fresh: a game may keep the masks it was given
            j = j0
            while j < j1:  # the block's rows, group by group
                g, a = divmod(j, width)
                b = min(width, a + (j1 - j))
                fill(block[j - j0:j - j0 + b - a], g, a, b)
                j += b - a
            out[j0:j1] = self.v(block)
            del block  # the next block is allocated after this one is gone
        return out.reshape(groups, width)

    def _ends(self) -> tuple[float, float]:
        if not hasattr(self, "_v_ends"):
            self._v_ends = self.ends()
        return self._v_ends

    def flip_sample_bytes(self) -> int:
        """One sample's N coalitions of one side (S ∪ {i} for every i, then S ∖ {i}) at ``row_bytes`` plus an N-byte
        mask row each, and its marginals. The declaration was 64 · N² bytes a sample (N = 1000: 64 MB) for the
        ~3 · N² the masks of both sides took together, so a chunk held ~20 times fewer samples than the budget
        allowed; the two sides are now built one after the other (N² bytes a sample)."""
        n = max(1, self.n)
        return n * (self.row_bytes + n) + FLIP_SAMPLE_BYTES * n

    def flip_marginals(self, masks):
        masks = np.asarray(masks, dtype=bool)
        c, N = masks.shape

        def flipped(value: bool) -> Callable[[np.ndarray, int, int, int], None]:
            def fill(seg: np.ndarray, s: int, a: int, b: int) -> None:  # rows i = a … b − 1 of sample s, bit i set
                seg[:] = masks[s]
                seg[np.arange(b - a), np.arange(a, b)] = value
            return fill

        vw = self._evaluate_blocks(c, N, flipped(True))  # row (s, i): S_s ∪ {i}
        vo = self._evaluate_blocks(c, N, flipped(False))  # row (s, i): S_s ∖ {i}
        return vw - vo

    def loo(self, v_full):
        def fill(seg: np.ndarray, _: int, a: int, b: int) -> None:  # rows i = a … b − 1: everyone but i
            seg[:] = True
            seg[np.arange(b - a), np.arange(a, b)] = False

        # in blocks: ~eye(N) was N² bytes at once (400 MB at N = 20,000), whatever the budget
        return v_full - self._evaluate_blocks(1, self.n, fill)[0]

    def curve(self, order: np.ndarray, ks: np.ndarray | list[int] | range) -> np.ndarray:
        order, ks = curve_args(order, ks, self.n)
        if not ks.size:
            return np.empty(0)
        rank = np.full(self.n, self.n, dtype=np.int64)
        rank[order] = np.arange(order.size)

        def fill(seg: np.ndarray, _: int, a: int, b: int) -> None:  # row k: the first ks[k] of the order deleted
            np.greater_equal(rank[None, :], ks[a:b, None], out=seg)

        return self._evaluate_blocks(1, ks.size, fill)[0]  # in blocks, as the permutations' prefixes


def _masked_sums(m: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """(c, P): Σ_j m[r, j] δ[j, p] for each coalition r, the players added in order (a scan along each row), so a
    coalition's sums do not depend on the other rows of its batch. A matrix product rounds a row differently
    with the batch's size, so ``memory_budget`` moved the last bits of MSR Banzhaf and the exact enumeration."""
    out = torch.empty((m.shape[0], delta.shape[1]), dtype=torch.float64, device=m.device)
    if m.device.type == "cpu" and m.shape[1] and jit_sampling.available():  # the same bits, ~20× faster
        jit_sampling.masked_sums(m.numpy() != 0, delta.contiguous().numpy(), out.numpy())
        return out
    for p in range(delta.shape[1]):
        out[:, p] = torch.cumsum(m * delta[:, p], dim=1)[:, -1]
    return out


def _checked_rho(out: Any, s: torch.Tensor) -> torch.Tensor:
    """ρ's value on sums ``s`` (..., P), checked as every indicator's output is: a real tensor of shape (...),
    as float64. A ρ that kept the P axis (``rho=lambda m: m``) was a ValueError from ``float()`` deep inside
    the kernel ('only one element tensors can be converted to Python scalars'), reported as the indicator's."""
    if not isinstance(out, torch.Tensor):
        raise IndicatorError(f"pooled rho returned {type(out).__name__}; it must return a torch tensor: rho maps "
                             "sums (..., P) to (...)")
    if out.is_complex() or not out.is_floating_point():
        raise IndicatorError(f"pooled rho returned a {out.dtype} tensor; it must return real floating values")
    if out.dtype in HALF:  # the rule of the indicator's own output (check_output): its rounding is in every v(S)
        raise IndicatorError(f"pooled rho returned {out.dtype} values; half precision would round every coalition's "
                             "value: return float32 or float64")
    if out.shape != s.shape[:-1]:
        raise IndicatorError(f"pooled rho returned shape {tuple(out.shape)} for sums of shape {tuple(s.shape)}; "
                             "rho maps (..., P) to (...)")
    return out.detach().to(torch.float64)


class AdditiveKernel(GameKernel):
    """v(S) = ρ(Σ_{i∈S} a_i + Σ_{i∉S} b_i); a, b of shape (N, P).

    Everything runs in float64 torch on ``device`` (the host by default): a chunk of c
    permutations is one gather of the (P, N) table a − b into (P, c, N), one in-place cumulative
    sum along contiguous rows, one call of ρ, one difference and one scatter back to player order.
    Permutations come from the host; only the (c, N) index block travels to the device.
    """

    kind = "additive"

    def __init__(self, a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor,
                 rho: Callable[[torch.Tensor], torch.Tensor], memory_budget: int = DEFAULT_MEMORY_BUDGET,
                 device: torch.device = CPU, rows: PooledRows | None = None,
                 log1p_product: float | None = None) -> None:
        a64 = as_torch(a, dtype=torch.float64, device=device)
        b64 = as_torch(b, dtype=torch.float64, device=device)
        if a64.shape != b64.shape or a64.ndim != 2:
            raise IndicatorError(f"additive game terms must be two (N, P) arrays; got {tuple(a64.shape)} and "
                                 f"{tuple(b64.shape)}")
        self.rho = rho
        self.memory_budget = int(memory_budget)
        self._device = torch.device(device)
        self.n, self.p = a64.shape
        self.delta = (a64 - b64).contiguous()  # (N, P)
        self.sum_b = b64.sum(dim=0)
        self.sum_a = self.sum_b + self.delta.sum(dim=0)
        self._delta_t: torch.Tensor | None = None
        self._ends: tuple[float, float] | None = None
        self.rows = rows
        # ρ(m) = log1p(c Π m) (PooledForm.log1p_product): the compiled path forms the products on the fly
        self.log1p_product = None if log1p_product is None or self.p > 8 else float(log1p_product)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def delta_t(self) -> torch.Tensor:
        """(P, N) copy of a − b, made on first use (permutation sampling only)."""
        if self._delta_t is None:
            self._delta_t = self.delta.T.contiguous()
        return self._delta_t

    def ends(self):
        if self._ends is None:
            e = self._rho(torch.stack([self.sum_b, self.sum_a]))
            self._ends = (float(e[0]), float(e[1]))
        return self._ends

    def _rho(self, s: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return _checked_rho(self.rho(s), s)

    def values(self, masks):
        return self._rho(self.sums(masks)).cpu().numpy()

    def sums(self, masks: np.ndarray) -> torch.Tensor:
        """The running sums Σ_{i∈S} a_i + Σ_{i∉S} b_i of coalitions ``masks`` (B, N): (B, P) float64."""
        m = as_torch(np.asarray(masks), device=self._device).to(torch.float64)
        return self.sum_b + _masked_sums(m, self.delta)

    def rounding_reach(self, sums: torch.Tensor, eps: float) -> np.ndarray:
        """How far ρ can move at each of ``sums`` (K, P) when every sum moves by the rounding that forming it can
        explain: Σ_p max_± |ρ(s ± h_p e_p) − ρ(s)| with h_p = 2(N + 2) · eps · Σ_i (|a_ip| + |b_ip|), the worst-case
        error of a sum of N terms of that size (plus the terms' own rounding), ``eps`` the unit roundoff of the
        computation. (K,) float64; inf where ρ is not finite there (nothing can be told). Running sums that miss f
        by less than this lost its precision (an offset far from the spread, ρ = m₂ − m₁²); by more, ρ(mean ψ) is
        not f."""
        if self.rows is not None:
            r = self.rows
            live = np.ones(r.psi_x.shape[0], bool) if r.live is None else np.asarray(r.live, bool)
            size = (np.abs(r.psi_x[live]).sum(0) + np.abs(r.psi_b[live]).sum(0)) / r.n
            mag = as_torch(size, dtype=torch.float64, device=self._device)
        else:  # agent-wise ψ: the terms are gone; their sums and differences bound them
            mag = self.sum_b.abs() + self.delta.abs().sum(dim=0)
        mag = mag + self.sum_a.abs() + self.sum_b.abs()
        h = 2.0 * (self.n + 2) * float(eps) * mag  # (P,)
        s = sums.to(torch.float64)
        k, p = s.shape
        steps = torch.cat([torch.diag(h), -torch.diag(h)])  # (2P, P)
        points = torch.cat([s[:, None, :], s[:, None, :] + steps[None]], dim=1).reshape(-1, p)  # (K·(1 + 2P), P)
        try:  # one leading dimension, as the kernel's own calls of ρ
            with torch.no_grad():
                vals = _checked_rho(self.rho(points), points).view(k, 1 + 2 * p)
        except (ArithmeticError, RuntimeError, ValueError, IndicatorError):
            return np.full(k, np.inf)
        moved = (vals[:, 1:] - vals[:, :1]).abs().view(k, 2, p).amax(dim=1).sum(dim=1)
        out = moved.cpu().numpy()
        out[~np.isfinite(out) | ~np.isfinite(vals.cpu().numpy()).all(axis=1)] = np.inf
        return out

    def chunk_permutations(self):
        # per permutation: the (P, N) running sums, ρ's (N,) output, marginals, scatter target, indices
        return max(1, self.memory_budget // ((self.p + 5) * 8 * self.n))

    def prefix_marginals(self, perms, reverse):
        fwd, rev = self.prefix_marginals_tensor(perms, reverse)
        return fwd.cpu().numpy(), None if rev is None else rev.cpu().numpy()

    @property
    def permutation_dtypes(self) -> tuple[type, ...]:  # type: ignore[override]
        return (np.int32, np.int64) if self._compiled() else (np.int64,)

    def _compiled(self) -> bool:
        return self._device.type == "cpu" and jit_sampling.available()

    def antithetic_units(self, perms: np.ndarray) -> torch.Tensor:
        """The compiled path writes each antithetic unit straight to player order from the walk's prefix and
        suffix values (:func:`~aumann.attribution.jit_sampling.scatter_antithetic`): one random write per player
        instead of two scatters, a second (c, N) array and two more passes — the same bits as the default."""
        if not self._compiled():
            return super().antithetic_units(perms)
        perms = _walk_perms(perms)
        v0, vN = self.ends()
        vals, u = self._walk_values(perms, reverse=True)
        assert u is not None
        out = fresh(perms.shape, np.float64)
        jit_sampling.scatter_antithetic(vals, u, v0, vN, perms, out)
        return as_torch(out)

    def _walk_values(self, perms: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(c, N) float64 v(π[:k+1]) along ``perms`` (contiguous int32/int64) from the compiled running sums, and
        with ``reverse`` v(π[k+1:]) (the suffix after position k has sums Σ_a + Σ_b − g[k]; π[k] joins it).

        ρ(m) = log1p(c Π_p m_p) declared: the products of the running sums are formed along the walk (the same
        sums, multiplied in index order, then by c) and the vectorised log1p runs on them
        (:mod:`~aumann.attribution.jit_log1p`; equal to the ρ path up to the last bit of log1p, ours vs torch's).
        Else ρ in torch on the running sums, laid out (c, N, P) for P ≤ 4 — ρ's reductions over the last axis are
        then contiguous, 2× faster, and bit-identical to the (P, c, N) layout (tested) — and (P, c, N) above,
        where a contiguous sum over P could round differently."""
        c, n = perms.shape
        if self.log1p_product is not None:
            h = fresh((c, n), np.float64)  # recycled memory: a fresh 8 MB per permutation cost its page faults
            hr = fresh((c, n), np.float64) if reverse else h
            jit_sampling.running_products_kernel(self.p)(self.delta.numpy(), self.sum_b.numpy(),
                                                         (self.sum_a + self.sum_b).numpy(), self.log1p_product,
                                                         perms, h, hr, reverse)
            log1p(h, out=h)
            if not reverse:
                return h, None
            log1p(hr, out=hr)  # hr[:, k] = v(π[k+1:])
            return h, hr
        agents_last = self.p > 4
        g = as_torch(fresh((self.p, c, n) if agents_last else (c, n, self.p), np.float64), writable=True)
        jit_sampling.running_sums_kernel(self.p, agents_last)(self.delta.numpy(), self.sum_b.numpy(), perms,
                                                              g.numpy())
        view = g.permute(1, 2, 0) if agents_last else g
        vals = self._rho_view(view)  # (c, N): v of the first k + 1 members of each permutation
        if not reverse:
            return vals.numpy(), None
        if np.may_share_memory(vals.numpy(), g.numpy()):  # a ρ that returns a view of the sums (P = 1)
            vals = vals.clone()
        tot = (self.sum_a + self.sum_b)
        torch.sub(tot[:, None, None] if agents_last else tot, g, out=g)
        return vals.numpy(), self._rho_view(view).numpy()  # u[:, k] = v(π[k+1:])

    def prefix_marginals_tensor(self, perms, reverse):
        if self._compiled():
            return self._prefix_marginals_compiled(np.asarray(perms), reverse)
        c, n = perms.shape
        v0, vN = self.ends()
        perms = np.asarray(perms, dtype=np.int64)
        idx = as_torch(perms).to(self._device)
        # (P, c, N) layout: the gather reads the contiguous rows of a − b, the cumsum runs along them
        if self._device.type == "cpu":  # numpy's take: 2–3× faster than torch's index_select along dim 1
            g = as_torch(np.take(self.delta_t.numpy(), perms, axis=1))
        else:
            g = self.delta_t.index_select(1, idx.reshape(-1)).view(self.p, c, n)
        g[:, :, 0] += self.sum_b[:, None]
        g.cumsum_(dim=2)  # g[:, p, k] = sums of the coalition π_p[:k+1]
        vals = self._rho_t(g)  # (c, N)
        out_f = self._scatter(idx, self._steps(vals, v0))
        if not reverse:
            return out_f, None
        # the suffix π[k+1:] has sums Σ_a + Σ_b − g[:, k]; π[k] joins it, reaching π[k:]
        torch.sub((self.sum_a + self.sum_b)[:, None, None], g, out=g)
        u = self._rho_t(g)  # u[:, k] = v(π[k+1:])
        marg = torch.empty_like(u)
        marg[:, 0] = vN - u[:, 0]
        torch.sub(u[:, :-1], u[:, 1:], out=marg[:, 1:])
        return out_f, self._scatter(idx, marg)

    def _prefix_marginals_compiled(self, perms: np.ndarray, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The host path with compiled kernels: the running sums straight from one random row read per
        player of the (N, P) table a − b (the same additions as ``take`` + ``cumsum``, in the same order, so
        the same bits; :meth:`_walk_values`), ρ on them, and the marginals written straight to player order."""
        perms = _walk_perms(perms)
        v0, vN = self.ends()
        vals, u = self._walk_values(perms, reverse)
        out_f = fresh(perms.shape, np.float64)
        jit_sampling.scatter_steps(vals, v0, perms, out_f)
        if u is None:
            return as_torch(out_f), None
        out_r = fresh(perms.shape, np.float64)
        jit_sampling.scatter_steps_reversed(u, vN, perms, out_r)
        return as_torch(out_f), as_torch(out_r)

    def _rho_view(self, m: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = self.rho(m)
        return _checked_rho(out, m).contiguous()

    @staticmethod
    def _steps(vals: torch.Tensor, v0: float) -> torch.Tensor:
        marg = torch.empty_like(vals)
        torch.sub(vals[:, 0], v0, out=marg[:, 0])
        torch.sub(vals[:, 1:], vals[:, :-1], out=marg[:, 1:])
        return marg

    @staticmethod
    def _scatter(idx: torch.Tensor, marg: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(marg).scatter_(1, idx, marg)  # rows are permutations: one scatter

    def _rho_t(self, g: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            m = g.permute(1, 2, 0)
            out = self.rho(m)
        return _checked_rho(out, m)

    def flip_marginals(self, masks):
        m = as_torch(np.asarray(masks), device=self._device).to(torch.float64)
        s = self.sum_b + _masked_sums(m, self.delta)  # (c, P)
        with_i = s[:, None, :] + (1.0 - m)[..., None] * self.delta[None]
        without_i = s[:, None, :] - m[..., None] * self.delta[None]
        return (self._rho(with_i) - self._rho(without_i)).cpu().numpy()

    def loo(self, v_full):
        return (v_full - self._rho(self.sum_a[None, :] - self.delta)).cpu().numpy()

    def _on(self, players: np.ndarray) -> AdditiveKernel:
        """The running sums on ``players`` only: their rows of a − b, the same Σ_b and Σ_a (the others' rows of
        a − b are 0, so every sum along a permutation of ``players`` is the sum the whole table gives)."""
        sub = copy.copy(self)
        idx = torch.as_tensor(np.asarray(players, dtype=np.int64), device=self._device)
        sub.delta = self.delta.index_select(0, idx).contiguous()
        sub.n = int(idx.numel())
        sub._delta_t = None
        sub.players = None
        sub.rows = None  # (the pooled rows sum ψ over every living agent: the sub-game's sums are Σ_b, Σ_a and its δ)
        return sub

    def curve(self, order, ks):
        """Running sums along ``order``: O(k_max · P) for the whole curve.

        With the pooled rows (ψ(z_i), ψ(z⁰_i), the living mask and n_t; see :class:`PooledRows`) the sums
        are Σ_{living} ψ(z) + Σ_{l<k} (ψ(z⁰) − ψ(z))_{order_l}, divided by n_t before ρ; otherwise the
        kernel's own a, b."""
        order, ks = curve_args(order, ks, self.n)
        if not ks.size:
            return np.empty(0)
        kmax = int(ks.max())
        if self.rows is not None:
            a, b, live, n = self.rows.psi_x, self.rows.psi_b, self.rows.live, self.rows.n
            if live is None:
                total, change = a.sum(axis=0), b - a
            else:
                total, change = a[live].sum(axis=0), np.where(live[:, None], b - a, 0.0)
            run = np.cumsum(change[order[:kmax]], axis=0)  # the running change of Σψ
            s = total[None, :] + np.concatenate([np.zeros((1, total.size)), run])[ks]
            with torch.no_grad():
                return self.rho(as_torch(s / n)).double().numpy()
        delta = self.delta.cpu().numpy()
        run = np.cumsum(delta[order[:kmax]], axis=0)
        s = self.sum_a.cpu().numpy()[None, :] - np.concatenate([np.zeros((1, self.p)), run])[ks]
        return self._rho(as_torch(s, device=self._device)).cpu().numpy()


@dataclass(frozen=True)
class PooledRows:
    """The per-agent rows of a pooled masking game before scaling: ψ(z_i), ψ(z⁰_i) (N, P) float64, the living
    mask (None: everyone) and the living count n_t the sums are divided by (the deletion curve sums them in
    this form: one running sum, then one division)."""

    psi_x: np.ndarray
    psi_b: np.ndarray
    live: np.ndarray | None
    n: float


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

    def _on(self, players: np.ndarray) -> QuadraticKernel:
        """The quadratic game on ``players`` P only, the others O at their baseline (their ds and dq are 0): its block
        C_PP, with the cross term u_Pᵀ C_PO s⁰_O, which is additive in S, moved into q (w = C_PO s⁰_O: q_P + w s_P,
        q⁰_P + w s⁰_P) and the constant Σ q⁰_O + ½ s⁰_Oᵀ C_OO s⁰_O added to one player's q and q⁰ alike, so that
        :meth:`values` and every marginal are the whole game's, in O(|P|²) per permutation (the generic kernel's
        evaluations of the whole game on prefix masks cost O(|P| N²))."""
        p = np.asarray(players, dtype=np.int64)
        o = np.setdiff1d(np.arange(self.n), p)
        w = self.C[np.ix_(p, o)] @ self.s0[o]
        q, q0 = self.q[p] + w * self.s[p], self.q0[p] + w * self.s0[p]
        if p.size:
            const = self.q0[o].sum() + 0.5 * self.s0[o] @ (self.C[np.ix_(o, o)] @ self.s0[o])
            q[0] += const
            q0[0] += const
        return QuadraticKernel(q=q, q0=q0, s=self.s[p], s0=self.s0[p], C=self.C[np.ix_(p, p)], block=self.block)


__all__ = [
    "AdditiveKernel", "AgentwiseIndicator", "GameKernel", "GenericKernel", "PooledRows", "QuadraticIndicator",
    "QuadraticKernel", "curve_args",
]
