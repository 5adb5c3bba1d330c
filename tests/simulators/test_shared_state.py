"""A fork by replay of a model built on a module-level default object (mesa-examples' ``aco_tsp`` pattern:
``def __init__(self, tsp_graph=TSPGraph.from_random(20))``) shares that object with the original: the replayed
constructor resets the original's pheromones and the replayed steps deposit into them. Before the check this
was silent (the state digest does not look into the graph); now it is a SharedStateWarning naming the path."""

from __future__ import annotations

import copy
import typing
import warnings

import mesa
import numpy as np
import pytest
from mesa.discrete_space import CellAgent, OrthogonalMooreGrid

from aumann.errors import CheckpointError, ForkFallbackWarning, SharedStateWarning
from aumann.simulators import FeatureRecorder, fork, simulate
from aumann.simulators.sharing import shared_state


class Trails:
    """A tiny pheromone graph: edge -> pheromone level."""

    def __init__(self, edges: int = 6) -> None:
        self.level = {e: 0.0 for e in range(edges)}

    def reset(self) -> None:
        for e in self.level:
            self.level[e] = 1.0


class Ant(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.deposit = 0.0

    def step(self) -> None:
        e = self.random.randrange(len(self.model.trails.level))
        self.deposit = self.model.trails.level[e]
        self.model.trails.level[e] += 1.0


class Colony(mesa.Model):
    def __init__(self, trails: Trails = Trails(), n: int = 4, seed: int = 7) -> None:  # noqa: B008 (the pattern)
        super().__init__(rng=seed)
        self.trails = trails
        self.trails.reset()  # as aco_tsp re-initialises its pheromones
        for _ in range(n):
            Ant(self)

    def step(self) -> None:
        self.agents.do("step")


REC = FeatureRecorder({"deposit": "deposit"})


def test_a_replay_that_shares_a_module_level_default_warns_and_names_it():
    model = Colony()
    simulate(model, 3, REC)
    before = dict(model.trails.level)
    with pytest.warns(SharedStateWarning, match=r"holds the original's own mutable objects \(\.trails\)"):
        fork(model, steps=2, recorder=REC, strategy="replay", factory=Colony)
    assert model.trails.level != before  # what the warning is about: the replay wrote into the original


def test_a_fork_by_copy_or_a_factory_with_its_own_object_does_not_warn():
    model = Colony(Trails())
    simulate(model, 3, REC)
    before = dict(model.trails.level)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharedStateWarning)
        fork(model, steps=2, recorder=REC, strategy="copy")
        assert model.trails.level == before
        fresh = fork(model, steps=2, recorder=REC, strategy="replay", factory=lambda: Colony(Trails()))
    assert model.trails.level == before and fresh.model.trails is not model.trails


def test_shared_state_looks_two_levels_deep_and_skips_immutables_and_self_copying_objects():
    class SharesItself:
        def __deepcopy__(self, memo):  # shared on purpose (as aumann's LLM backends and caches)
            return self

    graph, backend, frozen = {"a": 1}, SharesItself(), np.zeros(3)
    frozen.flags.writeable = False

    class Holder:
        def __init__(self) -> None:
            self.g = graph

    class M:
        def __init__(self) -> None:
            self.grid, self.params = Holder(), {"graph": graph, "name": "x", "k": (1, 2)}
            self.backend, self.frozen, self.own = backend, frozen, [1, 2]

    assert shared_state(M(), M()) == [".grid.g", ".params['graph']"]


class ShallowColony(Colony):
    """A hand-written ``__deepcopy__`` that copies the pheromone object shallowly: the copy's ``trails`` is a new
    object, its ``level`` table the original's (two levels deep)."""

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            setattr(new, k, copy.copy(v) if k == "trails" else copy.deepcopy(v, memo))
        return new


