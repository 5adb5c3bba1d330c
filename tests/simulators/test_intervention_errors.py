"""An intervention ``g(model)`` that raises in a fork or a replay is an :class:`InterventionError` naming it.

Before, its exception escaped bare (``ValueError: no agent 7``), with no word of the intervention, the fork or
replay, or the step, while a failing step in the same places says ``ModelStepError: ... at step 3 of 5``."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Iterator

import pytest

from aumann.errors import InterventionError, SimulationError, UnknownAgentError
from aumann.simulators import FeatureRecorder, for_agents, fork, simulate
from aumann.simulators.intervention import intervention_name
from tests.simulators.user_models import Fragile


def _rec() -> FeatureRecorder:
    return FeatureRecorder({"x": "x"})


def _model(steps: int = 3) -> Fragile:
    model = Fragile(crash_at=99)
    simulate(model, steps=steps, recorder=_rec())
    return model


def _refuse_from_step_5(model: Fragile) -> None:
    if model.steps >= 5:
        raise ValueError("no agent 7")


@pytest.mark.parametrize("strategy", ["copy", "replay"])
def test_a_raising_intervention_of_a_fork_names_itself_the_fork_and_the_step(strategy: str) -> None:
    model = _model()
    with pytest.raises(InterventionError) as info:
        fork(model, intervention=lambda m: 1 / 0, steps=2, recorder=_rec(),
             strategy=strategy, factory=lambda: Fragile(crash_at=99))
    assert str(info.value) == (
        f"intervention 'test_a_raising_intervention_of_a_fork_names_itself_the_fork_and_the_step.<locals>.<lambda>' "
        f"raised ZeroDivisionError when applied to the fork (by {strategy}) of Fragile (model.steps = 3), before the "
        "first of 2 forked step(s) (repeat=False: applied once): division by zero (the original traceback is "
        "chained above)")
    assert isinstance(info.value.__cause__, ZeroDivisionError) and info.value.panel is None
    assert isinstance(info.value, SimulationError)  # still a RuntimeError, as most interventions' errors are


def test_a_repeated_intervention_says_before_which_forked_step_and_keeps_the_steps_recorded() -> None:
    model = _model()
    with pytest.raises(InterventionError, match=r"^intervention '_refuse_from_step_5' raised ValueError when applied "
                                                r"to the fork \(by copy\) of Fragile \(model.steps = 3\) before forked "
                                                r"step 3 of 4 \(repeat=True: applied before every step\): no agent 7; "
                                                r"the 2 capture\(s\) recorded before it are in this error's .panel"
                       ) as info:
        fork(model, intervention=_refuse_from_step_5, steps=4, repeat=True, recorder=_rec(), strategy="copy")
    assert info.value.panel.values.shape[0] == 2
    assert str(info.value.__cause__) == "no agent 7"


class _Switch:
    """An intervention that worked in the run and raises once switched on (state the factory does not rebuild)."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, model: Fragile) -> None:
        if self.on:
            raise KeyError("gone")


@pytest.mark.parametrize(("repeat", "where"), [
    (False, "re-applied before replayed step 4 of 4 (applied once)"),
    (True, "re-applied before replayed step 4 of 5 (applied before every step)"),
])
def test_an_intervention_failing_in_a_replay_names_the_replay_and_the_step(repeat: bool, where: str) -> None:
    switch = _Switch()
    branch = fork(_model(), intervention=switch, steps=1 + repeat, repeat=repeat, recorder=_rec(),
                  strategy="copy").model
    switch.on = True
    with pytest.raises(InterventionError) as info:
        fork(branch, steps=1, recorder=_rec(), strategy="replay", factory=lambda: Fragile(crash_at=99))
    assert str(info.value).startswith(
        f"intervention '_Switch object' raised KeyError in a replay of Fragile (the model rebuilt from its factory "
        f"and re-run to fork it), where it was {where} (model.steps = 3): 'gone'; an intervention that "
        "ran in the original run and fails in its replay depends on something the factory does not rebuild")
    assert isinstance(info.value.__cause__, KeyError)


