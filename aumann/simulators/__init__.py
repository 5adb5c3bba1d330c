"""Simulation layer: Mesa observer hook, runner and forks, executors, LLM backends.

Public surface::

    from aumann.simulators import FeatureRecorder, ArrayRecorder, simulate, fork, checkpoint
    panel = simulate(model, steps=T, recorder=FeatureRecorder({"wealth": "wealth"}))   # step=fn for any stepping
    branch = fork(model, steps=5, recorder=rec, factory=make_model)   # a checked copy, else a replay

Forks (``checkpoint``, ``fork``, ``fork_many``, ``replay``) are made by checked copy or by replay
(:mod:`aumann.simulators.branching`); ``override_next_step`` scopes a baseline action to one step.

``aumann.simulators.llm`` (pydantic; openai lazily) is
imported on demand so that ``import aumann.simulators`` stays light.
"""

from aumann.errors import (
    CheckpointError,
    ExecutorError,
    FeatureValueError,
    ReplayDivergedError,
    ReplayUnavailableError,
    StepsMismatchError,
    UnknownAttributeError,
)
from aumann.simulators.branching import default_step, override_next_step, state_digest
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
    replay,
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
    "ReplayDivergedError",
    "ReplayUnavailableError",
    "RunSpec",
    "StepsMismatchError",
    "UnknownAttributeError",
    "checkpoint",
    "default_step",
    "for_agents",
    "fork",
    "fork_many",
    "indicator_values",
    "override_next_step",
    "replay",
    "seeded_specs",
    "simulate",
    "state_digest",
]
