"""The runner owns the step loop: ``simulate`` records a run; ``checkpoint`` and ``fork`` branch it.

``simulate(model, steps=T, recorder=rec)`` advances the model T times and calls
``rec.capture(model)`` after each, then returns the :class:`~aumann.panel.Panel`. A step is
``step(model)`` — by default ``model.step()``, or ``model.simulator.run_for(1)`` when a Mesa DEVS
simulator drives the model (Mesa 3.3's wolf–sheep regrows grass through simulator events) — and any
callable can be given with ``step=``. Nothing patches the model.

Counterfactual forks: ``fork(model, intervention=g, steps=k, recorder=rec)`` makes a branch at the
model's current step t, applies ``g(branch)`` (e.g. force a set of agents to a baseline action),
steps k times recording, and returns the panel and the final model. The original is untouched, so
the factual run can continue. A branch is made by ``strategy``:

* ``"copy"`` — a deep copy, repaired for Mesa's cell spaces and DEVS events and checked to be a
  faithful, independent copy (:mod:`aumann.simulators.branching` explains why plain ``deepcopy``
  breaks Mesa grids);
* ``"replay"`` — rebuild the model with ``factory()`` (a callable returning it in its initial state;
  a :class:`~aumann.scenarios.Scenario` passes its own) and replay its history — the steps it took
  with the same step function, and any interventions — then check it against the original;
* ``"auto"`` (default) — copy when the copy works, else replay when a factory is known, else
  :class:`~aumann.errors.ReplayUnavailableError` saying to pass ``factory=``.

With LLM decisions served from a :class:`~aumann.simulators.llm.ResponseCache` (mode ``replay`` or a
warm ``record``), a fork with no intervention reproduces the factual continuation exactly and a
replay costs no calls; decision backends and caches are shared (not copied) by ``deepcopy``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aumann.errors import (
    AumannError,
    CheckpointError,
    ModelStepError,
    ReplayUnavailableError,
    SimulationError,
    UnknownAgentError,
)
from aumann.progress import progress_bar
from aumann.simulators import branching
from aumann.simulators.boundary import UserStep
from aumann.simulators.branching import StepFn, advance, default_step
from aumann.simulators.intervention import apply_intervention, model_step_label
from aumann.simulators.recording import ContextFn, Recording, _check_steps

Observer = Callable[[Any, int], None]
Intervention = Callable[[Any], None]
Factory = Callable[[], Any]
STRATEGIES = ("auto", "copy", "replay")


def _check_step_fn(model: Any, step: StepFn | None) -> None:
    if step is not None:
        if not callable(step):
            raise SimulationError(f"step must be a callable step(model); got {step!r}")
    elif not callable(getattr(model, "step", None)):
        raise SimulationError(f"model {type(model).__name__} has no step() method; pass step=fn to advance it")


def _advance_recorded(model: Any, step: StepFn | None, rec: Recording, t: int, steps: int) -> None:
    """:func:`advance` for a recording's step ``t`` (0-based) of ``steps``: an exception of the model's own (not
    aumann's typed errors) becomes a :class:`~aumann.errors.ModelStepError` naming the step, with the original
    chained and the steps recorded before it as the error's ``panel``."""
    fn = (step.at(t + 1, steps) if isinstance(step, UserStep) else step) or default_step

    def watched(m: Any) -> None:  # inside advance: its overrides' removal watch is put back after this one
        with rec.stepping(m):
            fn(m)

    try:  # a scenario's step is told its place in the run, so its errors count as ModelStepError does
        advance(model, watched)
    except (AumannError, MemoryError):
        raise
    except Exception as exc:
        from aumann.simulators.boundary import exception_message

        partial = rec.partial()
        kept = (f"the {partial.shape[0]} capture(s) recorded before it are in this error's .panel" if partial
                is not None else "nothing was recorded before it")
        mesa_step = getattr(model, "steps", None)
        counted = isinstance(mesa_step, int) and not isinstance(mesa_step, bool)
        label = f" (model.steps = {mesa_step})" if counted else ""
        err = ModelStepError(f"{type(model).__name__}'s step raised {type(exc).__name__} at step {t + 1} of {steps}"
                             f"{label}: {exception_message(exc)}; {kept} (the original traceback is chained above)")
        err.panel = partial
        raise err from exc


def simulate(
    model: Any,
    steps: int,
    recorder: Any,
    *,
    observers: Sequence[Observer] = (),
    progress: bool = False,
    context: Mapping[str, ContextFn] | None = None,
    initial: bool = False,
    step: StepFn | None = None,
    warn_finished: bool = True,
    warn_transient: bool = True,
    warn_rounded: bool | None = None,
):
    """Step ``model`` in place ``steps`` times, recording after each step; return the Panel.

    A model that says it is done (Mesa's ``model.running = False``: forest fire when no tree burns any more;
    ``batch_run`` stops there) is still stepped for all ``steps``, so the panel has the shape asked for and a
    model that never sets ``running`` is recorded as before; the step where ``running`` became ``False`` is
    said once (:class:`~aumann.errors.ModelFinishedWarning`, when steps followed it) and kept in the panel's
    ``meta["model_finished"]``
    (``{"step": panel position, "model_step": model.steps, "steps": T}``; position -1: finished before the
    first step). Its later steps usually change nothing: pass fewer ``steps`` to stop there.

    Args:
        model: any object with ``step()`` (a ``mesa.Model``), or any object with ``step=`` given;
            agents are read through the recorder.
        steps: number of steps T (positive int).
        recorder: a :class:`FeatureRecorder` or :class:`ArrayRecorder`.
        observers: extra callables ``obs(model, t)`` called after each capture (t = 0 … T-1).
        progress: show a Rich progress bar.
        context: mapping name → ``fn(model)`` (number or array), recorded per step into
            ``Panel.context`` (world state such as prices; never attributed).
        initial: also capture the state before the first step, as the panel's first row (the
            panel then has T + 1 steps; useful for a "pre-event" baseline).
        step: how to advance the model one step, ``step(model)`` (default: ``model.step()``, or
            ``model.simulator.run_for(1)`` for a model driven by a Mesa DEVS simulator); e.g.
            ``step=lambda m: m.simulator.run_for(1)``. Forks and replays of this model reuse it.
        warn_finished: warn when the model sets ``running = False`` (forks pass ``False``: the factual run
            said it already, and a branch from a finished model is finished too).
        warn_transient: warn (:class:`~aumann.errors.TransientAgentsWarning`) when agents were born and removed within
            one step, so that no capture saw them; they are counted in the panel's ``meta["transient_agents"]``
            either way (forks pass ``False``: the factual run said it already).
        warn_rounded: warn (:class:`~aumann.errors.PrecisionLossWarning`) of recorded integers past ±2**53 that
            float64 rounded (an ``ArrayRecorder(dtype=float32)``'s features: past ±2**24, float32), counted in
            ``meta["rounded_values"]`` either way; ``None`` (default): as ``warn_transient``.

    Returns:
        Panel with values (T, N, D) float64, agent ids ascending, features in the recorder's order.

    Raises:
        StepsMismatchError: ``steps`` is not a positive int.
        UnknownAttributeError, FeatureValueError: a feature cannot be read or is not a finite number.
        ModelStepError: the model's own step raised (named with its step; ``exc.panel`` holds the steps
            recorded before it, ``exc.__cause__`` the model's exception).
    """
    steps = _check_steps(steps)
    _check_step_fn(model, step)
    if not hasattr(recorder, "recording"):
        raise SimulationError(
            f"recorder must be a FeatureRecorder or ArrayRecorder; got {type(recorder).__name__}"
        )
    bar = progress_bar(progress, steps, f"simulate {type(model).__name__}")
    finished: dict[str, Any] | None = None if _running(model) else {"step": -1, "model_step": _model_step(model)}
    try:
        with recorder.recording(model, steps=steps + bool(initial), context=context) as rec:
            rec.warn_transients = warn_transient
            # (a fork's recording: its run warned of both already)
            rec.warn_rounded = warn_transient if warn_rounded is None else warn_rounded
            if initial:
                rec.capture(model)
            for t in range(steps):
                _advance_recorded(model, step, rec, t, steps)
                branching.record(model, ("step", 1, step))  # the history is exact at every observer call
                rec.capture(model)
                if finished is None and not _running(model):
                    finished = {"step": t + bool(initial), "model_step": _model_step(model)}
                for obs in observers:
                    obs(model, t)
                if bar is not None:
                    bar.advance()
    finally:
        if bar is not None:
            bar.stop()
    panel = rec.panel()
    if finished is not None:
        finished["steps"] = int(panel.shape[0])
        panel.meta["model_finished"] = finished
        if warn_finished and finished["step"] < finished["steps"] - 1:  # (finished on the last step: none after)
            _warn_finished(model, finished)
    return panel


def _running(model: Any) -> bool:
    """``False`` only when the model says it is done (``running`` is the bool ``False``): a model without
    ``running``, or with something else there, is running."""
    flag = getattr(model, "running", True)
    return not (isinstance(flag, bool | np.bool_) and not flag)


def _model_step(model: Any) -> int | None:
    s = getattr(model, "steps", None)
    return int(s) if isinstance(s, int | np.integer) and not isinstance(s, bool) else None


def _warn_finished(model: Any, finished: Mapping[str, Any]) -> None:
    import warnings

    from aumann.errors import ModelFinishedWarning

    at, total = finished["step"], finished["steps"]
    label = "" if finished["model_step"] is None else f" (model step {finished['model_step']})"
    when = (f"was already finished (running = False) before the first step{label}" if at < 0
            else f"set running = False at panel step {at}{label}")
    rest = total - 1 - at
    warnings.warn(
        f"{type(model).__name__} {when}, the step where Mesa's batch_run stops; aumann kept stepping it, so the "
        f"panel's last {rest} of {total} step(s) are of a finished model (usually unchanged, so f is flat there and "
        f"Δv can be 0 at a t* among them); pass steps={max(at + 1, 1)} to stop where it finished",
        ModelFinishedWarning, stacklevel=3)


def _branch(model: Any, strategy: str, factory: Factory | None, step: StepFn | None) -> tuple[Any, str]:
    if strategy not in STRATEGIES:
        raise SimulationError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if factory is not None and not callable(factory):
        raise SimulationError(f"factory must be a callable returning a fresh model; got {factory!r}")
    lin = branching.lineage(model, create=factory is not None)
    if lin is not None and factory is not None:
        lin.factory = factory
    reason = None
    if strategy == "copy" or (strategy == "auto" and (lin is None or lin.copy_error is None)):
        try:
            branch = branching.copy_model(model)
        except CheckpointError as exc:
            if strategy == "copy":
                raise
            reason = str(exc)
            lin = lin or branching.lineage(model, create=True)
            if lin is not None:
                lin.copy_error = reason  # decided once per model: later forks replay without trying again
            warn_replay(model, reason)
        else:
            if lin is not None:
                branching.set_lineage(branch, lin.clone())
            return branch, "copy"
    elif lin is not None:
        reason = lin.copy_error
    try:
        branch = branching.replay_model(model, factory, step)
    except ReplayUnavailableError as exc:
        if reason is None:
            raise
        raise type(exc)(f"{reason}. {exc}") from exc
    blin = branching.lineage(branch)
    if blin is not None:
        blin.copy_error = reason
    return branch, "replay"


def warn_replay(model: Any, reason: str) -> None:
    """Say once (a :class:`~aumann.errors.ForkFallbackWarning`; Python shows each distinct message once)
    that ``strategy="auto"`` forks ``model`` by replay, and why its copy failed."""
    import warnings

    from aumann.errors import ForkFallbackWarning

    warnings.warn(ForkFallbackWarning(
        f"{type(model).__name__} cannot be copied, so its forks replay its history from the factory instead "
        f"(slower: every fork re-runs the steps before it). Why: {reason}"), stacklevel=3)


def checkpoint(model: Any, *, strategy: str = "auto", factory: Factory | None = None,
               step: StepFn | None = None) -> Any:
    """A second model in ``model``'s current state (agents, space, ``rng`` state) to fork from.

    Args:
        model: the model to branch (left untouched).
        strategy: ``"copy"`` (a checked deep copy), ``"replay"`` (rebuild with ``factory`` and replay
            the model's history) or ``"auto"`` (copy when the copy works, else replay).
        factory: a callable returning the model in its initial state (same seed and parameters); it
            is remembered for later forks of this model and its branches.
        step: the step function the model was advanced with, when it did not run through
            :func:`simulate` (which records it).

    Raises:
        CheckpointError: ``strategy="copy"`` and the model cannot be copied faithfully (the message
            names the cause: ``RecursionError``, an uncopyable object, a cell left out of its space, ...).
        ReplayUnavailableError: the copy fails and no factory is known (the message says to pass
            ``factory=``).
        ReplayDivergedError: the replay does not reproduce the model's state.
    """
    return _branch(model, strategy, factory, step)[0]


@dataclass(frozen=True)
class ForkResult:
    """What a fork returns: the recorded panel of the continuation, the final model, the
    indicator per step (``f_values`` (T,), when an indicator was given) and how the branch was made
    (``strategy``: ``"copy"`` or ``"replay"``)."""

    panel: Any
    model: Any
    f_values: Any = None
    strategy: str = "copy"


def indicator_values(f: Callable[..., Any], panel: Any):
    """f evaluated on every step of ``panel`` with that step's context → float64 numpy array (T,).

    (Absent rows hold 0.0 in a recorded panel; an alive-aware indicator gets ``panel.alive`` and never
    sees them.) Uses :func:`aumann.attribution.indicators.evaluate`, a
    block of whole steps at a time (≤ 128 MiB as float64), so a float32 panel is never upcast whole.
    """
    import numpy as np

    from aumann.attribution.indicators import EvalContext, evaluate

    state = EvalContext.of_panel(panel)  # values, context and living mask of every step, together
    T = panel.values.shape[0]
    chunk = max(1, (128 << 20) // max(1, panel.values[0].size * 8))  # whole steps, ≤ 128 MiB of float64 at a time
    if chunk >= T:
        return evaluate(f, state)
    out = np.empty(T, dtype=np.float64)
    for s in range(0, T, chunk):
        sl = slice(s, min(T, s + chunk))
        out[sl] = evaluate(f, state.steps(sl))
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
    strategy: str = "auto",
    factory: Factory | None = None,
    step: StepFn | None = None,
) -> ForkResult:
    """Branch a run: make a branch at the model's state, apply ``intervention``, step ``steps`` times recording.

    Args:
        model: the model at the fork point (left untouched).
        intervention: ``g(branch)`` applied once before the first forked step (or before every
            step with ``repeat=True``, which forces e.g. a baseline action each step); ``None``
            continues the factual run.
        steps: number of steps to run after the fork.
        recorder: recorder for the continuation.
        context: per-step world state to record, as in :func:`simulate`.
        repeat: apply the intervention before every step instead of once.
        indicator: a batched torch indicator ``f(z[..., N, D])`` (an engine ``Indicator`` or any
            callable) evaluated on each recorded step into ``ForkResult.f_values``.
        strategy: ``"auto"`` (default), ``"copy"`` or ``"replay"``: how the branch is made (see
            :func:`checkpoint`).
        factory: a callable returning the model in its initial state, for forks by replay.
        step: how to advance the branch (default: the model's own step, see :func:`simulate`).

    Returns:
        ForkResult(panel, model, f_values, strategy) -- the model is the branch after its last step.

    Raises:
        CheckpointError, ReplayUnavailableError, ReplayDivergedError: see :func:`checkpoint`.
    """
    steps = _check_steps(steps)
    if intervention is not None and not callable(intervention):
        raise SimulationError(f"intervention must be a callable g(model); got {intervention!r}")
    _check_step_fn(model, step)
    branch, how = _branch(model, strategy, factory, step)
    if step is None:
        step = _known_step(branch)
    at = f"the fork (by {how}) of {type(model).__name__}{model_step_label(model)}"
    if intervention is None or not repeat:
        if intervention is not None:
            apply_intervention(intervention, branch, f"when applied to {at}, before the first of {steps} forked "
                               "step(s) (repeat=False: applied once)")
            branching.record(branch, ("apply", intervention))
        panel = simulate(branch, steps, recorder, context=context, step=step, warn_finished=False,
                         warn_transient=False)
    else:
        with recorder.recording(branch, steps=steps, context=context) as rec:
            rec.warn_transients = False
            rec.warn_rounded = False
            for t in range(steps):
                apply_intervention(intervention, branch, f"when applied to {at} before forked step {t + 1} of "
                                   f"{steps} (repeat=True: applied before every step)", panel=rec.partial)
                _advance_recorded(branch, step, rec, t, steps)
                branching.record(branch, ("repeat", intervention, 1, step))
                rec.capture(branch)
        panel = rec.panel()
    f_values = None if indicator is None else indicator_values(indicator, panel)
    return ForkResult(panel, branch, f_values, how)


def _known_step(model: Any) -> StepFn | None:
    """The step function this model's history was advanced with (when it used exactly one)."""
    lin = branching.lineage(model)
    if lin is None:
        return None
    fns = {s[2] if s[0] == "step" else s[3] for s in lin.segments if s[0] != "apply"}
    return next(iter(fns)) if len(fns) == 1 else None


def replay(factory: Factory, steps: int = 0, *, step: StepFn | None = None) -> Any:
    """Build a model with ``factory()`` and advance it ``steps`` times with ``step`` (no recording).

    The model at step ``steps`` of the factual run whose initial state ``factory`` rebuilds; it
    remembers ``factory`` and its history, so forks of it can replay too.
    """
    if not callable(factory):
        raise SimulationError(f"factory must be a callable returning a fresh model; got {factory!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise SimulationError(f"steps must be a non-negative integer; got {steps!r}")
    return branching.run_plan(branching.Lineage(factory, [("step", steps, step)] if steps else []))


@dataclass(frozen=True)
class ForAgents:
    """An intervention calling ``action(agent)`` on the agents whose ``unique_id`` is in ``ids``, once on each (an id
    given twice, or as ``1`` and ``1.0``, names one agent).

    Picklable when ``action`` is (a top-level function or ``functools.partial``), so it can be
    shipped to process-pool or Ray workers by :func:`fork_many`.

    ``missing``: what an id with no agent in the model is -- ``"error"`` (default) or ``"skip"`` (act on the
    agents still present: with ``fork(..., repeat=True)`` on a model with deaths, an agent that dies during the
    branch is no longer acted on, where ``"error"`` stops the branch at the step after its death).

    Raises (when applied):
        UnknownAgentError: an id with no live agent in the model (``missing="error"``).
    """

    ids: tuple[Hashable, ...]
    action: Callable[[Any], None]
    missing: str = "error"

    def __call__(self, model: Any) -> None:
        by_id = {a.unique_id: a for a in model.agents}
        missing = [i for i in self.ids if i not in by_id]
        if missing:  # a panel's label of an id it keeps as text (a tuple (0, 1) is "(0, 1)") names that agent too
            by_id = {**_by_label(by_id), **by_id}
            missing = [i for i in missing if i not in by_id]
        if missing and self.missing != "skip":
            at = getattr(model, "steps", None)
            raise UnknownAgentError(
                f"intervention names {len(missing)} agent id(s) not in the model"
                f"{'' if at is None else f' at model step {at}'}, e.g. {missing[:5]}; the model has "
                f"{len(model.agents)} agents with ids {_some_ids(a.unique_id for a in model.agents)}... An agent "
                "that was there and has left (died: with repeat=True, during the branch) is acted on no more with "
                "for_agents(ids, action, missing='skip')"
            )
        done: set[int] = set()  # each agent once: an id given twice (1 and 1.0, a tuple and its label) acted twice
        for i in self.ids:
            agent = by_id.get(i, _NONE)
            if agent is not _NONE and id(agent) not in done:
                done.add(id(agent))
                self.action(agent)


_NONE = object()


def _by_label(by_id: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
    """The agents of ``by_id`` under the label a panel keeps for their ids where it is not the id itself (text for
    a tuple id), so that ids read off ``panel.agent_ids`` or ``top_agents.csv`` name their agents."""
    from aumann.labels import id_labels

    uids = list(by_id)
    try:
        labels = id_labels(uids)
    except Exception:  # ids a panel cannot label (mixed kinds, None): matched as they are
        return {}
    return {lab: by_id[u] for u, lab in zip(uids, labels, strict=True) if lab is not u and lab != u}


def _some_ids(ids: Iterable[Hashable], k: int = 10) -> list[Hashable]:
    """The first ``k`` ids in order (text and numbers mixed: by kind, then order), for messages."""
    ids = list(ids)
    for key in (None, lambda u: (type(u).__name__, u), lambda u: (type(u).__name__, repr(u))):
        try:
            return sorted(ids, key=key)[:k]
        except TypeError:  # ids of kinds that cannot be compared (a model's text ids beside Mesa's ints)
            continue
    return ids[:k]


def for_agents(ids: Iterable[Hashable], action: Callable[[Any], None], *, missing: str = "error") -> ForAgents:
    """An intervention that calls ``action(agent)`` on every agent whose ``unique_id`` is in ``ids``.

    ``missing="skip"`` acts on the agents of ``ids`` that are in the model and passes over the others (for
    ``fork(..., repeat=True)`` on models whose agents die); ``"error"`` (default) refuses an id with no agent.

    Example:
        >>> freeze = for_agents([3, 7], lambda a: setattr(a, "wealth", 0))   # doctest: +SKIP
        >>> result = fork(model, intervention=freeze, steps=10, recorder=rec)  # doctest: +SKIP
    """
    if not isinstance(missing, str) or missing not in ("error", "skip"):
        raise SimulationError(f"for_agents(missing=...) must be 'error' or 'skip'; got {missing!r}")
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        # for_agents("ab", g) acted on the agents 'a' and 'b'; for_agents(3, g) was a bare TypeError
        one = ids.item() if isinstance(ids, np.generic) else ids
        raise UnknownAgentError(f"for_agents takes a list of agent ids; got the single id {one!r}: pass [{one!r}] "
                                "for that one agent")
    given = tuple(ids)
    if given and all(isinstance(i, bool | np.bool_) for i in given):
        # a mask over agents: True == 1 in Python, so [True, False, True] acted twice on agent 1, once on agent 0
        raise UnknownAgentError(f"for_agents ids {list(given)[:5]} are booleans, not agent ids: for a mask over agents "
                                "(panel.agent_ids order), pass the ids it selects, panel.agent_ids[mask].tolist()")
    return ForAgents(given, action, missing)


def _fork_task(spec: tuple) -> ForkResult:
    return _fork_from(spec[0], spec[1:])


def _fork_from(model: Any, spec: tuple) -> ForkResult:
    """One branch of :func:`fork_many` from the checkpoint ``model`` (the executor's shared object:
    shipped once per map, forked -- copied -- by every task, never modified). An error names the branch's key
    (:func:`_name_branch`), here in the worker, so that it travels back with the error through any executor."""
    intervention, steps, recorder, context, repeat, keep_model, indicator, strategy, factory, step, key = spec
    try:
        res = fork(model, intervention=intervention, steps=steps, recorder=recorder, context=context, repeat=repeat,
                   indicator=indicator, strategy=strategy, factory=factory, step=step)
    except Exception as exc:
        _name_branch(exc, key)
        raise
    return res if keep_model else ForkResult(res.panel, None, res.f_values, res.strategy)


def _name_branch(exc: Exception, key: Hashable) -> None:
    """Say which branch of :func:`fork_many` raised ``exc``: an aumann error's message starts with the key (the CLI
    shows that one line), another exception keeps its text and gets a note (shown with its traceback); both carry
    the key as ``.branch``. Type, other attributes (``.panel``) and cause are unchanged."""
    try:
        exc.branch = key  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__
        pass
    try:
        said = f"fork_many branch {key!r}"
    except Exception:  # a key whose repr raises: the branch's own error must not be lost to it
        said = f"fork_many branch of type {type(key).__name__}"
    if isinstance(exc, AumannError) and exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{said}: {exc.args[0]}", *exc.args[1:])
    else:
        exc.add_note(f"(in {said})")


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
    strategy: str = "auto",
    factory: Factory | None = None,
    step: StepFn | None = None,
) -> dict[str, ForkResult]:
    """Fork ``model`` once per named intervention and run the branches through an executor.

    Every branch starts from the same checkpoint (same ``rng`` state: common random numbers), so
    differences between branches come from the interventions alone. Include ``None`` for the
    factual continuation.

    Args:
        model: the model at the fork point (left untouched).
        interventions: name → ``g(model)`` or ``None``.
        steps, recorder, context, repeat: as in :func:`fork`.
        executor: anything with ``.map(fn, specs)`` (default: serial ``LocalExecutor(0)``). With
            aumann's executors the checkpoint travels once (Ray: one ``ray.put``) and every branch
            forks it; models, recorders and interventions are serialised with cloudpickle, so
            lambdas travel too, and the model's arrays arrive writable (Mesa grids write into them).
        keep_models: also return each branch's final model (costly to ship back from workers).
        indicator: evaluated per step of each branch into ``ForkResult.f_values``.
        strategy, factory, step: how branches are made and advanced (see :func:`fork`); with process
            pools or Ray, a replay factory must be picklable.

    Returns:
        name → ForkResult (``model`` is ``None`` unless ``keep_models``).

    Raises:
        The failing branch's own error (as :func:`fork` raises it: :class:`~aumann.errors.InterventionError`,
        :class:`~aumann.errors.ModelStepError`, ...), naming its key: an aumann error's message starts with
        ``fork_many branch 'KEY': ``, any other exception gets that as a note; both carry it as ``exc.branch``.
    """
    from aumann.simulators.executors import LocalExecutor

    steps = _check_steps(steps)
    names = list(interventions)
    executor = executor or LocalExecutor(max_workers=0)
    specs = [(interventions[n], steps, recorder, context, repeat, keep_models, indicator, strategy, factory, step, n)
             for n in names]
    if getattr(executor, "supports_shared", False):
        return dict(zip(names, executor.map(_fork_from, specs, shared=model), strict=True))
    return dict(zip(names, executor.map(_fork_task, [(model, *s) for s in specs]), strict=True))


__all__ = ["STRATEGIES", "ForAgents", "ForkResult", "checkpoint", "for_agents", "fork", "fork_many", "indicator_values",
           "replay", "simulate"]
