"""A unique_id given to a newborn after its agent died: a typed error by default, a new row on request.

Before the check, agent A (id 3) dying at step 5 and a newborn B given id 3 at step 9 became one row of the
panel, A's values then B's after a gap: two agents merged silently."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import mesa
import numpy as np
import pytest

from aumann.errors import FeatureValueError, ReusedAgentIdError
from aumann.simulators import FeatureRecorder, simulate


class Cell(mesa.Agent):
    def __init__(self, model: mesa.Model, wealth: float) -> None:
        super().__init__(model)
        self.wealth = wealth


class DeathsAndBirths(mesa.Model):
    """Four agents with wealth 1..4. At ``die`` agent ``victim`` removes itself (``Agent.remove()``); at ``born``
    a newcomer of wealth 100 joins, given the dead agent's id by hand when ``reuse`` (an older-style model), or
    the same agent object is registered again when ``same_object``. Every step adds 1 to each wealth."""

    def __init__(self, *, die: int = 5, born: int = 9, victim: int = 3, reuse: bool = True,
                 same_object: bool = False, seed: int = 0) -> None:
        super().__init__(rng=seed)
        self.die, self.born, self.victim, self.reuse, self.same_object = die, born, victim, reuse, same_object
        for w in (1.0, 2.0, 3.0, 4.0):
            Cell(self, w)
        self.dead: Cell | None = None

    def step(self) -> None:
        for a in self.agents:
            a.wealth += 1.0
        if self.steps == self.die:
            self.dead = next(a for a in self.agents if a.unique_id == self.victim)
            self.dead.remove()
        if self.steps == self.born:
            if self.same_object:
                uid = self.dead.unique_id
                self.register_agent(self.dead)
                self.dead.unique_id = uid  # Mesa >= 3.4.2's register_agent gives it the next id; 3.3's keeps it
            else:
                b = Cell(self, 100.0)
                if self.reuse:
                    b.unique_id = self.victim
            if not self.same_object:
                self.dead = None  # nothing of the model keeps the dead agent
                gc.collect()


def test_a_reused_id_is_a_typed_error_naming_the_id_and_the_captures():
    with pytest.raises(ReusedAgentIdError, match=r"agent unique_id 3 was reused: a Cell with this id was present "
                                                 r"from capture 0 \(model step 1\) to capture 3 \(model step 4\), "
                                                 r"left the model.*at capture 8 \(model step 9\)") as err:
        simulate(DeathsAndBirths(), steps=12, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert isinstance(err.value, FeatureValueError)  # caught as any bad feature data
    assert "reused_ids='new_agent'" in str(err.value)


def test_the_newcomer_is_recorded_as_a_new_agent_on_request():
    panel = simulate(DeathsAndBirths(), steps=12, recorder=FeatureRecorder({"wealth": "wealth"},
                                                                           reused_ids="new_agent"))
    assert list(panel.agent_ids) == [
        "(1, 0)", "(2, 0)", "(3, 0)", "(3, 1)", "(4, 0)"]
    a, b = 2, 3  # rows of the dead agent and of the newcomer
    np.testing.assert_array_equal(panel.alive[:, a], [True] * 4 + [False] * 8)
    np.testing.assert_array_equal(panel.alive[:, b], [False] * 8 + [True] * 4)
    np.testing.assert_array_equal(panel.values[:4, a, 0], [4.0, 5.0, 6.0, 7.0])  # wealth 3 + steps
    np.testing.assert_array_equal(panel.values[8:, b, 0], [100.0, 101.0, 102.0, 103.0])  # the newborn's own
    assert not panel.values[4:, a].any() and not panel.values[:8, b].any()


def test_the_same_object_removed_and_registered_again_stays_one_row_with_a_gap():
    panel = simulate(DeathsAndBirths(same_object=True), steps=12, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert list(panel.agent_ids) == [1, 2, 3, 4]
    np.testing.assert_array_equal(panel.alive[:, 2], [True] * 4 + [False] * 4 + [True] * 4)
    np.testing.assert_array_equal(panel.values[8:, 2, 0], [8.0, 9.0, 10.0, 11.0])  # the returned agent's wealth


def test_fresh_ids_for_newborns_are_unaffected():
    panel = simulate(DeathsAndBirths(reuse=False), steps=12, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert list(panel.agent_ids) == [1, 2, 3, 4, 5]


def test_a_replacement_within_one_step_is_caught_with_the_default_agents():
    """The victim dies and the newborn takes its id in the same step: no gap at all, so only the object's
    identity tells the two agents apart."""
    with pytest.raises(ReusedAgentIdError, match=r"unique_id 3 was reused.*replaced within one step.*capture 4"):
        simulate(DeathsAndBirths(die=5, born=5), steps=8, recorder=FeatureRecorder({"wealth": "wealth"}))


class _Proxy:  # weak-referenceable, built afresh at every capture
    def __init__(self, uid: int, wealth: float) -> None:
        self.unique_id, self.wealth = uid, wealth


class _Arrays:
    """A model of arrays whose agents=fn builds new proxy objects each capture; agent 1 is away at step 3."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def proxies(self) -> list[_Proxy]:
        return [_Proxy(u, float(u + self.steps)) for u in (0, 1, 2) if not (u == 1 and self.steps == 3)]


