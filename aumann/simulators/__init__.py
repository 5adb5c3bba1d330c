"""Simulation layer: Mesa observer hook, runner and forks, executors, LLM backends.

Public surface::

    from aumann.simulators import FeatureRecorder, ArrayRecorder, simulate, fork, checkpoint
    panel = simulate(model, steps=T, recorder=FeatureRecorder({"wealth": "wealth"}))

``aumann.simulators.llm`` (pydantic; openai lazily) is
imported on demand so that ``import aumann.simulators`` stays light.
"""

from aumann.errors import (
    CheckpointError,
    ExecutorError,
    FeatureValueError,
    StepsMismatchError,
    UnknownAttributeError,
)
from aumann.simulators.executors import LocalExecutor, RayExecutor, RunSpec, seeded_specs
from aumann.simulators.recorder import ArrayRecorder, FeatureRecorder, Recording
from aumann.simulators.runner import (
    ForAgents,
    ForkResult,
    checkpoint,
    for_agents,
    fork,
    fork_many,
    indicator_values,
    simulate,
)

__all__ = [
    "ArrayRecorder",
    "CheckpointError",
    "ExecutorError",
    "FeatureRecorder",
    "FeatureValueError",
    "ForAgents",
    "ForkResult",
    "LocalExecutor",
    "RayExecutor",
    "Recording",
    "RunSpec",
    "StepsMismatchError",
    "UnknownAttributeError",
    "checkpoint",
    "for_agents",
    "fork",
    "fork_many",
    "indicator_values",
    "seeded_specs",
    "simulate",
]
