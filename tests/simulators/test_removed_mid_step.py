"""Agents removed mid-step by another agent (a wolf eats a sheep, an antibody kills a virus) while a baseline
action overrides one of their methods for that step.

Mesa's ``AgentSet.shuffle_do`` / ``do`` walk a snapshot of weak references and step every agent whose object is
still alive, removed or not; a removed agent normally dies with its last reference and is skipped. aumann's
``override_next_step`` kept a strong reference to every overridden agent until the end of the step, so a removed
agent went on stepping in every fork with a baseline action: it drew from the model's RNG (the fork silently
diverged from what the model does) or crashed in Mesa's code (mesa-examples' virus_antibody: a killed virus moved
with ``space`` None, ``AttributeError: 'NoneType' object has no attribute 'agent_positions'``).
"""

from __future__ import annotations

import gc

import mesa
import pytest

from aumann.simulators import FeatureRecorder, fork, override_next_step, simulate

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Prey(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.draw = 0.0
        self.kids = 0.0

    def step(self) -> None:
        self.model.stepped.append(self.unique_id)
        self.draw = self.random.random()
        if self.draw < 0.5:
            self.breed()

    def breed(self) -> None:
        self.kids += 1


class Hunter(mesa.Agent):
    def step(self) -> None:
        prey = sorted((a for a in self.model.agents if isinstance(a, Prey)), key=lambda a: a.unique_id)
        if prey:
            prey[0].remove()  # the lowest id: removed before its turn (the hunter steps first)


class Field(mesa.Model):
    def __init__(self, seed: int = 0, n: int = 6) -> None:
        super().__init__(rng=seed)
        self.stepped: list[int] = []
        Hunter.create_agents(self, 1)
        Prey.create_agents(self, n)

    def step(self) -> None:
        self.agents.do("step")  # creation order: the hunter first


REC = FeatureRecorder({"draw": lambda a: getattr(a, "draw", -1.0), "kids": lambda a: getattr(a, "kids", 0.0)})


def _prey(model: Field) -> list[Prey]:
    return sorted((a for a in model.agents if isinstance(a, Prey)), key=lambda a: a.unique_id)


def test_an_overridden_agent_removed_mid_step_does_not_go_on_stepping():
    model = Field()
    victim = _prey(model)[0]
    vid = victim.unique_id
    override_next_step(victim, "breed")  # a baseline action: it does not breed this step
    del victim  # the test holds no reference: only aumann's override could keep it alive
    simulate(model, 1, REC)
    assert vid not in {a.unique_id for a in model.agents}  # the hunter removed it
    assert vid not in model.stepped, "a removed agent was stepped after its removal"


def test_a_replacement_is_not_called_for_an_agent_removed_mid_step():
    model = Field()
    victim = _prey(model)[0]
    calls: list[int] = []
    # a replacement that holds its agent (as a closure over it does) keeps the object alive through the step, and
    # Mesa steps it; the replacement must not act for an agent that has left the model
    override_next_step(victim, "step", lambda p=victim: calls.append(p.unique_id))
    gc.collect()
    simulate(model, 1, REC)
    assert victim not in model.agents
    assert calls == []
    assert "step" not in vars(victim)  # still undone after the step


def test_a_replacement_still_acts_for_agents_that_stay():
    model = Field()
    survivor = _prey(model)[1]
    calls: list[int] = []
    override_next_step(survivor, "step", lambda p=survivor: calls.append(p.unique_id))
    simulate(model, 1, REC)
    assert calls == [survivor.unique_id] and "step" not in vars(survivor)


def _no_breeding_override(model: Field) -> None:
    for a in _prey(model):
        override_next_step(a, "breed")


def _no_breeding_by_hand(model: Field) -> None:
    """The same baseline made by hand, without aumann: every prey's ``breed`` is a no-op (held by nothing else)."""
    for a in _prey(model):
        a.breed = lambda: None


@pytest.mark.parametrize("at", [0, 2])
def test_a_fork_with_an_override_matches_the_same_baseline_made_otherwise(at):
    """A fork whose baseline action overrides a method of every prey must record what the model does under that
    action: the prey the hunter removes does not act (before the fix it drew from the model's RNG after its removal,
    and every later prey's draw was shifted)."""
    model = Field(seed=3)
    if at:
        simulate(model, at, REC)
    by_override = fork(model, intervention=_no_breeding_override, steps=1, recorder=REC, strategy="copy").panel
    by_hand = Field(seed=3)
    if at:
        simulate(by_hand, at, REC)
    _no_breeding_by_hand(by_hand)
    by_hand.step()
    expected = {a.unique_id: (a.draw, a.kids) for a in _prey(by_hand)}
    rows = by_override.agent_ids.tolist()
    got = {k: (by_override.values[0, j, 0], by_override.values[0, j, 1]) for j, k in enumerate(rows) if k in expected}
    assert got == expected
    assert sorted(k for j, k in enumerate(rows) if by_override.alive is None or by_override.alive[0, j]) == sorted(
        [a.unique_id for a in by_hand.agents])


def _pay(agent: Prey) -> None:
    agent.kids += 10


def test_a_repeated_intervention_on_agents_that_die_during_the_branch():
    """fork(..., intervention=for_agents(ids, g), repeat=True) applies g before every step; the hunter removes one
    prey a step. With the default an id whose agent died is an error that says what to do (it was a bare 'names 1
    agent id(s) not in the model' at the branch's second step, and nothing said how to go on); missing='skip' acts
    on the survivors, as a loop by hand does, and a replay of that branch reproduces it."""
    from aumann.errors import SimulationError, UnknownAgentError
    from aumann.simulators import for_agents

    model = Field(seed=5)
    simulate(model, 1, REC)
    ids = [a.unique_id for a in _prey(model)]
    with pytest.raises(UnknownAgentError, match=r"at model step 2.*missing='skip'"):
        fork(model, intervention=for_agents(ids, _pay), steps=3, recorder=REC, repeat=True)
    branch = fork(model, intervention=for_agents(ids, _pay, missing="skip"), steps=3, recorder=REC, repeat=True,
                  factory=lambda: Field(seed=5))
    by_hand = Field(seed=5)
    by_hand.step()
    for _ in range(3):
        for a in _prey(by_hand):
            if a.unique_id in ids:
                _pay(a)
        by_hand.step()
    assert {a.unique_id: a.kids for a in _prey(branch.model)} == {a.unique_id: a.kids for a in _prey(by_hand)}
    assert len(_prey(by_hand)) == len(ids) - 3  # three prey died during the branch
    # the branch's history (the repeated intervention included) replays to the same model
    copied = fork(branch.model, steps=1, recorder=REC, strategy="copy")
    replayed = fork(branch.model, steps=1, recorder=REC, strategy="replay")
    assert replayed.strategy == "replay" and replayed.panel.equals(copied.panel)
    with pytest.raises(SimulationError, match="'error' or 'skip'"):
        for_agents(ids, _pay, missing="ignore")


class Grazer(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.x = 0.0
        self.food = 0.0

    def move(self) -> None:
        self.model.moved.append(self.unique_id)
        self.x += self.random.random()

    def eat(self) -> None:
        self.food += 1


class Stalker(mesa.Agent):
    def move(self) -> None:
        grazers = sorted((a for a in self.model.agents if isinstance(a, Grazer)), key=lambda a: a.unique_id)
        if grazers:
            grazers[0].remove()

    def eat(self) -> None:
        pass


class Pasture(mesa.Model):
    """Staged activation by other method names than ``step``: everyone moves (the stalker first: creation order),
    then everyone eats."""

    def __init__(self, seed: int = 0, n: int = 5) -> None:
        super().__init__(rng=seed)
        self.moved: list[int] = []
        Stalker.create_agents(self, 1)
        Grazer.create_agents(self, n)

    def step(self) -> None:
        self.agents.do("move")
        self.agents.do("eat")


def _grazers(model: Pasture) -> list[Grazer]:
    return sorted((a for a in model.agents if isinstance(a, Grazer)), key=lambda a: a.unique_id)


def _feed_twice(g: Grazer) -> None:
    g.food += 2


GRAZE = FeatureRecorder({"x": lambda a: getattr(a, "x", -1.0), "food": lambda a: getattr(a, "food", -1.0)})


def test_a_replacement_holding_its_agent_does_not_keep_a_removed_agent_acting_in_other_methods():
    """The override is on ``eat`` and its replacement holds the agent (a closure, as a baseline action needing its
    agent has); the model activates ``do("move")`` then ``do("eat")``. The stalker removes the first grazer during
    ``move``, before its turn. The replacement kept the removed object alive through the step (agent -> override
    -> closure -> agent), and Mesa's ``do("move")`` ran its real ``move`` after its removal: it drew from the
    model's RNG, so every later grazer's move was shifted. Mesa's mesa-examples virus_antibody crashed so
    (override on a virus' ``duplicate``, activation ``step``: AttributeError 'NoneType' object has no attribute
    'agent_positions' in forks at steps 4 and 5 of 10)."""
    model = Pasture(seed=2)
    victim = _grazers(model)[0]
    vid = victim.unique_id
    override_next_step(victim, "eat", lambda g=victim: _feed_twice(g))
    del victim
    gc.collect()
    simulate(model, 1, GRAZE)
    assert vid not in {a.unique_id for a in model.agents}
    assert vid not in model.moved, "a removed agent's real move ran after its removal"
    assert "deregister_agent" not in vars(model)  # the removal watch lasts one step


def _feed_twice_override(model: Pasture) -> None:
    for g in _grazers(model):
        override_next_step(g, "eat", lambda g=g: _feed_twice(g))


def _feed_twice_by_hand(model: Pasture) -> None:
    """The same baseline without aumann, each replacement reaching its agent through a weak reference (no cycle)."""
    import weakref

    def through(ref):
        return lambda: _feed_twice(ref())

    for g in _grazers(model):
        g.eat = through(weakref.ref(g))


@pytest.mark.parametrize("at", [0, 1, 3])
def test_a_fork_whose_replacements_hold_their_agents_matches_the_baseline_made_otherwise(at):
    model = Pasture(seed=7)
    if at:
        simulate(model, at, GRAZE)
    got = fork(model, intervention=_feed_twice_override, steps=1, recorder=GRAZE, strategy="copy").panel
    by_hand = Pasture(seed=7)
    if at:
        simulate(by_hand, at, GRAZE)
    _feed_twice_by_hand(by_hand)
    by_hand.step()
    expected = {a.unique_id: (a.x, a.food) for a in _grazers(by_hand)}
    assert all(food >= 2 for _, food in expected.values())  # the baseline acted for the survivors
    rows = got.agent_ids.tolist()
    live = {k: (got.values[0, j, 0], got.values[0, j, 1]) for j, k in enumerate(rows)
            if (got.alive is None or got.alive[0, j]) and k in expected}
    assert live == expected
    assert sorted(k for j, k in enumerate(rows) if got.alive is None or got.alive[0, j]) == sorted(
        a.unique_id for a in by_hand.agents)
