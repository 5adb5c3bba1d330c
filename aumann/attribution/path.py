"""Aumann–Shapley path-integral attribution (integrated gradients with agents as features).

φ_{i,t} = Σ_d (z_{i,t,d} − z⁰_{i,t,d}) ∫₀¹ ∂f/∂z_{i,d}(z⁰_t + τ (z_t − z⁰_t)) dτ        (Eq. phi-it)

It satisfies efficiency (Σ_i φ_{i,t} = f(z_t) − f(z⁰_t)), symmetry, dummy and linearity
(Appendix B). When the indicator declares a zero-baseline closed form (Appendix F) and the baseline
is zero, the closed form is used (O(N)); otherwise the integral is approximated by quadrature:

* Gauss–Legendre (default): K nodes on [0, 1], exact for polynomial integrands of degree 2K − 1;
* midpoint (Eq. phi-discrete): τ_k = (k − ½)/K, error ≤ ‖h''‖∞ / (24 K²) (Appendix C);
* substitution τ = u^p (``power=p``): ∫ h(τ) dτ = ∫ h(u^p) p u^{p−1} du, concentrating points near
  τ = 0 where log-type integrands vary sharply (p = 4 for the DeepSet of Appendix Q).

Each integration point costs one forward and one backward pass of f, giving the gradient for every
agent and feature at once, so the cost is O(T · K · C_f); points (and steps) are batched into
chunks that respect a memory budget. In adaptive mode (``tol``) K doubles until the worst relative
efficiency gap is below ``tol`` (or ``max_steps`` is reached, which is reported, not hidden).

References: Aumann & Shapley (1974); Sundararajan, Taly & Yan (2017), arXiv:1703.01365.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from aumann.attribution.device import memory_budget as device_budget
from aumann.attribution.device import resolve_device
from aumann.attribution.games import MaskedIndicatorGame, pooled_check_step
from aumann.attribution.indicators import HALF, LinearCombination, aumanns_own
from aumann.attribution.problem import AttributionMethod, Problem
from aumann.attribution.result import Attribution
from aumann.attribution.streaming import _tensor, column_sums, linear_closed_form, weighted_rows
from aumann.checks import as_bool, as_choice, as_float, as_int, as_optional_bool, as_real_array, as_torch, user_code
from aumann.errors import AumannWarning, ClosedFormUnavailable, IndicatorError, MethodError, UnusedArgumentWarning
from aumann.panel import Panel
from aumann.progress import progress_bar
from aumann.seeding import RNGLike

Rule = Literal["gauss-legendre", "midpoint"]
_RULES = ("gauss-legendre", "midpoint")


#: the most integration points each rule takes: Gauss–Legendre nodes cost O(K²) memory and O(K³) time
#: (K = 4096 takes about a minute) and are exact for polynomials of degree 2K − 1, so more is never needed;
#: a midpoint rule costs O(K) but every node is an evaluation of f
MAX_STEPS = {"gauss-legendre": 4096, "midpoint": 1_000_000}


def quadrature(steps: int, rule: str = "gauss-legendre", power: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes τ_k ∈ (0, 1) and weights w_k with Σ_k w_k h(τ_k) ≈ ∫₀¹ h(τ) dτ."""
    rule = as_choice(rule, "rule (quadrature rule)", _RULES)
    steps = as_int(steps, f"steps (integration points, {rule} rule)", minimum=1, maximum=MAX_STEPS[rule])
    power = as_float(power, "power (substitution τ = u^power)", minimum=0, exclusive_minimum=True)
    if rule == "gauss-legendre":
        x, w = np.polynomial.legendre.leggauss(steps)
        u, wu = (x + 1.0) / 2.0, w / 2.0
    elif rule == "midpoint":
        u = (np.arange(steps) + 0.5) / steps
        wu = np.full(steps, 1.0 / steps)
    else:
        raise MethodError(f"unknown quadrature rule {rule!r}; use one of {list(_RULES)}")
    if power == 1:
        return u, wu
    return u**power, wu * power * u ** (power - 1.0)


def _call_closed_form(f: Any, problem: Problem, *, over_living: bool = False) -> Any:
    """``f.closed_form`` (or ``closed_form_over_living``) of the problem's values, handed a read-only view: the
    values are the panel's own memory, and a closed form that scaled them in place (``values /= n``) changed the
    user's panel and explained the changed one, its φ and Δv agreeing (no gap to see)."""
    values = problem.x.view()
    values.flags.writeable = False
    try:
        with user_code(f"the closed form of indicator {f.name!r}"):
            if over_living:
                return f.closed_form_over_living(values, problem.alive, per_feature=problem.per_feature)
            return f.closed_form(values, per_feature=problem.per_feature)
    except IndicatorError as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError) and "read-only" in str(cause):
            raise IndicatorError(f"the closed form of indicator {f.name!r} wrote into the panel values it was given "
                                 f"({cause}); they are the panel's own memory, read-only: compute on new arrays "
                                 "(values / n, values.copy())") from cause
        raise


