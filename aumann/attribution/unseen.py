"""A floor on a sampled standard error where the units drawn did not vary: the rule of three.

A sampled estimator's standard error is sd/√n of its n independent units (permutations, antithetic pairs or
marginal samples). An agent whose n sampled marginals are all equal has sd = 0, a standard error of 0 — an
estimate reported as exact. That is right for a dummy agent or an additive game, whose marginal is the same in
every ordering, but not for an agent whose marginal differs only in orderings that n draws rarely produce: a
unit that matters only in the grand coalition (f = Π_i x_i, N = 8: in 34 % of runs with n = 8 an agent is never
drawn last, its estimate is 0, its standard error 0, and the truth is Δv/8), the non-maximal agents of a
``max``, the far side of a threshold.

What the draws do say is how rare that is: n units without a different marginal put its probability p at
most ≈ 3/n (the rule of three, 95 %). A share p of units off by D moves the mean by pD, whose standard error is
D √(p/n); at p = 3/n that is √3·D/n. D is unknown; the floor takes it from the step's own units: the largest
per-unit spread of any agent's marginals there, times √n (an agent seen once off by D in n units has sd ≈ D/√n).
So an agent whose marginals did not vary gets a standard error of at least

    √3 · max_j sd_j / √n    (√3 times the step's largest plain standard error),

and its estimate is unchanged. Where no agent's marginal varied at all (a linear indicator; a game additive on
every ordering drawn), the floor is 0 to rounding: nothing sampled says the game is not additive, and an
additive game's sampled Shapley value *is* exact. A game whose non-additive part shows on fewer than about one
ordering in n for every agent at once is beyond any sampling estimate of its error (docs/baselines.md).
"""

from __future__ import annotations

import math

import numpy as np

#: an agent's sampled marginals "did not vary" where their sd is at most this share of the step's marginal
#: scale (the largest |mean| plus the largest sd over agents): rounding, not a different marginal
FLAT_RTOL = 1e-9


def unseen_floor(mean: np.ndarray, sd: np.ndarray, units: int) -> np.ndarray:
    """Per agent, the least standard error the n = ``units`` units support (module docstring): √3·max_j sd_j/√n
    for an agent whose ``sd`` (per unit, over the units) is 0 to rounding while another agent's is not, else 0.

    >>> unseen_floor(np.array([0.0, 0.125, 0.875]), np.array([0.0, 0.35, 0.35]), 8).round(4).tolist()
    [0.2143, 0.0, 0.0]
    >>> unseen_floor(np.array([0.5, 0.5]), np.array([1e-17, 0.0]), 8).tolist()  # additive: exact stays exact
    [0.0, 0.0]
    """
    mean = np.asarray(mean, dtype=np.float64)
    sd = np.asarray(sd, dtype=np.float64)
    if sd.size == 0 or units < 2:
        return np.zeros_like(sd)
    top = float(np.max(sd))
    scale = float(np.max(np.abs(mean))) + top
    flat = sd <= FLAT_RTOL * scale
    if not flat.any() or top <= FLAT_RTOL * scale:  # every agent varied, or none did
        return np.zeros_like(sd)
    return np.where(flat, math.sqrt(3.0) * top / math.sqrt(units), 0.0)


def floored(mean: np.ndarray, sd: np.ndarray, stderr: np.ndarray, units: int) -> tuple[np.ndarray, int]:
    """``stderr`` raised to :func:`unseen_floor` where that is larger, and how many agents were raised."""
    floor = unseen_floor(mean, sd, units)
    up = floor > stderr
    return np.where(up, floor, stderr), int(up.sum())


__all__ = ["FLAT_RTOL", "floored", "unseen_floor"]
