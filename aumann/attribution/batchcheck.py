"""One check of the batched-indicator contract before a method runs: f's value for one element of a batch
depends on that element alone.

Every method hands the indicator batches — the path integral its quadrature points, the coalition methods
their coalitions, the values f(z_t) and f(z⁰_t) the steps — and reads element b of the output as f of element b.
A user's indicator that reduces over the batch as well (``x / x.sum()`` without ``dim=-1``, ``z.max()``,
``z[0]``), or that draws random numbers, gives each method other numbers for the same f and panel: f(z_t) itself
changed with the batch it was evaluated in, and the attributions were silently of no function at all (the
efficient methods at least warned of an efficiency gap, advising more integration points; leave-one-out and
Banzhaf said nothing). :func:`check_batch_independent` evaluates f on one step's point and the midpoint of its
path, each beside its own twin and beside the other, and refuses an indicator whose values differ with an
:class:`~aumann.errors.IndicatorError` naming the likely causes. aumann's own indicators are not checked
(nothing to find); a user's costs three small evaluations (batches of two elements).
"""

from __future__ import annotations

import numpy as np
import torch

from aumann.attribution.indicators import aumanns_own
from aumann.attribution.problem import Problem
from aumann.checks import as_torch
from aumann.errors import IndicatorError

#: how far (relative to the largest |f| seen) an element's value may move with its batch: reduction orders of
#: batched kernels differ in the last bits, a batch-level reduction moves it by O(1)
RTOL = {torch.float64: 1e-6, torch.float32: 1e-3}


def _probe_step(problem: Problem) -> int:
    """The last step whose point differs from its baseline (one of the last three; else the last): there the
    point and the midpoint of its path are two different elements."""
    T = problem.shape[0]
    for t in range(T - 1, max(-1, T - 4), -1):
        if not np.array_equal(problem.x[t], problem.baseline_at(t)):
            return t
    return T - 1


def _values(problem: Problem, z: np.ndarray, t_idx: list[int]) -> np.ndarray:
    """f on the batch z of steps ``t_idx`` as float64 numpy, checked as the engine checks it."""
    return problem.evaluate(as_torch(z, device=problem.device), t_idx).double().cpu().numpy()


def check_batch_independent(problem: Problem) -> None:
    """Refuse an indicator whose value for a batch element depends on the other elements (or on the call).

    Raises:
        IndicatorError: f of one step's point, or of the midpoint of its path, differs between a batch of it and
            its twin and a batch of both points, naming the values and the usual causes.
    """
    if aumanns_own(problem.f):
        return
    t = _probe_step(problem)
    x = np.asarray(problem.x[t])
    mid = (x + (np.asarray(problem.baseline_at(t), dtype=x.dtype) - x) * x.dtype.type(0.5)).astype(x.dtype)
    # every batch has two elements: the same shapes take the same kernels and summation orders, so an f that
    # values each element on its own gives the same bits for an element beside its twin as beside the other point
    # (against a batch of one, reductions over 10^5 agents moved a cancelling f such as E[x²] − E[x]² by 1e-3)
    try:
        with torch.no_grad():
            pair = _values(problem, np.stack([x, mid]), [t, t])
            alone = np.array([_values(problem, np.stack([p, p]), [t, t])[0] for p in (x, mid)])  # each beside its twin
    except IndicatorError:
        # f fails here (NaN/inf at the midpoint, which is not one of every method's points; its shape; an exception
        # of its own): the method finds and names that at its own points, in its own words
        return
    dtype = torch.float32 if x.dtype == np.float32 else torch.float64
    scale = max(float(np.max(np.abs(pair))), float(np.max(np.abs(alone))), np.finfo(np.float64).tiny)
    diff = np.abs(pair - alone)
    if np.all(diff <= RTOL[dtype] * scale):
        return
    step = problem.panel.steps[t]
    step = step.item() if hasattr(step, "item") else step
    k = int(np.argmax(diff))
    which = "f(z_t)" if k == 0 else "f at the midpoint of its path to the baseline"
    raise IndicatorError(
        f"indicator {problem.f.name!r} is not one value per batch element: at step {step!r}, {which} is "
        f"{float(alone[k])!r} in a batch with its twin but {float(pair[k])!r} in a batch with the other point. "
        "Every method evaluates f on batches (..., N, D) and reads element b as f of element b alone, so its "
        "attributions would be of no one function. Reduce over the agents and features of each element only "
        "(x.sum(dim=-1), not x.sum(); z.amax(dim=(-2, -1)), not z.max(); no z[0]), and draw no random numbers in f")
