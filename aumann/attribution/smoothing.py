"""C² smoothing primitives and surrogates of non-smooth indicators, with their gap report.

The Aumann–Shapley path integral needs f ∈ C² along the path (paper, Section 4.1). Indicators built
from max, thresholds, |·|, sorting or ranks are not; each primitive below is a C∞ replacement with a
temperature τ (or ε, β) and a known worst-case error that vanishes as τ → 0:

==================  =====================================  ===========================================
primitive           definition                              error bound vs the original
==================  =====================================  ===========================================
smooth_max(x, τ)    τ · logsumexp(x / τ)                    0 ≤ smooth_max − max ≤ τ · log n
smooth_min(x, τ)    −smooth_max(−x, τ)                      0 ≤ min − smooth_min ≤ τ · log n
smooth_step(x, τ)   σ(x / τ)                                |σ(x/τ) − 1[x > 0]| ≤ exp(−|x| / τ)
smooth_abs(x, ε)    √(x² + ε²)                              0 ≤ smooth_abs − |x| ≤ ε
softplus(x, β)      log(1 + e^{βx}) / β                     0 ≤ softplus − max(x, 0) ≤ log 2 / β
soft_rank(x, τ)     1 + Σ_{j≠i} σ((x_i − x_j) / τ)          |r̃_i − r_i| ≤ (n − 1) · exp(−δ / τ)
soft_sort(x, τ)     P̂(x) x, NeuralSort relaxation           → sort(x) as τ → 0 (distinct values)
==================  =====================================  ===========================================

(δ = the smallest gap between distinct values; ranks are 1-based ascending, ties get the average.)

soft_sort uses the NeuralSort relaxation (Grover et al., 2019, arXiv:1903.08850): the k-th row of
the relaxed permutation is softmax(((n + 1 − 2k) x − A 1) / τ) with A_ij = |x_i − x_j|. We replace
|·| by smooth_abs(·, ε = τ) so the result is C∞ (plain NeuralSort is only piecewise smooth at ties).
It is chosen over optimal-transport / projection schemes because it is closed-form, batched, and
differentiable twice through autograd with O(n²) memory, which suits the small-to-moderate n of
per-step indicators (use smooth_max / soft_rank for large n).

A :class:`Surrogate` carries the original (possibly non-smooth) indicator and its C² version;
:func:`gap_report` measures |f_smooth − f_orig| per step on a recorded panel and, when the engine
is available, the rank agreement of their attributions (Kendall τ, top-k Jaccard).

All functions are pure torch, batched over leading dimensions, and work in float64.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from aumann.attribution.indicators import EvalContext, Indicator, as_indicator, aumanns_own, evaluate, living
from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.checks import as_float, as_int
from aumann.errors import EfficiencyGapWarning, IndicatorError


def _pos(name: str, value: float) -> float:
    return as_float(value, name, minimum=0, exclusive_minimum=True, error=IndicatorError)


def smooth_max(x: torch.Tensor, dim: int = -1, temperature: float = 0.1) -> torch.Tensor:
    """τ · logsumexp(x / τ) over ``dim``; within τ · log n above the true max."""
    t = _pos("temperature", temperature)
    return t * torch.logsumexp(x / t, dim=dim)


def smooth_min(x: torch.Tensor, dim: int = -1, temperature: float = 0.1) -> torch.Tensor:
    """−smooth_max(−x); within τ · log n below the true min."""
    return -smooth_max(-x, dim=dim, temperature=temperature)


def smooth_step(x: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """σ(x / τ), a C∞ Heaviside step."""
    return torch.sigmoid(x / _pos("temperature", temperature))


def smooth_abs(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """√(x² + ε²), a C∞ |x| (within ε above it)."""
    e = _pos("eps", eps)
    return torch.sqrt(x * x + e * e)


def softplus(x: torch.Tensor, beta: float = 10.0) -> torch.Tensor:
    """log(1 + e^{βx}) / β, a C∞ max(x, 0) (within log 2 / β above it)."""
    b = _pos("beta", beta)
    # logaddexp is overflow-safe and, unlike F.softplus, has no linear cut-over (which breaks C²)
    return torch.logaddexp(b * x, torch.zeros_like(x)) / b


def soft_rank(x: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """1-based ascending soft ranks over the last dim: r̃_i = 1 + Σ_{j≠i} σ((x_i − x_j)/τ)."""
    t = _pos("temperature", temperature)
    diff = (x.unsqueeze(-1) - x.unsqueeze(-2)) / t  # (..., n, n): x_i − x_j
    # the diagonal contributes σ(0) = 1/2, so 1 + Σ_{j≠i} = 1/2 + Σ_j
    return 0.5 + torch.sigmoid(diff).sum(dim=-1)


def soft_sort(x: torch.Tensor, temperature: float = 0.1, descending: bool = False) -> torch.Tensor:
    """NeuralSort with a smooth |·|: the values of the last dim sorted, relaxed with temperature τ."""
    t = _pos("temperature", temperature)
    n = x.shape[-1]
    a = smooth_abs(x.unsqueeze(-1) - x.unsqueeze(-2), eps=t)  # (..., n, n)
    b = a.sum(dim=-1)  # (..., n): A 1
    k = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    scaling = (n + 1 - 2 * k)  # (n,)
    logits = (scaling.unsqueeze(-1) * x.unsqueeze(-2) - b.unsqueeze(-2)) / t  # (..., n_rows, n)
    p_hat = torch.softmax(logits, dim=-1)
    out = (p_hat * x.unsqueeze(-2)).sum(dim=-1)  # descending order
    return out if descending else out.flip(-1)


# --------------------------------------------------------------------------- surrogates
IndicatorFn = Callable[..., torch.Tensor]


class Surrogate(Indicator):
    """A C² surrogate bound to the original indicator it replaces — itself an :class:`Indicator`.

    Calling it evaluates the smooth version, so it is attributed like any indicator; the smooth
    version's declarations carry over (``pooled`` sufficient statistics, ``uses_context``, and a
    closed form when it has one), so wrapping never costs a fast path. ``.original`` keeps the exact
    indicator for reporting, and :meth:`gap` measures the difference.

    Args:
        original: the exact indicator ``f(z[..., N, D]) -> [...]`` (may be non-smooth).
        smooth: its C² surrogate with the same signature (a callable or an :class:`Indicator`).
        name: a label (e.g. ``"top10_share~τ=0.05"``).

    Example:
        >>> import torch
        >>> peak = Surrogate(lambda z: z[..., 0].amax(-1),
        ...                  lambda z: smooth_max(z[..., 0], temperature=0.5), "max")
        >>> round(float(peak(torch.tensor([[1.0], [3.0]], dtype=torch.float64))), 4)  # just above the max, 3
        3.0091
    """

    def __init__(self, original: IndicatorFn, smooth: IndicatorFn, name: str) -> None:
        if not (callable(original) and callable(smooth)):
            raise IndicatorError(
                f"Surrogate needs callables (original, smooth); got {original!r}, {smooth!r}"
            )
        self.original = original
        self.smooth = smooth
        self.name = str(name)
        self._smooth = as_indicator(smooth)
        self._original = as_indicator(original)
        self.pooled = self._smooth.pooled
        self.uses_context = self._smooth.uses_context or self._original.uses_context
        self.has_closed_form = self._smooth.has_closed_form
        # a surrogate of the user's own functions is user code (copies, and its pooled form and closed form are
        # checked against f), though the class is aumann's; aumann's own surrogates (max_surrogate, ...) are not
        self.calls_user_code = not (_aumann_code(original) and _aumann_code(smooth))

    @property
    def accepts_alive(self) -> bool:
        """Alive-aware when its smooth version is (the original is then handed the same mask in :meth:`gap`)."""
        return self._smooth.accepts_alive

    def forward(self, z: torch.Tensor, context: Mapping[str, torch.Tensor] | None = None,
                alive: torch.Tensor | None = None) -> torch.Tensor:
        return self._smooth(z, context, alive)

    def closed_form(self, values: np.ndarray, *, per_feature: bool = False) -> tuple[np.ndarray, np.ndarray,
                                                                                      np.ndarray]:
        return self._smooth.closed_form(values, per_feature=per_feature)

    def gap(self, z: torch.Tensor, context: Mapping[str, torch.Tensor] | None = None,
            alive: torch.Tensor | None = None) -> torch.Tensor:
        """|f_smooth(z) − f_orig(z)| (batched; ``alive``: the living mask, handed to whichever is alive-aware)."""
        with torch.no_grad():
            return (self._smooth(z, context, alive) - self._original(z, context, alive)).abs()

    def __repr__(self) -> str:
        return f"Surrogate({self.name!r})"


def _aumann_code(c: Any) -> bool:
    """Whether ``c`` (an indicator or a function) is aumann's own code: a built-in indicator, or a function
    defined in an aumann module (the closures of :func:`max_surrogate` and the like)."""
    if isinstance(c, Indicator):
        return aumanns_own(c)
    return str(getattr(c, "__module__", None) or "").startswith("aumann.")


def smooth_indicator(original: IndicatorFn, smooth: IndicatorFn, name: str | None = None) -> Surrogate:
    """Bind a smooth indicator to the original it replaces (see :class:`Surrogate`)."""
    return Surrogate(original, smooth, name or getattr(smooth, "__name__", "surrogate"))


def _feature(z: torch.Tensor, feature: int, alive: Any) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
    x = z[..., feature]
    mask, n = living(x, alive)
    return x, mask, n


def _fill(x: torch.Tensor, mask: torch.Tensor | None, value: float) -> torch.Tensor:
    return x if mask is None else torch.where(mask, x, torch.full((), value, dtype=x.dtype, device=x.device))


def max_surrogate(feature: int = 0, temperature: float = 0.05) -> Surrogate:
    """max_i z_{i,feature} and its logsumexp surrogate (gap ≤ τ · log N); over the living rows."""
    feature = as_int(feature, "feature", error=IndicatorError)
    _pos("temperature", temperature)

    def orig(z: torch.Tensor, alive: Any = None) -> torch.Tensor:
        x, mask, _ = _feature(z, feature, alive)
        return _fill(x, mask, -math.inf).amax(-1)

    def smooth(z: torch.Tensor, alive: Any = None) -> torch.Tensor:
        x, mask, _ = _feature(z, feature, alive)
        return smooth_max(_fill(x, mask, -math.inf), temperature=temperature)

    return Surrogate(orig, smooth, f"max[{feature}]~τ={temperature:g}")


def fraction_above(threshold: float, feature: int = 0, temperature: float = 0.05) -> Surrogate:
    """The share of agents with z_{i,feature} > c, and its sigmoid surrogate; over the living rows."""
    threshold = as_float(threshold, "threshold", error=IndicatorError)
    feature = as_int(feature, "feature", error=IndicatorError)
    _pos("temperature", temperature)

    def share(z: torch.Tensor, step: Callable[[torch.Tensor], torch.Tensor], alive: Any) -> torch.Tensor:
        x, mask, n = _feature(z, feature, alive)
        s = step(x)
        return s.mean(-1) if mask is None else _fill(s, mask, 0.0).sum(-1) / n

    return Surrogate(lambda z, alive=None: share(z, lambda x: (x > threshold).to(x.dtype), alive),
                     lambda z, alive=None: share(z, lambda x: smooth_step(x - threshold, temperature), alive),
                     f"share>{threshold:g}[{feature}]~τ={temperature:g}")


def top_k_share(k: int, feature: int = 0, temperature: float = 0.05) -> Surrogate:
    """The share of the total held by the k largest values (e.g. top-10% wealth), via soft_sort; over the
    living rows (dead rows count as 0: never among the top k of a non-negative feature).

    The feature is assumed non-negative with a positive total.
    """
    k = as_int(k, "k", minimum=1, error=IndicatorError)
    feature = as_int(feature, "feature", error=IndicatorError)

    def orig(z: torch.Tensor, alive: Any = None) -> torch.Tensor:
        # Σ_i w_i x_i / Σ x with w held constant: 1 above the k-th largest value, and the free slots shared
        # equally among values tied with it (the symmetric subgradient: a tie's sorted position decides nothing)
        x, mask, _ = _feature(z, feature, alive)
        x = _fill(x, mask, 0.0)
        xd = x.detach()
        kth = torch.sort(xd, dim=-1, descending=True).values[..., min(k, x.shape[-1]) - 1:][..., :1]
        above, tied = (xd > kth), (xd == kth)
        if mask is not None:
            above, tied = above & mask, tied & mask
        free = (k - above.sum(-1, keepdim=True)).clamp_min(0).to(x.dtype)
        w = above.to(x.dtype) + tied.to(x.dtype) * (free / tied.sum(-1, keepdim=True).clamp_min(1)).clamp_max(1.0)
        return (w * x).sum(-1) / x.sum(-1)

    def smooth(z: torch.Tensor, alive: Any = None) -> torch.Tensor:
        x, mask, _ = _feature(z, feature, alive)
        x = _fill(x, mask, 0.0)
        return soft_sort(x, temperature, descending=True)[..., :k].sum(-1) / x.sum(-1)

    return Surrogate(orig, smooth, f"top{k}_share[{feature}]~τ={temperature:g}")


def gini_surrogate(feature: int = 0, eps: float = 1e-3) -> Surrogate:
    """The Gini coefficient Σ_ij |x_i − x_j| / (2 n² mean) over the living rows (n = n_t), and its smooth_abs
    surrogate. Undefined (0/0) where the living mean is 0 — e.g. at the zero baseline; see
    :class:`~aumann.attribution.indicators.GiniCoefficient` for the sort-based exact version."""
    feature = as_int(feature, "feature", error=IndicatorError)
    _pos("eps", eps)

    def gini(z: torch.Tensor, absf: Callable[[torch.Tensor], torch.Tensor], alive: Any,
             diagonal: float = 0.0) -> torch.Tensor:
        x, mask, n = _feature(z, feature, alive)
        pair = absf(x.unsqueeze(-1) - x.unsqueeze(-2))
        if mask is not None:
            pair = torch.where(mask.unsqueeze(-1) & mask.unsqueeze(-2), pair, torch.zeros((), dtype=pair.dtype))
            x = _fill(x, mask, 0.0)
        total = x.sum(-1)
        # remove the diagonal's n·ε (smooth version) so that the surrogate is exact on an equal distribution
        return (pair.sum((-1, -2)) - n * diagonal) / (2 * n * total)

    return Surrogate(lambda z, alive=None: gini(z, torch.abs, alive),
                     lambda z, alive=None: gini(z, lambda d: smooth_abs(d, eps), alive, eps),
                     f"gini[{feature}]~ε={eps:g}")


# --------------------------------------------------------------------------- gap report
@dataclass(frozen=True)
class GapReport:
    """How far a surrogate is from its original on a recorded run.

    Attributes:
        name: the surrogate's name.
        f_original, f_smooth: (T,) indicator values per step.
        abs_gap: (T,) |f_smooth − f_orig| per step; ``max_gap`` / ``mean_gap`` over steps.
        kendall_tau, top_k_jaccard: (T,) per-step rank agreement of the two attributions (φ over
            agents), or ``None`` when not computed (no engine, or the original is not attributable).
        rank_note: why rank agreement is missing, if it is.
    """

    name: str
    f_original: np.ndarray
    f_smooth: np.ndarray
    abs_gap: np.ndarray
    max_gap: float
    mean_gap: float
    kendall_tau: np.ndarray | None = None
    top_k_jaccard: np.ndarray | None = None
    k: int | None = None
    rank_note: str | None = field(default=None)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "max_gap": self.max_gap, "mean_gap": self.mean_gap}
        if self.kendall_tau is not None:
            tau = self.kendall_tau[~np.isnan(self.kendall_tau)]  # τ is undefined on a step whose φ all tie
            out["mean_kendall_tau"] = float(tau.mean()) if tau.size else float("nan")
            jac = self.top_k_jaccard[~np.isnan(self.top_k_jaccard)]  # so is the top-k Jaccard (no top k)
            out["mean_top_k_jaccard"] = float(jac.mean()) if jac.size else float("nan")
            out["k"] = self.k
        if self.rank_note:
            out["rank_note"] = self.rank_note
        return out


def gap_report(
    surrogate: Surrogate,
    data: Any,
    *,
    ranks: bool = False,
    k: int | None = None,
    attribute_kwargs: Mapping[str, Any] | None = None,
) -> GapReport:
    """Per-step gap |f_smooth − f_orig| on a Panel or a (T, N, D) array, and optionally rank agreement.

    Args:
        surrogate: a :class:`Surrogate`.
        data: a :class:`~aumann.attribution.Panel` (its context is passed to the indicators) or an
            array of shape (T, N, D).
        ranks: also attribute both with :func:`aumann.attribution.attribute` and compare the
            per-step agent rankings (needs the engine and a Panel). If the original cannot be
            attributed (e.g. no gradient), ``rank_note`` says why and the rank fields are ``None``.
        k: top-k size for the Jaccard index (default ⌈N/10⌉).
        attribute_kwargs: extra arguments for ``attribute`` (e.g. ``method=...``).
    """
    z = np.asarray(getattr(data, "values", data), dtype=np.float64)
    if z.ndim != 3 or 0 in z.shape:
        raise IndicatorError(f"gap_report needs (T, N, D) values with at least one step, agent and feature; got "
                             f"shape {tuple(z.shape)}")
    if k is not None:  # k=0 was read as "not given" (k or the default) and reported as k=⌈N/10⌉
        k = as_int(k, "k (top-k Jaccard size)", minimum=1, error=IndicatorError)
    state = EvalContext(z, getattr(data, "context", None) or None, getattr(data, "alive", None), batched=True)
    fo = evaluate(surrogate.original, state)
    fs = evaluate(surrogate.smooth, state)
    gap = np.abs(fs - fo)
    kt = jac = None
    note = None
    kk = None
    if ranks:
        if not hasattr(data, "values") or not hasattr(data, "agent_ids"):
            raise IndicatorError("rank agreement needs a Panel (attribution works on panels)")
        from aumann.attribution.engine import attribute

        kw = dict(attribute_kwargs or {})
        phi_s = attribute(surrogate.smooth, data, **kw).phi
        try:
            with warnings.catch_warnings():  # a non-smooth original misses efficiency by design: only its ranks count
                warnings.simplefilter("ignore", EfficiencyGapWarning)
                phi_o = attribute(surrogate.original, data, **kw).phi
        except Exception as exc:  # the original may be non-differentiable or otherwise unattributable
            note = f"original not attributable: {type(exc).__name__}: {exc}"
        else:
            kk = k if k is not None else max(1, math.ceil(phi_s.shape[1] / 10))
            kt = np.array([kendall_tau(phi_s[t], phi_o[t]) for t in range(phi_s.shape[0])])
            jac = np.array([topk_jaccard(phi_s[t], phi_o[t], kk, by="abs") for t in range(phi_s.shape[0])])
    return GapReport(surrogate.name, fo, fs, gap, float(gap.max()), float(gap.mean()), kt, jac, kk, note)


__all__ = [
    "GapReport",
    "Surrogate",
    "fraction_above",
    "gap_report",
    "gini_surrogate",
    "max_surrogate",
    "smooth_abs",
    "smooth_indicator",
    "smooth_max",
    "smooth_min",
    "smooth_step",
    "soft_rank",
    "soft_sort",
    "softplus",
    "top_k_share",
]
