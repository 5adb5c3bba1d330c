"""Agents that no capture sees: born and removed within one step (fry eaten as they hatch, lambs eaten the step
they are born), or there before the first step and removed in it. They have no row and no end-of-step state, so
they cannot enter the panel; before, they were counted nowhere (silent data loss). They are now counted per step in
the panel's ``meta["transient_agents"]`` and said in one ``TransientAgentsWarning``; nothing else about the panel
changes (the panels are compared with ones recorded by hand, unwatched)."""

from __future__ import annotations

import gc
import warnings
import weakref

import mesa
import numpy as np
import pytest

from aumann.errors import ModelStepError, TransientAgentsWarning
from aumann.panel import Panel
from aumann.simulators import ArrayRecorder, FeatureRecorder, default_step, fork, simulate

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Fish(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.size = 1.0

    def step(self) -> None:
        self.size += 1.0


class Weed(mesa.Agent):  # no ``size``: a type the default FeatureRecorder({"size": ...}) skips
    pass


class Pond(mesa.Model):
    """``fry[s]`` fry hatch and are eaten at model step ``s``; ``eaten_first`` fish there from the start are eaten in
    step 1; ``weeds[s]`` weeds grow and are eaten at step ``s``."""

    def __init__(self, n: int = 3, *, fry: dict[int, int] | None = None, eaten_first: int = 0,
                 weeds: dict[int, int] | None = None, back: bool = False) -> None:
        super().__init__(rng=1)
        self.fry, self.eaten_first, self.weeds, self.back = fry or {}, eaten_first, weeds or {}, back
        self.collected: list[bool] = []  # per eaten fry: was it collected at once (nothing held it)?
        Fish.create_agents(self, n)

    def step(self) -> None:
        self.agents.do("step")
        if self.steps == 1:
            for f in sorted(self.agents, key=lambda a: a.unique_id)[:self.eaten_first]:
                f.remove()
        for _ in range(self.fry.get(self.steps, 0)):
            fry = Fish(self)
            fry.remove()
            if self.back:  # removed and registered again: present at the capture, so not transient
                self.register_agent(fry)
                continue
            ref = weakref.ref(fry)
            del fry
            gc.collect()
            self.collected.append(ref() is None)
        for _ in range(self.weeds.get(self.steps, 0)):
            Weed(self).remove()


SIZE = FeatureRecorder({"size": "size"})
ENERGY = FeatureRecorder({"energy": "energy"})


def _by_hand(model: mesa.Model, steps: int, recorder: FeatureRecorder) -> Panel:
    """The same run recorded without the watch (captures only), for the comparison."""
    with recorder.recording(model, steps=steps) as rec:
        for _ in range(steps):
            default_step(model)
            rec.capture(model)
    return rec.panel()


def _without(panel: Panel, key: str) -> Panel:
    return Panel(panel.values, features=panel.features, agent_ids=panel.agent_ids, steps=panel.steps,
                 alive=panel.alive, context=panel.context, meta={k: v for k, v in panel.meta.items() if k != key})


def test_fry_born_and_eaten_within_a_step_are_counted_per_step_and_said_once():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        model = Pond(fry={2: 4, 4: 1})
        panel = simulate(model, steps=5, recorder=SIZE)
    assert panel.meta["transient_agents"] == {
        "total": 5, "types": {"Fish": 5},
        "steps": [{"step": 1, "model_step": 2, "count": 4}, {"step": 3, "model_step": 4, "count": 1}]}
    said = [str(w.message) for w in got if issubclass(w.category, TransientAgentsWarning)]
    assert len(said) == 1
    assert "5 agent(s) (5 Fish) were present at no capture" in said[0]
    assert "in 2 of 5 step(s): 4 at panel step 1 (model step 2), 1 at panel step 3 (model step 4)." in said[0]
    assert "initial=True" not in said[0]  # none was there before the first step
    # they are no features: the panel is the one recorded unwatched, plus the count
    assert panel.shape == (5, 3, 1) and panel.alive is None
    assert _without(panel, "transient_agents").equals(_by_hand(Pond(fry={2: 4, 4: 1}), 5, SIZE))
    # the watch holds no eaten fry (an object kept alive would go on acting in Mesa's AgentSet.do) ...
    assert model.collected == [True] * 5
    # ... and is gone from the model between steps
    assert "register_agent" not in vars(model) and "deregister_agent" not in vars(model)


def test_a_panel_without_them_is_the_unwatched_one_byte_for_byte(tmp_path):
    panel = simulate(Pond(), steps=4, recorder=SIZE)
    assert "transient_agents" not in panel.meta
    a, b = panel.save(tmp_path / "a.npz"), _by_hand(Pond(), 4, SIZE).save(tmp_path / "b.npz")
    assert a.read_bytes() == b.read_bytes()


def test_an_agent_removed_and_registered_again_within_the_step_is_not_transient():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TransientAgentsWarning)
        panel = simulate(Pond(fry={2: 2}, back=True), steps=3, recorder=SIZE)
    assert "transient_agents" not in panel.meta
    assert panel.N == 5 and not panel.alive[0, -2:].any() and panel.alive[1:, -2:].all()