def test_a_fork_by_copy_whose_copy_shares_state_two_levels_deep_is_refused():
    """The copy check looked at agents, cells, rng and simulator, not at what else the copy shares: a fork by copy
    of ShallowColony wrote into the original's pheromones ({0: 5.0, 1: 2.0, 2: 3.0, 3: 2.0, ...} became {0: 9.0, 1: 4.0,
    2: 3.0, 3: 4.0, ...})
    and returned strategy 'copy', silently. Now the copy gets the replay's two-level check (shared_state), and a
    copy sharing state is refused (auto: replayed from the factory instead)."""
    model = ShallowColony(Trails())
    simulate(model, 3, REC)
    before = dict(model.trails.level)
    with pytest.raises(CheckpointError, match=r"the copy holds the original's own mutable objects \(\.trails\.level\)"):
        fork(model, steps=2, recorder=REC, strategy="copy")
    assert model.trails.level == before
    with pytest.warns(ForkFallbackWarning, match=r"\.trails\.level"):
        res = fork(model, steps=2, recorder=REC, factory=lambda: ShallowColony(Trails()))
    assert res.strategy == "replay" and model.trails.level == before


def test_shared_state_looks_into_tuples_and_up_to_four_levels():
    """A list inside a tuple, or a dict three levels down, that the branch shares with the original was not
    looked at (two levels, no tuples): the branch wrote into it silently. Four levels now, tuples and frozen
    containers entered; a fifth level is beyond the bound (documented)."""
    log, table, deep5 = [], {"x": 0.0}, {"y": 1}

    class Inner:
        def __init__(self) -> None:
            self.table = table  # model.world.layers['roads'].table: level 4

    class World:
        def __init__(self) -> None:
            self.layers = {"roads": Inner()}
            self.far = {"a": {"b": {"c": deep5}}}  # model.world.far['a']['b']['c']: level 5

    class M:
        def __init__(self) -> None:
            self.pair = (1, log)  # a list inside a tuple: level 2
            self.world = World()
            self.cfg = {"a": {"b": log}}  # a dict... holding the same list three levels down

    found = shared_state(M(), M())
    assert found == [".pair[1]", ".cfg['a']['b']", ".world.layers['roads'].table"], found


class TupleColony(Colony):
    """The pheromone object held inside a tuple (``self.parts = (name, trails)``), from a module-level default."""

    def __init__(self, parts: tuple = ("trails", Trails()), n: int = 4, seed: int = 7) -> None:
        super().__init__(parts[1], n, seed)
        self.parts = parts


def test_a_replay_sharing_an_object_inside_a_tuple_warns_and_names_it():
    model = TupleColony()
    simulate(model, 3, REC)
    with pytest.warns(SharedStateWarning, match=r"\.parts\[1\]"):
        fork(model, steps=2, recorder=REC, strategy="replay", factory=TupleColony)


class Walker(CellAgent):
    def __init__(self, model: mesa.Model, cell) -> None:
        super().__init__(model)
        self.cell, self.moves = cell, 0.0

    def step(self) -> None:
        self.cell = self.cell.neighborhood.select_random_cell()
        self.moves += 1


class Depot(mesa.Model):
    """A model that keeps a cell of its grid (a dock, a charging station, a home) and reads its neighbourhood."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__(rng=seed)
        self.grid = OrthogonalMooreGrid((4, 4), torus=True, random=self.random)
        self.home = self.grid[(0, 0)]
        for _ in range(3):
            Walker(self, self.home)

    def step(self) -> None:
        self.agents.shuffle_do("step")


def test_a_replay_of_a_model_keeping_a_cell_does_not_warn_about_typing_objects():
    """mesa-examples' warehouse keeps cells (its robots' docks and stations): a fork by replay warned that the
    replayed model held the original's own mutable objects '.home.neighborhood.__orig_class__' -- the
    ``CellCollection[Cell]`` alias Python's typing caches once per process and sets on every collection it builds,
    shared by every model by design and never written. The factory was fine; the warning told the user it was not.
    Objects of ``typing`` (generic aliases, type variables) and ``list[int]``-style aliases are not model state."""
    model = Depot()
    simulate(model, 3, FeatureRecorder({"moves": "moves"}))
    assert "neighborhood" in vars(model.home)  # the cached collection, which carries __orig_class__
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharedStateWarning)
        branch = fork(model, steps=2, recorder=FeatureRecorder({"moves": "moves"}), strategy="replay", factory=Depot)
    assert branch.strategy == "replay"
    alias = typing.List[int]  # noqa: UP006 (a typing alias, cached by typing)

    class Box(typing.Generic[typing.TypeVar("T")]):
        pass

    class M:
        def __init__(self) -> None:
            self.box, self.alias, self.builtin_alias = Box[int](), alias, list[int]
            self.tv, self.union = typing.TypeVar("U"), int | str

    assert shared_state(M(), M()) == []
