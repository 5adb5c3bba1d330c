"""Errors of the simulation layer, all subclasses of :mod:`aumann.errors` classes.

* SimulationError (aumann.errors)
  * UnknownAttributeError(SimulationError, UnknownFeatureError) -- a feature names an attribute
    the agents do not have
  * FeatureValueError(SimulationError, ValueError)  -- a feature returned a non-numeric, NaN or inf
    value, or an array of the wrong shape
  * StepsMismatchError(SimulationError, ValueError) -- captured steps differ from the steps declared
  * CheckpointError(SimulationError)                -- a model that cannot be deep-copied / pickled
  * ExecutorError(SimulationError)                  -- an executor that cannot run (e.g. Ray missing)
"""

from __future__ import annotations

from aumann.errors import SimulationError, UnknownFeatureError


class UnknownAttributeError(UnknownFeatureError, SimulationError):
    """A feature given by attribute name that an agent does not have."""


class FeatureValueError(SimulationError, ValueError):
    """A feature extractor returned a non-numeric or non-finite value, or a wrongly shaped array."""


class StepsMismatchError(SimulationError, ValueError):
    """The number of captured steps differs from the number declared (or steps is not a positive int)."""


class CheckpointError(SimulationError):
    """A model that cannot be checkpointed (deep-copied) or shipped to a worker (pickled)."""


class ExecutorError(SimulationError):
    """An executor that cannot run: a missing optional dependency or a failed worker."""


__all__ = [
    "CheckpointError",
    "ExecutorError",
    "FeatureValueError",
    "SimulationError",
    "StepsMismatchError",
    "UnknownAttributeError",
]
