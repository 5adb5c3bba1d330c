"""An error out of one branch of :func:`fork_many` names that branch's key.

Before, ``fork_many(model, {"factual": None, "arm-07": g, ...})`` raised ``InterventionError: intervention 'g' raised
...``: with many branches sharing one intervention function (or one model step), nothing said which branch failed.
Now the message starts ``fork_many branch 'arm-07': ...`` and the error carries ``.branch``; its type and its own
attributes (``.panel``) are unchanged, serially, through a process pool, a plain ``map`` executor and Ray."""

from __future__ import annotations

import importlib.util

import pytest

from aumann.errors import AgentIdChangedError, AumannError, InterventionError, ModelStepError
from aumann.simulators import FeatureRecorder, LocalExecutor, fork_many, simulate
from tests.simulators.user_models import Fragile


class _PlainMap:
    """A user's executor: ``map(fn, items)`` and nothing else (no shared object: each item carries the model)."""

    def map(self, fn, items):
        return [fn(item) for item in items]

    def close(self) -> None:
        pass


EXECUTORS = [pytest.param(None, id="serial"),
             pytest.param(lambda: LocalExecutor(max_workers=2, mp_context="fork"), id="pool-2"),
             pytest.param(_PlainMap, id="plain-map")]


def _rec() -> FeatureRecorder:
    return FeatureRecorder({"x": "x"})


def _model(crash_at: int = 99) -> Fragile:
    model = Fragile(crash_at=crash_at)
    simulate(model, steps=2, recorder=_rec())
    return model


def _refuse(model: Fragile) -> None:
    raise ValueError("no agent 7")


def _renumber(model: Fragile) -> None:
    """From the second forked step on, one agent object changes its ``unique_id`` (a model renumbering agents)."""
    if model.steps >= 3:
        agent = min(model.agents, key=lambda a: str(a.unique_id))
        agent.unique_id = f"renamed-{model.steps}"


def _out_of_memory(model: Fragile) -> None:
    raise MemoryError("cannot allocate the branch's grid")


def _run(executor, model, arms, **kw):
    ex = executor() if executor is not None else None
    try:
        return fork_many(model, arms, steps=3, recorder=_rec(), executor=ex, **kw)
    finally:
        if ex is not None:
            ex.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_intervention_error_names_the_branch(executor) -> None:
    with pytest.raises(InterventionError) as info:
        _run(executor, _model(), {"factual": None, "arm-07": _refuse})
    err = info.value
    assert str(err).startswith("fork_many branch 'arm-07': intervention '_refuse' raised ValueError ")
    assert err.branch == "arm-07" and err.panel is None
    assert str(err).endswith(": no agent 7 (the original traceback is chained above)")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_model_step_error_names_the_branch_and_keeps_its_panel(executor) -> None:
    # the model's step raises at Mesa step 4: the branch from step 2 recorded one step before it
    with pytest.raises(ModelStepError) as info:
        _run(executor, _model(crash_at=4), {"arm-a": None})
    err = info.value
    assert str(err).startswith("fork_many branch 'arm-a': Fragile's step raised RuntimeError at step 2 of 3")
    assert err.branch == "arm-a" and err.panel is not None and err.panel.values.shape[0] == 1


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_agent_id_changed_error_names_the_branch(executor) -> None:
    with pytest.raises(AgentIdChangedError) as info:
        _run(executor, _model(), {"factual": None, "renumbered": _renumber}, repeat=True)
    assert str(info.value).startswith("fork_many branch 'renumbered': ")
    assert info.value.branch == "renumbered"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_error_of_another_kind_keeps_its_message_and_says_the_branch_in_a_note(executor) -> None:
    # a MemoryError passes through the intervention boundary unwrapped: its type and text stay, a note names the branch
    with pytest.raises(MemoryError) as info:
        _run(executor, _model(), {"factual": None, "big": _out_of_memory})
    err = info.value
    assert not isinstance(err, AumannError) and str(err) == "cannot allocate the branch's grid"
    assert "(in fork_many branch 'big')" in getattr(err, "__notes__", []) and err.branch == "big"


def test_a_single_fork_is_not_given_a_branch() -> None:
    from aumann.simulators import fork

    with pytest.raises(InterventionError) as info:
        fork(_model(), intervention=_refuse, steps=2, recorder=_rec())
    assert info.value.branch is None and not str(info.value).startswith("fork_many")


@pytest.mark.ray
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_branch_failing_on_ray_is_named_too() -> None:
    import ray

    from aumann.simulators import RayExecutor

    try:
        with pytest.raises(ModelStepError) as info:
            _run(lambda: RayExecutor(num_cpus=1), _model(crash_at=4), {"factual-0": None})
    finally:
        ray.shutdown()
    err = info.value
    assert str(err).startswith("fork_many branch 'factual-0': Fragile's step raised RuntimeError at step 2 of 3")
    assert err.branch == "factual-0" and err.panel.values.shape[0] == 1 and "ray node" in err.__cause__.where


class _Arm:
    """A branch key whose repr raises (a user's key type with a broken __repr__)."""

    def __hash__(self) -> int:
        return 7

    def __repr__(self) -> str:
        raise RuntimeError("repr of the key")


def test_a_branch_key_whose_repr_raises_leaves_the_branch_error_as_it_is() -> None:
    """Naming the branch called repr(key): a key whose repr raised replaced the branch's InterventionError with that
    RuntimeError, and the intervention's failure was lost. The error is the branch's, naming the key's type."""
    key = _Arm()
    with pytest.raises(InterventionError, match=r"^fork_many branch of type _Arm: intervention '_refuse'") as info:
        _run(None, _model(), {key: _refuse})
    assert info.value.branch is key


class _Unpicklable(MemoryError):
    """An exception that pickles but does not unpickle (its ``__init__`` takes two arguments, its ``args`` one)."""

    def __init__(self, what: str, size: int) -> None:
        super().__init__(f"cannot allocate {what} ({size} bytes)")


def _unpicklable(model: Fragile) -> None:
    raise _Unpicklable("the branch's grid", 1 << 40)


def test_a_branch_error_that_does_not_unpickle_names_the_branch_in_branch_too() -> None:
    # the driver gets a RemoteTaskError in its place: its message named the branch (from the worker's note, in the
    # traceback) but its .branch was None
    from aumann.errors import RemoteTaskError

    with pytest.raises(RemoteTaskError) as info:
        _run(lambda: LocalExecutor(max_workers=2, mp_context="fork"), _model(), {"factual": None, "big": _unpicklable})
    err = info.value
    assert "_Unpicklable: cannot allocate the branch's grid (1099511627776 bytes)" in str(err)
    assert err.branch == "big" and "(in fork_many branch 'big')" in getattr(err, "__notes__", [])
