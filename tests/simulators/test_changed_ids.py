"""An agent object whose unique_id changes mid-run is a typed error, not two agents.

Before the check, a model that renumbered its agents at step 3 (ids 1, 2, 3 became 11, 12, 13) was recorded as six
agents, three leaving and three born at capture 2; a renumbering that reused ids (1, 2, 3 became 2, 3, 4) was
reported as a reuse of id 2 by "a different Cell object", which it is not."""

from __future__ import annotations

import mesa
import numpy as np
import pytest

from aumann.errors import AgentIdChangedError, FeatureValueError
from aumann.simulators import FeatureRecorder, simulate


class Cell(mesa.Agent):
    def __init__(self, model: mesa.Model, wealth: float) -> None:
        super().__init__(model)
        self.wealth = wealth


class Renumbering(mesa.Model):
    """Three cells; at model step ``at`` every unique_id is moved by ``shift`` (10: new ids; 1: ids the neighbours
    had). With ``born`` a fourth cell joins at that step and gets its id set by hand one step later."""

    def __init__(self, *, shift: int = 10, at: int = 3, born: bool = False) -> None:
        super().__init__(rng=0)
        self.shift, self.at, self.born = shift, at, born
        for w in (1.0, 2.0, 3.0):
            Cell(self, w)

    def step(self) -> None:
        for a in self.agents:
            a.wealth += 1.0
        if self.born:
            if self.steps == self.at:
                self.newcomer = Cell(self, 50.0)
            elif self.steps == self.at + 1:
                self.newcomer.unique_id = 100
        elif self.steps == self.at:
            for a in self.agents:
                a.unique_id += self.shift


def _own_agents(model: mesa.Model) -> list[mesa.Agent]:
    return list(model.agents)


