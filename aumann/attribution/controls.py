"""Diagonal controls: the first-order model of a marginal contribution along a permutation, with its exact mean.

A coalition game v on N players has smooth *participation extensions* V(λ), λ ∈ [0, 1]^N, with
V(1_S) = v(S). When player i joins the coalition S of its predecessors at position k of a
permutation (k = |S| ∈ {0, …, N − 1}), its marginal contribution is modelled to first order by the
gradient of V on the diagonal,

    g_i(k) = ∂V/∂λ_i (τ_k · 1),        τ_k = (k + ½) / N.

**Which point, and why the mean is exact.** In a uniformly random permutation the position k of
player i is uniform on {0, …, N − 1}, so

    E_π[g_i] = (1/N) Σ_{k=0}^{N−1} ∂_i V((k + ½)/N · 1),

which is the N-point *midpoint rule* of the diagonal (Aumann–Shapley) integral φ^AS_i = ∫₀¹ ∂_i V(τ1) dτ —
computed here exactly, never approximated by the engine's K-point rule (φ^AS itself is not the mean).
The midpoint (k + ½)/N, not k/N, is the right point: before i joins, a share k/N of the population
takes part; after, (k + 1)/N; the marginal is the difference of V across that step, whose
first-order model is the gradient half-way (a midpoint difference quotient, exact to second order
for a pooled ρ(mean ψ)). It also makes antithetic pairs symmetric: the reversed permutation puts i at
N − 1 − k, i.e. τ ↦ 1 − τ. (The left point k/N would give the left Riemann sum as the exact mean —
just as valid for unbiasedness, but its model lags the marginal by half a step.)

**The extension.** Any smooth V with the right corners gives an unbiased estimator; the closer its
diagonal gradient follows the marginals, the lower the variance. Each game kind gets the extension
that matches its own structure:

* pooled and agent-wise games v(S) = ρ(Σ_{j∈S} a_j + Σ_{j∉S} b_j) (:class:`~aumann.attribution.pooled.AdditiveKernel`,
  alive-aware pooled indicators included): V(λ) = ρ(Σ_j b_j + λ_j (a_j − b_j)), so
  g_i(k) = ∇ρ(Σb + τ_k Σ(a − b)) · (a_i − b_i) — one gradient of ρ per position, O(N·P) for all N
  positions. For ψ linear in z (``lin``, ``heat``, f_prop) this *is* the feature path
  ∇_i f(z⁰ + τ(z − z⁰)) · (z_i − z⁰_i) of the engine; for nonlinear ψ (``var``, MidScale's risk) it
  is the running-sum path, on which an agent's term enters whole, as it does in the masking game
  (on the feature path the own term 2τ δ_i² of ``var`` varies with the position while the marginal's
  does not, which costs most of the reduction);
* quadratic forms Σ q + ½ uᵀCu, u = s⁰ + λ ⊙ (s − s⁰): g_i(k) = α_i + τ_k γ_i, α = Δq + Δs ⊙ C s⁰,
  γ = Δs ⊙ C Δs (closed form);
* network quadratics log(1 + c Q_S), Q_S = u_Sᵀ A u_S, u_S = r⁰ + 1_S ⊙ δr
  (:class:`~aumann.attribution.network.NetworkQuadratic`): the same principle as the pooled form —
  linearise the outer function at the diagonal, keep the increment exact — but here the increment
  ΔQ_i(S) = 2 δr_i (A u_S)_i depends on which neighbours are in S, so the control does too:
  g_i(S) = c ΔQ_i(S)/(1 + c Q(τ_k)), Q(τ) = Q₀ + 2τ δrᵀA r⁰ + τ² δrᵀA δr. It is linear in the
  membership of the others, whose conditional mean given k is k/(N − 1) each, so its mean is still
  exact (:class:`NetworkControl`); O(N + nnz) per permutation. (A position-only gradient explains
  almost nothing on a sparse graph: with two active neighbours the marginal is mostly which of them
  came first — measured ρ² ≈ 0.05 on MegaScale's cascade indicator);
* any other masking game: the feature path itself, ∇_i f(z⁰ + τ(z − z⁰)) · (z_i − z⁰_i), by autograd
  through the indicator (its context and living mask included), one forward and backward pass per node;
* a user game: the extension it declares (:class:`ParticipationGame`, e.g. f∘G of a scenario's step map
  on the re-simulation game).

**Tables and interpolation.** Low-rank controls (the first three) are evaluated at every one of the N
positions. A control given as a table of gradients (autograd, a participation game) costs one gradient
pass per node: it uses all N positions as nodes while the (nodes × N) table fits the memory budget,
and otherwise K nodes u_j = j/(K − 1) with g_i(k) the linear interpolation of the table at τ_k; the
mean is then Σ_j W_j ∂_i V(u_j) with W_j = (1/N) Σ_k L_j(τ_k) (L_j the hat functions) — again exact for
the position distribution, only the model is coarser.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from aumann.attribution import jit_controls
from aumann.attribution.device import CPU
from aumann.attribution.games import CoalitionGame, MaskedIndicatorGame
from aumann.attribution.network import NetworkQuadraticKernel
from aumann.attribution.pooled import DEFAULT_MEMORY_BUDGET, AdditiveKernel, GameKernel, QuadraticKernel
from aumann.attribution.threads import run_items
from aumann.checks import as_int, as_torch
from aumann.errors import GameError, IndicatorError, MethodError

F64 = torch.float64


def positions(n: int) -> np.ndarray:
    """τ_k = (k + ½)/n for k = 0 … n − 1: the diagonal points of the n positions of a permutation."""
    return (np.arange(n, dtype=np.float64) + 0.5) / n


class DiagonalControl(ABC):
    """g_i(k) for every player i and position k, and its exact mean over uniform positions."""

    n: int
    kind: str
    mean: torch.Tensor  # (n,) float64 on ``device``: E_π[g_i]
    gradient_evals: int = 0  # gradient passes spent building the control
    nodes: int = 0  # diagonal points the control was evaluated at

    @property
    def device(self) -> torch.device:
        return self.mean.device

    @abstractmethod
    def along(self, perms: np.ndarray, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(c, n) controls in player order along ``perms`` (and along the reversed perms, or None)."""

    def units(self, perms: np.ndarray, reverse: bool) -> torch.Tensor:
        """(c, n) centred controls of the sampling units in player order: g − μ along ``perms`` or, with
        ``reverse`` (antithetic pairs), the pair mean (g(π) + g(reversed π)) · ½ − μ."""
        cf, cr = self.along(perms, reverse)
        if cr is not None:
            cf = (cf + cr) * 0.5
        return cf - self.mean

    def variance(self, reverse: bool) -> torch.Tensor | None:
        """(n,) the exact variance of a unit's control over uniform permutations (with ``reverse``, of the
        antithetic pair mean), or None where it is not known in closed form."""
        return None


