"""Macro indicators (value functions): batched torch callables ``f(z[..., N, D]) -> [...]``.

An indicator maps the agents' features at one step to a scalar; leading batch dimensions let many
integration points or coalitions evaluate in one call. It is evaluated at the scale n of whatever
panel it is given (the full population or a subset z_S), so the same code serves both.

Built-in indicators (paper, Section 3.1; g_i := Σ_d z_{i,d}, m_d := mean_i z_{i,d}, any D):

* ``lin``  f = (1/n) Σ_i g_i                                  (linear over agents; pooled)
* ``heat`` f = log(1 + Π_d m_d)                               (multiplicative-saturating; pooled)
* ``var``  f = (1/n) Σ_i (g_i − ḡ)²                          (population variance; pooled)
* ``gini`` f = (1/(2n²)) Σ_{i,j} |g_i − g_j|                  (Gini mean difference; sort-based)
* ``pairwise`` f = (1/n²) Σ_{i<j} g_i g_j                     (Appendix A counterexample)

Closed forms (Appendix F; valid for the zero baseline z⁰ = 0), per feature d:

* lin:  φ_{i,d} = z_{i,d} / n
* heat: φ_{i,d} = z_{i,d} · (Π_{d'≠d} m_{d'}) / n · log(1 + H) / (D·H),  H = Π_d m_d
  (→ z_{i,d} Π_{d'≠d} m_{d'} / (nD) as H → 0; for D = 3 this is Eq. phi-heat)
* var:  φ_{i,d} = z_{i,d} (g_i − ḡ) / n
* gini: φ_{i,d} = z_{i,d} (2k_i − n − 1) / n², k_i the (average, for ties) rank of g_i
* pairwise: φ_{i,d} = z_{i,d} (Σ_k g_k − g_i) / (2n²)

lin and heat (and linear combinations of them) are *linear* closed forms, φ_{i,d} = z_{i,d} c_d with
c depending on z only through the column means: they declare ``has_linear_closed_form`` and give c,
f(z) and f(0) from the means (:meth:`Indicator.linear_coefficients`), and the engine streams z twice
(:mod:`aumann.attribution.streaming`).

Pooled indicators f = ρ(mean_i ψ(z_i)) declare ψ and ρ in :class:`PooledForm`, which lets
coalition methods keep running sums (O(N) per permutation) instead of re-evaluating f.

Indicators over the living. ``forward(z, context=None, alive=None)``: an indicator that takes the
``alive`` keyword is *alive-aware*; the engine (and :func:`evaluate`) passes it a bool tensor
broadcastable to ``z[..., N]`` whenever the panel has dead rows (``Panel.alive``), and the indicator
must then equal itself evaluated on the living rows alone: f(z, alive) = f(z[alive]) at the living
count n_t. Every built-in above is alive-aware (means, variances, Gini and products over the living),
so ``f_values`` and φ never depend on what dead rows hold, and dead rows get φ = 0. Indicators without
the keyword are evaluated on all N rows as before (dead rows held at the baseline). An alive-aware
indicator at a step with nobody alive raises :class:`~aumann.errors.NoLivingAgentsError` (a mean there
is 0/0; a sum over the living is refused there too: no alive-aware indicator is evaluated over nobody).

Ties. ``gini`` sorts; at ties its gradient is the symmetric (average-rank) subgradient, so identical
agents always get identical attributions (the sorted position of a tie never decides who gets what).
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aumann.attribution.evalcontext import EvalContext
from aumann.attribution.streaming import linear_closed_form
from aumann.checks import as_float, as_real_array, as_torch, load_spec, refuse_spec_name, user_code
from aumann.errors import IndicatorError, NoLivingAgentsError, UndefinedIndicatorError, UnknownIndicatorError

Context = Mapping[str, torch.Tensor] | None


@dataclass(frozen=True)
class PooledForm:
    """f(z) = rho(mean_i psi(z_i)): ``psi(z[..., N, D]) -> [..., N, P]``, ``rho(m[..., P]) -> [...]``.

    ``linear_psi=True`` declares psi linear (psi(z) = z A): then every agent's gradient at a point
    of the path is the same vector A ∇ρ(m)/n, so the path integral needs only the per-step means
    (O(N + K) instead of O(N·K)). ``living=False`` declares that ρ depends on the population size, so
    the form does not carry over to the living sub-population of a step with dead rows.

    ``log1p_product=c`` declares ρ(m) = log(1 + c Π_p m_p) (heat: c = 1): the permutation kernels then
    form the product of the running sums while they walk the permutation (no (·, N, P) intermediate)
    and take log1p with numpy — the same values as ``rho`` up to the last bit of log1p.
    """

    psi: Callable[[torch.Tensor], torch.Tensor]
    rho: Callable[[torch.Tensor], torch.Tensor]
    linear_psi: bool = False
    #: whether f over the living is ρ(mean over the living of ψ) at n_t (the running sums then average over
    #: the living when a step has dead rows); False when ρ itself depends on the population size (a sum such
    #: as log(1 + n·m)), and coalition methods then evaluate f on masks instead
    living: bool = True
    log1p_product: float | None = None


class Indicator(ABC):
    """Base class of macro indicators. Subclasses implement :meth:`forward`.

    Class attributes declare capabilities: ``pooled`` (a :class:`PooledForm` or ``None``) and
    ``uses_context`` (whether :meth:`forward` reads the per-step world context). A subclass with a
    zero-baseline closed form overrides :meth:`closed_form` and sets ``has_closed_form = True``.
    A subclass whose :meth:`forward` takes the keyword ``alive`` is alive-aware (:attr:`accepts_alive`):
    it receives the living mask and must compute over the living rows only (see the module docstring).
    """

    name: str = "indicator"
    pooled: PooledForm | None = None
    uses_context: bool = False
    has_closed_form: bool = False
    has_linear_closed_form: bool = False
    #: the class's own code calls functions the user gave it (agent-wise psi, quadratic q / s): not aumann's code
    calls_user_code: bool = False

    @abstractmethod
    def forward(self, z: torch.Tensor, context: Context = None) -> torch.Tensor:
        """f(z[..., N, D]) -> [...] (a subclass's one required method; optionally with ``alive=None``)."""

    @property
    def accepts_alive(self) -> bool:
        """Whether :meth:`forward` takes the ``alive`` keyword (an indicator over the living)."""
        cls = type(self)
        if cls not in _ALIVE_AWARE:
            _ALIVE_AWARE[cls] = _takes_alive(cls.forward)
        return _ALIVE_AWARE[cls]

    def __call__(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        if alive is not None and self.accepts_alive:
            return self.forward(z, context, alive=alive)
        return self.forward(z, context)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False) -> tuple[np.ndarray, np.ndarray,
                                                                                      np.ndarray]:
        """Zero-baseline Aumann–Shapley attribution of a (T, N, D) array.

        Returns ``(phi, f_values, f_baseline)`` with phi of shape (T, N, D) if ``per_feature`` else
        (T, N), and f_values = f(z_t), f_baseline = f(0) as (T,) arrays.

        It must hold at any n (the engine spot-checks a user's closed form against the path integral of
        :meth:`forward` on a seeded sample of agents as a panel of their own, and refuses one that disagrees).
        """
        raise IndicatorError(f"indicator {self.name!r} has no closed form")

    def closed_form_over_living(self, values: np.ndarray, alive: np.ndarray, *,
                                per_feature: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`closed_form` of an alive-aware indicator on a (T, N, D) array with a (T, N) living mask.

        f(z, alive) is f on the living rows, so each step's closed form is the closed form of its living
        rows at the living count n_t; dead rows get φ = 0 whatever they hold. Steps that share a living
        set are computed together.
        """
        T, N, D = values.shape
        alive = np.asarray(alive, dtype=bool)
        empty = np.flatnonzero(~alive.any(axis=1))
        if empty.size:
            raise NoLivingAgentsError(f"indicator {self.name!r} takes the alive mask, and is not evaluated at step "
                                      f"index {int(empty[0])}: no agent is alive there (n_t = 0)")
        if self.has_linear_closed_form:  # φ_{i,d} = z_{i,d} c_d with c from the living means at n_t
            live = alive.astype(values.dtype)
            n_t = alive.sum(axis=1)
            means = np.einsum("tnd,tn->td", values, live, dtype=np.float64) / n_t[:, None]
            parts = [self.linear_coefficients(means[t:t + 1], int(n_t[t])) for t in range(T)]
            coef = np.concatenate([c for c, _, _ in parts]).astype(values.dtype)
            fv, fb = np.concatenate([f for _, f, _ in parts]), np.concatenate([f0 for _, _, f0 in parts])
            if per_feature:
                return values * coef[:, None, :] * live[..., None], fv, fb
            return np.einsum("tnd,td->tn", values, coef) * live, fv, fb
        phi = None
        fv = np.empty(T, dtype=np.float64)
        fb = np.empty(T, dtype=np.float64)
        groups: dict[bytes, list[int]] = {}  # steps by living set (packed bits hash fast; np.unique sorts rows)
        for t, key in enumerate(np.packbits(alive, axis=1)):
            groups.setdefault(key.tobytes(), []).append(t)
        for steps in groups.values():
            ts = np.asarray(steps)
            idx = np.flatnonzero(alive[steps[0]])
            rows = np.ascontiguousarray(values[ts][:, idx])
            rows.flags.writeable = False  # as the panel's values are: a closed form must not scale them in place
            p, f, f0 = self.closed_form(rows, per_feature=per_feature)
            if phi is None:  # the dtype the closed form itself returns
                phi = np.zeros((T, N, D) if per_feature else (T, N), dtype=np.asarray(p).dtype)
            phi[np.ix_(ts, idx)] = p
            fv[ts], fb[ts] = f, f0
        return phi, fv, fb

    def linear_coefficients(self, means: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For closed forms φ_{t,i} = Σ_d z_{t,i,d} c_{t,d} (``has_linear_closed_form``): the
        coefficients c (T, D), f(z_t) and f(0) (T,) from the float64 column means (T, D) at scale n.

        The engine streams z twice around this call (:mod:`aumann.attribution.streaming`).
        """
        raise IndicatorError(f"indicator {self.name!r} has no linear closed form")

    # linear combinations keep closed forms (the linearity axiom holds for them too)
    def __add__(self, other: Indicator) -> Indicator:
        return LinearCombination([(1.0, self), (1.0, _operand(other))])

    def __sub__(self, other: Indicator) -> Indicator:
        return LinearCombination([(1.0, self), (-1.0, _operand(other))])

    def __mul__(self, w: float) -> Indicator:
        return LinearCombination([(as_float(w, "indicator weight", error=IndicatorError), self)])

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _operand(other: Any) -> Indicator:
    if isinstance(other, Indicator | str) or callable(other):
        return as_indicator(other)
    raise IndicatorError(f"indicators combine with indicators (or numbers as weights: 2 * f); got "
                         f"{type(other).__name__} {other!r}")


_ALIVE_AWARE: dict[type, bool] = {}


def _takes_alive(fn: Callable[..., Any]) -> bool:
    try:
        p = inspect.signature(fn).parameters.get("alive")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def _accepts_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes the context: a parameter named ``context``, or a second positional parameter
    (``f(z, ctx)``, ``f(z, ctx=None)``, ``f(z, *args)``). A second parameter whose default is a value other than
    None (``f(z, power=2.0)``) is the function's own setting, not the context: it is left to its default."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "context" for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "alive"]
    if len(positional) >= 2:
        second = positional[1]
        return second.default is second.empty or second.default is None
    return any(p.kind == p.VAR_POSITIONAL for p in params)


class FunctionIndicator(Indicator):
    """Wraps a plain batched torch callable ``fn(z)`` or ``fn(z, context)``; a callable with an
    ``alive`` keyword (``fn(z, alive=None)``, ``fn(z, context=None, alive=None)``) is alive-aware."""

    def __init__(self, fn: Callable[..., torch.Tensor], name: str | None = None,
                 pooled: PooledForm | None = None) -> None:
        if not callable(fn):
            raise IndicatorError(f"an indicator must be callable; got {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", type(fn).__name__)
        self.uses_context = _accepts_context(fn)
        self._alive = _takes_alive(fn)
        self.pooled = pooled

    @property
    def accepts_alive(self) -> bool:
        return self._alive

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        kw = {"alive": alive} if self._alive else {}
        return self.fn(z, context, **kw) if self.uses_context else self.fn(z, **kw)


def as_indicator(f: Any) -> Indicator:
    """An :class:`Indicator` for ``f``: itself, or a wrapped callable."""
    if isinstance(f, Indicator):
        return f
    if isinstance(f, str):
        return get(f)
    if not callable(f):
        raise IndicatorError(f"an indicator must be an Indicator, a registered name ({names()}) or a batched torch "
                             f"callable f(z[..., N, D]) -> [...]; got {type(f).__name__} {f!r}")
    return FunctionIndicator(f)


# ---------------------------------------------------------------------- built-ins
def _g(z: torch.Tensor) -> torch.Tensor:
    return z.sum(dim=-1)


def living(g: torch.Tensor, alive: Any = None) -> tuple[torch.Tensor | None, torch.Tensor | int]:
    """``(mask, n)`` for per-agent values ``g[..., N]``: the living mask broadcast to g's shape and the
    living count n_t of shape g.shape[:-1], or ``(None, N)`` when ``alive`` is None (everyone alive).

    For alive-aware indicators: reduce with ``torch.where(mask, g, 0).sum(-1) / n``.

    Raises:
        NoLivingAgentsError: some batch element has no living agent (the value is undefined at n_t = 0).
        IndicatorError: ``alive`` does not broadcast to g's shape.
    """
    if alive is None:
        return None, g.shape[-1]
    try:
        mask = as_torch(alive, device=g.device).to(torch.bool).broadcast_to(g.shape)
    except RuntimeError as exc:
        raise IndicatorError(f"alive mask of shape {tuple(as_torch(alive).shape)} does not broadcast to the "
                             f"agents' shape {tuple(g.shape)}") from exc
    n = mask.sum(dim=-1)
    if not bool(n.all()):
        bad = torch.nonzero(n == 0).tolist()
        raise NoLivingAgentsError(f"no living agent at batch element {bad[0]} (of {len(bad)} such): an alive-aware "
                                  "indicator is not evaluated over nobody (n_t = 0)")
    return mask, n.to(g.dtype)


def _mean_living(x: torch.Tensor, mask: torch.Tensor | None, n: torch.Tensor | int) -> torch.Tensor:
    """Mean over the agent axis (-1) of x[..., N] over the living."""
    if mask is None:
        return x.mean(dim=-1)
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=-1) / n


class Lin(Indicator):
    """f = (1/n) Σ_i Σ_d z_{i,d}: linear over agents (Definition 2 holds)."""

    name = "lin"
    has_closed_form = True
    has_linear_closed_form = True
    pooled = PooledForm(psi=lambda z: z.sum(dim=-1, keepdim=True), rho=lambda m: m[..., 0], linear_psi=True)

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        g = _g(z)
        return _mean_living(g, *living(g, alive))

    def linear_coefficients(self, means, n):
        coef = np.full(means.shape, 1.0 / n)
        f = means.sum(axis=1)
        return coef, f, np.zeros_like(f)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        return _linear(self, values, per_feature)


def _linear(f: Indicator, values: np.ndarray, per_feature: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cf = linear_closed_form(f, values, per_feature=per_feature)
    return (cf.phi_features if per_feature else cf.phi), cf.f_values, cf.f_baseline


def _log1p_over(h: np.ndarray, d: int) -> np.ndarray:
    """log(1 + h) / (d·h), continuous at h = 0 (value 1/d)."""
    h = np.asarray(h, dtype=np.float64)
    small = np.abs(h) < 1e-8
    safe = np.where(small, 1.0, h)
    return np.where(small, (1.0 - h / 2.0) / d, np.log1p(safe) / (d * safe))


class Heat(Indicator):
    """f = log(1 + Π_d m_d): multiplicative reach × activity × resonance with log saturation.

    Requires 1 + τ^D Π_d m_d > 0 along the path (true for non-negative features).
    """

    name = "heat"
    has_closed_form = True
    has_linear_closed_form = True
    pooled = PooledForm(psi=lambda z: z, rho=lambda m: torch.log1p(m.prod(dim=-1)), linear_psi=True,
                        log1p_product=1.0)

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        mask, n = living(z[..., 0], alive)
        if mask is None:
            return torch.log1p(z.mean(dim=-2).prod(dim=-1))
        m = torch.where(mask[..., None], z, torch.zeros((), dtype=z.dtype)).sum(dim=-2) / n[..., None]
        return torch.log1p(m.prod(dim=-1))

    def linear_coefficients(self, means, n):
        T, D = means.shape
        if T == 1:  # one step (the common small call): plain floats, same operations in the same order
            m = means[0].tolist()
            h = math.prod(m)
            others = [math.prod(m[:d] + m[d + 1:]) for d in range(D)]
            f = math.log1p(h) if h > -1.0 else math.nan  # NaN like numpy (the engine raises a typed error)
            scale = (1.0 - h / 2.0) / D if abs(h) < 1e-8 else f / (D * h)
            return np.array([[o / n * scale for o in others]]), np.array([f]), np.zeros(1)
        h = means.prod(axis=1)  # (T,)
        f = np.log1p(h)
        others = np.repeat(means[:, None, :], D, axis=1)  # row d: the means with m_d replaced by 1
        others.reshape(T, D * D)[:, :: D + 1] = 1.0
        others = others.prod(axis=2)  # Π_{d'≠d} m_{d'}, multiplied in index order
        small = np.abs(h) < 1e-8
        scale = f / (D * h) if not small.any() else _log1p_over(h, D)  # log(1 + H) / (D·H)
        return others / n * scale[:, None], f, np.zeros(T)  # φ_{i,d} = z_{i,d} coef_d

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        return _linear(self, values, per_feature)


class Var(Indicator):
    """f = (1/n) Σ_i (g_i − ḡ)²: population variance of the additive composite."""

    name = "var"
    has_closed_form = True
    pooled = PooledForm(
        psi=lambda z: torch.stack((_g(z), _g(z) ** 2), dim=-1),
        rho=lambda m: m[..., 1] - m[..., 0] ** 2,
    )

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        g = _g(z)
        mask, n = living(g, alive)
        if mask is None:
            return ((g - g.mean(dim=-1, keepdim=True)) ** 2).mean(dim=-1)
        return _mean_living((g - _mean_living(g, mask, n)[..., None]) ** 2, mask, n)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        n = values.shape[1]
        g = as_torch(values).sum(dim=-1)  # (T, N)
        dev = g - g.mean(dim=1, keepdim=True)
        f = (dev * dev).mean(dim=1).double().numpy()
        w = (dev / n).numpy()
        phi = values * w[:, :, None] if per_feature else g.numpy() * w
        return phi, f, np.zeros_like(f)


#: values of g closer than this, relative to the largest |g| of their row, are ties (the average-rank rule):
#: a path point z⁰ + τ (z − z⁰) summed over features rounds equal g_i differently by a few ulps, and
#: the sorted position of such a near-tie must not decide who gets what
TIE_RTOL = 64 * float(np.finfo(np.float64).eps)


def _tie_tol(g: np.ndarray, eps: float) -> np.ndarray:
    """The per-row tie tolerance 64·eps·max|g| (shape g.shape[:-1] + (1,))."""
    return 64 * eps * np.max(np.where(np.isfinite(g), np.abs(g), 0.0), axis=-1, keepdims=True)


def average_ranks(g: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, ties (and near-ties, within :data:`TIE_RTOL` of the row's largest
    |g|) given their average rank (symmetric)."""
    order = np.argsort(g, axis=-1, kind="stable")
    sorted_g = np.take_along_axis(g, order, axis=-1)
    n = g.shape[-1]
    ranks_sorted = np.broadcast_to(np.arange(1, n + 1, dtype=np.float64), g.shape).copy()
    # average over runs of (nearly) equal values
    new_run = np.ones(g.shape, dtype=bool)
    if n > 1:
        eps = float(np.finfo(g.dtype).eps) if np.issubdtype(g.dtype, np.floating) else 0.0
        new_run[..., 1:] = (sorted_g[..., 1:] - sorted_g[..., :-1]) > _tie_tol(sorted_g, eps)
    if not new_run.all():
        flat_g = sorted_g.reshape(-1, n)
        flat_r = ranks_sorted.reshape(-1, n)
        flat_new = new_run.reshape(-1, n)
        for row in range(flat_g.shape[0]):
            starts = np.flatnonzero(flat_new[row])
            if starts.size == n:
                continue
            ends = np.append(starts[1:], n)
            sums = np.add.reduceat(flat_r[row], starts)
            flat_r[row] = np.repeat(sums / (ends - starts), ends - starts)
        ranks_sorted = flat_r.reshape(g.shape)
    ranks = np.empty_like(ranks_sorted)
    np.put_along_axis(ranks, order, ranks_sorted, axis=-1)
    return ranks


def average_ranks_torch(g: torch.Tensor, mask: torch.Tensor | None = None, *,
                        return_order: bool = False) -> Any:
    """1-based ranks of g[..., N] along the last axis among the rows where ``mask`` is True, ties (and
    near-ties, within :data:`TIE_RTOL` of the largest |g| among them) given their average rank
    (symmetric); O(N log N). Rows outside the mask get meaningless ranks. ``return_order``: also the
    sorting permutation (living rows ascending, then the dead ones)."""
    key = g if mask is None else torch.where(mask, g, torch.full((), float("inf"), dtype=g.dtype))
    srt, order = torch.sort(key, dim=-1)
    n = g.shape[-1]
    pos = torch.arange(n, device=g.device).expand(g.shape)
    ranks = (pos + 1).to(g.dtype)
    if n > 1:
        eps = torch.finfo(g.dtype).eps if g.is_floating_point() else 0.0
        # the largest |g| among the living: at one end of the sorted living values
        last = srt[..., -1:] if mask is None else srt.gather(-1, (mask.sum(-1, keepdim=True) - 1).clamp_min(0))
        tol = 64 * eps * torch.maximum(srt[..., :1].abs(), last.abs())
        starts = torch.ones(g.shape, dtype=torch.bool, device=g.device)
        # a new run of (nearly) equal values begins here; inf - inf (dead rows) is NaN: no new run among them
        starts[..., 1:] = (srt[..., 1:] - srt[..., :-1]) > tol
        if not bool(starts.all()):  # ties: positions start..end−1 of a run share (start + end + 1)/2
            first = torch.where(starts, pos, 0).cummax(dim=-1).values
            ends = torch.ones_like(starts)
            ends[..., :-1] = starts[..., 1:]
            last_pos = torch.where(ends, pos + 1, n).flip(-1).cummin(dim=-1).values.flip(-1)
            ranks = (first + last_pos + 1).to(g.dtype) / 2
    out = torch.empty_like(ranks).scatter_(-1, order, ranks)
    return (out, order) if return_order else out


def average_rank_weights(g: torch.Tensor, mask: torch.Tensor | None, n: torch.Tensor | int, *,
                         return_order: bool = False) -> Any:
    """Gini weights w_i = (2k̄_i − n − 1)/n² (k̄ the average rank among the living), 0 for dead rows
    (``return_order``: also the sorting permutation of :func:`average_ranks_torch`)."""
    nn = n[..., None] if isinstance(n, torch.Tensor) else n
    ranks, order = average_ranks_torch(g, mask, return_order=True)
    w = (2.0 * ranks - nn - 1) / nn**2
    w = w if mask is None else torch.where(mask, w, torch.zeros((), dtype=w.dtype))
    return (w, order) if return_order else w


def _sorted_weighted_sum(g: torch.Tensor, alive: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | int]:
    """(Σ_i w_i g_i with the average-rank weights w held constant, Σ_i g_i, n_t), dead rows as 0.

    Without a gradient to take, both sums run in ascending order of g, so they depend only on the multiset
    of values: agents with exactly equal g are interchangeable bit for bit (a leave-one-out or a coalition
    that swaps them values the same). With one, they run in agent order (the same function; the gradient
    is w, so ties keep their shared weight)."""
    mask, n = living(g, alive)
    w, order = average_rank_weights(g.detach(), mask, n, return_order=True)
    if mask is not None:
        g = torch.where(mask, g, torch.zeros((), dtype=g.dtype))
    if g.requires_grad:
        return (w * g).sum(dim=-1), g.sum(dim=-1), n
    gs = g.gather(-1, order)
    return (w.gather(-1, order) * gs).sum(dim=-1), gs.sum(dim=-1), n


class Gini(Indicator):
    """f = (1/(2n²)) Σ_{i,j} |g_i − g_j| = (1/n²) Σ_k (2k − n − 1) g_(k): the paper's ``gini``, half the
    Gini mean difference (in the units of g; *not* the Gini coefficient, which divides this by the mean
    ḡ: :class:`GiniCoefficient`). 0 at the zero baseline (every g_i = 0), where its closed form applies.

    C² except at ties; its gradient is rank-constant along the zero-baseline ray, so the closed form
    is exact (paper, footnote to Assumption 1). The torch form sorts, O(n log n), and is written as
    f = Σ_i w_i g_i with w_i = (2k_i − n − 1)/n² held constant, k_i the *average* rank of g_i: the same
    value, and at ties the symmetric subgradient (tied agents share their ranks' weights equally).
    """

    name = "gini"
    has_closed_form = True

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        return _sorted_weighted_sum(_g(z), alive)[0]

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        n = values.shape[1]
        g = values.sum(axis=2)
        w = (2.0 * average_ranks(g) - n - 1) / n**2  # (T, N)
        f = (w * g).sum(axis=1)
        phi = values * w[:, :, None] if per_feature else g * w
        return phi, f, np.zeros_like(f)


class GiniCoefficient(Indicator):
    """G = Σ_{i,j} |g_i − g_j| / (2 n² ḡ) = ``gini`` / ḡ: the Gini coefficient (scale-invariant, in [0, 1 − 1/n]
    for non-negative g), over the living rows at n_t, O(n log n) by one sort (the same average-rank weights
    as :class:`Gini`, so tied and nearly tied agents get identical attributions).

    Undefined where the living mean ḡ is 0 — at the zero baseline it is 0/0 — so it has no zero-baseline
    closed form (G is homogeneous of degree 0: along the ray from z⁰ = 0 its gradient grows like 1/τ and the
    path integral diverges); evaluating it there raises :class:`~aumann.errors.UndefinedIndicatorError`
    naming the batch element. Attribute it from a baseline with ḡ ≠ 0 (``"mean"``, ``"pre-event"``,
    ``"previous"``, an array), or attribute :class:`Gini` (the paper's f, 0 at the zero baseline).
    """

    name = "gini_coefficient"

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        md, total, n = _sorted_weighted_sum(_g(z), alive)
        mean = total / n
        zero = mean.detach() == 0
        if bool(zero.any()):
            bad = torch.nonzero(zero).tolist()
            where = f" at batch element {tuple(bad[0])}" if bad and bad[0] else ""
            raise UndefinedIndicatorError(
                f"indicator 'gini_coefficient' is 0/0 where the mean of g over the living is 0{where} ({len(bad)} "
                "such element(s)): at the zero baseline, or at a panel step (or a baseline) whose living agents "
                "all have g = 0. Attribute it from a baseline with a non-zero mean ('mean', 'pre-event', "
                "'previous' or an array) on steps with a non-zero mean, or use 'gini' (the Gini mean "
                "difference, defined everywhere)")
        return md / mean


class Pairwise(Indicator):
    """f = (1/n²) Σ_{i<j} g_i g_j: the minimal quadratic-interaction family of Appendix A."""

    name = "pairwise"
    has_closed_form = True

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        g = _g(z)
        mask, n = living(g, alive)
        if mask is not None:
            g = torch.where(mask, g, torch.zeros((), dtype=g.dtype))
        return (g.sum(dim=-1) ** 2 - (g**2).sum(dim=-1)) / (2 * n**2)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        n = values.shape[1]
        g = values.sum(axis=2)
        s = g.sum(axis=1, keepdims=True)
        w = (s - g) / (2 * n**2)
        f = (s[:, 0] ** 2 - (g**2).sum(axis=1)) / (2 * n**2)
        phi = values * w[:, :, None] if per_feature else g * w
        return phi, f, np.zeros_like(f)


class LinearCombination(Indicator):
    """Σ_k w_k f_k; its closed form is the combination of closed forms when every part has one."""

    def __init__(self, terms: list[tuple[float, Indicator]]) -> None:
        flat: list[tuple[float, Indicator]] = []
        for w, ind in terms:
            if isinstance(ind, LinearCombination):
                flat.extend((w * w2, i2) for w2, i2 in ind.terms)
            else:
                flat.append((float(w), ind))
        self.terms = flat
        self.name = " + ".join(f"{w:g}*{i.name}" for w, i in flat)
        self.uses_context = any(i.uses_context for _, i in flat)
        self.has_closed_form = all(i.has_closed_form for _, i in flat)
        self.has_linear_closed_form = all(i.has_linear_closed_form for _, i in flat)

    @property
    def accepts_alive(self) -> bool:
        return any(i.accepts_alive for _, i in self.terms)

    def forward(self, z: torch.Tensor, context: Context = None, alive: torch.Tensor | None = None) -> torch.Tensor:
        return sum(w * i(z, context, alive) for w, i in self.terms)  # type: ignore[return-value]

    def closed_form_over_living(self, values: np.ndarray, alive: np.ndarray, *, per_feature: bool = False):
        parts = [(w, i.closed_form_over_living(values, alive, per_feature=per_feature) if i.accepts_alive
                  else i.closed_form(values, per_feature=per_feature)) for w, i in self.terms]
        return tuple(sum(w * p[j] for w, p in parts) for j in range(3))

    def linear_coefficients(self, means, n):
        parts = [(w, i.linear_coefficients(means, n)) for w, i in self.terms]
        return tuple(sum(w * p[k] for w, p in parts) for k in range(3))  # type: ignore[return-value]

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False):
        if self.has_linear_closed_form:  # one streaming pass for the whole combination
            return _linear(self, values, per_feature)
        parts = [(w, i.closed_form(values, per_feature=per_feature)) for w, i in self.terms]
        phi = sum(w * p[0] for w, p in parts)
        f = sum(w * p[1] for w, p in parts)
        f0 = sum(w * p[2] for w, p in parts)
        return phi, f, f0


# ---------------------------------------------------------------------- registry
_REGISTRY: dict[str, Callable[..., Indicator]] = {}


def register(indicator: Indicator | Callable[..., Any], name: str | None = None, *,
             overwrite: bool = False) -> Indicator | Callable[..., Any]:
    """Register an indicator under ``name`` so that :func:`get` (and ``aumann attribute --indicator NAME``) finds it.

    ``indicator`` is one of

    * an :class:`Indicator` instance (``get`` returns it);
    * an :class:`Indicator` subclass or another *factory*, called by ``get(name, **params)`` with the keyword
      parameters given there (``get("mine", power=3)``), or with none;
    * a plain batched indicator function ``f(z[, context][, alive=None]) -> [...]``: ``get(name)`` returns it
      wrapped as :class:`FunctionIndicator` under ``name``, exactly as ``attribute(f, ...)`` would wrap it. (It was
      called as a factory, ``f()``, and failed.)

    A callable with a required positional parameter (z) cannot be a factory called without arguments, so
    ``get(name)`` with no parameters takes it for an indicator function, and ``get(name, **params)`` for a factory
    (``def make(power): ...`` registered and asked for with ``get(name, power=3)`` keeps working).

    Usable as a decorator (``@register`` on a subclass or a plain function). Returns its argument.

    Raises:
        IndicatorError: a name that is no name (blank, not a string, or ``'<lambda>'``: pass ``name=``), a name
            with ``:``, ``/`` or ``\\`` (which :func:`get` reads as a ``module:attribute`` / ``file.py:attribute``
            spec or a path: registered, it would hide that file), a name already registered (unless
            ``overwrite``), or something that is neither an indicator nor callable.
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        # an explicit name that is no name: `name or indicator.name` registered it under another name
        raise IndicatorError(f"an indicator is registered under a non-blank name (a string); got {name!r}")
    if isinstance(indicator, Indicator):
        key = name or indicator.name
        factory: Callable[..., Any] = _instance(indicator)
    elif callable(indicator):
        key = name or getattr(indicator, "name", None) or getattr(indicator, "__name__", None)
        factory = _FunctionOrFactory(indicator, key) if _is_indicator_function(indicator) else indicator
    else:
        raise IndicatorError(f"cannot register {indicator!r}: not an Indicator, an indicator function f(z) or a "
                             "factory")
    if not key or not isinstance(key, str) or key == "<lambda>":
        raise IndicatorError(f"an indicator needs a name to be registered{' (a lambda has none)' if key else ''}: "
                             "pass name=... (register(f, name='mine'))")
    refuse_spec_name(key, error=IndicatorError, what="indicator", where="indicators.get() and --indicator")
    if key in _REGISTRY and not overwrite:
        raise IndicatorError(f"indicator {key!r} is already registered (pass overwrite=True to replace)")
    _REGISTRY[key] = factory
    return indicator


def _instance(ind: Indicator) -> Callable[..., Indicator]:
    """The registry's factory of an instance: the instance itself, which takes no parameters."""
    def factory(**params: Any) -> Indicator:
        if params:
            raise IndicatorError(f"indicator {ind.name!r} is registered as an indicator (not a factory), so it takes "
                                 f"no parameters; got {sorted(params)}")
        return ind
    return factory


class _FunctionOrFactory:
    """The registry's entry of a callable with a required positional parameter: without parameters, the indicator
    function itself (one :class:`FunctionIndicator` under its registered name); with them, a factory call."""

    def __init__(self, fn: Callable[..., Any], key: Any) -> None:
        self.fn, self.key = fn, key
        self._wrapped: FunctionIndicator | None = None

    def __call__(self, **params: Any) -> Any:
        if params:
            return self.fn(**params)
        if self._wrapped is None:
            self._wrapped = FunctionIndicator(self.fn, name=self.key if isinstance(self.key, str) else None)
        return self._wrapped


def _is_indicator_function(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a plain indicator function f(z, ...) rather than a factory: a function or method (not a
    class) with a positional parameter that has no default (z). A callable whose signature cannot be read is taken
    for a factory, as before."""
    if isinstance(fn, type):
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


def load(spec: str) -> Indicator:
    """The indicator at ``path/to/file.py:attribute`` or ``package.module:attribute``: an :class:`Indicator`,
    an Indicator subclass (instantiated without arguments) or a batched callable ``f(z[, context][, alive])``.
    The file is imported as ``python file.py`` would (its sibling modules import).

    Raises:
        UnknownIndicatorError: the spec cannot be imported or names nothing usable as an indicator.
    """
    _, obj = load_spec(spec, error=UnknownIndicatorError, what="indicator")
    if isinstance(obj, type) and issubclass(obj, Indicator):
        with user_code(f"indicator class {spec!r}"):
            obj = obj()
    if not (isinstance(obj, Indicator) or callable(obj)):
        raise UnknownIndicatorError(f"indicator spec {spec!r} names a {type(obj).__name__}, not an Indicator or a "
                                    "batched callable f(z[..., N, D]) -> [...]")
    ind = as_indicator(obj)
    if isinstance(ind, FunctionIndicator) and ind.name in ("<lambda>", "function"):
        ind.name = spec.rpartition(":")[2]
    return ind


def get(name: str, **params: Any) -> Indicator:
    """The registered indicator called ``name`` (factories receive ``params``), or the one a
    ``path/to/file.py:attribute`` / ``package.module:attribute`` spec names (:func:`load`)."""
    if not isinstance(name, str):
        raise UnknownIndicatorError(f"indicator names are strings; got {type(name).__name__} {name!r}; registered "
                                    f"indicators are {sorted(_REGISTRY)}")
    if name not in _REGISTRY and ":" in name and not params:
        return load(name)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownIndicatorError(
            f"unknown indicator {name!r}; registered indicators are {sorted(_REGISTRY)}"
        ) from None
    with user_code(f"the factory of indicator {name!r}"):
        ind = as_indicator(factory(**params) if params else factory())
    if isinstance(ind, FunctionIndicator) and ind.name in ("<lambda>", "function"):
        ind.name = name  # a factory's lambda: provenance, pages and errors named it '<lambda>', not what was asked for
    return ind


def names() -> list[str]:
    """Names of all registered indicators."""
    return sorted(_REGISTRY)


for _cls in (Lin, Heat, Var, Gini, GiniCoefficient, Pairwise):
    register(_cls)

# ---------------------------------------------------------------------- evaluation
def _as_eval_context(f_name: str, state: Any, context: Any, context_batched: bool, alive: Any) -> EvalContext:
    if isinstance(state, EvalContext):
        if context is not None or alive is not None or context_batched:
            raise IndicatorError(f"indicator {f_name!r}: an EvalContext carries its own context and living mask; "
                                 "pass it alone (evaluate(f, ctx)) or use ctx.with_values(z) for other values")
        return state
    return EvalContext(state, context, alive, context_batched)


def _living_mask(ind: Indicator, ec: EvalContext, lead_and_n: tuple[int, ...], device: Any) -> torch.Tensor | None:
    """The living mask of ``ec`` as a bool tensor of z's shape[:-1] (None when f is not alive-aware or
    nobody is dead); a step (batch element) with nobody alive raises NoLivingAgentsError naming it."""
    if ec.alive is None or not ind.accepts_alive:
        return None
    try:
        a = np.broadcast_to(ec.alive, lead_and_n)
    except ValueError:
        raise IndicatorError(f"indicator {ind.name!r}: alive mask of shape {ec.alive.shape} does not broadcast to "
                             f"the batch's agents {lead_and_n}") from None
    empty = np.argwhere(np.atleast_1d(~a.any(axis=-1)))  # (one step of no agents at all: index 0, not no index)
    if empty.size:
        where = ", ".join(str(tuple(int(i) for i in e)) if len(e) > 1 else str(int(e[0])) for e in empty[:5])
        raise NoLivingAgentsError(f"indicator {ind.name!r} takes the alive mask, and is not evaluated where no agent "
                                  f"is alive (n_t = 0): step (batch) index {where}")
    return torch.tensor(a, device=device)  # a copy: a broadcast view is read-only


def evaluate_tensor(f: Any, state: EvalContext) -> torch.Tensor:
    """``f`` on an :class:`EvalContext` whose ``z`` is a torch tensor, as a torch tensor (gradients kept).

    The engine's evaluation (:meth:`~aumann.attribution.problem.Problem.evaluate`, the path integral's
    points, the coalition games' batches) goes through here; context arrays become tensors on z's device
    (a ``batched`` context already has z's leading dimensions, else it is expanded to them) and the living
    mask is handed to an alive-aware f. The output is returned unchecked (callers check it).
    """
    ind = as_indicator(f)
    z = state.z
    ctx = _tensor_context(state, z)
    mask = _living_mask(ind, state, tuple(z.shape[:-1]), z.device)
    version = z._version  # torch counts every in-place write to z (and to the array it may share memory with)
    with user_code(f"indicator {ind.name!r}", shape=tuple(z.shape)):
        out = ind(z, ctx, mask)
    if z._version != version:
        raise IndicatorError(f"indicator {ind.name!r} modified its input z in place (z.mul_(), z += ..., z[...] = "
                             "...); every value computed from it would be wrong. An indicator must leave z as it is: "
                             "compute on a new tensor (z = z * 2, z.clone())")
    return out


def _tensor_context(state: EvalContext, z: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The context arrays as tensors on z's device (expanded to z's leading dimensions unless batched)."""
    if not state.context:
        return None
    lead = tuple(z.shape[:-2])
    ctx = {}
    for k, v in state.context.items():
        tv = v if isinstance(v, torch.Tensor) else as_torch(
            as_real_array(v, f"context {k!r}", error=IndicatorError, dtype=np.float64))
        tv = tv.to(z.device)
        ctx[k] = tv if (state.batched or not lead) else tv.expand(*lead, *tv.shape)
    return ctx


def _lead_slice(state: EvalContext, sl: slice) -> EvalContext:
    """Elements ``sl`` of the leading dimension of a batch: z, a batched context and a per-element mask with it."""
    z = state.z
    ctx = state.context
    if ctx is not None and state.batched:
        ctx = {k: v[sl] for k, v in ctx.items()}
    alive = state.alive
    if alive is not None and alive.ndim == z.ndim - 1:
        alive = alive[sl]
    return EvalContext(z[sl], ctx, alive, state.batched)


def aumanns_own(f: Any) -> bool:
    """Whether ``f`` runs aumann's own code only (its built-in indicators), which never writes into its input: a
    wrapped function, a combination of indicators, a class defined elsewhere or one that calls functions the user
    gave it (``calls_user_code``) is user code, handed copies where it could otherwise write into the caller's data."""
    return (type(f).__module__.startswith("aumann.") and not hasattr(f, "fn") and not hasattr(f, "terms")
            and not getattr(f, "calls_user_code", False))


def _own(state: EvalContext, owned: bool) -> EvalContext:
    """``state`` itself when its z is a tensor aumann made, else ``state`` over a copy of z: an indicator that
    writes into its input (refused after the call, :func:`evaluate_tensor`) then writes into the copy, never
    into the caller's array or a panel's values."""
    return state if owned else state.with_values(state.z.clone())


def _batch_rows(ind: Indicator, state: EvalContext, owned: bool = True) -> int:
    """How many elements of the leading dimension one call may take (all of them for small batches):
    the indicator's cost per element is measured once per shape (:mod:`aumann.attribution.memory`), on a
    copy of the first elements unless ``owned`` (z is not the caller's memory)."""
    z = state.z
    if z.ndim < 3 or z.shape[0] < 2:
        return z.shape[0] if z.ndim >= 3 else 1
    from aumann.attribution.memory import cache_owner, item_bytes, items_per_batch, limits, small_enough

    per_elem = int(np.prod(z.shape[1:])) * z.element_size()
    target, hard = limits(z.device)
    if small_enough(z.shape[0], per_elem, z.shape[-2], target):  # nothing to measure
        return z.shape[0]

    def run(b: int) -> None:
        evaluate_tensor(ind, _own(_lead_slice(state, slice(0, b)), owned))

    owner = cache_owner(ind)
    key = (tuple(z.shape[1:]), str(z.dtype), state.batched, None if state.alive is None else state.alive.ndim)
    with torch.no_grad():
        per = item_bytes(run, 4 * per_elem, key=key, owner=owner, device=z.device, limit=hard, target=target,
                         what=f"element of a batch of indicator {ind.name!r} (shape {tuple(z.shape[1:])})")
    return items_per_batch(per, target)


def evaluate(f: Any, z: Any, context: Mapping[str, Any] | None = None, *, context_batched: bool = False,
             alive: Any = None) -> np.ndarray:
    """The indicator ``f`` on an :class:`EvalContext` (or a batch ``z``) → float64 numpy array of shape (...).

    The one place indicators are evaluated outside the engine (recorded panels, forks, deletion
    curves, ablations, smoothing gaps). ``f`` may be an :class:`Indicator`, a registered name or a plain
    batched callable (see :func:`as_indicator`); the context is passed whenever the indicator takes it,
    the living mask whenever the indicator is alive-aware.

    Args:
        f: the indicator.
        z: an :class:`EvalContext` (z, context and living mask together: ``evaluate(f, ctx)``, the form
            every call inside aumann uses), or (..., N, D) values (numpy or torch; converted to float64)
            with the three keywords below.
        context: per-step world state {name: array}. By default one step's state, broadcast to every
            element of the batch; with ``context_batched=True`` each array already has the batch's
            leading dimensions (e.g. a recorded panel's context with leading T for a (T, N, D) batch).
        context_batched: see ``context``.
        alive: living mask (bool, broadcastable to z.shape[:-1], e.g. a panel's (T, N) ``alive``),
            passed to an alive-aware indicator (one whose ``forward`` takes ``alive``); other
            indicators are evaluated on all rows, as without it.

    Returns:
        f's values as float64 numpy. Inputs of any real dtype (float16 included) are evaluated in float64; what f
        returns is checked by the engine's rule (:func:`check_output`): a float64 or float32 tensor is accepted
        (float32 as the engine accepts it from a float32 panel) and upcast; float16/bfloat16 output is refused,
        not upcast: its rounding (~1e-3 relative) is already in the values, in an attribution checked to ~1e-12.

    Raises:
        IndicatorError: ``f`` returns something that is not a real float32/float64 tensor of shape z.shape[:-2],
            or NaN/inf (the message names the batch elements), as the engine refuses them.
        NoLivingAgentsError: an alive-aware indicator where some step (batch element) has no living
            agent; the message names its index.
    """
    ind = as_indicator(f)
    state, zt, lead, owned = _tensor_state(ind, z, context, context_batched, alive)
    owned = owned or aumanns_own(ind)  # aumann's own indicators read the caller's memory without a copy
    step = _batch_rows(ind, state, owned)
    with torch.no_grad():
        if step >= (lead[0] if lead else 1):
            out = evaluate_tensor(ind, _own(state, owned))
        else:  # a batch larger than the memory budget holds: in slices of the leading dimension (each copied
            # just before its call when z is the caller's memory: one slice more in memory, not the whole z)
            parts = []
            for s in range(0, lead[0], step):
                part = _lead_slice(state, slice(s, s + step))
                out = evaluate_tensor(ind, _own(part, owned))
                if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(part.z.shape[:-2]):
                    # named with the slice's own shapes (a (k, N) output was reported as the concatenation's)
                    check_output(ind.name, out, tuple(part.z.shape))
                parts.append(out)
            out = torch.cat(parts)
    return _checked(ind, out, zt, lead)


def _tensor_state(ind: Indicator, z: Any, context: Any, context_batched: bool,
                  alive: Any) -> tuple[EvalContext, torch.Tensor, tuple[int, ...], bool]:
    """:func:`evaluate`'s input as an EvalContext over a float64 tensor: (state, that tensor, leading shape,
    whether that tensor is aumann's own memory). It shares memory with the input when the input already was
    float64 on the host (a numpy array, a panel's values, a CPU tensor): then it is not ours to hand to the
    indicator (:func:`_own`)."""
    state = _as_eval_context(ind.name, z, context, context_batched, alive)
    arr = as_real_array(state.z, f"input of indicator {ind.name!r}", error=IndicatorError, dtype=np.float64)
    zt = as_torch(arr)
    if zt.ndim < 2:
        raise IndicatorError(f"indicator {ind.name!r}: a batch must have shape (..., N, D); got {tuple(zt.shape)}")
    return state.with_values(zt), zt, tuple(zt.shape[:-2]), not _shares_memory(arr, state.z)


def _shares_memory(arr: np.ndarray, src: Any) -> bool:
    """Whether ``arr`` (made from ``src`` by :func:`as_real_array`) may share memory with ``src``."""
    if isinstance(src, torch.Tensor):
        if src.device.type != "cpu":
            return False  # .cpu() copied it
        src = src.detach().resolve_conj().resolve_neg().numpy() if src.dtype == torch.float64 else None
    return isinstance(src, np.ndarray) and np.may_share_memory(arr, src)


def evaluate_pair(f: Any, g: Any, state: EvalContext) -> tuple[np.ndarray, np.ndarray]:
    """``(evaluate(f, state), evaluate(g, state))`` — the same two arrays — for one step (``state.z`` of shape
    (N, D)), with the work the two share done once where ``f`` declares it: an indicator with
    ``forward_pair(g, z, context, alive)`` returns both values (e.g. two network indicators on one graph:
    one pass over it). Otherwise, or for a batch, each is evaluated alone."""
    fi, gi = as_indicator(f), as_indicator(g)
    pair = getattr(fi, "forward_pair", None)
    if pair is None or fi.accepts_alive != gi.accepts_alive:
        return evaluate(fi, state), evaluate(gi, state)
    st, zt, lead, owned = _tensor_state(fi, state, None, False, None)
    owned = owned or (aumanns_own(fi) and aumanns_own(gi))
    if lead:
        return evaluate(fi, state), evaluate(gi, state)
    if not owned:  # the caller's memory: the pair gets a copy (see _own)
        zt = zt.clone()
    ctx = _tensor_context(st, zt)
    mask = _living_mask(fi, st, tuple(zt.shape[:-1]), zt.device)
    version = zt._version
    with torch.no_grad(), user_code(f"indicator {fi.name!r}", shape=tuple(zt.shape)):
        a, b = pair(gi, zt, ctx, mask)
    if zt._version != version:
        raise IndicatorError(f"indicator {fi.name!r} modified its input z in place in forward_pair; every value "
                             "computed from it would be wrong. An indicator must leave z as it is")
    return _checked(fi, a, zt, lead), _checked(gi, b, zt, lead)


#: floating output dtypes an indicator may return: half precision (float16: ~3 significant digits, bfloat16: ~2)
#: would carry its rounding into attributions checked to ~1e-12, so it is refused, not upcast after the fact
HALF = (torch.float16, torch.bfloat16)


def check_output(name: str, out: Any, z_shape: tuple[int, ...],
                 where: Callable[[np.ndarray], str] | None = None) -> torch.Tensor:
    """What indicator ``name`` returned for a batch z of shape ``z_shape``, checked — the one rule of the engine
    (:meth:`~aumann.attribution.problem.Problem.evaluate`) and of :func:`evaluate`: a real floating torch tensor
    (float32 or float64; float16/bfloat16 refused) of shape ``z_shape[:-2]``, every value finite. ``where`` maps
    the bool array of non-finite values (shape ``z_shape[:-2]``) to the words that say where they are.

    Raises:
        IndicatorError: naming the indicator and what is wrong (type, dtype, shape, NaN/inf and where).
    """
    if not isinstance(out, torch.Tensor):
        raise IndicatorError(f"indicator {name!r} returned {type(out).__name__}; it must return a torch tensor of "
                             "shape z.shape[:-2]")
    if out.is_complex() or not out.is_floating_point():
        raise IndicatorError(f"indicator {name!r} returned a {out.dtype} tensor; it must return real floating values "
                             "(float32/float64)")
    if out.dtype in HALF:
        raise IndicatorError(f"indicator {name!r} returned {out.dtype} values; half precision keeps "
                             f"{'3' if out.dtype == torch.float16 else '2'} significant digits, and every attribution "
                             "of it would be off by that much: return float32 or float64 (compute in z's dtype; no "
                             ".half(), .to(torch.float16) or autocast in the indicator)")
    lead = tuple(z_shape[:-2])
    if tuple(out.shape) != lead:
        raise IndicatorError(f"indicator {name!r} returned shape {tuple(out.shape)} for a batch of shape "
                             f"{tuple(z_shape)}; expected {lead}: a batched indicator maps (..., N, D) to (...) — one "
                             "value per step (per batch element): reduce over agents and features, keep the leading "
                             "batch dimensions")
    finite = torch.isfinite(out.detach())
    if not bool(finite.all()):
        bad = (~finite).cpu().numpy()
        raise IndicatorError(f"indicator {name!r} returned NaN/inf on a batch of shape {tuple(z_shape)}"
                             f"{where(bad) if where is not None else ''}")
    return out


def _batch_elements(bad: np.ndarray) -> str:
    """Where :func:`evaluate`'s non-finite values are: the first batch elements, and how many."""
    if bad.ndim == 0:
        return ""
    idx = [tuple(int(i) for i in e) if len(e) > 1 else int(e[0]) for e in np.argwhere(bad)]
    return f" (at batch element(s) {idx[:5]}; {len(idx)} of {bad.size} value(s))"


def _checked(ind: Indicator, out: Any, zt: torch.Tensor, lead: tuple[int, ...]) -> np.ndarray:
    """An indicator's output, checked by the engine's rule (:func:`check_output`), as float64 numpy."""
    return check_output(ind.name, out, tuple(zt.shape), _batch_elements).detach().to(torch.float64).cpu().numpy()


__all__ = [
    "TIE_RTOL", "EvalContext", "FunctionIndicator", "Gini", "GiniCoefficient", "Heat", "Indicator", "Lin",
    "LinearCombination", "Pairwise", "PooledForm", "Var", "as_indicator", "average_rank_weights", "average_ranks",
    "average_ranks_torch", "check_output", "evaluate", "evaluate_pair", "evaluate_tensor", "get", "living", "load",
    "names", "register",
]