def test_aumann_errors_and_memory_errors_of_an_intervention_pass_through_unchanged() -> None:
    model = _model()
    with pytest.raises(UnknownAgentError):
        fork(model, intervention=for_agents([10_000], lambda a: None), steps=1, recorder=_rec())

    def hungry(m: Fragile) -> None:
        raise MemoryError("no room")

    with pytest.raises(MemoryError) as info:
        fork(model, intervention=hungry, steps=1, recorder=_rec())
    assert not isinstance(info.value, InterventionError)


def test_an_intervention_is_named_without_an_address() -> None:
    assert intervention_name(functools.partial(_refuse_from_step_5)) == "_refuse_from_step_5"
    assert intervention_name(for_agents([1], print)) == "ForAgents object"


@pytest.mark.parametrize("repeat", [False, True])
def test_an_intervention_calling_sys_exit_is_an_intervention_error_not_the_end_of_the_process(repeat: bool) -> None:
    # sys.exit(3) in g escaped as SystemExit: `aumann` ended with status 3 and no word of the intervention, where
    # every other boundary that calls user code (indicators, scenario code) turns it into its typed error
    def quit_early(m: Fragile) -> None:
        sys.exit(3)

    with pytest.raises(InterventionError, match=r"^intervention '.*quit_early' called sys.exit\(3\) when applied to "
                                                r"the fork \(by copy\) of Fragile .*: an intervention must return or "
                                                r"raise, not end the process") as info:
        fork(_model(), intervention=quit_early, steps=2, repeat=repeat, recorder=_rec(), strategy="copy")
    assert isinstance(info.value.__cause__, SystemExit)


def _lazy_generator(m: Fragile) -> Iterator[None]:
    m.x = 1_000.0  # never runs: calling a generator function only makes the generator
    yield


async def _coroutine(m: Fragile) -> None:
    m.x = 1_000.0


@pytest.mark.parametrize(("g", "made"), [
    (_lazy_generator, "a generator"),
    (_coroutine, "a coroutine"),
    (lambda m: map(lambda a: setattr(a, "x", 1_000.0), m.agents), "a map object"),
], ids=["generator", "coroutine", "map"])
def test_an_intervention_whose_body_never_ran_is_an_intervention_error(g, made: str) -> None:
    """An intervention written with ``yield`` (or ``async def``, or returning a lazy ``map(...)``) returned an object
    and changed nothing: the fork was the factual run, silently, and every effect measured through it zero."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no "coroutine was never awaited" left behind)
        with pytest.raises(InterventionError, match=rf"^intervention '.*' returned {made} when applied to the fork "
                                                    r"\(by copy\) of Fragile .*: its body never ran"):
            fork(_model(), intervention=g, steps=2, recorder=_rec(), strategy="copy")


def _set_x(m: Fragile) -> None:
    for a in m.agents:
        a.x = 1_000.0


def _works_then_returns_a_generator(m: Fragile) -> Iterator[float]:
    _set_x(m)  # a plain function: this runs; the generator it returns is a by-product
    return (a.x for a in m.agents)


def test_an_intervention_that_ran_and_returns_a_generator_is_warned_of_not_refused() -> None:
    """0b8fc29 refused every returned generator as 'its body never ran'; a plain function that changed the model and
    returned a generator expression ran, and its fork was right (accepted before): it is now warned of, not refused.
    A generator function's own generator (its body never ran) is still refused."""
    from aumann.errors import AumannWarning

    with pytest.warns(AumannWarning, match=r"returned a generator .*nothing of the generator itself runs"):
        res = fork(_model(), intervention=_works_then_returns_a_generator, steps=2, recorder=_rec(), strategy="copy")
    ran = fork(_model(), intervention=_set_x, steps=2, recorder=_rec(), strategy="copy")
    factual = fork(_model(), steps=2, recorder=_rec(), strategy="copy")
    assert (res.panel.values == ran.panel.values).all() and (res.panel.values != factual.panel.values).any()
    with pytest.raises(InterventionError, match="its body never ran"):
        fork(_model(), intervention=functools.partial(_lazy_generator), steps=2, recorder=_rec(), strategy="copy")
