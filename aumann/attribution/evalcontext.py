"""The one evaluation context: what an indicator is evaluated on, as one object.

An indicator f sees three things at a step: the agents' features ``z`` (..., N, D), the world
``context`` (prices, a graph; never attributed) and the ``alive`` mask (which rows are living
agents). They travel together as an :class:`EvalContext` through every place f is evaluated — the
engine (:class:`~aumann.attribution.problem.Problem`), the coalition games and their kernels, both
deletion oracles, forks, ablations, smoothing gap reports, aggregators, network indicators, the
judge's trace and the report — so that no path can evaluate f on a step without its mask (an
alive-aware f evaluated on all N rows would average dead rows in: a masking deletion curve that
divided by N instead of the living count n_t was off by −50 % on a sugarscape with starvation).

Variations of one step (a coalition masked to the baseline, a deletion, a point of the path) are
made from the context itself (:meth:`EvalContext.with_values`, :meth:`EvalContext.batch`), which
keeps the step's context and mask; :func:`aumann.attribution.indicators.evaluate` takes the object.

>>> import numpy as np
>>> ctx = EvalContext(np.array([[1.0], [2.0], [900.0]]), alive=np.array([True, True, False]))
>>> ctx.n_living, ctx.living_rows.tolist()
(2, [0, 1])
>>> ctx.with_values(np.zeros((3, 1))).alive.tolist()   # a variation keeps the step's mask
[True, True, False]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aumann.errors import IndicatorError


def _host(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor (torch is not imported here)
        a = a.detach().cpu().numpy()
    return np.asarray(a)


@dataclass(frozen=True, eq=False)
class EvalContext:
    """One step's (or a batch's) features, world context and living mask — evaluated together.

    Attributes:
        z: the features, (..., N, D) (numpy or torch).
        context: ``{name: array}`` world state. One step's state (broadcast to every element of a
            batch of z) unless ``batched``, in which case each array already has z's leading
            dimensions (e.g. a panel's context, leading T, for its (T, N, D) values).
        alive: bool mask broadcastable to ``z.shape[:-1]`` ((N,) for one step, (T, N) for a panel),
            or ``None`` when every row is a living agent. Alive-aware indicators (``forward(...,
            alive=None)``) compute over the living rows only; others ignore it.
        batched: see ``context``.
    """

    z: Any
    context: Mapping[str, Any] | None = None
    alive: Any = None
    batched: bool = False

    def __post_init__(self) -> None:
        if self.context is not None and not isinstance(self.context, Mapping):
            raise IndicatorError(f"context must be a mapping name → array (or None); got {type(self.context).__name__}")
        if self.alive is not None:
            a = _host(self.alive)
            if a.dtype != bool:  # the Panel's rule: bool, or integers 0/1 ("False", 0.5 and NaN were all alive)
                if a.dtype.kind not in "iu" or not np.isin(a, (0, 1)).all():
                    raise IndicatorError(f"alive mask must be bool (or integers 0/1); got dtype {a.dtype}"
                                         + ("" if a.dtype.kind not in "iu" else " with values other than 0 and 1")
                                         + " — a float or string mask is ambiguous (NaN, 0.5 and 'False' are not "
                                         "booleans)")
                a = a.astype(bool)
            object.__setattr__(self, "alive", a)
            if a.size and a.all():  # nobody dead: the same as no mask (keeps the everyone-alive fast paths; no agent
                # at all is nobody alive, an empty mask's all() notwithstanding)
                object.__setattr__(self, "alive", None)
        if self.context is not None and not self.context:
            object.__setattr__(self, "context", None)

    # ------------------------------------------------------------------ construction
    @classmethod
    def of_panel(cls, panel: Any, steps: Sequence[int] | slice | None = None) -> EvalContext:
        """Every step of ``panel`` (or the steps at ``steps``): z (T, N, D), the context with leading T,
        the (T, N) living mask."""
        sl = slice(None) if steps is None else (steps if isinstance(steps, slice) else np.asarray(steps))
        alive = getattr(panel, "alive", None)
        ctx = getattr(panel, "context", None) or {}
        return cls(panel.values[sl], {k: np.asarray(v)[sl] for k, v in ctx.items()} or None,
                   None if alive is None else alive[sl], batched=True)

    @classmethod
    def at_step(cls, panel: Any, t: int) -> EvalContext:
        """Step position ``t`` of ``panel``: z (N, D), that step's context, the (N,) living mask."""
        alive = getattr(panel, "alive", None)
        ctx = getattr(panel, "context", None) or {}
        return cls(panel.values[t], {k: np.asarray(v)[t] for k, v in ctx.items()} or None,
                   None if alive is None else alive[t])

    # ------------------------------------------------------------------ variations of the same step(s)
    def with_values(self, z: Any) -> EvalContext:
        """The same step(s) with other feature values of the same shape (a masked or re-simulated copy)."""
        return EvalContext(z, self.context, self.alive, self.batched)

    def batch(self, zs: Any) -> EvalContext:
        """A batch (B, N, D) of variations of this one step: the step's context broadcast to each element,
        its mask to each element's rows."""
        if self.batched:
            raise IndicatorError("batch() makes variations of one step; this context already holds a batch")
        return EvalContext(zs, self.context, self.alive, batched=False)

    def steps(self, sl: slice | Sequence[int]) -> EvalContext:
        """Some steps of a batched (panel) context: z, context and mask sliced together."""
        if not self.batched:
            raise IndicatorError("steps() slices a batched (panel) context; this one is a single step")
        idx = sl if isinstance(sl, slice) else np.asarray(sl)
        ctx = None if self.context is None else {k: v[idx] for k, v in self.context.items()}
        return EvalContext(self.z[idx], ctx, None if self.alive is None else self.alive[idx], batched=True)

    # ------------------------------------------------------------------ the living
    @property
    def living_rows(self) -> np.ndarray:
        """Positions of the living rows of a single step (all N when there is no mask)."""
        n = self.z.shape[-2]
        if self.alive is None:
            return np.arange(n)
        if self.alive.ndim != 1:
            raise IndicatorError("living_rows is defined for one step; this context holds a mask per step")
        return np.flatnonzero(self.alive)

    @property
    def n_living(self) -> int | np.ndarray:
        """The living count n_t (an int for one step, an array per step for a batch)."""
        n = self.z.shape[-2]
        if self.alive is None:
            return n
        a = np.broadcast_to(self.alive, tuple(self.z.shape[:-1]))
        counts = a.sum(axis=-1)
        return int(counts) if counts.ndim == 0 else counts

    def __repr__(self) -> str:
        shape = tuple(getattr(self.z, "shape", ()))
        dead = 0 if self.alive is None else int((~np.broadcast_to(self.alive, shape[:-1])).sum())
        return (f"EvalContext(z={shape}, context={sorted(self.context) if self.context else []}, "
                f"dead_rows={dead}, batched={self.batched})")


__all__ = ["EvalContext"]
