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

import time
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from aumann.attribution.problem import AttributionMethod, Problem
from aumann.attribution.result import Attribution
from aumann.checks import as_bool, as_choice, as_float, as_int, as_optional_bool
from aumann.errors import ClosedFormUnavailable, IndicatorError, MethodError
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


class AumannShapley(AttributionMethod):
    """The Aumann–Shapley value along the straight path from the baseline.

    Args:
        steps: integration points K (default 30).
        rule: ``"gauss-legendre"`` (default) or ``"midpoint"``.
        power: substitution τ = u^power (1 = none; 4 for log-type integrands).
        tol: if set, adaptive mode: double K until the worst relative efficiency gap ≤ tol.
        max_steps: the largest K adaptive mode may use.
        closed_form: ``None`` (use it when the indicator has one and the baseline is zero),
            ``True`` (require it; :class:`ClosedFormUnavailable` otherwise) or ``False`` (always integrate).
        memory_budget: bytes of working memory for a batch of integration points (default 256 MiB).
        pooled_fast_path: for indicators declaring a pooled form with linear ψ (``lin``, ``heat``),
            integrate ∇ρ along the path of the means instead of back-propagating through all agents
            (same quadrature, same numbers, O(N + K)); ``False`` forces the generic autograd path.

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

    def __init__(self, steps: int = 30, rule: Rule = "gauss-legendre", power: float = 1.0, *,
                 tol: float | None = None, max_steps: int = 2048, closed_form: bool | None = None,
                 memory_budget: int = 256 * 2**20, pooled_fast_path: bool = True) -> None:
        self.rule = as_choice(rule, "rule (quadrature rule)", _RULES)
        self.steps = as_int(steps, f"steps (integration points K, {self.rule} rule)", minimum=1,
                            maximum=MAX_STEPS[self.rule])
        self.power = as_float(power, "power (substitution τ = u^power)", minimum=0, exclusive_minimum=True)
        self.tol = None if tol is None else as_float(tol, "tol (relative efficiency gap)", minimum=0,
                                                     exclusive_minimum=True)
        self.max_steps = as_int(max_steps, f"max_steps ({self.rule} rule)", minimum=1, maximum=MAX_STEPS[self.rule])
        self.closed_form = as_optional_bool(closed_form, "closed_form")
        self.memory_budget = as_int(memory_budget, "memory_budget (bytes)", minimum=1)
        self.pooled_fast_path = as_bool(pooled_fast_path, "pooled_fast_path")

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
            phi, fv, fb = problem.f.closed_form(problem.x, per_feature=problem.per_feature)
            phi_feat = phi if problem.per_feature else None
            if problem.per_feature:
                phi = phi.sum(axis=2)
            prov = {"closed_form": True, "steps": None, "rule": "closed-form", "power": None,
                    "seconds": time.perf_counter() - t0}
            return problem.result(phi, method=self.name, provenance=prov, f_values=fv, f_baseline=fb,
                                  phi_features=phi_feat, rng=rng)

        steps = self.steps
        history: list[tuple[int, float]] = []
        pooled = self._linear_pooled(problem)
        while True:
            phi_feat = self._integrate_pooled(problem, steps, pooled) if pooled else self._integrate(problem, steps)
            phi = phi_feat.sum(axis=2)
            res = problem.result(
                phi, method=self.name, phi_features=phi_feat, rng=rng,
                provenance={"closed_form": False, "steps": steps, "rule": self.rule, "power": self.power,
                            "integrator": "pooled-linear" if pooled else "autograd"},
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
        return pooled

    def _integrate_pooled(self, problem: Problem, steps: int, pooled: Any) -> np.ndarray:
        """Linear-ψ pooled indicators: ∇_{z_i} f(z(τ)) = A ∇ρ(m(τ)) / n for every agent i, with
        ψ(z) = z A and m(τ) = ψ(mean z⁰) + τ ψ(mean δ); so G_t = A Σ_k w_k ∇ρ(m_t(τ_k)) / n."""
        T, N, D = problem.shape
        nodes, weights = quadrature(steps, self.rule, self.power)
        x = torch.as_tensor(problem.x)
        dtype = x.dtype
        base = torch.as_tensor(np.ascontiguousarray(problem.baseline)).to(dtype)
        eye = torch.eye(D, dtype=dtype)
        a = pooled.psi(eye[None])[0]  # (D, P): rows are ψ(e_d)
        if not torch.equal(pooled.psi(torch.zeros(1, 1, D, dtype=dtype))[0, 0], torch.zeros(a.shape[1], dtype=dtype)):
            return self._integrate(problem, steps)  # affine, not linear: use the generic path
        mean_b = base.mean(dim=1).expand(T, D)  # (T, D)
        mean_x = x.mean(dim=1)
        tau = torch.as_tensor(nodes, dtype=dtype)
        w = torch.as_tensor(weights, dtype=dtype)
        m = (mean_b @ a)[:, None, :] + tau[None, :, None] * ((mean_x - mean_b) @ a)[:, None, :]  # (T, K, P)
        m = m.detach().requires_grad_(True)
        out = pooled.rho(m)
        if out.shape != m.shape[:-1]:
            raise IndicatorError(f"pooled rho of {problem.f.name!r} returned shape {tuple(out.shape)} for means "
                                 f"{tuple(m.shape)}")
        (grad_m,) = torch.autograd.grad(out.sum(), m, allow_unused=True)
        if grad_m is None:
            return np.zeros((T, N, D), dtype=problem.x.dtype)
        if not torch.isfinite(grad_m).all():
            raise IndicatorError(f"indicator {problem.f.name!r} has a NaN/inf gradient on the integration path "
                                 f"{_first_bad_step(problem, grad_m)}")
        g = torch.einsum("k,tkp->tp", w, grad_m) @ a.T / N  # (T, D): the same for every agent
        delta = x - base if not problem.baseline_is_zero else x
        return (delta.expand(T, N, D) * g[:, None, :]).numpy()

    def _integrate(self, problem: Problem, steps: int) -> np.ndarray:
        """(T, N, D) per-feature attributions by quadrature with ``steps`` points.

        G_t = Σ_k w_k ∇f(z⁰_t + τ_k δ_t) and φ_t = δ_t ⊙ G_t. Batches are blocks of whole steps
        (all K points of several steps in one call) when they fit the memory budget, else chunks of
        points within one step; both are slices, never gathers.
        """
        T, N, D = problem.shape
        nodes, weights = quadrature(steps, self.rule, self.power)
        dtype = torch.float32 if problem.x.dtype == np.float32 else torch.float64
        x = torch.as_tensor(problem.x)
        base = torch.as_tensor(np.ascontiguousarray(problem.baseline)).to(dtype)  # (T|1, N|1, D)
        zero_base = problem.baseline_is_zero
        tau = torch.as_tensor(nodes, dtype=dtype)
        w = torch.as_tensor(weights, dtype=dtype)
        grad_sum = torch.zeros((T, N, D), dtype=dtype)
        item_bytes = N * D * (4 if dtype == torch.float32 else 8)
        per_batch = max(1, int(self.memory_budget // (6 * item_bytes)))

        def base_of(t0: int, t1: int) -> torch.Tensor:
            b = base if base.shape[0] == 1 else base[t0:t1]
            return b.expand(t1 - t0, N, D)

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

        steps_per_batch = per_batch // steps
        total = T * steps
        progress = progress_bar(problem.progress, total, f"path integral K={steps}")
        try:
            if steps_per_batch >= 1:  # whole steps per call: z has shape (tb·K, N, D)
                for t0 in range(0, T, steps_per_batch):
                    t1 = min(T, t0 + steps_per_batch)
                    xb = x[t0:t1]
                    bb = base_of(t0, t1)
                    if zero_base:
                        z = tau.view(1, -1, 1, 1) * xb.unsqueeze(1)
                    else:
                        z = bb.unsqueeze(1) + tau.view(1, -1, 1, 1) * (xb - bb).unsqueeze(1)
                    t_idx = np.repeat(np.arange(t0, t1), steps)
                    g = grad_of(z.reshape(-1, N, D), t_idx)
                    if g is not None:
                        grad_sum[t0:t1] += torch.einsum("k,tknd->tnd", w, g.view(t1 - t0, steps, N, D))
                    if progress is not None:
                        progress.advance((t1 - t0) * steps)
            else:  # chunks of points within one step: z has shape (kc, N, D)
                for t in range(T):
                    xt = x[t]
                    bt = base_of(t, t + 1)[0]
                    dt = xt if zero_base else xt - bt
                    for k0 in range(0, steps, per_batch):
                        k1 = min(steps, k0 + per_batch)
                        if k1 - k0 == 1:  # a scalar multiply is a faster kernel than a broadcast one
                            z = (dt * float(tau[k0]))[None] if zero_base else (bt + dt * float(tau[k0]))[None]
                        else:
                            tk = tau[k0:k1].view(-1, 1, 1)
                            z = tk * dt if zero_base else bt + tk * dt
                        g = grad_of(z, np.full(k1 - k0, t))
                        if g is not None:
                            if k1 - k0 == 1:
                                grad_sum[t].add_(g[0], alpha=float(w[k0]))
                            else:
                                grad_sum[t] += torch.einsum("k,knd->nd", w[k0:k1], g)
                        if progress is not None:
                            progress.advance(k1 - k0)
        finally:
            if progress is not None:
                progress.stop()
        if not torch.isfinite(grad_sum).all():
            raise IndicatorError(f"indicator {problem.f.name!r} has a NaN/inf gradient on the integration path "
                                 f"{_first_bad_step(problem, grad_sum)}; is it C¹ between the baseline and the panel?")
        delta = x - base if not zero_base else x
        return (delta.expand(T, N, D) * grad_sum).numpy()


def _first_bad_step(problem: Problem, grad: torch.Tensor) -> str:
    """``"at step <label>"`` for the first step (leading axis of ``grad``) holding NaN/inf."""
    bad = ~torch.isfinite(grad.reshape(grad.shape[0], -1)).all(dim=1)
    t = int(torch.nonzero(bad)[0, 0]) if bad.any() else 0
    label = problem.panel.steps[t]
    return f"at step {label.item() if hasattr(label, 'item') else label!r}"


__all__ = ["AumannShapley", "quadrature"]
