"""Sampled Shapley with the Aumann–Shapley value as a control variate (method ``sampled_shapley_cv``).

Plain permutation sampling averages the marginal contributions Δ_i(π) = v(S ∪ i) − v(S) of agent i
(S: its predecessors in π, k = |S| its position). Here every marginal comes with a *control*: the
first-order model g_i(k) = ∂V/∂λ_i((k + ½)/N · 1) of a smooth extension V of the game, whose mean
over uniform positions μ_i = E_π[g_i] is known exactly (the N-point midpoint rule of the Aumann–Shapley
integral; derivation and the extension used per game kind: :mod:`aumann.attribution.controls`). Then

    φ̂_i = mean_π (Δ_i(π) − β_i (g_i(π) − μ_i))

is unbiased for the Shapley value φ_i for any β_i that does not depend on the permutation it is
applied to, and with the best β_i = Cov(Δ_i, g_i)/Var(g_i) its variance per permutation is
Var(Δ_i)(1 − ρ_i²), ρ_i the correlation of marginal and model. Where the game is smooth and N is
large, a coalition of size k is close to the diagonal point k/N and ρ_i² → 1 (×10²–10⁵ fewer
permutations for the same standard error); at kinks and thresholds the model misses the jump and
ρ_i² is small.

**β: estimated per agent, predictably.** The control's quality differs between agents (an agent near a
threshold, an agent whose term is nearly constant), so each agent gets its own β_i (an O(N) set of
running sums; a pooled β cannot adapt). β must not depend on the unit it corrects, or the estimate is
biased (O(1/m)); so the units are processed in rounds, and the β_i of a round is the least-squares
slope over all *earlier* units, clipped to [−2, 2] (the model's natural coefficient is 1). The first
round (the *pilot*, ``pilot`` units, 8–16 by default) is cross-fitted: its first half is held back, the
second half is corrected with the first half's slopes, then the first half with the second's. Each
slope falls back to β_i = 0 (plain sampling for that agent) unless the sample correlation is
significant (ρ̂_i² > 4/(n + 2) on n earlier units, ≈ the 5 % level), and is switched off for an agent
whose residuals so far, corrected out of sample, varied clearly more than its plain marginals — so a
weak control costs little variance: where it is useless the estimate *is* plain sampling on the same
permutations (measured where it is weak: docs/baselines.md). ``beta=<float>`` fixes one β for
every agent (``beta=1`` is the Taylor control of ControlSHAP; ``beta=0`` reproduces plain sampling).

**Efficiency projection.** Every permutation telescopes (Σ_i Δ_i = Δv), but the corrections do not:
the per-unit residuals r_i = Δ_i − β_i (g_i − μ_i) sum to Δv − C with C = Σ_i β_i (g_i − μ_i), whose
mean is exactly 0. The projection is one more control variate, on C: φ̃_i = r̄_i − w_i C̄ with
w_i = Cov(r_i, C)/Var(C) (least squares over the units). The w_i sum to −1 by construction
(Σ_i r_i = Δv − C), so Σ_i φ̃_i = Δv exactly — the efficiency gap is at the rounding floor, as for
plain sampling — and, being a regression on a mean-zero quantity, the projection can only lower the
variance. Its standard error is the regression's: se_i² = s_i²/(m)·(1 + m C̄²/Σ(C − C̄)²), s_i² the
residual variance of r_i on C (m − 2 degrees of freedom), so it reports what the projection removed
and the (small) price of estimating w. The projection's w is estimated from the same units (a bias
of order 1/m only where E[r_i | C] is not linear in C; measured in the tests as z-score means ≈ 0).

The projection is skipped where it would extrapolate: C's exact mean is 0, and where the units' C̄ lies more than
``MAX_PROJECTION_T`` (10) of its standard errors from 0 they never straddled it, so the regression would carry a
fit, exact on the one unit that differed, far out to C = 0 (a steep sigmoid at N = 8, m = 8: errors of 274 on
agents worth 0.16, with standard errors of 0.004). The estimate is then plain sampling's on the same units
(efficient, its standard error; ``provenance["per_step"]["projection_extrapolated"]``).

**A floor at kinks.** On a piecewise-linear indicator the control equals the marginal on every unit that stays
on one side of the kink, so a few units can leave an agent's residuals constant to rounding (standard error
1e-16) while the unseen units that cross the kink carry the error. Per agent, the units on which the control
missed the marginal (|Δ − g| > MISS_RTOL (|Δ| + |g| + |E g|)) are counted; below MIN_MISSES of them the
agent's standard error is at least plain sampling's on the same units, or the control's exact spread over
positions (:meth:`~aumann.attribution.controls.DiagonalControl.variance`) where larger (docs/baselines.md;
``provenance["per_step"]["stderr_floored"]``). The estimate is unchanged; smooth indicators miss on every unit.
An agent whose sampled marginals did not vary at all while another's did also gets plain sampling's rule-of-three
floor (:mod:`aumann.attribution.unseen`, ``provenance["per_step"]["stderr_unseen"]``): with β = 0 or a control
that is flat where the unit lands, its residuals are as constant as its marginals.

**Units, antithetic pairs, stopping.** As for :class:`~aumann.attribution.sampled.SampledShapley`:
a unit is a permutation, or with ``antithetic=True`` the mean of a permutation and its reverse
(controls averaged the same way: positions k and N − 1 − k, i.e. τ and 1 − τ); standard errors are
per agent; the stopping rules are the count, ``max_evals`` (evaluations of v, m(N − 1) + 2 per step)
and ``stderr_tol`` checked after every round (from :data:`~aumann.attribution.distributed.MIN_UNITS_TO_STOP`
units on, whatever the pilot) (rounds of ``round_size`` permutations with a rule,
otherwise doubling after the pilot so that β is refitted as data arrive). The control's own cost —
one gradient of ρ per position on pooled games (O(N·P)), closed forms on quadratic and network games,
one forward and backward pass of f per node otherwise — is reported in ``provenance["per_step"]``
(``control_gradient_evals``), not in ``n_evals``.

An indicator with no gradient at all (numpy inside, ``argmax``, ``.detach()``, an integer result) has no control:
the estimate is then plain sampled Shapley on the same permutations (the numbers of ``beta=0``), with the reason in
``provenance["per_step"]["control_fallback"]`` (``control`` ``"none"``) and an :class:`~aumann.errors.AumannWarning`;
a :class:`~aumann.attribution.controls.ParticipationGame` whose declared extension has no gradient is refused
(:class:`~aumann.errors.GameError`: the extension is there only to be differentiated).

Needs at least 4 units (permutations, or antithetic pairs). Games: every masking game (pooled fast
path, generic coalitions, agent-wise and quadratic indicators, network indicators, alive-aware
indicators) and any :class:`~aumann.attribution.controls.ParticipationGame` (a game with a
differentiable extension, e.g. the re-simulation game through a scenario's step map).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from aumann.attribution.controls import DiagonalControl, describe_control, diagonal_control, kernel_control
from aumann.attribution.device import CPU
from aumann.attribution.distributed import MIN_UNITS_TO_STOP
from aumann.attribution.games import CoalitionGame, MaskedIndicatorGame
from aumann.attribution.pooled import DEFAULT_MEMORY_BUDGET, GameKernel
from aumann.attribution.problem import Problem
from aumann.attribution.result import Attribution
from aumann.attribution.sampled import SampledShapley, _Permutations
from aumann.attribution.semivalues import CoalitionMethod, Estimate
from aumann.attribution.unseen import floored
from aumann.checks import as_float, as_int, user_code
from aumann.errors import GameError, IndicatorError, MethodError
from aumann.seeding import RNGLike

F64 = torch.float64
MAX_SLOPE = 2.0  # |β| beyond this is noise from units that barely moved the control (see _slopes)
MAX_BETA = 1e6  # the largest fixed β= accepted
MIN_UNITS = 4  # two cross-fitted halves of two units in the pilot, and the projection's regression
#: the efficiency projection is skipped (plain sampling on the same units) where the units' mean of C = Σ β_i c_i, whose
#: exact mean is 0, lies more than this many of its standard errors from 0 (see _Accumulator.result). Over 200 seeds
#: each at N = 8, m = 8, 16, 64: heat, var, abs and a hinge stay below |t| = 6.5; a steep sigmoid reaches 550 at
#: m = 8 and 12 at m = 16, a product of all agents 25 at m = 8; at m = 64 nothing passes 3.5
MAX_PROJECTION_T = 10.0
#: units on which the control must have missed an agent's marginal before the residuals' spread is its standard
#: error: below, the plain estimator's standard error on the same units is its floor (see _Accumulator.result)
MIN_MISSES = 5
#: a unit's marginal Δ and control g "agree" where |Δ − g| ≤ MISS_RTOL (|Δ| + |g| + |E g|): rounding, not a miss
MISS_RTOL = 1e-9


def _significant(rho2: torch.Tensor, n: int | torch.Tensor) -> torch.Tensor:
    """Whether a sample correlation ρ̂² on n units is significant at about the 5 % level. Never on fewer than
    three units: two points always lie on a line (ρ̂² = 1 = 4/(2 + 2)), so the test was decided by rounding and
    passed for about a third of the agents of a 4-unit pilot, whose 2-unit slopes then cost variance (N = 8,
    m = 4: 3.5× plain sampling's mean squared error on ``var``)."""
    return (rho2 > 4.0 / (n + 2.0)) & (torch.as_tensor(n) >= 3)


def _slopes(su: torch.Tensor, sc: torch.Tensor, suu: torch.Tensor, scc: torch.Tensor, suc: torch.Tensor,
            n: int | torch.Tensor) -> torch.Tensor:
    """Least-squares slopes of u on c from sums over n units, clipped to [−2, 2], and 0 where the
    correlation is not significant. The control is a first-order model of the marginal, so its natural
    coefficient is 1; a slope beyond ±2 says the units seen so far barely moved c (a few of them, all on
    the flat side of a threshold), not that c should be amplified — applied to a unit that lands on the
    steep side, such a slope costs far more than it can save (measured: a steep sigmoid at N = 2000
    goes from ×0.1 to ×0.5 at the 1 % quantile of agents, N = 8 thresholds from z-scores of 30 to 8)."""
    cuc = suc - su * sc / n
    ccc = scc - sc * sc / n
    cuu = suu - su * su / n
    ok = (ccc > 0) & (cuu > 0)
    safe_c = torch.where(ok, ccc, torch.ones_like(ccc))
    safe_u = torch.where(ok, cuu, torch.ones_like(cuu))
    beta = torch.clamp(cuc / safe_c, -MAX_SLOPE, MAX_SLOPE)
    rho2 = cuc * cuc / (safe_c * safe_u)
    return torch.where(ok & _significant(rho2, n), beta, torch.zeros_like(beta))


def _running(total: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``total`` (n,) plus the (c, n) ``rows`` added one after another in unit order, so the sums do not depend
    on how the units were chunked (``memory_budget``). (A row at a time: a scan along the outer axis makes the
    same additions ~7× slower.)"""
    out = total.clone()
    for row in rows:
        out += row
    return out


#: a residual variance below this share of the plain marginals' is rounding (sd ratio 1e-12): the ratio is unbounded
UNBOUNDED_SHARE = 1e-24


def _variance_reduction(plain_var: torch.Tensor, resid_var: torch.Tensor) -> dict[str, Any]:
    """``variance_reduction``: the median over agents (those whose marginals varied) of Var(Δ_i) / Var(residual_i)
    per unit, and ``variance_reduction_note``. Where the residual variance is 0 to rounding for the median agent
    (N = 2, where the efficiency projection is exact; a control that is the marginal on every unit) the ratio is
    unbounded: ``variance_reduction`` is then ``None`` (not inf, which JSON cannot hold and wrote as a bare null;
    nor ~1e306 from dividing by the smallest float) and the note says why; otherwise the note is ``None``."""
    has = plain_var > 0
    p, r = plain_var[has], resid_var[has]
    ratio = torch.where(r > UNBOUNDED_SHARE * p, p / torch.clamp(r, min=torch.finfo(F64).tiny),
                        torch.full_like(p, math.inf)).cpu().numpy()
    if ratio.size == 0:
        return {"variance_reduction": 1.0, "variance_reduction_note": None}
    med = float(np.median(ratio))
    if math.isfinite(med):
        return {"variance_reduction": med, "variance_reduction_note": None}
    k = int(np.isinf(ratio).sum())
    return {"variance_reduction": None,
            "variance_reduction_note": f"unbounded: the residual variance is 0 to rounding for {k} of {ratio.size} "
                                       "agents (the control and the efficiency projection explain every sampled "
                                       "marginal; at N = 2 the projection is exact)"}


class _Accumulator:
    """Running sums of one game's units: raw (for the slopes β) and residual (for the estimate and projection),
    each taken unit by unit in draw order."""

    def __init__(self, n: int, device: torch.device, beta: float | None, mean: torch.Tensor | None = None,
                 spread: Callable[[], torch.Tensor | None] | None = None) -> None:
        z = torch.zeros(n, dtype=F64, device=device)
        self.fixed = beta
        self.count = 0
        # the control's exact mean E g (to tell a unit's g from its centred control), and per agent the units on
        # which the control missed the marginal (|Δ − g| beyond rounding)
        self.mean = z if mean is None else mean.to(device=device, dtype=F64)
        self.misses = torch.zeros(n, dtype=torch.int64, device=device)
        self.used = torch.zeros(n, dtype=torch.bool, device=device)  # agents whose units were corrected (β ≠ 0)
        self._saturated = False
        self._spread = spread  # the exact variance of a unit's control (DiagonalControl.variance), asked for once
        self._spread_value: torch.Tensor | None = None
        self.su, self.sc, self.suu, self.scc, self.suc = (z.clone() for _ in range(5))
        self.sr, self.srr, self.src = (z.clone() for _ in range(3))
        self.s_c = torch.zeros((), dtype=F64, device=device)
        self.s_cc = torch.zeros((), dtype=F64, device=device)
        self.shift_u: torch.Tensor | None = None
        self.shift_r: torch.Tensor | None = None
        self.last_beta = z

    def _raw(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        if self.shift_u is None:
            self.shift_u = u[0].clone()
        d = u - self.shift_u
        self.su = _running(self.su, d)
        self.sc = _running(self.sc, c)
        self.suu = _running(self.suu, d * d)
        self.scc = _running(self.scc, c * c)
        self.suc = _running(self.suc, d * c)
        return d

    def _residual(self, r: torch.Tensor, ctot: torch.Tensor) -> None:
        if self.shift_r is None:
            self.shift_r = r[0].clone()
        d = r - self.shift_r
        self.sr = _running(self.sr, d)
        self.srr = _running(self.srr, d * d)
        self.src = _running(self.src, ctot[:, None] * d)
        self.s_c = _running(self.s_c[None], ctot[:, None])[0]
        self.s_cc = _running(self.s_cc[None], (ctot * ctot)[:, None])[0]
        self.count += r.shape[0]

    def slopes_of(self, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """(n,) slopes of stored units alone (the fixed β, if one was given)."""
        if self.fixed is not None:
            return torch.full_like(u[0], self.fixed)
        d = u - u[0]
        return _slopes(d.sum(0), c.sum(0), (d * d).sum(0), (c * c).sum(0), (d * c).sum(0), u.shape[0])

    def beta(self, *, check: bool = True) -> torch.Tensor:
        """(n,) slopes from every unit so far (the fixed β, if one was given), 0 for an agent whose
        residuals so far — each corrected with the slope it was actually given, i.e. out of sample —
        vary clearly more than its plain marginals on the same units (beyond 1 + 2√(2/(n − 1)), about
        two standard errors of a variance ratio): a control that did not pay off, e.g. a narrow spike
        at a threshold that the marginals' jump does not follow."""
        if self.fixed is not None:
            return torch.full_like(self.su, self.fixed)
        n = self.count
        beta = _slopes(self.su, self.sc, self.suu, self.scc, self.suc, n)
        if not check:
            return beta
        band = 1.0 + 2.0 * (2.0 / max(1, n - 1)) ** 0.5
        harmed = (self.srr - self.sr * self.sr / n) > band * (self.suu - self.su * self.su / n)
        return torch.where(harmed, torch.zeros_like(beta), beta)

    def add(self, u: torch.Tensor, c: torch.Tensor, beta: torch.Tensor) -> None:
        if not self._saturated:  # (counted only until every agent has MIN_MISSES: smooth games, the first units)
            g = c + self.mean
            self.misses += ((u - g).abs() > MISS_RTOL * (u.abs() + g.abs() + self.mean.abs())).sum(0)
            self._saturated = bool((self.misses >= MIN_MISSES).all())
        self.used |= beta != 0
        self._raw(u, c)
        # C = Σ_i β_i c_i of each unit, summed over the agents in order (a scan): a matrix-vector product
        # rounds a row differently with the number of rows in the chunk
        self._residual(u - beta * c, torch.cumsum(c * beta, dim=1)[:, -1])
        self.last_beta = beta

    def result(self, delta_v: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """(φ̃, standard errors, diagnostics) after the efficiency projection."""
        n = self.count
        assert self.shift_r is not None and n >= 2
        rbar = self.shift_r + self.sr / n
        cbar = self.s_c / n
        vrr = torch.clamp(self.srr - self.sr * self.sr / n, min=0.0)
        vcc = self.s_cc - self.s_c * self.s_c / n
        # the projection extrapolates each residual's regression on C to C's exact mean 0: where the units' C̄ lies
        # more than MAX_PROJECTION_T of its own standard errors from 0, they never straddled that mean (a steep
        # sigmoid at m = 8: C moved by 1e-10 around −8e-8, and the fit, exact on the one unit that differed, put
        # 274 on an agent worth 0.16 with a standard error of 0.004). Then the control explained nothing the units
        # can check: the estimate is plain sampling's on the same units (efficient, with its standard error)
        extrapolated = bool(vcc > 0) and n >= 3 and float(n * (n - 1) * cbar * cbar) > MAX_PROJECTION_T**2 * float(vcc)
        projected = bool(vcc > 0) and n >= 3 and not extrapolated
        if extrapolated:
            assert self.shift_u is not None
            phi = self.shift_u + self.su / n
            resid_var = torch.clamp(self.suu - self.su * self.su / n, min=0.0) / (n - 1)
            se = torch.sqrt(resid_var / n)
        elif projected:
            vrc = self.src - self.sr * self.s_c / n
            w = vrc / vcc
            phi = rbar - w * cbar
            res = torch.clamp(vrr - vrc * vrc / vcc, min=0.0)
            se = torch.sqrt(res / (n - 2) * (1.0 / n + cbar * cbar / vcc))
            resid_var = res / (n - 2)
        else:
            phi = rbar
            se = torch.sqrt(vrr / (n - 1) / n)
            resid_var = vrr / (n - 1)
        phi_np = phi.cpu().numpy()
        se_np = se.cpu().numpy()
        gap = delta_v - float(phi_np.sum())  # rounding only (the projection is efficient in exact arithmetic)
        if gap and (projected or extrapolated):
            weight = se_np**2
            total = float(weight.sum())
            phi_np = phi_np + gap * (weight / total if total > 0 else np.full(phi_np.size, 1.0 / phi_np.size))
        plain_var = torch.clamp(self.suu - self.su * self.su / n, min=0.0) / (n - 1)
        # a kinked indicator (abs, a hinge, max): on most units the first-order control *is* the marginal (both on
        # one side of the kink), so the residuals of a handful of units can be constant to rounding while the units
        # that cross the kink, unseen so far, carry the error (hinge, N = 8, m = 16: error 0.1 with a standard
        # error of 1e-16). Until the control has missed an agent's marginal on MIN_MISSES units, the residuals say
        # nothing about how far it misses: that agent's standard error is at least plain sampling's on the same
        # units (its estimate is unchanged)
        # (an agent never corrected has plain sampling's own error, floored only where its sampled marginals were
        # all equal, to rounding, although the control varies over positions: its units all fell on one side)
        ubar = (self.shift_u + self.su / n).abs() if self.shift_u is not None else torch.zeros_like(self.su)
        flat = plain_var <= (MISS_RTOL * (ubar + self.mean.abs())) ** 2
        thin = (self.misses < MIN_MISSES) & (self.used | flat)
        raised = 0
        if self.fixed != 0.0 and bool(thin.any()):
            floor = torch.sqrt(torch.maximum(plain_var, self.control_spread()) / n).cpu().numpy()
            up = thin.cpu().numpy() & (floor > se_np)
            se_np = np.where(up, floor, se_np)
            raised = int(up.sum())
        # an agent whose sampled marginals did not vary at all while another's did (a unit that matters only in
        # orderings the draws rarely produce): the rule-of-three floor of plain sampling (aumann.attribution.unseen)
        mean_u = (self.shift_u + self.su / n).cpu().numpy() if self.shift_u is not None else np.zeros(se_np.shape)
        se_np, unseen = floored(mean_u, torch.sqrt(plain_var).cpu().numpy(), se_np, n)
        beta = self.last_beta.cpu().numpy()
        info = {"beta_nonzero": float(np.mean(beta != 0)) if beta.size else 0.0,
                "beta_median": float(np.median(beta)) if beta.size else 0.0,
                **_variance_reduction(plain_var, resid_var),
                "projected": projected,
                "projection_extrapolated": extrapolated,
                "stderr_floored": raised,
                "stderr_unseen": unseen}
        return phi_np, se_np, info

    def control_spread(self) -> torch.Tensor:
        """The exact variance of each agent's control over permutations (0 where the control does not know it): a
        model of the marginals' variance that, unlike theirs, does not depend on which units were drawn. With a
        kink near either end of the diagonal, all of a few units can land on one side, where the marginals are
        equal too (hinge, N = 10, m = 16: plain sampling's own standard error was 0 for agents off by 0.03)."""
        if self._spread_value is None:
            got = self._spread() if self._spread is not None else None
            self._spread_value = torch.zeros_like(self.su) if got is None else got.to(self.su)
        return self._spread_value

    def max_stderr(self, delta_v: float) -> float:
        return float(np.max(self.result(delta_v)[1]))


def _warn_no_control(reason: str) -> None:
    import warnings

    from aumann.errors import AumannWarning

    warnings.warn(f"sampled_shapley_cv: {reason}", AumannWarning, stacklevel=6)


class SampledShapleyCV(SampledShapley):
    """Permutation-sampling Shapley values with the Aumann–Shapley control variate (module docstring).

    Args:
        permutations: m, permutations per step (a forward/reversed pair counts as two); at least 4 units.
        antithetic: pair every permutation with its reverse (m must be even, ≥ 8); units are pair means.
        beta: ``"auto"`` (per-agent slopes estimated from earlier units, 0 where not significant) or a
            number in [−10⁶, 10⁶] used for every agent (``1.0``: the first-order Taylor control; ``0.0``: plain
            sampling).
        pilot: units of the first round, cross-fitted in two halves (default 16, 8 beyond 2·10⁶ players;
            half of them held in memory).
        nodes: diagonal points of a gradient-table control (generic and user games; default: every
            position while the (nodes × N) table fits 64 MiB, else fewer nodes with interpolation). Neither
            default depends on ``memory_budget`` or on the memory at hand: same seed, same numbers.
        max_evals, stderr_tol, round_size, fast, memory_budget, common_permutations, device: as for
            :class:`~aumann.attribution.SampledShapley` (``common_permutations`` runs the steps one after
            another on the shared stream; ``round_size`` also sets how often β is refitted).

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, SampledShapley, SampledShapleyCV
        >>> z = np.abs(np.random.default_rng(0).normal(size=(1, 2000, 3)))
        >>> cv = attribute("var", Panel(z), method=SampledShapleyCV(permutations=32), rng=1)
        >>> plain = attribute("var", Panel(z), method=SampledShapley(permutations=32), rng=1)
        >>> bool(np.median(plain.stderr / cv.stderr) > 10), cv.max_efficiency_gap < 1e-12
        (True, True)
    """

    name: ClassVar[str] = "sampled_shapley_cv"
    satisfies_efficiency: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def __init__(self, permutations: int = 1000, *, antithetic: bool = False, beta: str | float = "auto",
                 pilot: int | None = None, nodes: int | None = None, max_evals: int | None = None,
                 stderr_tol: float | None = None, round_size: int | None = None, fast: bool | None = None,
                 memory_budget: int | None = None, common_permutations: bool = False,
                 device: str | torch.device | None = None) -> None:
        super().__init__(permutations, antithetic=antithetic, max_evals=max_evals, stderr_tol=stderr_tol,
                         round_size=round_size, fast=fast, memory_budget=memory_budget,
                         common_permutations=common_permutations, device=device)
        per = 2 if self.antithetic else 1
        if self.permutations // per < MIN_UNITS:
            raise MethodError(f"the control-variate estimator needs at least {MIN_UNITS} units (permutations, or "
                              f"antithetic pairs) for its slopes and its efficiency projection; got "
                              f"permutations={self.permutations}{' (antithetic)' if self.antithetic else ''}")
        if isinstance(beta, str):
            if beta != "auto":
                raise MethodError(f"beta must be 'auto' (per-agent slopes) or a number; got {beta!r}")
            self.beta: str | float = "auto"
        else:
            # a slope is a ratio of two of the game's own differences: far beyond ±MAX_BETA it only overflows
            # (β·control of 1e300 read as an indicator's overflow); the auto slopes stay within ±MAX_SLOPE
            self.beta = as_float(beta, "beta (control-variate coefficient)", minimum=-MAX_BETA, maximum=MAX_BETA)
        self.pilot = None if pilot is None else as_int(pilot, "pilot (units of the first round)", minimum=MIN_UNITS)
        self.nodes = None if nodes is None else as_int(nodes, "nodes (diagonal points of the control)", minimum=2)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "control_variate": "aumann-shapley", "beta": self.beta, "pilot": self.pilot,
                "nodes": self.nodes}

    def __repr__(self) -> str:
        return (f"SampledShapleyCV(permutations={self.permutations}, antithetic={self.antithetic}, "
                f"beta={self.beta!r}, max_evals={self.max_evals}, stderr_tol={self.stderr_tol}, "
                f"common_permutations={self.common_permutations})")

    def _budget(self, n: int) -> int:
        m = super()._budget(n)
        per = 2 if self.antithetic else 1
        if m // per < MIN_UNITS:
            raise MethodError(f"max_evals={self.max_evals} buys {m // per} unit(s) of N = {n} agents; the "
                              f"control-variate estimator needs {MIN_UNITS}, i.e. max_evals ≥ "
                              f"{MIN_UNITS * per * (n - 1) + 2}")
        return m

    def _pilot_units(self, n: int) -> int:
        """``pilot``, else 16 units (8 beyond 2·10⁶ players): from the fixed default budget, not from
        ``memory_budget`` or the memory at hand, since the pilot shapes the estimate (the same seed must give
        the same numbers on any machine)."""
        if self.pilot is not None:
            return self.pilot
        return int(min(16, max(8, DEFAULT_MEMORY_BUDGET // (8 * max(1, n)))))

    # ------------------------------------------------------------------ drivers
    def attribute(self, problem: Problem, *, rng: RNGLike = None) -> Attribution:
        # steps one after another (with common_permutations each on a copy of the shared stream)
        return CoalitionMethod.attribute(self, problem, rng=rng)

    def _run(self, game: CoalitionGame, rng: np.random.Generator,
             device: torch.device | None = None) -> tuple[Estimate, float, float]:
        device = CPU if device is None else device
        error = IndicatorError if isinstance(game, MaskedIndicatorGame) else GameError
        budget = self.budget_on(device)
        with user_code(f"{'indicator' if error is IndicatorError else 'game'} {game.name!r}", error=error):
            kernel = game.kernel(self.fast, memory_budget=budget)
            v0, vN = kernel.ends()
            sub, rows = kernel, None
            restrict = getattr(kernel, "restricted", None)
            if restrict is not None:  # null players get 0; only the others are permuted (and controlled)
                s, active = restrict()
                if s.n < kernel.n:
                    sub, rows = s, np.asarray(active)
            if sub.n == 0:
                est = Estimate(np.zeros(0), np.zeros(0), 2, {"permutations": 0, "stopped": "no active player"})
            else:
                t0 = time.perf_counter()
                control = diagonal_control(game, kernel, rows=rows, nodes=self.nodes, memory_budget=budget) \
                    if sub.n > 1 else None
                seconds = time.perf_counter() - t0
                if getattr(control, "reason", None):  # no gradient: plain sampling, and it says so
                    _warn_no_control(control.reason)
                est = self._estimate(sub, control, v0, vN, rng)
                est.info["control_seconds"] = seconds
        if rows is not None:
            phi, se = np.zeros(kernel.n), np.zeros(kernel.n)
            phi[rows], se[rows] = est.phi, est.stderr
            est = Estimate(phi=phi, stderr=se, n_evals=est.n_evals,
                           info={**est.info, "null_players": int(kernel.n - sub.n)})
        est.info["path"] = kernel.kind
        return est, v0, vN

    def estimate(self, kernel: GameKernel, v0: float, vN: float, rng: np.random.Generator) -> Estimate:
        """The estimate on a kernel alone (pooled, quadratic and network kernels determine their control;
        others need the game: use ``attribute`` / ``attribute_game``)."""
        control = kernel_control(kernel) if kernel.n > 1 else None
        if control is None and kernel.n > 1:
            raise MethodError(f"a {type(kernel).__name__} alone does not determine the Aumann–Shapley control; "
                              "call attribute() or attribute_game() so the game's extension is available")
        return self._estimate(kernel, control, v0, vN, rng)

    def _estimate(self, kernel: GameKernel, control: DiagonalControl | None, v0: float, vN: float,
                  rng: np.random.Generator) -> Estimate:
        n = kernel.n
        if n == 1 or control is None:  # a single player gets everything, no sampling needed
            return Estimate(phi=np.array([vN - v0]), stderr=np.zeros(1), n_evals=2,
                            info={"permutations": 0, "stopped": "single player"})
        per = 2 if self.antithetic else 1
        m = self._budget(n)
        total = m // per
        pilot = min(total, self._pilot_units(n))
        fixed_rounds = self.round_size is not None or self.stderr_tol is not None
        round_units = max(2, (self.round_size or 32) // per)
        chunk = max(1, kernel.chunk_permutations() // per)
        dv = vN - v0
        acc = _Accumulator(n, control.device, None if self.beta == "auto" else float(self.beta), control.mean,
                           lambda: control.variance(self.antithetic))
        draws = _Permutations(rng, n, batch=min(chunk, total), limit=total)

        def units(c: int) -> tuple[torch.Tensor, torch.Tensor]:
            perms = draws.take(c)
            fwd, rev = kernel.prefix_marginals_tensor(perms, reverse=self.antithetic)
            fwd = fwd.to(device=control.device, dtype=F64)
            if rev is not None:
                fwd = (fwd + rev.to(device=control.device, dtype=F64)) * 0.5
            return fwd, control.units(perms, reverse=self.antithetic)

        stopped = "permutations"
        try:
            # the pilot, cross-fitted: half A is kept, half B is corrected with A's slopes, then A with B's
            half = max(2, pilot // 2)
            parts = [units(min(chunk, half - s)) for s in range(0, half, chunk)]
            u_a, c_a = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            del parts
            beta_a = acc.slopes_of(u_a, c_a)
            while acc.count < pilot - half:
                u, c = units(min(chunk, pilot - half - acc.count))
                acc.add(u, c, beta_a)
            # B's own slopes, without the out-of-sample check: that check read B's residuals, which were
            # corrected with A's slopes, so it would carry A's data back into A's correction
            acc.add(u_a, c_a, acc.beta(check=False))
            del u_a, c_a
            while True:
                # from MIN_UNITS_TO_STOP units on, as plain sampling: a pilot of 4-8 units can have a residual
                # variance of 0 by chance (N = 2: every unit the same ordering) and would stop at its marginals
                if self.stderr_tol is not None and acc.count >= MIN_UNITS_TO_STOP \
                        and acc.max_stderr(dv) < self.stderr_tol:
                    stopped = "stderr_tol"
                    break
                if acc.count >= total:
                    break
                beta = acc.beta()
                target = min(total, acc.count + (round_units if fixed_rounds else acc.count))
                while acc.count < target:
                    u, c = units(min(chunk, target - acc.count))
                    acc.add(u, c, beta)
        finally:
            draws.close()
        if stopped == "permutations" and m < self.permutations:
            stopped = "max_evals"
        phi, se, diag = acc.result(dv)
        used = acc.count * per
        info = {"permutations": used, "stopped": stopped, "pilot": pilot * per, **describe_control(control), **diag}
        return Estimate(phi=phi, stderr=se, n_evals=used * (n - 1) + 2, info=info)


__all__ = ["SampledShapleyCV"]
