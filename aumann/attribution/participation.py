"""The Aumann–Shapley value of a differentiable participation game, by kink-aware adaptive quadrature.

A *participation game* gives every player i an intensity λ_i ∈ [0, 1] and a value v̂(λ) that is a
torch function of the intensities (λ = 1: everyone takes part fully; λ = 0: nobody does). Its
straight-path (diagonal) Aumann–Shapley value is

    φ_i = ∫₀¹ ∂v̂/∂λ_i (τ·1) dτ,        Σ_i φ_i = v̂(1) − v̂(0)   (efficiency),

the value of the non-atomic game in which each player is a continuum of participation units faded
in together (Aumann & Shapley 1974). Autograd gives all N partial derivatives in one backward pass
per quadrature point, so the cost is one forward and one backward pass of v̂ per point.

:func:`diagonal_path_integral` computes it with the engine's quadrature rules
(:func:`aumann.attribution.path.quadrature`) on a composite grid of panels:

* **kinks.** A v̂ built from clips, ``max`` or |·| is only piecewise smooth along the diagonal: its
  derivative jumps where an argument crosses a threshold, and a jump in the integrand makes any
  fixed rule converge slowly (O(1/K)). When the caller can name the places — ``switches(λ)``
  returning, for a batch of intensities, the signed distances of every clip/|·| argument to its
  threshold — their zero crossings along the diagonal are located (a grid scan, then regula falsi
  on forward passes only) and become panel boundaries, so every panel is smooth;
* **adaptive refinement** (``tol``). Each panel [a, b] has a check nothing can fool: by the
  fundamental theorem of calculus its quadrature total Σ_i φ_i^{[a,b]} must equal v̂(b·1) − v̂(a·1),
  computed by two forward passes; call the difference e_[a,b]. While Σ_panels |e| exceeds
  ``tol`` · |v̂(1) − v̂(0)|, the panels with the largest |e| (the fewest whose errors leave at most
  half the budget to the rest) are bisected, each half keeping the panel's point count, until the
  budget holds or ``max_evals`` gradient points are spent (reported as ``converged = False``, never
  hidden). The relative efficiency gap is then at most ``tol`` (up to float rounding), whatever
  cancellation. The check constrains the sum over players; the change of φ between the last two
  rounds (``phi_change``) is reported as the per-player diagnostic.

Nothing here knows about simulators: a scenario's step map enters as the function v̂
(:func:`aumann.evaluation.action_attribution`).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from aumann.attribution.path import quadrature
from aumann.checks import as_torch
from aumann.errors import IndicatorError, MethodError

ValueFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class DiagonalIntegral:
    """The result of :func:`diagonal_path_integral`.

    Attributes:
        phi: (N,) the Aumann–Shapley value of each player.
        v_full, v_empty: v̂(1) and v̂(0).
        grad_evals: points at which v̂ and ∇v̂ were evaluated (one forward + backward pass each).
        value_evals: forward-only evaluations of v̂ (panel ends) and of the switches (kink search).
        panels: the final panel edges, increasing from 0 to 1.
        kinks: the located kink positions τ ∈ (0, 1) (panel boundaries from ``switches``).
        converged: every panel passed the exactness check (always True without ``tol``).
        history: (grad_evals, relative efficiency gap) after each refinement round.
        phi_change: ‖φ − φ_previous round‖₁ / ‖φ‖₁ of the last refinement (0 without refinement).
        seconds: wall time.
    """

    phi: np.ndarray
    v_full: float
    v_empty: float
    grad_evals: int
    value_evals: int
    panels: np.ndarray
    kinks: np.ndarray
    converged: bool
    history: list[tuple[int, float]] = field(default_factory=list)
    phi_change: float = 0.0
    seconds: float = 0.0

    @property
    def delta_v(self) -> float:
        """v̂(1) − v̂(0)."""
        return self.v_full - self.v_empty

    @property
    def efficiency_gap(self) -> float:
        """|Σ_i φ_i − (v̂(1) − v̂(0))|."""
        return abs(float(self.phi.sum()) - self.delta_v)

    @property
    def relative_efficiency_gap(self) -> float:
        """The efficiency gap divided by |v̂(1) − v̂(0)| (by the smallest normal float when that is 0)."""
        return self.efficiency_gap / max(abs(self.delta_v), np.finfo(np.float64).tiny)


class _Counter:
    def __init__(self, v: ValueFn, switches: ValueFn | None, n: int, dtype: torch.dtype, batch: int) -> None:
        self.v, self.switches, self.n, self.dtype, self.batch = v, switches, n, dtype, batch
        self.grad_evals = 0
        self.value_evals = 0

    def _lam(self, taus: np.ndarray) -> torch.Tensor:
        return as_torch(np.asarray(taus, dtype=np.float64), dtype=self.dtype)[:, None].expand(-1, self.n)

    def _checked(self, out: Any, b: int, what: str) -> torch.Tensor:
        if not isinstance(out, torch.Tensor) or tuple(out.shape[:1]) != (b,):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise IndicatorError(f"the participation game's {what} must map intensities (B, N) to a tensor with "
                                 f"leading dimension B = {b}; got {shape}")
        return out

    def values(self, taus: np.ndarray) -> np.ndarray:
        """v̂(τ·1) for each τ (forward only)."""
        taus = np.asarray(taus, dtype=np.float64)
        out = np.empty(taus.size)
        with torch.no_grad():
            for s in range(0, taus.size, self.batch):
                chunk = taus[s:s + self.batch]
                val = self._checked(self.v(self._lam(chunk)), chunk.size, "value v(λ)")
                out[s:s + chunk.size] = val.detach().to(torch.float64).cpu().numpy().reshape(chunk.size)
        self.value_evals += taus.size
        if not np.all(np.isfinite(out)):
            raise IndicatorError("the participation game's value is NaN/inf on the diagonal path")
        return out

    def switch_values(self, taus: np.ndarray) -> np.ndarray:
        """(len(taus), M) switching-function values at τ·1 (forward only)."""
        assert self.switches is not None
        rows = []
        with torch.no_grad():
            for s in range(0, len(taus), self.batch):
                chunk = np.asarray(taus[s:s + self.batch], dtype=np.float64)
                sw = self._checked(self.switches(self._lam(chunk)), chunk.size, "switches(λ)")
                rows.append(sw.reshape(chunk.size, -1).to(torch.float64).cpu().numpy())
        self.value_evals += len(taus)
        return np.concatenate(rows, axis=0) if rows else np.zeros((0, 0))

    def grads(self, taus: np.ndarray, weights: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
        """(groups, N): Σ_{k in group g} weights_k ∇v̂(τ_k·1) (one forward + backward pass per point)."""
        acc = torch.zeros((groups, self.n), dtype=torch.float64)
        for s in range(0, len(taus), self.batch):
            chunk = np.asarray(taus[s:s + self.batch], dtype=np.float64)
            lam = self._lam(chunk).clone().requires_grad_(True)
            out = self._checked(self.v(lam), chunk.size, "value v(λ)")
            if not out.requires_grad:
                raise IndicatorError("the participation game's value has no gradient with respect to the "
                                     "intensities: v(λ) must be a differentiable torch function of λ")
            (g,) = torch.autograd.grad(out.sum(), lam, allow_unused=True)
            if g is None:
                continue
            w = as_torch(np.asarray(weights[s:s + self.batch], dtype=np.float64))
            idx = as_torch(np.asarray(group[s:s + self.batch], dtype=np.int64))
            acc.index_add_(0, idx, w[:, None] * g.to(torch.float64))
        self.grad_evals += len(taus)
        if not torch.isfinite(acc).all():
            raise IndicatorError("the participation game has a NaN/inf gradient on the diagonal path")
        return acc.numpy()


def _locate_kinks(c: _Counter, grid: int, xtol: float, max_iter: int) -> np.ndarray:
    """Zero crossings of the switching functions along τ ∈ (0, 1): a grid scan, then regula falsi."""
    taus = np.linspace(0.0, 1.0, grid + 1)
    sw = c.switch_values(taus)
    if sw.size == 0:
        return np.zeros(0)
    sign = np.sign(sw)
    # a switch that is exactly 0 on a grid point between opposite signs crosses there
    on_grid = taus[1:-1][np.any((sign[1:-1] == 0) & (sign[:-2] * sign[2:] < 0), axis=1)]
    cell, fn = np.nonzero(sign[:-1] * sign[1:] < 0)
    if cell.size == 0:
        return on_grid
    a, b = taus[cell], taus[cell + 1]
    fa, fb = sw[cell, fn], sw[cell + 1, fn]
    side = np.zeros(cell.size, dtype=np.int8)
    for _ in range(max_iter):
        live = (b - a) > xtol
        if not live.any():
            break
        x = np.where(live, (a * fb - b * fa) / (fb - fa), (a + b) / 2)
        x = np.clip(x, a, b)
        idx = np.flatnonzero(live)
        fx_all = c.switch_values(x[idx])
        fx = fx_all[np.arange(idx.size), fn[idx]]
        for k, val in zip(idx, fx):
            if val == 0:
                a[k] = b[k] = x[k]
                continue
            if np.sign(val) == np.sign(fa[k]):
                a[k], fa[k] = x[k], val
                if side[k] == -1:  # Illinois: halve the stale end's value
                    fb[k] /= 2
                side[k] = -1
            else:
                b[k], fb[k] = x[k], val
                if side[k] == 1:
                    fa[k] /= 2
                side[k] = 1
    roots = np.unique(np.concatenate([np.round((a + b) / 2, 14), on_grid]))
    return roots[(roots > 0) & (roots < 1)]


def diagonal_path_integral(v: ValueFn, n: int, *, steps: int = 32, rule: str = "gauss-legendre",
                           tol: float | None = None, switches: ValueFn | None = None, max_evals: int = 4096,
                           kink_grid: int = 64, batch: int = 64, dtype: torch.dtype = torch.float64,
                           ) -> DiagonalIntegral:
    """φ_i = ∫₀¹ ∂v̂/∂λ_i(τ·1) dτ for a torch function ``v`` of the intensities (module docstring).

    Args:
        v: ``v(lam)`` with ``lam`` of shape (B, N) → (B,): the participation game's value, differentiable.
        n: the number of players N.
        steps: quadrature points on [0, 1]; a panel of width h gets max(2, ⌈steps · h⌉) of them
            (all ``steps`` when there is a single panel, as :class:`AumannShapley` would use).
        rule: ``"gauss-legendre"`` or ``"midpoint"`` (:func:`aumann.attribution.path.quadrature`).
        tol: adaptive mode: refine until every panel's exactness check passes (relative to
            |v̂(1) − v̂(0)|, see the module docstring); ``None`` integrates once.
        switches: optional ``switches(lam)`` (B, N) → (B, M): signed distances of every clip/|·|
            argument of v̂ to its threshold; their zero crossings become panel boundaries.
        max_evals: the most gradient points adaptive mode may spend.
        kink_grid: grid cells of the kink scan (a switch crossing twice inside one cell is not
            split on; adaptive refinement still catches the error it causes).
        batch: points per forward/backward call.
        dtype: torch dtype of the intensities (float64 by default).

    Raises:
        MethodError: bad parameters. IndicatorError: ``v`` is not a differentiable batched function
            of the intensities, or returns NaN/inf.

    Example:
        >>> import torch
        >>> w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
        >>> res = diagonal_path_integral(lambda lam: (lam * w).sum(-1) ** 2, 3, steps=4)
        >>> [round(float(x), 12) for x in res.phi]      # = w_i Σ_j w_j: the Shapley value of this game
        [6.0, 12.0, 18.0]
    """
    if int(n) < 1:
        raise MethodError(f"a participation game needs at least one player; got n={n}")
    if int(steps) < 1:
        raise MethodError(f"steps must be ≥ 1; got {steps}")
    if tol is not None and not tol > 0:
        raise MethodError(f"tol must be > 0; got {tol}")
    if int(max_evals) < 1 or int(batch) < 1 or int(kink_grid) < 1:
        raise MethodError(f"max_evals, batch and kink_grid must be ≥ 1; got {max_evals}, {batch}, {kink_grid}")
    quadrature(1, rule)  # validates the rule name
    t0 = time.perf_counter()
    c = _Counter(v, switches, int(n), dtype, int(batch))
    kinks = _locate_kinks(c, int(kink_grid), 1e-13, 200) if switches is not None else np.zeros(0)
    edges = np.unique(np.concatenate([[0.0, 1.0], kinks]))
    ends = dict(zip(edges.tolist(), c.values(edges).tolist()))
    v_empty, v_full = ends[0.0], ends[1.0]
    scale = abs(v_full - v_empty)

    def points(h: float) -> int:
        return int(steps) if len(edges) == 2 and h == 1.0 else max(2, math.ceil(steps * h))

    def panel_sums(panels: list[tuple[float, float, int]]) -> list[np.ndarray]:
        taus, weights, group = [], [], []
        for g, (a, b, k) in enumerate(panels):  # all panels' points in shared batches; φ kept per panel
            u, w = quadrature(k, rule)
            taus.append(a + (b - a) * u)
            weights.append((b - a) * w)
            group.append(np.full(k, g))
        acc = c.grads(np.concatenate(taus), np.concatenate(weights), np.concatenate(group), len(panels))
        return list(acc)

    tiny = np.finfo(np.float64).tiny
    panels = [(a, b, points(b - a)) for a, b in itertools.pairwise(edges)]
    sums = dict(zip(((a, b) for a, b, _ in panels), panel_sums(panels)))
    size = {(a, b): k for a, b, k in panels}
    history: list[tuple[int, float]] = []
    phi_prev: np.ndarray | None = None
    phi_change = 0.0
    converged = True
    while True:
        phi = np.sum(list(sums.values()), axis=0)
        history.append((c.grad_evals, abs(float(phi.sum()) - (v_full - v_empty)) / max(scale, tiny)))
        if phi_prev is not None:
            phi_change = float(np.abs(phi - phi_prev).sum() / max(np.abs(phi).sum(), tiny))
        if tol is None:
            break
        keys = list(sums)
        err = np.array([abs(float(sums[k].sum()) - (ends[k[1]] - ends[k[0]])) for k in keys])
        floor = 64 * np.finfo(np.float64).eps * max(scale, max(abs(x) for x in ends.values()))
        budget = tol * scale + floor * len(keys)
        if err.sum() <= budget:
            break
        order = np.argsort(-err)
        rest = err.sum() - np.cumsum(err[order])
        chosen = [keys[i] for i in order[: int(np.argmax(rest <= budget / 2)) + 1]]
        if c.grad_evals + sum(2 * size[k] for k in chosen) > max_evals:
            converged = False
            break
        mids = [(a + b) / 2 for a, b in chosen]
        ends.update(zip(mids, c.values(np.array(mids)).tolist()))
        halves = [h for (a, b), m in zip(chosen, mids) for h in ((a, m, size[(a, b)]), (m, b, size[(a, b)]))]
        for k in chosen:
            del sums[k]
        sums.update(zip(((a, b) for a, b, _ in halves), panel_sums(halves)))
        size.update({(a, b): k for a, b, k in halves})
        phi_prev = phi
    edges_out = np.array(sorted({x for key in sums for x in key}))
    return DiagonalIntegral(phi=phi, v_full=float(v_full), v_empty=float(v_empty), grad_evals=c.grad_evals,
                            value_evals=c.value_evals, panels=edges_out, kinks=kinks, converged=converged,
                            history=history, phi_change=phi_change, seconds=time.perf_counter() - t0)


__all__ = ["DiagonalIntegral", "diagonal_path_integral"]