def test_agents_fn_proxies_present_throughout_are_not_a_reuse():
    panel = simulate(_Arrays(), steps=2, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_Arrays.proxies))
    assert list(panel.agent_ids) == [0, 1, 2]


def test_agents_fn_proxies_that_come_back_need_same_agent():
    with pytest.raises(ReusedAgentIdError, match=r"unique_id 1 was reused.*reused_ids='same_agent'"):
        simulate(_Arrays(), steps=4, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_Arrays.proxies))
    panel = simulate(_Arrays(), steps=4, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_Arrays.proxies,
                                                                  reused_ids="same_agent"))
    assert list(panel.agent_ids) == [0, 1, 2]
    np.testing.assert_array_equal(panel.alive[:, 1], [True, True, False, True])


def test_agents_without_weak_references_are_not_checked():
    def fn(m: _Arrays) -> list[SimpleNamespace]:
        return [SimpleNamespace(unique_id=u, wealth=1.0) for u in (0, 1) if not (u == 1 and m.steps == 2)]

    panel = simulate(_Arrays(), steps=3, recorder=FeatureRecorder({"wealth": "wealth"}, agents=fn))
    assert list(panel.agent_ids) == [0, 1]
    np.testing.assert_array_equal(panel.alive[:, 1], [True, False, True])


@pytest.mark.parametrize("bad", ["merge", None, 1])
def test_an_unknown_reused_ids_mode_is_refused(bad):
    with pytest.raises(FeatureValueError, match="reused_ids must be one of"):
        FeatureRecorder({"wealth": "wealth"}, reused_ids=bad)


def _own_agents(model: mesa.Model) -> list[mesa.Agent]:  # agents=fn returning the model's own agent objects
    return list(model.agents)


def test_a_replacement_within_one_step_is_caught_with_agents_fn():
    """With agents=fn only an id absent for a capture was checked: the victim dying and a newborn taking its id in
    the same step merged them into one row (wealth 4, 5, 6, 7 then 100, 101, ...), silently. An id whose object
    stayed the same from one capture to the next is the model's own agent: another object under it is a reuse."""
    with pytest.raises(ReusedAgentIdError, match=r"unique_id 3 was reused.*replaced within one step.*capture 4"):
        simulate(DeathsAndBirths(die=5, born=5), steps=8,
                 recorder=FeatureRecorder({"wealth": "wealth"}, agents=_own_agents))
    panel = simulate(DeathsAndBirths(die=5, born=5), steps=8,
                     recorder=FeatureRecorder({"wealth": "wealth"}, agents=_own_agents, reused_ids="new_agent"))
    assert list(panel.agent_ids) == ["(1, 0)", "(2, 0)", "(3, 0)", "(3, 1)", "(4, 0)"]
    np.testing.assert_array_equal(panel.values[:, 2, 0], [4.0, 5.0, 6.0, 7.0, 0, 0, 0, 0])
    np.testing.assert_array_equal(panel.values[:, 3, 0], [0, 0, 0, 0, 100.0, 101.0, 102.0, 103.0])
    same = simulate(DeathsAndBirths(die=5, born=5), steps=8,
                    recorder=FeatureRecorder({"wealth": "wealth"}, agents=_own_agents, reused_ids="same_agent"))
    assert list(same.agent_ids) == [1, 2, 3, 4]  # the old merging, on request


def test_agents_fn_returning_the_same_objects_or_fresh_proxies_is_no_false_alarm():
    """The same objects throughout (no death, fresh ids for newborns, the same object back after a gap) and
    proxies built afresh at every capture (followed from one capture to the next) record as before."""
    for model in (DeathsAndBirths(reuse=False), DeathsAndBirths(same_object=True)):
        panel = simulate(model, steps=12, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_own_agents))
        assert len(panel.agent_ids) == (5 if not model.same_object else 4)
    panel = simulate(_Arrays(), steps=2, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_Arrays.proxies))
    np.testing.assert_array_equal(panel.values[:, :, 0], [[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]])