def test_agents_removed_in_the_first_step_are_counted_unless_captured_before_it():
    panel = simulate(Pond(eaten_first=2, fry={1: 1}), steps=2, recorder=SIZE)
    assert panel.meta["transient_agents"] == {
        "total": 3, "types": {"Fish": 3}, "steps": [{"step": 0, "model_step": 1, "count": 3}],
        "removed_before_first_capture": 2}
    with pytest.warns(TransientAgentsWarning, match=r"\(1 born and removed within one step, 2 there before the first "
                      r"step and removed in it\); in 1 of 2 step\(s\): 3 at panel step 0 \(model step 1\)\. .*; a "
                      r"capture before the first step \(simulate\(\.\.\., initial=True\)\) gives those there"):
        simulate(Pond(eaten_first=2, fry={1: 1}), steps=2, recorder=SIZE)
    seen = simulate(Pond(eaten_first=2, fry={1: 1}), steps=2, recorder=SIZE, initial=True)
    assert seen.meta["transient_agents"]["total"] == 1 and "removed_before_first_capture" not in \
        seen.meta["transient_agents"]
    assert seen.N == 3 and seen.alive[0].all() and not seen.alive[1:, :2].any()


def test_only_the_agents_the_recorder_would_record_are_counted():
    model = Pond(fry={1: 1}, weeds={1: 3})
    panel = simulate(model, steps=2, recorder=FeatureRecorder({"size": "size"}))
    assert panel.meta["transient_agents"]["types"] == {"Fish": 1}  # weeds have no size: not recorded anyway
    chosen = FeatureRecorder({"size": lambda a: getattr(a, "size", 0.0)}, agents=lambda m: list(m.agents))
    panel = simulate(Pond(fry={1: 1}, weeds={1: 3}), steps=2, recorder=chosen)
    assert panel.meta["transient_agents"]["types"] == {"Fish": 1, "Weed": 3}  # agents=fn: every agent counts


def test_forks_count_without_warning_and_a_step_that_raises_leaves_no_hook():
    model = Pond()
    simulate(model, steps=1, recorder=SIZE)
    model.fry = {3: 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TransientAgentsWarning)
        branch = fork(model, steps=3, recorder=SIZE)
    assert branch.panel.meta["transient_agents"]["total"] == 2

    class Broken(Pond):
        def step(self) -> None:
            Fish(self).remove()
            raise RuntimeError("boom")

    broken = Broken()
    with pytest.raises(ModelStepError):
        simulate(broken, steps=2, recorder=SIZE)
    assert "register_agent" not in vars(broken) and "deregister_agent" not in vars(broken)


def test_array_recorders_and_plain_objects_are_not_watched():
    model = Pond(fry={1: 2})
    panel = simulate(model, steps=2, recorder=ArrayRecorder(lambda m: {"n": np.array([len(m.agents)])}))
    assert "transient_agents" not in panel.meta  # its rows are array positions, not Mesa agents


def test_the_record_survives_save_and_load(tmp_path):
    panel = simulate(Pond(fry={2: 1}), steps=3, recorder=SIZE)
    back = Panel.load(panel.save(tmp_path / "p.npz"))
    assert back.meta["transient_agents"] == panel.meta["transient_agents"] and back.equals(panel)


def _wolf_sheep(seed: int) -> mesa.Model:
    """Mesa's bundled wolf–sheep at its own default size (20×20, 100 sheep, 50 wolves)."""
    from mesa.examples.advanced.wolf_sheep import model

    if hasattr(model, "WolfSheepScenario"):  # Mesa >= 3.5: a scenario, events on the model (no ABMSimulator, which
        return model.WolfSheep(model.WolfSheepScenario(rng=seed))  # 3.5 deprecates with a FutureWarning)
    from mesa.experimental.devs import ABMSimulator

    return model.WolfSheep(seed=seed, simulator=ABMSimulator())


def test_mesas_wolf_sheep_lambs_eaten_at_birth_match_the_ids_mesa_handed_out():
    """Mesa's bundled wolf–sheep: sheep born in a step can be eaten by a wolf in the same step, and animals there at
    the start die in the first step. Mesa numbers agents 1, 2, 3, ... in creation order, so the ids below the
    largest recorded one that no capture saw (grass patches aside) are exactly the agents no capture saw."""
    model = _wolf_sheep(1)
    grass = {a.unique_id for a in model.agents if type(a).__name__ == "GrassPatch"}
    with pytest.warns(TransientAgentsWarning, match="were present at no capture"):
        panel = simulate(model, steps=50, recorder=ENERGY)
    seen = {int(i) for i in panel.agent_ids} | grass
    unseen = set(range(1, max(seen) + 1)) - seen
    record = panel.meta["transient_agents"]
    assert len(unseen) == record["total"] > record["removed_before_first_capture"] > 0  # lambs among them
    assert "GrassPatch" not in record["types"]
    hand = _by_hand(_wolf_sheep(1), 50, ENERGY)
    assert _without(panel, "transient_agents").equals(hand)  # the watched run is the unwatched one


def test_fry_eaten_at_birth_in_the_pond_of_the_user_model_tests_are_the_ones_it_counts_itself():
    """tests/simulators/user_models.Pond (text ids, two classes) counts the fry it eats at birth."""
    from tests.simulators.user_models import Pond as TextPond

    model = TextPond(rng=3)
    with pytest.warns(TransientAgentsWarning, match=r"\(\d+ Fish\) were present at no capture"):
        panel = simulate(model, steps=12, recorder=FeatureRecorder({"energy": "energy"}))
    record = panel.meta["transient_agents"]
    assert record["total"] == model.eaten_at_birth > 0 and "removed_before_first_capture" not in record
    assert sum(s["count"] for s in record["steps"]) == record["total"]
