"""The entry point: ``attribute(f, panel, method=..., rng=...) -> Attribution``."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from aumann.attribution.batchcheck import check_batch_independent
from aumann.attribution.device import CPU, pick_device
from aumann.attribution.indicators import as_indicator
from aumann.attribution.path import AumannShapley
from aumann.attribution.problem import AttributionMethod, Problem
from aumann.attribution.result import EFFICIENCY_WARN_SHARE, Attribution
from aumann.checks import as_bool, as_seed
from aumann.errors import MethodError
from aumann.panel import Panel
from aumann.seeding import RNGLike


def attribute(
    f: Any,
    panel: Panel | Any,
    method: AttributionMethod | type[AttributionMethod] | None = None,
    *,
    baseline: Any = "zero",
    rng: RNGLike = None,
    per_feature: bool = False,
    progress: bool = False,
    device: str | torch.device | None = None,
    absent: str = "entry",
    executor: Any = None,
) -> Attribution:
    """Attribute the macro indicator ``f`` to every agent at every step of ``panel``.

    Args:
        f: an :class:`~aumann.attribution.indicators.Indicator`, a registered indicator name, or any
            batched torch callable ``f(z[..., N, D]) -> [...]`` (optionally ``f(z, context)``).
        panel: a :class:`Panel` (or an array of shape (T, N, D) / (N, D), wrapped in one).
        method: an attribution method object (default :class:`AumannShapley` — its closed form when
            the indicator has one and the baseline is zero, else the path integral).
        baseline: ``"zero"`` | ``"mean"`` | ``"pre-event"`` | ``"previous"`` | an array of shape (D,),
            (N, D) or (T, N, D) (a pandas Series or frame labelled by feature names is read by name). Dead
            rows (``panel.alive == False``) are held at the baseline and get
            φ = 0; an alive-aware indicator (every built-in; a user one whose ``forward`` takes
            ``alive=``) is handed the living mask and computes over the living rows only.
            ``"pre-event"`` and ``"previous"`` never read a dead row: see ``absent``.
        absent: where ``"pre-event"`` / ``"previous"`` would read an agent's dead row (a newborn, an agent
            that left and came back): ``"entry"`` (default; its first living row from that step on, the
            state it entered in), ``"zero"`` or ``"mean"`` (the ``"mean"`` baseline's vector); recorded in
            provenance when it applies. See :mod:`aumann.attribution.problem`.
        rng: seed or Generator for sampled methods (recorded in provenance).
        per_feature: also return per-feature attributions (``Attribution.phi_features``).
        progress: show a progress bar for long computations.
        device: torch device for the heavy kernels — ``"cpu"`` (default), ``"cuda"``, ``"cuda:1"``, or a
            :class:`torch.device` — or ``None`` for the method's own ``device=`` (else cpu). The path
            integral and the running-sum kernels of the coalition methods run there; closed forms
            are memory-bound and run on the host. Results are host numpy arrays either way.
        executor: anything with ``map(fn, items)`` (a process pool, Ray): blocks of steps -- and, for
            a sampled method with ``block_size``, blocks of permutations -- run there, with results
            identical to the single-process run (:mod:`aumann.attribution.distributed`).

    Raises:
        MethodError: for an invalid or unavailable device, a method that is not a method object, or an
            executor without ``map``.
        ExecutorError: the executor itself failed (a pool that died, a task it could not ship).

    Returns:
        An :class:`Attribution` with ``.phi`` (T, N), ``.delta_v``, ``.efficiency_gap`` and provenance.

    Example:
        >>> import numpy as np
        >>> from aumann.attribution import Panel, attribute, indicators
        >>> z = np.abs(np.random.default_rng(0).normal(size=(14, 1000, 3)))
        >>> res = attribute(indicators.get("heat"), Panel(z, features=["a", "b", "c"]))
        >>> res.phi.shape
        (14, 1000)
    """
    if panel.__class__ is not Panel and not isinstance(panel, Panel):  # a Panel is validated once, when built
        if isinstance(panel, str | bytes | os.PathLike):
            raise MethodError(f"panel must be a Panel or an array of shape (T, N, D); got the path {panel!r} — load "
                              "it first with Panel.load(path)")
        panel = Panel(panel)
    # the common values skip the checks' function calls (a small call is ~20 µs in all); others are checked
    if rng is not None:
        rng = as_seed(rng, "rng", error=MethodError)
    if per_feature is not False:
        per_feature = as_bool(per_feature, "per_feature")
    if progress is not False:
        progress = as_bool(progress, "progress")
    if method is None:
        method = _DEFAULT_METHOD
    elif isinstance(method, type) and issubclass(method, AttributionMethod):
        method = method()
    if method is not _DEFAULT_METHOD and not isinstance(method, AttributionMethod):
        raise MethodError(
            f"method must be an attribution method object such as AumannShapley(), SampledShapley(...); "
            f"got {method!r}"
        )
    dev = CPU if device is None and method.device is None else pick_device(device, method.device)
    problem = Problem.build(as_indicator(f), panel, baseline, per_feature=per_feature, progress=progress,
                            device=dev, absent=absent)
    check_batch_independent(problem)  # a user's f that reduces over the batch explains no one function
    # overflow / invalid values are not warned about here: every result is checked for finiteness and a
    # non-finite one is an IndicatorError naming the indicator and the step (Attribution._check_finite)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if executor is not None:
            from aumann.attribution.distributed import attribute_over, check_executor

            res = attribute_over(method, problem, rng, check_executor(executor))
        else:
            res = method.attribute(problem, rng=rng)
    flag_efficiency_gap(res)
    return res


def flag_efficiency_gap(res: Attribution) -> None:
    """Warn (:class:`~aumann.errors.EfficiencyGapWarning`) and flag ``provenance["efficiency_flag"]`` when an
    efficient method's Σφ misses Δv by more than :data:`~aumann.attribution.result.EFFICIENCY_WARN_SHARE` of
    |Δv| at some step (too few integration points for a sharp indicator, a kink on the path)."""
    if not res.satisfies_efficiency:
        return
    _flag_unmet_tol(res)
    gap = res.efficiency_gap
    if (gap <= EFFICIENCY_WARN_SHARE * np.abs(res.delta_v)).all():  # the common case, in two passes over T
        return
    flags = res.large_efficiency_gap()
    if not flags.any():
        return
    import warnings

    from aumann.errors import EfficiencyGapWarning

    rel = res.relative_efficiency_gap
    worst = int(np.argmax(np.where(flags, rel, -np.inf)))
    label = res.steps[worst].item() if hasattr(res.steps[worst], "item") else res.steps[worst]
    res.provenance["efficiency_flag"] = {"steps": int(flags.sum()), "worst_step": label,
                                         "worst_relative_gap": float(rel[worst]), "share": EFFICIENCY_WARN_SHARE}
    hint = " (raise steps= or use tol= for adaptive K)" if res.method == "aumann_shapley" else ""
    if rel[worst] <= 1e4:
        by = f"{100 * rel[worst]:.3g} % of |Δv|"
    else:  # a percentage of next to nothing (3.99e+294 %) says less than the two numbers
        by = (f"{float(gap[worst]):.3g} while Δv = {float(res.delta_v[worst]):.3g} (f barely changes between the "
              "baseline and z there; an indicator that does not keep the batch axis does this too)")
    warnings.warn(EfficiencyGapWarning(
        f"{res.method} of {res.provenance.get('indicator', 'f')!r}: Σ_i φ misses Δv by {by} at step {label!r} "
        f"({int(flags.sum())} step(s) over {100 * EFFICIENCY_WARN_SHARE:g} %){hint}"),
        stacklevel=3)


_DEFAULT_METHOD = AumannShapley()  # methods hold hyperparameters only: one default instance serves every call


__all__ = ["attribute"]


def _flag_unmet_tol(res: Attribution) -> None:
    """Warn when adaptive K (``tol=``) stopped at ``max_steps`` without reaching ``tol``: the result was returned
    with only ``provenance["converged"] = False`` to say so, and a gap under the 1 % of :func:`flag_efficiency_gap`
    (7e-4 for a ``tol`` of 1e-6, say) was not warned about at all."""
    prov = res.provenance
    if prov.get("converged") is not False or prov.get("tol") is None:
        return
    import warnings

    from aumann.errors import EfficiencyGapWarning

    steps, gap = (prov.get("adaptive_history") or [(prov.get("steps"), float("nan"))])[-1]
    warnings.warn(EfficiencyGapWarning(
        f"{res.method} of {prov.get('indicator', 'f')!r}: adaptive K stopped at K = {steps} (doubling it would pass "
        f"max_steps) with a "
        f"relative efficiency gap of {gap:.3g}, above tol = {prov['tol']:g}; the result does not meet tol (a kink or "
        "a singularity on the path? raise max_steps, or use power= or a smooth surrogate)"), stacklevel=4)
