"""The runner owns the step loop: ``simulate`` records a run; ``checkpoint`` and ``fork`` branch it.

``simulate(model, steps=T, recorder=rec)`` calls ``model.step()`` T times and ``rec.capture(model)``
after each, then returns the :class:`~aumann.attribution.Panel`. Nothing patches the model.

Counterfactual forks: ``fork(model, intervention=g, steps=k, recorder=rec)`` deep-copies the model
at its current step t (Mesa 3 models, including their ``rng``, deep-copy bit-identically), applies
``g(copy)`` (e.g. force a set of agents to a baseline action), steps k times recording, and returns
the panel and the final model. The original model is untouched, so the factual run can continue.
With LLM decisions served from a :class:`~aumann.simulators.llm.ResponseCache` (mode ``replay`` or a
warm ``record``), a fork with no intervention replays the factual continuation exactly; decision
backends and caches are shared (not copied) by ``deepcopy``.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from aumann.errors import CheckpointError, SimulationError, UnknownAgentError
from aumann.progress import progress_bar
from aumann.simulators.recording import ContextFn, _check_steps

Observer = Callable[[Any, int], None]
Intervention = Callable[[Any], None]


def simulate(
    model: Any,
    steps: int,
    recorder: Any,
    *,
    observers: Sequence[Observer] = (),
    progress: bool = False,
    context: Mapping[str, ContextFn] | None = None,
    initial: bool = False,
):
    """Step ``model`` in place ``steps`` times, recording after each step; return the Panel.

    Args:
        model: any object with ``step()`` (a ``mesa.Model``); agents are read through the recorder.
        steps: number of steps T (positive int).
        recorder: a :class:`FeatureRecorder` or :class:`ArrayRecorder`.
        observers: extra callables ``obs(model, t)`` called after each capture (t = 0 … T-1).
        progress: show a Rich progress bar.
        context: mapping name → ``fn(model)`` (number or array), recorded per step into
            ``Panel.context`` (world state such as prices; never attributed).
        initial: also capture the state before the first step, as the panel's first row (the
            panel then has T + 1 steps; useful for a "pre-event" baseline).

    Returns:
        Panel with values (T, N, D) float64, agent ids ascending, features in the recorder's order.

    Raises:
        StepsMismatchError: ``steps`` is not a positive int.
        UnknownAttributeError, FeatureValueError: a feature cannot be read or is not a finite number.
    """
    steps = _check_steps(steps)
    if not callable(getattr(model, "step", None)):
        raise SimulationError(f"model {type(model).__name__} has no step() method")
    if not hasattr(recorder, "recording"):
        raise SimulationError(
            f"recorder must be a FeatureRecorder or ArrayRecorder; got {type(recorder).__name__}"
        )
    bar = progress_bar(progress, steps, f"simulate {type(model).__name__}")
    try:
        with recorder.recording(model, steps=steps + bool(initial), context=context) as rec:
            if initial:
                rec.capture(model)
            for t in range(steps):
                model.step()
                rec.capture(model)
                for obs in observers:
                    obs(model, t)
                if bar is not None:
                    bar.advance()
    finally:
        if bar is not None:
            bar.stop()
    return rec.panel()


def checkpoint(model: Any) -> Any:
    """A deep copy of ``model`` (its agents, space and ``rng`` state) to fork from.

    Raises:
        CheckpointError: the model cannot be deep-copied (e.g. it uses Mesa's experimental signals,
            or holds open files/sockets); the message names the cause.
    """
    try:
        branch = copy.deepcopy(model)
    except Exception as exc:  # deepcopy failures surface as many types
        raise CheckpointError(
            f"cannot checkpoint {type(model).__name__} with copy.deepcopy: {type(exc).__name__}: {exc}. "
            f"Models using mesa.experimental signals/observables or holding open resources cannot be "
            f"forked; keep such state outside the model or implement __deepcopy__."
        ) from exc
    _continue_id_counters(model, branch)
    return branch


_COUNT = re.compile(r"count\((-?\d+)\)")


def _continue_id_counters(model: Any, branch: Any) -> None:
    """Give the copy the original's next ``unique_id``.

    Mesa 3.3 draws ids from a class-level ``Agent._ids[model]`` counter keyed by the model object,
    which ``deepcopy`` cannot see: without this, agents created in a fork restart at id 1 and
    collide with living agents. The copy continues where the original is, so agents created after
    the fork get the same ids in the factual and the counterfactual branch.
    """
    seen: set[int] = set()
    for agent in getattr(model, "agents", ()):
        ids = getattr(type(agent), "_ids", None)
        if not isinstance(ids, MutableMapping) or id(ids) in seen:
            continue
        seen.add(id(ids))
        counter = ids.get(model) if model in ids else None
        m = _COUNT.fullmatch(repr(counter)) if counter is not None else None
        if m is not None:
            ids[branch] = itertools.count(int(m.group(1)))


@dataclass(frozen=True)
class ForkResult:
    """What a fork returns: the recorded panel of the continuation, the final model, and the
    indicator per step (``f_values`` (T,), when an indicator was given)."""

    panel: Any
    model: Any
    f_values: Any = None


def indicator_values(f: Callable[..., Any], panel: Any):
    """f evaluated on every step of ``panel`` with that step's context → float64 numpy array (T,).

    (Absent rows hold 0.0 in a recorded panel.) Uses :func:`aumann.attribution.indicators.evaluate`, a
    block of whole steps at a time (≤ 128 MiB as float64), so a float32 panel is never upcast whole.
    """
    import numpy as np

    from aumann.attribution.indicators import evaluate

    values = panel.values
    T = values.shape[0]
    chunk = max(1, (128 << 20) // max(1, values[0].size * 8))  # whole steps, ≤ 128 MiB of float64 at a time
    if chunk >= T:
        return evaluate(f, values, panel.context, context_batched=True)
    out = np.empty(T, dtype=np.float64)
    for s in range(0, T, chunk):
        sl = slice(s, min(T, s + chunk))
        out[sl] = evaluate(f, values[sl], {k: v[sl] for k, v in panel.context.items()}, context_batched=True)
    return out


def fork(
    model: Any,
    *,
    intervention: Intervention | None = None,
    steps: int,
    recorder: Any,
    context: Mapping[str, ContextFn] | None = None,
    repeat: bool = False,
    indicator: Callable[..., Any] | None = None,
) -> ForkResult:
    """Branch a run: copy ``model``, apply ``intervention``, step ``steps`` times recording.

    Args:
        model: the model at the fork point (left untouched).
        intervention: ``g(model_copy)`` applied once before the first forked step (or before every
            step with ``repeat=True``, which forces e.g. a baseline action each step); ``None``
            continues the factual run.
        steps: number of steps to run after the fork.
        recorder: recorder for the continuation.
        context: per-step world state to record, as in :func:`simulate`.
        repeat: apply the intervention before every step instead of once.
        indicator: a batched torch indicator ``f(z[..., N, D])`` (an engine ``Indicator`` or any
            callable) evaluated on each recorded step into ``ForkResult.f_values``.

    Returns:
        ForkResult(panel, model, f_values) -- the model is the forked copy after its last step.
    """
    steps = _check_steps(steps)
    if intervention is not None and not callable(intervention):
        raise SimulationError(f"intervention must be a callable g(model); got {intervention!r}")
    branch = checkpoint(model)
    if intervention is None or not repeat:
        if intervention is not None:
            intervention(branch)
        panel = simulate(branch, steps, recorder, context=context)
    else:
        with recorder.recording(branch, steps=steps, context=context) as rec:
            for _ in range(steps):
                intervention(branch)
                branch.step()
                rec.capture(branch)
        panel = rec.panel()
    f_values = None if indicator is None else indicator_values(indicator, panel)
    return ForkResult(panel, branch, f_values)


@dataclass(frozen=True)
class ForAgents:
    """An intervention calling ``action(agent)`` on the agents whose ``unique_id`` is in ``ids``.

    Picklable when ``action`` is (a top-level function or ``functools.partial``), so it can be
    shipped to process-pool or Ray workers by :func:`fork_many`.

    Raises (when applied):
        UnknownAgentError: an id with no live agent in the model.
    """

    ids: tuple[Hashable, ...]
    action: Callable[[Any], None]

    def __call__(self, model: Any) -> None:
        by_id = {a.unique_id: a for a in model.agents}
        missing = [i for i in self.ids if i not in by_id]
        if missing:
            raise UnknownAgentError(
                f"intervention names {len(missing)} agent id(s) not in the model, e.g. {missing[:5]}; "
                f"the model has {len(by_id)} agents with ids {sorted(by_id)[:10]}..."
            )
        for i in self.ids:
            self.action(by_id[i])


def for_agents(ids: Iterable[Hashable], action: Callable[[Any], None]) -> ForAgents:
    """An intervention that calls ``action(agent)`` on every agent whose ``unique_id`` is in ``ids``.

    Example:
        >>> freeze = for_agents([3, 7], lambda a: setattr(a, "wealth", 0))   # doctest: +SKIP
        >>> result = fork(model, intervention=freeze, steps=10, recorder=rec)  # doctest: +SKIP
    """
    return ForAgents(tuple(ids), action)


def _fork_task(spec: tuple) -> ForkResult:
    model, intervention, steps, recorder, context, repeat, keep_model, indicator = spec
    res = fork(model, intervention=intervention, steps=steps, recorder=recorder, context=context, repeat=repeat,
               indicator=indicator)
    return res if keep_model else ForkResult(res.panel, None, res.f_values)


def fork_many(
    model: Any,
    interventions: Mapping[str, Intervention | None],
    *,
    steps: int,
    recorder: Any,
    executor: Any = None,
    context: Mapping[str, ContextFn] | None = None,
    repeat: bool = False,
    keep_models: bool = False,
    indicator: Callable[..., Any] | None = None,
) -> dict[str, ForkResult]:
    """Fork ``model`` once per named intervention and run the branches through an executor.

    Every branch starts from the same checkpoint (same ``rng`` state: common random numbers), so
    differences between branches come from the interventions alone. Include ``None`` for the
    factual continuation.

    Args:
        model: the model at the fork point (left untouched).
        interventions: name → ``g(model)`` or ``None``.
        steps, recorder, context, repeat: as in :func:`fork`.
        executor: anything with ``.map(fn, specs)`` (default: serial ``LocalExecutor(0)``). Process
            pools need picklable models, recorders and interventions (top-level functions,
            :func:`for_agents` with a top-level action); Ray also accepts lambdas (cloudpickle).
        keep_models: also return each branch's final model (costly to ship back from workers).
        indicator: evaluated per step of each branch into ``ForkResult.f_values``.

    Returns:
        name → ForkResult (``model`` is ``None`` unless ``keep_models``).
    """
    from aumann.simulators.executors import LocalExecutor

    steps = _check_steps(steps)
    names = list(interventions)
    executor = executor or LocalExecutor(max_workers=0)
    specs = [(model, interventions[n], steps, recorder, context, repeat, keep_models, indicator) for n in names]
    return dict(zip(names, executor.map(_fork_task, specs), strict=True))


__all__ = ["ForAgents", "ForkResult", "checkpoint", "for_agents", "fork", "fork_many", "indicator_values", "simulate"]