@pytest.mark.parametrize("shift", [10, 1], ids=["new-ids", "ids-of-neighbours"])
def test_a_renumbered_agent_is_a_typed_error_naming_it_both_ids_and_the_captures(shift):
    with pytest.raises(AgentIdChangedError, match=(
            rf"a Cell had unique_id 1 from capture 0 \(model step 1\) to capture 1 \(model step 2\), and the same "
            rf"Cell object has unique_id {1 + shift} at capture 2 \(model step 3\); one row per id would record this "
            r"one agent as two.*Cell.__init__ right after super\(\).__init__")) as err:
        simulate(Renumbering(shift=shift), steps=5, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert isinstance(err.value, FeatureValueError)  # caught as any bad feature data


def test_an_id_set_by_hand_a_step_after_the_agent_was_born_is_caught():
    with pytest.raises(AgentIdChangedError, match=r"had unique_id 4 from capture 2 .* has unique_id 100 at capture 3"):
        simulate(Renumbering(born=True), steps=5, recorder=FeatureRecorder({"wealth": "wealth"}))


@pytest.mark.parametrize("kw", [{"agents": _own_agents}, {"reused_ids": "new_agent"}], ids=["agents-fn", "new-agent"])
def test_the_change_is_caught_with_agents_fn_and_in_new_agent_mode(kw):
    with pytest.raises(AgentIdChangedError, match=r"had unique_id 1 .* has unique_id 11 at capture 2"):
        simulate(Renumbering(), steps=5, recorder=FeatureRecorder({"wealth": "wealth"}, **kw))


def test_same_agent_mode_takes_each_id_as_one_agent_as_before():
    panel = simulate(Renumbering(), steps=5, recorder=FeatureRecorder({"wealth": "wealth"}, reused_ids="same_agent"))
    assert list(panel.agent_ids) == [1, 2, 3, 11, 12, 13]
    np.testing.assert_array_equal(panel.alive[:, 0], [True, True, False, False, False])


class _Proxy:  # weak-referenceable, built afresh at every capture: their id() values are recycled
    def __init__(self, uid: int, wealth: float) -> None:
        self.unique_id, self.wealth = uid, wealth


class _Turnover:
    """agents=fn builds new proxies each capture, for a population whose ids move on (0, 1, 2 then 1, 2, 3 ...)."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1

    def proxies(self) -> list[_Proxy]:
        return [_Proxy(u, float(u)) for u in range(self.steps, self.steps + 3)]


def test_fresh_proxies_whose_memory_is_recycled_are_no_false_alarm():
    panel = simulate(_Turnover(), steps=6, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_Turnover.proxies))
    assert list(panel.agent_ids) == list(range(1, 9))


class _Kept(_Turnover):
    """Fresh proxies at every capture, all kept alive by the model (so no two share an id())."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[_Proxy] = []

    def proxies(self) -> list[_Proxy]:
        made = [_Proxy(u, float(u)) for u in range(3)]
        self.kept.extend(made)
        return made


def test_the_object_map_holds_one_entry_per_row_not_one_per_proxy():
    """White-box: agents=fn building a new proxy per agent per capture must not grow the recorder's map of objects
    by N entries per capture (10⁵ agents × 10³ steps would be 10⁸ entries)."""
    model = _Kept()
    rec = FeatureRecorder({"wealth": "wealth"}, agents=_Kept.proxies)
    with rec.recording(model, steps=50) as recording:
        for _ in range(50):
            model.step()
            recording.capture(model)
        assert len(recording._buffer.rows_of) <= 3  # (proxies are never tracked: 0)
    assert list(recording.panel().agent_ids) == [0, 1, 2]


class Returning(mesa.Model):
    """Cell 1 leaves at step 2 (``remove``) and is registered again at step 4 (``model.register_agent``), with its id
    put back after registering when ``restore``. The ids are numbered as Mesa >= 3.4.2's ``register_agent`` numbers
    them (the next ``agent_id_counter``), on Mesa 3.3 too, where registering kept the agent's id."""

    def __init__(self, *, restore: bool = False) -> None:
        super().__init__(rng=0)
        self.restore, self.gone = restore, None
        self._numbers = not hasattr(self, "agent_id_counter")  # Mesa 3.3: Mesa 3.4.2's numbering, in a few lines
        if self._numbers:
            self.agent_id_counter = 1
        Cell.create_agents(self, 3, wealth=1.0)

    def register_agent(self, agent: mesa.Agent) -> None:
        super().register_agent(agent)
        if self._numbers:
            agent.unique_id = self.agent_id_counter
            self.agent_id_counter += 1

    def step(self) -> None:
        for a in self.agents:
            a.wealth += 1.0
        if self.steps == 2:
            self.gone = next(a for a in self.agents if a.unique_id == 1)
            self.gone.remove()
        elif self.steps == 4:
            uid = self.gone.unique_id
            self.register_agent(self.gone)
            if self.restore:
                self.gone.unique_id = uid


def test_an_agent_registered_again_under_mesas_next_id_is_told_to_restore_its_id():
    # Mesa >= 3.4.2's register_agent gives every agent it registers the next unique_id: an agent that left and was
    # registered again comes back as id 4, and the error's advice (set the id once in __init__, keep a changing number
    # elsewhere) was beside the point, since the model never touched the id. It now names register_agent, the Mesa
    # version, and the fix that records the agent as on Mesa 3.3 (one row, with a gap)
    rec = FeatureRecorder({"wealth": "wealth"})
    with pytest.raises(AgentIdChangedError, match=(
            r"has unique_id 4 at capture 3 \(model step 4\).*If the model registered it again "
            r"\(model.register_agent\(agent\).*from Mesa 3.4.2 on, register_agent gives every agent it registers "
            r"the next unique_id \(Mesa 3.3 kept the agent's id\), so restore it right after registering: "
            r"uid = agent.unique_id; model.register_agent\(agent\); agent.unique_id = uid \(here 1\). "
            r"Otherwise, keep")):
        simulate(Returning(), steps=5, recorder=rec)
    panel = simulate(Returning(restore=True), steps=5, recorder=rec)
    assert list(panel.agent_ids) == [1, 2, 3]
    np.testing.assert_array_equal(panel.alive[:, 0], [True, False, False, True, True])


def test_the_register_agent_advice_is_given_only_where_mesa_numbers_the_agents_it_registers():
    # Mesa 3.3 sets unique_id in Agent.__init__ and register_agent keeps it: there the sentence would be wrong
    model = Renumbering()
    with pytest.raises(AgentIdChangedError) as err:
        simulate(model, steps=5, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert ("register_agent" in str(err.value)) == hasattr(model, "agent_id_counter")
    assert ("Otherwise, keep each agent's unique_id" in str(err.value)) == hasattr(model, "agent_id_counter")
