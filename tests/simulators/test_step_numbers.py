"""Every error about a failing step counts steps the same way: from 1, as "step 4 of 6".

Before, a Mesa model raising at its fourth step ("boom at step 4") run through a scenario (``aumann run``) said
"step() at step 3 raised RuntimeError: boom at step 4": the boundary counted the steps aumann had seen taken (0-based)
while the model, and :class:`ModelStepError` for the same model run by ``simulate``, counted from 1 ("at step 4 of
6 (model.steps = 4)"). Outside a run it read the model's counter after the failure, which Mesa advances before the
step and a plain model after it: 4 for one model and 3 for the other at the same step."""

from __future__ import annotations

import pytest

from aumann.attribution import indicators
from aumann.errors import ModelStepError, ScenarioCodeError
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, simulate
from aumann.simulators.boundary import UserStep
from tests.hardening.userscen import Config as PlainConfig
from tests.hardening.userscen import Model as PlainModel
from tests.simulators.user_models import Fragile


class Config(ScenarioConfig):
    agents: int = 5
    steps: int = 6


def _fragile(cfg: Config, rng, backend=None) -> Fragile:
    return Fragile(crash_at=4, seed=0)


FRAGILE = Scenario(
    name="fragile", description="a Mesa random walk that raises at its fourth step", config_model=Config,
    build_model=_fragile, make_recorder=lambda cfg: FeatureRecorder({"x": "x"}), features=("x",),
    indicator=lambda cfg: indicators.get("var"), original=lambda cfg: indicators.get("var"),
    baseline_action=lambda model, positions: None)


def test_a_scenario_step_error_counts_as_the_model_and_simulate_do():
    with pytest.raises(ScenarioCodeError) as info:
        FRAGILE.simulate(FRAGILE.load_config(), rng=0)
    assert str(info.value) == ("scenario 'fragile': step() at step 4 of 6 (model.steps = 4) raised RuntimeError: "
                               "boom at step 4")
    with pytest.raises(ModelStepError) as plain:
        simulate(Fragile(crash_at=4), steps=6, recorder=FeatureRecorder({"x": "x"}))
    assert "at step 4 of 6 (model.steps = 4): boom at step 4" in str(plain.value)


def test_a_plain_model_counting_its_steps_after_them_gets_the_same_number():
    """userscen's model raises at its fourth step with its own counter at 3 (it counts a step once it is done)."""
    sc_step = UserStep("user-code")
    model = PlainModel(PlainConfig(mode="raise"), None)
    for _ in range(3):
        sc_step(model)
    with pytest.raises(ScenarioCodeError, match=r"^scenario 'user-code': step\(\) at step 4 \(model.steps = 3\) "
                                                r"raised ZeroDivisionError"):
        sc_step(model)



def test_a_replayed_step_error_says_which_of_the_replayed_steps():
    """A replay (``replay(factory, steps)``, which rebuilds a scenario run's checkpoints, and a fork by replay) said
    "step() at step 3 (model.steps = 3)" where simulate() says "step 3 of 6": the replay did not tell the scenario's
    step its place. It now counts the steps it replays, "step 3 of 5"."""
    from aumann.simulators import fork, replay

    with pytest.raises(ScenarioCodeError) as info:
        replay(lambda: Fragile(crash_at=3), 5, step=UserStep("fragile"))
    assert str(info.value) == ("scenario 'fragile': step() at step 3 of 5 (model.steps = 3) raised RuntimeError: "
                               "boom at step 3")
    model = Fragile(crash_at=99)
    simulate(model, steps=4, recorder=FeatureRecorder({"x": "x"}), step=UserStep("fragile"))
    # the factory's model is not the one that ran (a factory that lost the run's setting): its replay fails
    with pytest.raises(ScenarioCodeError) as info:
        fork(model, steps=1, recorder=FeatureRecorder({"x": "x"}), strategy="replay",
             factory=lambda: Fragile(crash_at=2), step=UserStep("fragile"))
    assert str(info.value) == ("scenario 'fragile': step() at step 2 of 4 (model.steps = 2) raised RuntimeError: "
                               "boom at step 2")


def _plain_step(model: Fragile) -> None:  # a step function of the user's, not a scenario's
    model.step()


def test_a_plain_step_failing_in_a_replay_is_a_model_step_error_naming_the_replayed_step():
    """The same replays with a plain step (the model's own ``step()``, or ``step=fn``): the model's exception escaped
    bare (``RuntimeError: boom at step 3``, no word of the replay or of which step), where a scenario's step names
    itself as above and simulate() says ModelStepError. It is now a ModelStepError counting the replayed steps, the
    original chained."""
    from aumann.simulators import fork, replay

    with pytest.raises(ModelStepError) as info:
        replay(lambda: Fragile(crash_at=3), 5)
    assert str(info.value).startswith("Fragile's step raised RuntimeError at step 3 of 5 of a replay (the model "
                                      "rebuilt from its factory and re-stepped to fork it) (model.steps = 3): boom "
                                      "at step 3; ")
    assert isinstance(info.value.__cause__, RuntimeError) and info.value.panel is None
    model = Fragile(crash_at=99)
    simulate(model, steps=4, recorder=FeatureRecorder({"x": "x"}), step=_plain_step)
    with pytest.raises(ModelStepError, match=r"^Fragile's step raised RuntimeError at step 2 of 4 of a replay .*"
                                             r"\(model.steps = 2\): boom at step 2; ") as info:
        fork(model, steps=1, recorder=FeatureRecorder({"x": "x"}), strategy="replay",
             factory=lambda: Fragile(crash_at=2), step=_plain_step)
    assert str(info.value.__cause__) == "boom at step 2"