class NoControl(DiagonalControl):
    """No control: the game's indicator has no gradient to build one from (its forward leaves torch's autograd:
    numpy inside, ``argmax``, ``.detach()``, an integer result). Every unit's control is 0, so every slope is 0 and
    the estimate is plain sampled Shapley on the same permutations (the numbers of ``beta=0``); ``reason``
    says why, in the attribution's provenance (``control_fallback``) and an :class:`~aumann.errors.AumannWarning`."""

    def __init__(self, n: int, device: torch.device, reason: str, gradient_evals: int = 0) -> None:
        self.n, self.kind, self.reason, self.nodes = n, "none", reason, 0
        self.gradient_evals = int(gradient_evals)
        self.mean = torch.zeros(n, dtype=F64, device=device)

    def along(self, perms: np.ndarray, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        zero = torch.zeros(np.shape(perms), dtype=F64, device=self.device)
        return zero, (zero.clone() if reverse else None)

    def variance(self, reverse: bool) -> torch.Tensor:
        return torch.zeros(self.n, dtype=F64, device=self.device)


NO_GRADIENT = ("has no gradient on the path (its forward leaves torch's autograd: numpy inside, argmax, .detach(), "
               "an integer result), so it has no Aumann–Shapley control: the estimate is plain sampled Shapley on "
               "the same permutations (give the indicator a torch forward for the control)")


def centred_rows(table: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``table`` (K, n) minus its (``weights``-)mean over the rows, centred twice: g − μ rounds at the size of
    |g|, so where g barely moves along the positions (a pooled indicator whose diagonal point does not move,
    e.g. ``var`` at the living-mean baseline) the centred control was rounding noise whose mean was not 0 at
    its own scale, and the efficiency projection, a regression on it, turned that into a bias that did not
    shrink with m. The second pass removes the first one's rounding, so the mean is 0 to the rounding of the
    variation itself."""
    def mean(t: torch.Tensor) -> torch.Tensor:
        return t.mean(dim=0) if weights is None else weights @ t

    out = table - mean(table)[None, :]
    return out - mean(out)[None, :]


class PositionControl(DiagonalControl):
    """A control given position by position: g at position k depends on k and the player there only."""

    @abstractmethod
    def _by_position(self, idx: torch.Tensor, flip: bool, centred: bool = False) -> torch.Tensor:
        """(c, n) control of the player at each position of ``idx`` (positions reversed with ``flip``); with
        ``centred`` from the table centred over the positions (:func:`centred_rows`), i.e. g − μ."""

    def _scatter(self, perms: np.ndarray, reverse: bool, centred: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        idx = as_torch(np.ascontiguousarray(perms, dtype=np.int64)).to(self.device)
        fwd = torch.empty(idx.shape, dtype=F64, device=self.device).scatter_(
            1, idx, self._by_position(idx, False, centred))
        if not reverse:
            return fwd, None
        rev = torch.empty_like(fwd).scatter_(1, idx, self._by_position(idx, True, centred))
        return fwd, rev

    def along(self, perms: np.ndarray, reverse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._scatter(perms, reverse, False)

    def units(self, perms: np.ndarray, reverse: bool) -> torch.Tensor:
        # Σ from the table centred over the positions (centred_rows), not g − μ: see centred_rows
        cf, cr = self._scatter(perms, reverse, True)
        return cf if cr is None else (cf + cr) * 0.5


def _paired(table: torch.Tensor, reverse: bool) -> torch.Tensor:
    """A (positions, ·) table, or with ``reverse`` the mean of each position and its mirror (antithetic pairs)."""
    return (table + table.flip(0)) * 0.5 if reverse else table


class LowRankControl(PositionControl):
    """g_i(k) = Σ_p B[i, p] Γ[k, p]: per-player coefficients B (n, P) times position profiles Γ (n, P)."""

    def __init__(self, B: torch.Tensor, G: torch.Tensor, *, kind: str, gradient_evals: int = 0) -> None:
        if B.ndim != 2 or G.ndim != 2 or B.shape[1] != G.shape[1] or B.shape[0] != G.shape[0]:
            raise MethodError(f"a low-rank control needs B (n, P) and Γ (n, P); got {tuple(B.shape)}, {tuple(G.shape)}")
        self.Bt = B.to(F64).T.contiguous()  # (P, n): one contiguous row per profile
        self.G = G.to(device=self.Bt.device, dtype=F64)
        self.n = B.shape[0]
        self.kind = kind
        self.mean = B.to(F64) @ self.G.mean(dim=0)
        self.gradient_evals = int(gradient_evals)
        self.nodes = self.n
        self._rows: np.ndarray | None = None  # host copies for the compiled walk, made on its first use
        self._profiles: np.ndarray | None = None
        self._mu: np.ndarray | None = None
        self._centred: torch.Tensor | None = None  # Γ centred over the positions (centred_rows)

    def variance(self, reverse: bool) -> torch.Tensor:
        # E_k[(Σ_p B_ip (Γ_kp − mean Γ_p))²] = B_i C B_iᵀ, C the (P, P) covariance of the profiles over positions
        if self._centred is None:
            self._centred = centred_rows(self.G)
        Gc = _paired(self._centred, reverse)
        C = Gc.T @ Gc / Gc.shape[0]
        B = self.Bt.T
        return torch.clamp(((B @ C) * B).sum(1), min=0.0)

    def _by_position(self, idx, flip, centred=False):
        if centred and self._centred is None:
            self._centred = centred_rows(self.G)
        G = self._centred if centred else self.G
        G = G.flip(0) if flip else G
        host = idx.device.type == "cpu"  # numpy's take beats torch's indexing on the host (as in AdditiveKernel)
        perms = idx.numpy() if host else None
        out = None
        for p in range(self.Bt.shape[0]):  # P gathers of (c, n): no (c, n, P) temporary
            term = as_torch(np.take(self.Bt[p].numpy(), perms)) if host else self.Bt[p][idx]
            term *= G[:, p]
            out = term if out is None else out.add_(term)
        return out if out is not None else torch.zeros(idx.shape, dtype=F64, device=idx.device)

    def units(self, perms: np.ndarray, reverse: bool) -> torch.Tensor:
        # Σ_p B[i, p] (Γ[k, p] − mean Γ[:, p]): centred profiles (centred_rows), not g − μ
        # on the host, one compiled walk per permutation (the same bits: aumann.attribution.jit_controls)
        if self.Bt.device.type != "cpu" or self.Bt.shape[0] == 0 or not jit_controls.available():
            return super().units(perms, reverse)
        if self._rows is None:
            if self._centred is None:
                self._centred = centred_rows(self.G)
            self._rows = np.ascontiguousarray(self.Bt.numpy().T)
            self._profiles = np.ascontiguousarray(self._centred.numpy())
            self._mu = np.zeros(self.n)
        out = np.empty(perms.shape, dtype=np.float64)
        perms = np.ascontiguousarray(perms)
        # a walk per permutation, on the idle cores (each writes only its own row: the same bits)
        run_items(lambda r: jit_controls.low_rank_units(self._rows, self._profiles, self._mu, perms[r:r + 1],
                                                        reverse, out[r:r + 1]), list(range(perms.shape[0])))
        return as_torch(out)


class TableControl(PositionControl):
    """g_i(k) from a table H[j, i] = ∂_i V(u_j·1) at nodes u_j, linearly interpolated at τ_k (exact at
    the nodes; the nodes are τ_0 … τ_{n−1} themselves when the table has one row per position). The table is
    kept centred (``self.H`` = H − μ, :func:`centred_rows`); ``along`` adds μ back."""

    def __init__(self, H: torch.Tensor, nodes: np.ndarray, *, kind: str, gradient_evals: int) -> None:
        H = H.to(F64)
        K, n = H.shape
        self.n, self.kind, self.gradient_evals, self.nodes = n, kind, int(gradient_evals), K
        taus = positions(n)
        nodes = np.asarray(nodes, dtype=np.float64)
        if K == n and np.allclose(nodes, taus, rtol=0, atol=1e-15):
            j, frac = np.arange(n), np.zeros(n)
        else:  # nodes must bracket every τ_k
            j = np.clip(np.searchsorted(nodes, taus, side="right") - 1, 0, K - 2)
            frac = (taus - nodes[j]) / (nodes[j + 1] - nodes[j])
        W = np.bincount(j, weights=1.0 - frac, minlength=K) + np.bincount(j + 1, weights=frac, minlength=K + 1)[:K]
        dev = H.device
        self.j = as_torch(j.astype(np.int64)).to(dev)
        self.frac = as_torch(frac).to(dev)
        self.interpolated = bool(np.any(frac))
        weights = as_torch(W / n).to(dev)
        self.mean = weights @ H
        # only the centred table is kept (one table in memory): H − μ with mean 0 to its own rounding
        self.H = centred_rows(H, weights).contiguous()

    def variance(self, reverse: bool) -> torch.Tensor:
        # the centred table interpolated at every position, a block of positions at a time (O(block · n) memory)
        out = torch.zeros(self.n, dtype=F64, device=self.H.device)
        block = max(1, (1 << 22) // max(1, self.n))
        for s in range(0, self.n, block):
            k = torch.arange(s, min(self.n, s + block), device=self.H.device)
            rows = self._at(k)
            if reverse:
                rows = (rows + self._at(self.n - 1 - k)) * 0.5
            out += (rows * rows).sum(0)
        return out / self.n

    def _at(self, k: torch.Tensor) -> torch.Tensor:
        """(len(k), n): the centred control of every player at positions ``k``."""
        lo = self.H[self.j[k]]
        if not self.interpolated:
            return lo
        return lo + self.frac[k][:, None] * (self.H[torch.clamp(self.j[k] + 1, max=self.H.shape[0] - 1)] - lo)

    def _by_position(self, idx, flip, centred=False):
        j, frac = (self.j.flip(0), self.frac.flip(0)) if flip else (self.j, self.frac)
        flat = j[None, :] * self.n + idx
        out = torch.take(self.H, flat)
        if self.interpolated:
            hi = torch.take(self.H, flat + self.n)
            out += frac[None, :] * (hi - out)
        return out if centred else out + self.mean[idx]


# ---------------------------------------------------------------------- building a game's control
def table_nodes(n: int, nodes: int | None, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> np.ndarray:
    """The diagonal points of a gradient table for n positions: all n positions while the table fits a
    quarter of ``memory_budget`` (or ``nodes`` = n), else K equispaced nodes on [0, 1] (endpoints included).

    :func:`diagonal_control` sizes it from the fixed default budget, never from the memory at hand: the nodes
    shape the control, so they shape the estimate (a budget read from the free memory of a GPU, or
    ``memory_budget=``, gave another estimate for the same seed)."""
    if nodes is None:
        k = max(33, memory_budget // (4 * 8 * max(1, n)))
    else:
        k = as_int(nodes, "nodes (diagonal points of the control)", minimum=2)
    if k >= n:
        return positions(n)
    return np.linspace(0.0, 1.0, k)


class ParticipationGame(CoalitionGame):
    """A coalition game with a differentiable participation extension: v(S) from ``game``, and
    ``extension(λ[B, N]) -> [B]`` a torch function with extension(1_S) ≈ v(S).

    Only the extension's gradient along the diagonal is used (as a control variate by
    :class:`~aumann.attribution.control_variate.SampledShapleyCV`), so the corners need not agree
    exactly: the estimate stays an unbiased estimate of the Shapley value of ``game``; the closer the
    extension follows the game, the lower its variance.

    Example:
        >>> import numpy as np, torch
        >>> from aumann.attribution import FunctionGame
        >>> w = np.array([1.0, 2.0, 3.0])
        >>> g = FunctionGame(lambda m: (m * w).sum(axis=1) ** 2, n_players=3)
        >>> pg = ParticipationGame(g, lambda lam: (lam * torch.as_tensor(w)).sum(-1) ** 2)
        >>> pg.diagonal_gradients(np.array([0.5])).round(6).tolist()
        [[6.0, 12.0, 18.0]]
    """

    def __init__(self, game: CoalitionGame, extension: Callable[[torch.Tensor], torch.Tensor], *,
                 batch: int = 64, name: str | None = None) -> None:
        if not isinstance(game, CoalitionGame):
            raise GameError(f"ParticipationGame needs a CoalitionGame; got {type(game).__name__}")
        if not callable(extension):
            raise GameError(f"the participation extension must be a callable v(λ[B, N]) -> [B]; got "
                            f"{type(extension).__name__}")
        self.game = game
        self.extension = extension
        self.n_players = game.n_players
        self.player_ids = game.player_ids
        self.name = name or game.name
        self.row_bytes = game.row_bytes
        self.batch = as_int(batch, "batch (diagonal points per gradient pass)", minimum=1, error=GameError)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        return self.game(masks)

    def kernel(self, fast: bool | None = None, *, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> GameKernel:
        return self.game.kernel(fast, memory_budget=memory_budget)

    def diagonal_gradients(self, taus: np.ndarray) -> np.ndarray:
        """(K, N): ∂V/∂λ_i at λ = τ·1 for each τ in ``taus``."""
        taus = np.asarray(taus, dtype=np.float64)
        out = np.empty((taus.size, self.n_players))
        for s in range(0, taus.size, self.batch):
            chunk = taus[s:s + self.batch]
            lam = as_torch(chunk, dtype=F64)[:, None].repeat(1, self.n_players).requires_grad_(True)
            val = self.extension(lam)
            if not isinstance(val, torch.Tensor) or tuple(val.shape) != (chunk.size,):
                shape = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
                raise GameError(f"game {self.name!r}: the participation extension must map λ of shape (B, N) = "
                                f"({chunk.size}, {self.n_players}) to (B,); got {shape}")
            if not val.requires_grad:
                raise GameError(f"game {self.name!r}: the participation extension has no gradient with respect to λ")
            (grad,) = torch.autograd.grad(val.sum(), lam, allow_unused=True)
            out[s:s + chunk.size] = 0.0 if grad is None else grad.detach().to(F64).cpu().numpy()
        if not np.all(np.isfinite(out)):
            raise GameError(f"game {self.name!r}: the participation extension has a NaN/inf gradient on the diagonal")
        return out


def _masked_feature_gradients(game: MaskedIndicatorGame, taus: np.ndarray, memory_budget: int) -> np.ndarray | None:
    """(K, N): ∇_{z_i} f(z⁰ + τ(z − z⁰)) · (z_i − z⁰_i) by autograd through the problem's indicator
    (its per-step context and living mask included); None where the indicator has no gradient at all."""
    x, b = game.x, game.b
    delta = (x - b).to(x.dtype)
    N, D = x.shape
    step = max(1, memory_budget // (16 * max(1, N * D * x.element_size())))
    out = np.empty((taus.size, N))
    for s in range(0, taus.size, step):
        chunk = as_torch(taus[s:s + step], dtype=x.dtype, device=x.device)
        z = (b[None] + chunk[:, None, None] * delta[None]).detach().requires_grad_(True)
        val = game.problem.evaluate(z, np.full(chunk.shape[0], game.t, dtype=np.int64))
        if not val.requires_grad:  # a property of the indicator's forward, not of the point: no control at all
            return None
        (grad,) = torch.autograd.grad(val.sum(), z, allow_unused=True)
        if grad is not None:
            out[s:s + chunk.shape[0]] = (grad.detach() * delta[None]).sum(-1).to(F64).cpu().numpy()
        else:
            out[s:s + chunk.shape[0]] = 0.0
    if not np.all(np.isfinite(out)):
        raise IndicatorError(f"indicator {game.problem.f.name!r} has a NaN/inf gradient on the path")
    return out


def _rho_gradients(rho: Callable[[torch.Tensor], torch.Tensor], start: torch.Tensor, total: torch.Tensor,
                   taus: np.ndarray, memory_budget: int, what: str) -> torch.Tensor | None:
    """(K, P): ∇ρ(start + τ total) for each τ (pooled sums; float64); None where ρ has no gradient at any τ."""
    P = start.shape[0]
    out = torch.empty((taus.size, P), dtype=F64, device=start.device)
    step = max(1, memory_budget // (64 * max(1, P)))
    t_all = as_torch(taus, dtype=F64, device=start.device)
    graph = False
    for s in range(0, taus.size, step):
        t = t_all[s:s + step]
        m = (start[None, :] + t[:, None] * total[None, :]).detach().requires_grad_(True)
        val = rho(m)
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != (t.shape[0],):
            raise IndicatorError(f"{what}: rho returned shape {tuple(getattr(val, 'shape', ()))} for sums "
                                 f"{tuple(m.shape)}")
        if not val.requires_grad:
            out[s:s + t.shape[0]] = 0.0
            continue
        graph = True
        (grad,) = torch.autograd.grad(val.sum(), m, allow_unused=True)
        out[s:s + t.shape[0]] = 0.0 if grad is None else grad.detach().to(F64)
    if not torch.isfinite(out).all():
        raise IndicatorError(f"{what}: rho has a NaN/inf gradient on the diagonal")
    return out if graph else None


SMOOTH_MIN_PLAYERS = 100


def composition_bandwidth(delta: np.ndarray, n: int) -> float:
    """How far (in positions) the sums of a random coalition of size k stray from the diagonal point,
    measured along the diagonal: a uniform k-subset of the players has Σ_{j∈S} δ_j with mean (k/N) u,
    u = Σ_j δ_j, and covariance ≈ τ(1 − τ) V, V = Σ_j (δ_j − δ̄)(δ_j − δ̄)ᵀ; its component along u is
    a shift of the diagonal point by sd √(τ(1 − τ) uᵀVu)/|u|² in τ, i.e. n/2 · √(uᵀVu)/|u|² positions at
    τ = ½ (∞ when the diagonal does not move, u = 0)."""
    d = np.asarray(delta, dtype=np.float64)
    u = d.sum(axis=0)
    uu = float(u @ u)
    if uu <= 0:
        return float("inf")
    c = d - d.mean(axis=0)
    proj = c @ u
    return 0.5 * n * float(np.sqrt(proj @ proj)) / uu


def smooth_positions(G: np.ndarray, bandwidth: float) -> np.ndarray:
    """G (n, P) convolved along the positions with a Gaussian of sd ``bandwidth`` positions (edges held)."""
    n = G.shape[0]
    if not bandwidth >= 1.0 or n < 3:
        return G
    from scipy.signal import fftconvolve

    half = int(min(4 * bandwidth, n))
    x = np.arange(-half, half + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (x / bandwidth) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(G, ((half, half), (0, 0)), mode="edge")
    return fftconvolve(padded, kernel[:, None], mode="valid", axes=0)


def _sum_space(delta: torch.Tensor, start: torch.Tensor, rho: Callable, rows: np.ndarray | None, n: int,
               memory_budget: int, what: str) -> LowRankControl | NoControl:
    total = delta.sum(dim=0)
    G = _rho_gradients(rho, start, total, positions(n), memory_budget, what)
    if G is None:
        return NoControl(n, delta.device, f"{what}: rho {NO_GRADIENT}", gradient_evals=n)
    # where ∇ρ changes faster along the diagonal than a coalition's sums wander (a steep threshold), the
    # marginal follows the average gradient over that wander, not the gradient at the point: smooth it
    b = composition_bandwidth(delta.detach().cpu().numpy(), n)
    if b >= 1.0 and n >= SMOOTH_MIN_PLAYERS:  # (a Gaussian wander needs many players: the CLT)
        G = as_torch(smooth_positions(G.cpu().numpy(), b)).to(G.device)
    B = delta if rows is None else delta[as_torch(rows).to(delta.device)]
    return LowRankControl(B, G, kind="sum-space", gradient_evals=n)


class NetworkControl(DiagonalControl):
    """The control of a network-quadratic game v(S) = log(1 + c Q_S): the outer log linearised on the
    diagonal, the multilinear increment kept exact,

        g_i(S) = c ΔQ_i(S) / (1 + c Q(τ_k)),   ΔQ_i(S) = 2 δr_i (A u_S)_i   (|S| = k),

    so the control follows which of i's neighbours are already in (on a sparse graph most of the
    marginal's variance). Its mean is still exact: S is a uniform k-subset of the others, so
    E[(A u_S)_i | k] = (A r⁰)_i + k/(n − 1) (A δr)_i (A has a zero diagonal), and E[g_i] is the average
    over k of 2c δr_i ((A r⁰)_i + k/(n − 1) (A δr)_i) / (1 + c Q(τ_k)). ΔQ along a permutation is
    one ``bincount`` over the edges (each edge enters at the later endpoint), as in the kernel: O(N + nnz).
    """

    def __init__(self, k: NetworkQuadraticKernel, rows: np.ndarray | None, n: int) -> None:
        act = k.active
        if rows is None:  # players are all N: edge endpoints in global indices
            ei, ej = act[k.ei], act[k.ej]
            dr, Ar0, Adr = k.dr, k.Ar0, k.A @ k.dr
        else:
            if not np.array_equal(np.asarray(rows), act):
                raise MethodError("a network control restricts to the kernel's active players only")
            ei, ej = k.ei, k.ej
            dr, Ar0, Adr = k.dr[act], k.Ar0[act], (k.A @ k.dr)[act]
        self.ei, self.ej, self.we = ei, ej, k.we
        self.own = 2.0 * dr * Ar0
        self.n, self.kind, self.nodes, self.gradient_evals = n, "network", n, 0
        tau = positions(n)
        Q = k.Q0 + 2.0 * tau * float(k.dr @ k.Ar0) + tau**2 * float(k.dr @ (k.A @ k.dr))
        self.scale = k.c / (1.0 + k.c * Q)  # (n,) by position
        frac = np.arange(n, dtype=np.float64) / max(1, n - 1)
        mean = self.own * self.scale.mean() + 2.0 * dr * Adr * float(np.mean(frac * self.scale))
        self.mean = as_torch(mean)

    def _one(self, order: np.ndarray) -> np.ndarray:
        pos = np.empty(self.n, dtype=np.int64)
        pos[order] = np.arange(self.n)
        later = np.maximum(pos[self.ei], pos[self.ej])
        dq = np.bincount(later, weights=self.we, minlength=self.n)
        dq += self.own[order]
        dq *= self.scale
        out = np.empty(self.n)
        out[order] = dq
        return out

    def along(self, perms, reverse):
        perms = np.asarray(perms)
        fwd = np.stack([self._one(p) for p in perms])
        rev = np.stack([self._one(p[::-1]) for p in perms]) if reverse else None
        return as_torch(fwd), None if rev is None else as_torch(rev)


def _network(k: NetworkQuadraticKernel, rows: np.ndarray | None, n: int) -> NetworkControl:
    return NetworkControl(k, rows, n)


def _quadratic(k: QuadraticKernel, rows: np.ndarray | None, n: int) -> LowRankControl:
    B = np.stack([k.dq + k.ds * (k.C @ k.s0), k.ds * (k.C @ k.ds)], axis=1)  # α + τ γ
    if rows is not None:
        B = B[rows]
    tau = positions(n)
    return LowRankControl(as_torch(np.ascontiguousarray(B)), as_torch(np.stack([np.ones(n), tau], 1)),
                          kind="quadratic")


def _pooled_masked(game: MaskedIndicatorGame, rows: np.ndarray | None, n: int,
                   memory_budget: int) -> LowRankControl | NoControl:
    """The sum-space control of a pooled indicator whose masking game has a kernel of its own."""
    f = game.problem.f
    N = game.n_players
    with torch.no_grad():
        a = f.pooled.psi(game.x.to(F64)) / N
        b = f.pooled.psi(game.b.to(F64)) / N
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] != N:
        raise IndicatorError(f"indicator {f.name!r}: psi must map (N, D) to (N, P); got {tuple(a.shape)}")
    return _sum_space((a - b).contiguous(), b.sum(dim=0), f.pooled.rho, rows, n, memory_budget,
                      f"indicator {f.name!r}")


def diagonal_control(game: CoalitionGame, kernel: GameKernel, *, rows: np.ndarray | None = None,
                     nodes: int | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> DiagonalControl:
    """The control of ``game`` (whose kernel is ``kernel``) for the players ``rows`` (default all),
    permuted among themselves (so n = len(rows) positions; see the module docstring for the choice
    of extension)."""
    n = kernel.n if rows is None else len(rows)
    structured = kernel
    if isinstance(game, MaskedIndicatorGame) and not isinstance(kernel, _STRUCTURED):
        # the plain path (fast=False) gets the same control as the fast path: the game's structured kernel
        try:
            structured = game.kernel(True, memory_budget=memory_budget)
        except (GameError, IndicatorError):
            structured = kernel
    if isinstance(structured, AdditiveKernel):
        return _sum_space(structured.delta, structured.sum_b, structured.rho, rows, n, memory_budget,
                          f"game {getattr(game, 'name', 'game')!r}")
    if isinstance(structured, NetworkQuadraticKernel):
        return _network(structured, rows, n)
    if isinstance(structured, QuadraticKernel):
        return _quadratic(structured, rows, n)
    if isinstance(game, MaskedIndicatorGame):
        f = game.problem.f
        if f.pooled is not None and not f.uses_context and game.problem.alive is None:
            return _pooled_masked(game, rows, n, memory_budget)
        taus = table_nodes(n, nodes)
        got = _masked_feature_gradients(game, taus, memory_budget)
        if got is None:
            return NoControl(n, _device_of(kernel), f"indicator {f.name!r} {NO_GRADIENT}", gradient_evals=1)
        H, kind = got, "feature-path"
    elif hasattr(game, "diagonal_gradients"):
        taus = table_nodes(n, nodes)
        H = np.asarray(game.diagonal_gradients(taus), dtype=np.float64)
        if H.shape != (taus.size, game.n_players):
            raise GameError(f"game {game.name!r}: diagonal_gradients returned shape {H.shape}; expected "
                            f"{(taus.size, game.n_players)}")
        kind = "extension"
    else:
        raise MethodError(f"game {getattr(game, 'name', 'game')!r} has no differentiable extension, so it has no "
                          "Aumann–Shapley control variate: wrap it as ParticipationGame(game, extension) with a "
                          "torch extension v(λ[B, N]) -> [B], or use SampledShapley")
    if rows is not None:
        H = H[:, rows]
    return TableControl(as_torch(np.ascontiguousarray(H)).to(_device_of(kernel)), taus, kind=kind,
                        gradient_evals=taus.size)


_STRUCTURED = (AdditiveKernel, NetworkQuadraticKernel, QuadraticKernel)


def _device_of(kernel: GameKernel) -> torch.device:
    try:
        return kernel.device
    except AttributeError:  # a user kernel without the property
        return CPU


def kernel_control(kernel: GameKernel) -> DiagonalControl | None:
    """The control a kernel alone determines (pooled, quadratic, network), else None."""
    if isinstance(kernel, AdditiveKernel):
        return _sum_space(kernel.delta, kernel.sum_b, kernel.rho, None, kernel.n, DEFAULT_MEMORY_BUDGET, "game")
    if isinstance(kernel, NetworkQuadraticKernel):
        return _network(kernel, None, kernel.n)
    if isinstance(kernel, QuadraticKernel):
        return _quadratic(kernel, None, kernel.n)
    return None


def describe_control(control: Any) -> dict[str, Any]:
    """Provenance notes of a control."""
    return {"control": control.kind, "control_nodes": int(control.nodes),
            "control_gradient_evals": int(control.gradient_evals),
            "control_interpolated": bool(getattr(control, "interpolated", False)),
            "control_fallback": getattr(control, "reason", None)}


__all__ = ["DiagonalControl", "LowRankControl", "NoControl", "ParticipationGame", "TableControl", "diagonal_control",
           "kernel_control", "positions", "table_nodes"]