def _checked_closed_form(name: str, out: Any, problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What an indicator's ``closed_form`` returned, checked: ``(phi, f_values, f_baseline)`` with phi (T, N) —
    (T, N, D) with ``per_feature`` — and the two (T,) arrays, real numbers (a user's closed form that returned
    two items, None or shapes of another panel failed deep inside numpy, naming nothing)."""
    T, N, D = problem.shape
    if not isinstance(out, tuple | list) or len(out) != 3:
        raise IndicatorError(f"the closed form of indicator {name!r} must return (phi, f_values, f_baseline); got "
                             f"{type(out).__name__}{f' of {len(out)} items' if isinstance(out, tuple | list) else ''}")
    want = (T, N, D) if problem.per_feature else (T, N)
    arrays = []
    for what, value, shape in (("phi", out[0], want), ("f_values", out[1], (T,)), ("f_baseline", out[2], (T,))):
        arr = as_real_array(value, f"the closed form of indicator {name!r}: {what}", error=IndicatorError)
        if arr.dtype == np.float16:  # the rule of the indicator's own output (check_output)
            raise IndicatorError(f"the closed form of indicator {name!r} returned {what} as float16; half precision "
                                 "keeps 3 significant digits: return float32 or float64")
        if arr.shape != shape:
            raise IndicatorError(f"the closed form of indicator {name!r} returned {what} of shape {arr.shape}; "
                                 f"expected {shape} for a panel of (T, N, D) = {(T, N, D)}"
                                 f"{' with per_feature=True' if problem.per_feature else ''}")
        arrays.append(arr)
    return arrays[0], arrays[1], arrays[2]


def _closed_form(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The indicator's zero-baseline closed form on the problem: (φ (T, N), f(z_t), f(0), Σ_i φ or None, per-feature
    φ or None)."""
    f = problem.f
    if problem.alive is not None:  # an alive-aware indicator: each step's closed form over its living
        out = _call_closed_form(f, problem, over_living=True)
    elif f.has_linear_closed_form:  # two streaming reads of z; Σ_i φ comes with it
        with user_code(f"the closed form of indicator {f.name!r}"):
            cf = linear_closed_form(f, problem.x, per_feature=problem.per_feature, steps=problem.panel.steps)
        return cf.phi, cf.f_values, cf.f_baseline, cf.phi_sums, cf.phi_features
    else:
        out = _call_closed_form(f, problem)
    phi, fv, fb = _checked_closed_form(f.name, out, problem)
    if problem.per_feature:
        return phi.sum(axis=2), fv, fb, None, phi
    return phi, fv, fb, None, None


def _trusted(f: Any) -> bool:
    """aumann's own indicators, and linear combinations of them: their closed forms are tested against the path
    integral in aumann's own suite, and are not checked again on every call."""
    if isinstance(f, LinearCombination):
        return all(_trusted(g) for _, g in f.terms)
    return aumanns_own(f)


#: the closed-form spot check: at most this many agents of one seeded step (the whole problem when T·N is at most
#: this), the Gauss–Legendre points of its path integral, and the seed of the step and agents
CLOSED_FORM_AGENTS = 64
CLOSED_FORM_STEPS = 48
CLOSED_FORM_SEED = 0x5EED_C105
#: the closed form and the path integral must agree to this share of Σ_i |φ_i| + |Δv| (or to ten times the
#: integral's own quadrature error, |I_K − I_2K|, where f has a kink on the path)
CLOSED_FORM_RTOL = 1e-6


def _check_closed_form(problem: Problem) -> dict[str, Any]:
    """A user's declared closed form against the autograd path integral on a small seeded sub-problem, in float64:
    the whole panel when T·N ≤ :data:`CLOSED_FORM_AGENTS`, else up to that many seeded agents (living ones, for an
    alive-aware f) of one seeded step, as a panel of their own (an indicator is evaluated at the scale n of the
    panel it is given; an f that reads the context gets all the step's agents). An efficient closed form that is
    not the path integral (equal shares of Δv, say) gave wrong attributions with no efficiency gap to see.
    O(agents · K) whatever N: well under a millisecond's worth of the panel at N = 10⁶.

    Returns:
        What was checked, for the provenance (``closed_form_check``): the step, the agents, the largest difference
        and the tolerance — or ``skipped`` and why, when the sub-problem cannot be built or integrated (an f with
        no gradient, or one that does not take a sub-panel, e.g. weights of the full N).

    Raises:
        IndicatorError: the closed form and the path integral disagree (naming the indicator, the step, the agent
            and both values).
    """
    f = problem.f
    T, N, _ = problem.shape
    panel = problem.panel
    rng = np.random.default_rng(CLOSED_FORM_SEED)
    if T * N <= CLOSED_FORM_AGENTS:
        steps, rows = np.arange(T), np.arange(N)
        values, alive, context = problem.x, panel.alive, panel.context or None
    else:
        t = int(rng.integers(T))
        pool = np.flatnonzero(problem.alive[t]) if problem.alive is not None else np.arange(N)
        rows = pool if f.uses_context or pool.size <= CLOSED_FORM_AGENTS else \
            np.sort(rng.choice(pool, CLOSED_FORM_AGENTS, replace=False))
        steps, values, alive = np.array([t]), problem.x[t][rows][None], None
        context = {k: np.asarray(v)[t:t + 1] for k, v in panel.context.items()} if panel.context else None
    label = panel.steps[int(steps[0])]
    label = label.item() if hasattr(label, "item") else label
    where: dict[str, Any] = {"step": label if isinstance(label, int | str) else str(label),  # JSON in a saved result
                             "agents": int(rows.size)}
    integral = AumannShapley(steps=CLOSED_FORM_STEPS, closed_form=False, pooled_fast_path=False)
    try:
        sub = Problem.build(f, Panel(np.asarray(values, dtype=np.float64), features=panel.features, alive=alive,
                                     context=context), "zero", device=problem.device)
        want = np.asarray(_closed_form(sub)[0], dtype=np.float64)
        (coarse, _, _), (fv, fb) = integral._integrate(sub, CLOSED_FORM_STEPS)
        (fine, _, _), _ = integral._integrate(sub, 2 * CLOSED_FORM_STEPS)
    except IndicatorError as exc:
        return {**where, "skipped": str(exc)}
    scale = np.abs(fine).sum(axis=1) + np.abs(fv - fb)  # per step of the sub-problem
    tol = np.maximum(CLOSED_FORM_RTOL * scale, 10 * np.abs(fine - coarse).max(axis=1)) + 1e-300
    diff = np.abs(want - fine)
    bad = diff > tol[:, None]
    if bad.any():
        s_idx, i_idx = (int(i) for i in np.argwhere(bad)[0])
        step, agent = panel.steps[int(steps[s_idx])], panel.agent_ids[int(rows[i_idx])]
        raise IndicatorError(
            f"the closed form of indicator {f.name!r} is not its Aumann–Shapley value: at step "
            f"{step.item() if hasattr(step, 'item') else step!r}, agent "
            f"{agent.item() if hasattr(agent, 'item') else agent!r} it gives φ = {want[s_idx, i_idx]:.10g}, the "
            f"path integral of f {fine[s_idx, i_idx]:.10g} ({int(bad.sum())} of {bad.size} checked value(s) differ "
            f"by more than {float(tol[s_idx]):.3g}; checked on {rows.size} agent(s) "
            f"{'of the panel' if values is problem.x else 'of one step, as a panel of their own'}). Σ_i φ = Δv "
            "alone does not make a closed form right: fix closed_form, or drop has_closed_form (the path integral "
            "is then used)")
    return {**where, "max_abs_diff": float(diff.max()), "tolerance": float(tol.min())}


class _DefaultInt(int):
    """A default argument value, told apart (``is``) from the same value given by the caller."""


class _DefaultFloat(float):
    """A default argument value, told apart (``is``) from the same value given by the caller."""


class _DefaultStr(str):
    """A default argument value, told apart (``is``) from the same value given by the caller."""


#: AumannShapley's defaults: an argument given (even of the same value) is known from one left out
_STEPS, _RULE, _POWER, _MAX_STEPS = (_DefaultInt(30), _DefaultStr("gauss-legendre"), _DefaultFloat(1.0),
                                    _DefaultInt(2048))


def _plain(value: Any) -> Any:
    """``value`` as a provenance records it (JSON: a device by its name)."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def _named(given: dict[str, Any]) -> str:
    """``steps=500, power=4`` for the arguments given."""
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in given.items())


class AumannShapley(AttributionMethod):
    """The Aumann–Shapley value along the straight path from the baseline.

    Args:
        steps: integration points K (default 30).
        rule: ``"gauss-legendre"`` (default) or ``"midpoint"``.
        power: substitution τ = u^power (1 = none; 4 for log-type integrands).
        tol: if set, adaptive mode: double K until the worst relative efficiency gap ≤ tol.
        max_steps: the largest K adaptive mode may use (read with ``tol`` only: given without it, an
            :class:`~aumann.errors.UnusedArgumentWarning`).
        closed_form: ``None`` (use it when the indicator has one and the baseline is zero),
            ``True`` (require it; :class:`ClosedFormUnavailable` otherwise) or ``False`` (always integrate).
            The path integral's arguments (``steps``, ``rule``, ``power``, ``tol``, ``max_steps``,
            ``memory_budget``, ``pooled_fast_path``, ``device``) given with ``True``, or with ``None`` where the
            closed form is picked, are named in an :class:`~aumann.errors.UnusedArgumentWarning` (and, where the
            closed form ran, in ``provenance["unused"]``).
            A user's declared closed form is spot-checked against this path integral on up to 64 seeded agents
            of one seeded step (a few milliseconds whatever N; recorded as ``provenance["closed_form_check"]``);
            one that disagrees raises :class:`~aumann.errors.IndicatorError`. aumann's own are not checked.
        memory_budget: bytes (an int, e.g. ``512 * 2**20``) of working memory for a batch of integration
            points, and the most one point may need (default: 256 MiB on the host, lowered to half the
            available memory; a share of the free memory on a GPU). Batches are sized from the
            indicator's measured cost per point (:mod:`aumann.attribution.memory`); a point that alone
            needs more raises :class:`~aumann.errors.MemoryBudgetError`.
        pooled_fast_path: for indicators declaring a pooled form with linear ψ (``lin``, ``heat``),
            integrate ∇ρ along the path of the means instead of back-propagating through all agents
            (same quadrature, same numbers, O(N + K)); ``False`` forces the generic autograd path.
        device: torch device of the generic autograd integral (``"cuda"``, ``"cuda:1"``, ...); the
            ``device=`` of :func:`~aumann.attribution.attribute` does the same. Closed forms and the
            O(N + K) pooled integrator run on the host.

    Example:
        >>> from aumann.attribution import Panel, attribute, indicators, AumannShapley
        >>> import numpy as np
        >>> panel = Panel(np.abs(np.random.default_rng(0).normal(size=(100, 3))), features=["a", "b", "c"])
        >>> res = attribute(indicators.get("heat"), panel, method=AumannShapley(steps=60, closed_form=False))
        >>> bool(res.max_efficiency_gap < 1e-12)
        True
    """

    name: ClassVar[str] = "aumann_shapley"
    satisfies_efficiency: ClassVar[bool] = True
    exact: ClassVar[bool] = False

    def __init__(self, steps: int = _STEPS, rule: Rule = _RULE, power: float = _POWER, *,
                 tol: float | None = None, max_steps: int = _MAX_STEPS, closed_form: bool | None = None,
                 memory_budget: int | None = None, pooled_fast_path: bool = True,
                 device: str | torch.device | None = None) -> None:
        given = {"steps": steps is not _STEPS, "rule": rule is not _RULE, "power": power is not _POWER,
                 "tol": tol is not None, "max_steps": max_steps is not _MAX_STEPS,
                 "memory_budget": memory_budget is not None, "pooled_fast_path": pooled_fast_path is not True,
                 "device": device is not None}
        self.rule = as_choice(rule, "rule (quadrature rule)", _RULES)
        self.steps = as_int(steps, f"steps (integration points K, {self.rule} rule)", minimum=1,
                            maximum=MAX_STEPS[self.rule])
        self.power = as_float(power, "power (substitution τ = u^power)", minimum=0, exclusive_minimum=True)
        self.tol = None if tol is None else as_float(tol, "tol (relative efficiency gap)", minimum=0,
                                                     exclusive_minimum=True)
        self.max_steps = as_int(max_steps, f"max_steps ({self.rule} rule)", minimum=1, maximum=MAX_STEPS[self.rule])
        self.closed_form = as_optional_bool(closed_form, "closed_form")
        self.memory_budget = None if memory_budget is None else as_int(
            memory_budget, "memory_budget (bytes)", minimum=2**16)
        self.pooled_fast_path = as_bool(pooled_fast_path, "pooled_fast_path")
        self.device = None if device is None else resolve_device(device)
        #: the path integral's arguments given (not left at their defaults), as the call spelt them
        self._path_given = {k: _plain(getattr(self, k)) for k, g in given.items() if g}
        # warned of, not refused: these combinations ran (and still run) the same numbers; a code that passes them
        # keeps working and now hears that they are unread
        if self.tol is None and given["max_steps"]:  # it caps adaptive mode alone: a fixed K ran, max_steps unread
            warnings.warn(f"AumannShapley: max_steps={self.max_steps} given but unused: it caps adaptive mode (K "
                          "doubles until the gap ≤ tol), which is off without tol; give tol= too, or set the "
                          "integration points with steps=", UnusedArgumentWarning, stacklevel=2)
        if self.closed_form is True and self._path_given:
            warnings.warn(f"AumannShapley: {_named(self._path_given)} given but unused: closed_form=True never "
                          "computes the path integral (the indicator's closed form has no integration points); "
                          "closed_form=False integrates with them", UnusedArgumentWarning, stacklevel=2)

    def __repr__(self) -> str:
        return (f"AumannShapley(steps={self.steps}, rule={self.rule!r}, power={self.power:g}, tol={self.tol}, "
                f"closed_form={self.closed_form})")

    # ------------------------------------------------------------------ dispatch
    def uses_closed_form(self, problem: Problem) -> bool:
        available = problem.f.has_closed_form and problem.baseline_is_zero
        if self.closed_form is True and not available:
            why = ("it has no closed form" if not problem.f.has_closed_form
                   else f"closed forms hold for the zero baseline only (baseline: {problem.baseline_label})")
            raise ClosedFormUnavailable(f"cannot use a closed form for indicator {problem.f.name!r}: {why}; "
                                        "use the path integral (closed_form=False)")
        return available if self.closed_form is None else bool(self.closed_form)

    def attribute(self, problem: Problem, *, rng: RNGLike = None) -> Attribution:
        t0 = time.perf_counter()
        if self.uses_closed_form(problem):
            phi, fv, fb, sums, phi_feat = _closed_form(problem)
            prov: dict[str, Any] = {"closed_form": True, "steps": None, "rule": "closed-form", "power": None}
            if self._path_given:  # closed_form=None picked the closed form: what was given for the integral is unread
                prov["unused"] = dict(self._path_given)
                warnings.warn(f"AumannShapley: {_named(self._path_given)} given but unused: indicator "
                              f"{problem.f.name!r} has a closed form at the zero baseline, which closed_form=None "
                              "uses (no path integral runs); closed_form=False integrates with them",
                              UnusedArgumentWarning, stacklevel=3)
            if not _trusted(problem.f):
                prov["closed_form_check"] = _check_closed_form(problem)
            prov["seconds"] = time.perf_counter() - t0
            return problem.result(phi, method=self.name, provenance=prov, f_values=fv, f_baseline=fb,
                                  phi_features=phi_feat, rng=rng, phi_sums=sums)

        steps = self.steps
        history: list[tuple[int, float]] = []
        pooled = self._linear_pooled(problem)
        own = aumanns_own(problem.f)

        def users_form() -> Any:  # a user's psi / rho raise outside f: named as theirs, not a bare traceback
            return contextlib.nullcontext() if own else user_code(f"the pooled form of indicator {problem.f.name!r}")

        if pooled is not None:
            with users_form():
                if not _pooled_form_holds(problem):
                    pooled = None
                elif not own:
                    _check_linear_psi(problem, pooled)
        while True:
            with users_form():
                out = self._integrate_pooled(problem, steps, pooled) if pooled else None
            integrator = "pooled-linear"
            if out is None:
                out, integrator = self._integrate(problem, steps), "autograd"
            out, ends = out
            phi, phi_feat, sums = out
            res = problem.result(
                phi, method=self.name, phi_features=phi_feat, rng=rng, phi_sums=sums,
                f_values=ends[0], f_baseline=ends[1],
                provenance={"closed_form": False, "steps": steps, "rule": self.rule, "power": self.power,
                            "integrator": integrator},
            )
            gap = float(res.relative_efficiency_gap.max())
            history.append((steps, gap))
            if self.tol is None or gap <= self.tol or steps * 2 > self.max_steps:
                break
            steps *= 2
        res.provenance["seconds"] = time.perf_counter() - t0
        if self.tol is not None:
            res.provenance.update({"tol": self.tol, "adaptive_history": history,
                                   "converged": history[-1][1] <= self.tol})
        return res

    # ------------------------------------------------------------------ the integral
    def _linear_pooled(self, problem: Problem) -> Any:
        pooled = problem.f.pooled
        if not (self.pooled_fast_path and pooled is not None and pooled.linear_psi and not problem.f.uses_context):
            return None
        if problem.alive is not None and not pooled.living:  # ρ depends on the population size: no living means
            return None
        return pooled

    def _integrate_pooled(self, problem: Problem, steps: int, pooled: Any) -> tuple[
            _Integral, tuple[np.ndarray, np.ndarray]] | None:
        """Linear-ψ pooled indicators: ∇_{z_i} f(z(τ)) = A ∇ρ(m(τ)) / n for every agent i, with
        ψ(z) = z A and m(τ) = ψ(mean z⁰) + τ ψ(mean δ); so G_t = A Σ_k w_k ∇ρ(m_t(τ_k)) / n and
        φ_{t,i} = δ_{t,i} · G_t, one streaming pass (on the host: O(N + K), nothing to offload).

        Computed one step at a time in float64 (a float32 panel is upcast step by step, never whole):
        returns (φ (T, N) float64, per-feature φ (T, N, D) float64 or None, Σ_i φ (T,)) and
        (f(z_t), f(z⁰_t)) = (ρ(ψ(mean z_t)), ρ(ψ(mean z⁰_t))) from the same means (ψ is linear);
        ``None`` when ψ is affine rather than linear (the generic integrator then takes over).
        With a living mask (alive-aware f) the means are over the living and n is the living count n_t;
        dead rows have δ = 0 and get φ = 0."""
        T, N, D = problem.shape
        nodes, weights = quadrature(steps, self.rule, self.power)
        dtype = torch.float64
        eye = torch.eye(D, dtype=dtype)
        a = pooled.psi(eye[None])[0]  # (D, P): rows are ψ(e_d)
        if not torch.equal(pooled.psi(torch.zeros(1, 1, D, dtype=dtype))[0, 0], torch.zeros(a.shape[1], dtype=dtype)):
            return None
        base_np = problem.baseline
        shared = base_np.shape[0] == 1
        b_shared = np.ascontiguousarray(base_np[0], dtype=np.float64) if shared else None

        def base_t(t: int) -> np.ndarray:  # (N|1, D) float64
            return b_shared if shared else np.ascontiguousarray(base_np[t], dtype=np.float64)

        alive = problem.alive
        if alive is None:
            n_t = torch.full((T, 1), float(N), dtype=dtype)
            mean_x = as_torch(column_sums(problem.x) / N)  # (T, D) float64, one streaming read
            mean_b = torch.stack([as_torch(base_t(t).mean(axis=0)) for t in range(1 if shared else T)]
                                 ).expand(T, D)
        else:  # means over the living rows of each step, at the living count n_t
            n_t = as_torch(alive.sum(axis=1, keepdims=True).astype(np.float64))

            def mean_living(v: np.ndarray, t: int) -> np.ndarray:  # v (N|1, D) → (D,)
                return v.mean(axis=0) if v.shape[0] == 1 else v[alive[t]].mean(axis=0)

            mean_x = as_torch(np.stack([mean_living(np.asarray(problem.x[t], dtype=np.float64), t)
                                                for t in range(T)]))
            mean_b = as_torch(np.stack([mean_living(base_t(t), t) for t in range(T)]))
        tau = as_torch(nodes, dtype=dtype)
        w = as_torch(weights, dtype=dtype)
        m = (mean_b @ a)[:, None, :] + tau[None, :, None] * ((mean_x - mean_b) @ a)[:, None, :]  # (T, K, P)
        m = m.detach().requires_grad_(True)
        out = pooled.rho(m)
        if out.shape != m.shape[:-1]:
            raise IndicatorError(f"pooled rho of {problem.f.name!r} returned shape {tuple(out.shape)} for means "
                                 f"{tuple(m.shape)}")
        if out.dtype in HALF:
            raise IndicatorError(f"pooled rho of {problem.f.name!r} returned {out.dtype} values; half precision "
                                 "would round f along the whole path: return float32 or float64")
        (grad_m,) = torch.autograd.grad(out.sum(), m, allow_unused=True)
        with torch.no_grad():
            ends = (pooled.rho(mean_x @ a).double().numpy(), pooled.rho(mean_b @ a).double().numpy())
        phi = np.zeros((T, N), dtype=np.float64)
        phi_feat = np.zeros((T, N, D), dtype=np.float64) if problem.per_feature else None
        if grad_m is None:
            return (phi, phi_feat, np.zeros(T)), ends
        if not torch.isfinite(grad_m).all():
            raise IndicatorError(f"indicator {problem.f.name!r} has a NaN/inf gradient on the integration path "
                                 f"{_first_bad_step(problem, grad_m)}")
        g = (torch.einsum("k,tkp->tp", w, grad_m) @ a.T / n_t).numpy()  # (T, D): the same for every living agent
        sums = np.zeros(T)
        for t in range(T):
            # the panel's own memory when it is float64 (read only); a float32 step is upcast alone
            delta = np.asarray(problem.x[t], dtype=np.float64)
            if not problem.baseline_is_zero:
                delta = delta - base_t(t)
            row, s = weighted_rows(delta[None], g[t:t + 1])
            phi[t], sums[t] = row[0], s[0]
            if phi_feat is not None:
                np.multiply(delta, g[t], out=phi_feat[t])
        return (phi, phi_feat, sums), ends

    def _integrate(self, problem: Problem, steps: int) -> tuple[_Integral, tuple[np.ndarray, np.ndarray]]:
        """φ (T, N), per-feature φ (T, N, D) if asked for, and Σ_i φ (T,), by quadrature on problem.device,
        with (f(z_t), f(z⁰_t)) evaluated from the same device blocks.

        G_t = Σ_k w_k ∇f(z⁰_t + τ_k δ_t) and φ_t = δ_t ⊙ G_t. Batches are blocks of whole steps
        (all K points of several steps in one call) when they fit the memory budget, else chunks of
        points within one step, written into one reused buffer. Steps travel to the device as they
        are needed and their φ comes straight back, so the device holds one batch, not the panel.
        """
        T, N, D = problem.shape
        dev = problem.device
        nodes, weights = quadrature(steps, self.rule, self.power)
        np_dtype = np.float32 if problem.x.dtype == np.float32 else np.float64
        dtype = torch.float32 if np_dtype == np.float32 else torch.float64
        x = problem.x
        shared_base = problem.baseline.shape[0] == 1  # (1, N|1, D): one copy on the device serves every step
        base = as_torch(np.ascontiguousarray(problem.baseline[:1]), dtype=dtype, device=dev)
        zero_base = problem.baseline_is_zero
        tau = as_torch(nodes, dtype=dtype, device=dev)
        w = as_torch(weights, dtype=dtype, device=dev)
        ones = torch.ones(D, dtype=dtype, device=dev)
        item_bytes = N * D * (4 if dtype == torch.float32 else 8)
        budget = device_budget(dev, self.memory_budget, _HOST_BUDGET)
        # points per batch from the measured cost of one point's forward and backward pass (≥ six copies of it)
        per_batch = problem.batch_items(T * steps, budget, grad=True, static=6 * item_bytes, limit=self.memory_budget)
        if per_batch >= T * steps:  # small enough not to measure: the static rule, as before
            per_batch = max(1, int(budget // (6 * item_bytes)))
        phi = np.empty((T, N), dtype=np_dtype)
        phi_feat = np.empty((T, N, D), dtype=np_dtype) if problem.per_feature else None
        sums = np.empty(T)
        f_values, f_baseline = np.empty(T), np.empty(T)

        def on_device(t0: int, t1: int) -> tuple[torch.Tensor, torch.Tensor]:
            """z_t and δ_t = z_t − z⁰_t of steps t0..t1 on the device (the baseline block travels with them);
            f(z_t) and f(z⁰_t) are taken here, from the blocks already on the device (no second transfer)."""
            src = _tensor(x[t0:t1])
            xb = src.to(dev, dtype)
            b = None if zero_base else (
                base if shared_base else as_torch(np.ascontiguousarray(problem.baseline[t0:t1])).to(dev, dtype))
            idx = np.arange(t0, t1)
            with torch.no_grad():
                # f never sees the panel's own memory: an indicator that writes to z in place is refused
                # (evaluate_tensor), and the user's panel must be as it was after the refusal
                own = xb.clone() if xb.data_ptr() == src.data_ptr() else xb
                f_values[t0:t1] = problem.evaluate(own, idx).double().cpu().numpy()
                del own
                z0 = torch.zeros_like(xb) if b is None else b.expand(t1 - t0, N, D).contiguous()
                f_baseline[t0:t1] = problem.evaluate(z0, idx).double().cpu().numpy()
                del z0
            return (xb, xb) if b is None else (xb, xb - b)

        def grad_of(z: torch.Tensor, t_idx: np.ndarray) -> torch.Tensor | None:
            z = z.detach().requires_grad_(True)
            out = problem.evaluate(z, t_idx)
            if not out.requires_grad:
                raise IndicatorError(
                    f"indicator {problem.f.name!r} returned a value with no gradient w.r.t. z; the path "
                    "integral needs a differentiable torch function (no numpy, no .detach(), no .item())"
                )
            (g,) = torch.autograd.grad(out.sum(), z, allow_unused=True)
            return g  # None: f does not depend on z at all (every agent is a dummy)

        def finish(t0: int, t1: int, delta: torch.Tensor, grad: torch.Tensor) -> None:
            if not torch.isfinite(grad).all():
                raise IndicatorError(f"indicator {problem.f.name!r} has a NaN/inf gradient on the integration "
                                     f"path {_first_bad_step(problem, grad, offset=t0)}; is it C¹ between the "
                                     "baseline and the panel?")
            grad.mul_(delta)  # φ per feature, in place: no second (steps, N, D) buffer
            # Σ_d. float64: a matrix-vector product (a strided reduction over D is up to 4× slower at D = 14). float32:
            # the reduction, whose bits per row depend on D alone — BLAS's sgemv rounded a row differently by the
            # number of steps in the call and their place in memory (on AVX-512 hosts), so φ depended on the
            # memory probe's batch size, which differs between machines; its dgemv gives each row one value
            rows = grad @ ones if dtype == torch.float64 else grad.sum(dim=-1)
            phi[t0:t1] = rows.cpu().numpy()
            sums[t0:t1] = rows.sum(dim=-1, dtype=torch.float64).cpu().numpy()
            if phi_feat is not None:
                phi_feat[t0:t1] = grad.cpu().numpy()

        steps_per_batch = per_batch // steps
        progress = progress_bar(problem.progress, T * steps, f"path integral K={steps}")
        try:
            if steps_per_batch >= 1:  # whole steps per call: z has shape (tb·K, N, D)
                for t0 in range(0, T, steps_per_batch):
                    t1 = min(T, t0 + steps_per_batch)
                    xb, db = on_device(t0, t1)
                    z = tau.view(1, -1, 1, 1) * db.unsqueeze(1)
                    if not zero_base:
                        z += (xb - db).unsqueeze(1)
                    g = grad_of(z.reshape(-1, N, D), np.repeat(np.arange(t0, t1), steps))
                    grad = torch.zeros_like(db)
                    if g is not None:
                        _weighted_sum_into(grad, g.view(t1 - t0, steps, N, D), w, axis=1)
                    finish(t0, t1, db, grad)
                    if progress is not None:
                        progress.advance((t1 - t0) * steps)
            else:  # chunks of points within one step, written into one reused buffer
                buf = torch.empty((per_batch, N, D), dtype=dtype, device=dev)
                products = torch.empty((N, D), dtype=dtype, device=dev)  # one buffer for every chunk's weighted sum
                for t in range(T):
                    xt, dt = on_device(t, t + 1)
                    xt, dt = xt[0], dt[0]
                    grad = torch.zeros_like(dt)
                    for k0 in range(0, steps, per_batch):
                        k1 = min(steps, k0 + per_batch)
                        z = buf[: k1 - k0]
                        torch.mul(tau[k0:k1].view(-1, 1, 1), dt, out=z)
                        if not zero_base:
                            z += xt - dt
                        g = grad_of(z, np.full(k1 - k0, t))
                        if g is not None:
                            _weighted_sum_into(grad, g, w[k0:k1], axis=0, tmp=products)
                        if progress is not None:
                            progress.advance(k1 - k0)
                    finish(t, t + 1, dt[None], grad[None])
        finally:
            if progress is not None:
                progress.stop()
        return (phi, phi_feat, sums), (f_values, f_baseline)


#: how far (relative) a user's ψ declared linear may sit from z A before it is refused: rounding stays orders of
#: magnitude below; a ψ that is not linear misses by O(1)
LINEAR_PSI_RTOL = 1e-9


def _check_linear_psi(problem: Problem, pooled: Any) -> None:
    """Refuse a user's ``PooledForm(linear_psi=True)`` whose ψ is not linear, on the rows of one seeded step: ψ(z)
    must be z A (A's rows ψ(e_d)). The pooled-linear integral reads f only through ρ(ψ(mean z)), its Δv too, so a
    ψ = z² declared linear gave φ off by 0.58 on values of 0.1 with an efficiency gap of 0 — silently wrong and
    consistent with itself. (:func:`_pooled_form_holds` compares ρ(mean_i ψ(z_i)) with f, which such a ψ passes.)"""
    T, _, D = problem.shape
    t = pooled_check_step(T)
    x = np.asarray(problem.x[t], dtype=np.float64)
    rows = torch.from_numpy(np.ascontiguousarray(x if problem.alive is None else x[problem.alive[t]]))
    with torch.no_grad():
        a = pooled.psi(torch.eye(D, dtype=torch.float64)[None])[0].to(torch.float64)  # (D, P)
        psi = pooled.psi(rows[None])[0]
        lin = rows @ a
    if not isinstance(psi, torch.Tensor) or tuple(psi.shape) != tuple(lin.shape):
        raise IndicatorError(f"indicator {problem.f.name!r}: its pooled psi must map (N, D) to (N, P); got "
                             f"{tuple(getattr(psi, 'shape', ()))} for rows {tuple(rows.shape)}")
    if not lin.numel():
        return
    scale = float(lin.abs().max())
    off = float((psi.to(torch.float64) - lin).abs().max())
    if not off <= LINEAR_PSI_RTOL * scale + 1e-300:
        raise IndicatorError(f"indicator {problem.f.name!r} declares PooledForm(linear_psi=True), but its psi is not "
                             f"linear (ψ(z) = z A, A's rows ψ(e_d)): on the rows of step index {t} it is {off:.3g} "
                             f"from z A (values up to {scale:.3g}). Set linear_psi=False (the path integral then "
                             "back-propagates through f itself)")


def _pooled_form_holds(problem: Problem) -> bool:
    """Whether a user's pooled form reproduces f where it is checked, before the pooled-linear integral trusts it
    (its f(z_t), f(z⁰_t) and every gradient come from ρ alone; f itself is never evaluated there): at one seeded
    step, the corners and a few seeded coalitions between them, one O(N) evaluation of f each
    (:meth:`~aumann.attribution.games.MaskedIndicatorGame.pooled_form_lost`). A declared ρ(q) = 3 q₁q₂ for
    f = m₁m₂ reported f(z) = 1.304 for a true 0.4347 and attributed it, silently. Corners where ρ lost the precision of
    f (within what rounding the sums explains) are warned about and the autograd integral evaluates f instead; a
    form that misses f beyond that, at the corners or between them, raises. aumann's own pooled forms are trusted."""
    if aumanns_own(problem.f):
        return True
    t = pooled_check_step(problem.shape[0])
    lost = MaskedIndicatorGame(problem, t).pooled_form_lost()
    if lost is None:
        return True
    warnings.warn(f"indicator {problem.f.name!r}: its pooled form does not reproduce f at step index {t} ({lost}); "
                  "the path integral back-propagates through f itself instead (pooled_fast_path=False does so from "
                  "the start)", AumannWarning, stacklevel=4)
    return False


def _weighted_sum_into(acc: torch.Tensor, g: torch.Tensor, w: torch.Tensor, *, axis: int,
                       tmp: torch.Tensor | None = None) -> None:
    """``acc += Σ_k w[k] · g[k]`` along ``axis`` of ``g``, one point at a time in k order: each point is one
    rounded product and one rounded sum per element. So a step's gradient has the same bits however its K
    points were batched (whole steps, or chunks sized by a memory probe whose answer differs between
    machines), and the same bits as the former ``einsum`` over whole steps. ``g`` is left alone (autograd
    may hand back a broadcast view); the products go through one buffer shaped like ``acc`` (``tmp``: a caller's,
    reused across calls)."""
    if tmp is None:
        tmp = torch.empty_like(acc)
    for k in range(g.shape[axis]):
        acc.add_(torch.mul(g.select(axis, k), w[k], out=tmp))


_HOST_BUDGET = 256 * 2**20
_Integral = tuple[np.ndarray, np.ndarray | None, np.ndarray]  # φ (T, N), φ per feature (T, N, D) or None, Σ_i φ


def _first_bad_step(problem: Problem, grad: torch.Tensor, offset: int = 0) -> str:
    """``"at step <label>"`` for the first step (leading axis of ``grad``, step ``offset`` first) holding NaN/inf."""
    bad = ~torch.isfinite(grad.reshape(grad.shape[0], -1)).all(dim=1).cpu()
    t = offset + (int(torch.nonzero(bad)[0, 0]) if bad.any() else 0)
    label = problem.panel.steps[t]
    return f"at step {label.item() if hasattr(label, 'item') else label!r}"


__all__ = ["AumannShapley", "quadrature"]
