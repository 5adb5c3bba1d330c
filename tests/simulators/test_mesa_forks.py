"""Forks on Mesa's own example models: a fork without intervention reproduces the factual run bit for
bit, by copy and by replay; broken copies are detected; auto falls back to replay; replay checks
itself; histories (interventions, step functions) are replayed."""

from __future__ import annotations

import copy
import sys
import threading

import numpy as np
import pytest

from aumann.errors import CheckpointError, ReplayDivergedError, ReplayUnavailableError, SimulationError
from aumann.simulators import (
    FeatureRecorder,
    checkpoint,
    for_agents,
    fork,
    override_next_step,
    replay,
    simulate,
    state_digest,
)
from aumann.simulators.branching import _plain, copy_problem, digest_difference
from tests.simulators.mesa_examples import EXAMPLES, numeric_features

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


def _recorder(model) -> FeatureRecorder:
    keys = sorted({k for a in model.agents for k in numeric_features(a)}) or ["none"]
    return FeatureRecorder({k: (lambda a, k=k: numeric_features(a).get(k, 0.0)) for k in keys})


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("strategy", ["copy", "replay", "auto"])
def test_fork_without_intervention_reproduces_every_mesa_example(name, strategy):
    factory = lambda: EXAMPLES[name](3)  # noqa: E731
    model = factory()
    rec = _recorder(model)
    simulate(model, 2, rec)
    branch = fork(model, steps=3, recorder=rec, strategy=strategy, factory=factory)
    factual = simulate(model, 3, rec)  # the original continues, untouched by the fork
    assert branch.panel.equals(factual), f"{name}: the {branch.strategy} fork diverged from the factual run"
    assert digest_difference(state_digest(branch.model), state_digest(model)) is None
    assert branch.strategy == ("replay" if strategy == "replay" else "copy")


def test_plain_deepcopy_breaks_mesa_grids_and_the_check_says_why():
    model = EXAMPLES["boltzmann"](1)
    simulate(model, 3, _recorder(model))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        plain = copy.deepcopy(model)  # what checkpoint() did before: cells copied twice
    except TypeError as exc:  # Mesa 3.5: the model's step schedule holds a WeakMethod, which deepcopy cannot copy
        assert "WeakMethod" in str(exc)
        plain = None
    finally:
        sys.setrecursionlimit(limit)
    if plain is not None:  # Mesa 3.3
        lost = [a for a in plain.agents if a.cell is not plain.grid._cells[a.cell.coordinate]]
        assert lost and len(lost[0].cell.neighborhood) == 0  # the IndexError of the deletion study
        problem = copy_problem(model, plain)  # the lost cell has no connections in the copy
        assert problem is not None and "_mesa_cell" in problem and ", 0)" in problem
    good = checkpoint(model, strategy="copy")
    assert all(a.cell is good.grid._cells[a.cell.coordinate] for a in good.agents)
    assert all(len(a.cell.neighborhood) == len(model.grid._cells[a.cell.coordinate].neighborhood)
               for a in good.agents)
    assert copy_problem(model, good) is None


def test_copied_property_layers_belong_to_the_copy():
    model = EXAMPLES["sugarscape"](2)
    simulate(model, 1, _recorder(model))
    branch = checkpoint(model, strategy="copy")
    cell, twin = model.grid._cells[(10, 10)], branch.grid._cells[(10, 10)]
    before = float(cell.sugar)
    twin.sugar = before + 7
    assert float(cell.sugar) == before and float(twin.sugar) == before + 7
    assert float(branch.grid._cells[(40, 3)].sugar) == float(model.grid._cells[(40, 3)].sugar)


class _Depot:
    """Robots on a Mesa grid of any dimension (mesa-examples' warehouse is rows × columns × shelf levels), with a
    property layer the robots heat as they pass."""

    @staticmethod
    def build(dims, seed=0):
        import mesa
        from mesa.discrete_space import CellAgent, OrthogonalMooreGrid, PropertyLayer

        class Bot(CellAgent):
            def __init__(self, model, cell):
                super().__init__(model)
                self.cell, self.load = cell, 0.0

            def step(self):
                self.cell = self.cell.neighborhood.select_random_cell()
                self.cell.heat += 1.0
                self.load += float(sum(self.cell.coordinate)) + float(self.cell.heat)

        class Depot(mesa.Model):
            def __init__(self):
                super().__init__(rng=seed)
                self.grid = OrthogonalMooreGrid(dims, torus=False, random=self.random)
                self.grid.add_property_layer(PropertyLayer("heat", dims, default_value=0.0))
                for c in self.random.sample(list(self.grid.all_cells.cells), 3):
                    Bot(self, c)

            def step(self):
                self.agents.shuffle_do("step")

        return Depot()


@pytest.mark.parametrize("dims", [(7,), (4, 3, 2), (2, 3, 2, 2)])
def test_grids_of_any_dimension_fork_by_copy_and_travel_to_workers(dims):
    """Mesa 3.3's Grid.__setstate__ takes the cell class from cell (0, 0), which only a 2-D grid has: every copy of
    a model on a 1-D, 3-D or 4-D grid failed ('cannot checkpoint Depot with copy.deepcopy: KeyError: (0, 0)',
    blaming files and locks), and fork_many through a process pool died with a bare KeyError: (0, 0) in the
    worker. Both now work: the fork reproduces the run bit for bit, the copy's layer and cells are its own, and the
    pickled model (what a worker receives) steps as the original does."""
    from aumann.simulators.remote import dumps, loads

    rec = FeatureRecorder({"load": "load"})
    model = _Depot.build(dims, seed=5)
    simulate(model, 2, rec)
    branch = fork(model, steps=3, recorder=rec, strategy="copy")
    shipped = loads(dumps(model))
    assert digest_difference(state_digest(shipped), state_digest(model)) is None
    assert branch.panel.equals(simulate(model, 3, rec))
    assert branch.panel.values.any()
    assert simulate(shipped, 3, rec).equals(branch.panel)
    corner = (0,) * len(dims)
    cell, twin = model.grid._cells[corner], branch.model.grid._cells[corner]
    before = float(cell.heat)
    twin.heat = before + 7
    assert float(cell.heat) == before and float(twin.heat) == before + 7
    assert type(twin) is branch.model.grid.cell_klass and type(cell) is model.grid.cell_klass


class _Env:
    """An environment wrapping a Mesa model (mesa-examples' rl/ examples wrap theirs in a gym Env): the agents
    belong to the inner model."""

    def __init__(self, seed: int = 0, *, churn: bool = True) -> None:
        from tests.simulators.models import BoltzmannWealth

        self.inner = BoltzmannWealth(6, seed=seed, churn=churn)
        self.steps = 0

    @property
    def agents(self):
        return self.inner.agents

    def step(self) -> None:
        self.inner.step()
        self.steps += 1


def test_a_model_wrapping_a_mesa_model_forks_by_copy():
    """The copy check wanted every agent's model to be the copy itself, so a wrapper whose agents belong to its
    inner Mesa model was refused ('the copy has agent 1 whose model is not the copy') although its copy is
    faithful; forks fell back to replay, or failed without a factory. An agent of the copy may belong to the copy
    of the inner model; one that belongs to the original's (inner) model is still refused."""
    rec = FeatureRecorder({"w": "wealth"})
    env = _Env(seed=4)
    simulate(env, 4, rec)
    branch = fork(env, steps=5, recorder=rec, strategy="copy")
    assert branch.strategy == "copy" and branch.model.inner is not env.inner
    assert branch.panel.equals(simulate(env, 5, rec))
    assert branch.panel.alive is not None  # the churn: agents leave and arrive in the branch too
    broken = copy.deepcopy(env)
    next(iter(broken.inner.agents)).model = env.inner
    assert "whose model is not the copy" in copy_problem(env, broken)


class _Locked(_Env):
    """A model holding an uncopyable object (a lock), built by a deterministic factory."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed, churn=False)
        self.lock = threading.Lock()


def test_auto_falls_back_to_replay_and_needs_a_factory():
    rec = FeatureRecorder({"wealth": "wealth"})
    model = _Locked(4)
    simulate(model, 3, rec)
    with pytest.raises(CheckpointError, match=r"_thread\.lock"):
        checkpoint(model, strategy="copy")
    with pytest.raises(ReplayUnavailableError, match=r"Pass factory=") as err:
        fork(model, steps=2, recorder=rec)
    assert "_thread.lock" in str(err.value)  # says why the copy failed too
    res = fork(model, steps=2, recorder=rec, factory=lambda: _Locked(4))
    assert res.strategy == "replay"
    assert res.panel.equals(simulate(model, 2, rec))
    again = fork(model, steps=1, recorder=rec)  # the factory is remembered for this model
    assert again.strategy == "replay"


def test_replay_checks_that_it_reproduces_the_model():
    rec = FeatureRecorder({"wealth": "wealth"})
    model = _Locked(4)
    simulate(model, 3, rec)
    with pytest.raises(ReplayDivergedError, match=r"does not reproduce.*same seed"):
        fork(model, steps=1, recorder=rec, factory=lambda: _Locked(5))
    with pytest.raises(SimulationError, match="strategy must be one of"):
        fork(model, steps=1, recorder=rec, strategy="clone")


def test_replay_reapplies_the_history_of_a_branch():
    factory = lambda: EXAMPLES["boltzmann"](5)  # noqa: E731
    model = factory()
    rec = _recorder(model)
    simulate(model, 2, rec)
    rich = max(model.agents, key=lambda a: (a.wealth, a.unique_id)).unique_id
    g = for_agents([rich], lambda a: setattr(a, "wealth", 0))
    branch = fork(model, intervention=g, steps=2, recorder=rec, factory=factory, strategy="replay").model
    via_copy = fork(branch, steps=3, recorder=rec, strategy="copy")
    via_replay = fork(branch, steps=3, recorder=rec, strategy="replay")
    assert via_replay.panel.equals(via_copy.panel)
    repeated = fork(model, intervention=g, repeat=True, steps=2, recorder=rec, strategy="replay").model
    assert fork(repeated, steps=2, recorder=rec, strategy="replay").panel.equals(
        fork(repeated, steps=2, recorder=rec, strategy="copy").panel)


def test_devs_models_advance_their_simulator():
    from mesa.examples.advanced.wolf_sheep.agents import GrassPatch

    def grown(m):
        return sum(p.fully_grown for p in m.agents_by_type[GrassPatch])

    stepped, driven = EXAMPLES["wolf_sheep"](1), EXAMPLES["wolf_sheep"](1)
    rec = FeatureRecorder({"energy": lambda a: float(getattr(a, "energy", 0.0))})
    if getattr(stepped, "simulator", None) is None:  # Mesa >= 3.5: the model's own events, run by model.step()
        for _ in range(12):
            stepped.step()
        simulate(driven, 12, rec)
        assert driven.time == 12 and grown(driven) != grown(EXAMPLES["wolf_sheep"](1))
        assert digest_difference(state_digest(stepped), state_digest(driven)) is None
        return
    for _ in range(12):
        stepped.step()  # model.step() alone: the simulator's regrowth events never run
    simulate(driven, 12, rec)  # the default step runs the ABMSimulator
    assert _clock(driven) == 12 and grown(driven) > grown(stepped)
    custom = EXAMPLES["wolf_sheep"](1)
    simulate(custom, 12, rec, step=lambda m: m.simulator.run_for(1))
    assert digest_difference(state_digest(custom), state_digest(driven)) is None


def _clock(model):
    """The DEVS clock: ``simulator.time`` in Mesa 3.3; ``model.time`` in newer Mesa, whose ``simulator.time``
    warns that it is deprecated."""
    sim = getattr(model, "simulator", None)  # none on Mesa >= 3.5: the model keeps its own clock
    return sim.__dict__["time"] if sim is not None and "time" in vars(sim) else model.time


def test_the_state_digest_reads_a_devs_clock_without_mesas_deprecated_accessor():
    """Newer Mesa (main, 3.4.0.dev) moved a DEVS simulator's clock to ``model.time``; ``simulator.time`` became a
    property warning "simulator.time is deprecated, use model.time instead" (FutureWarning) at every read, and
    ``state_digest`` (every fork's copy check, every replay's check) read it: one warning per digest, pointing at
    aumann. The digest now reads where the clock is. A stand-in with Mesa 3.4's accessor, and Mesa's wolf-sheep
    (whichever Mesa is installed), digest without a warning, and two clocks that differ still differ."""
    import warnings

    class Model34:
        def __init__(self, time):
            self.time = time
            self.simulator = Simulator34(self)

    class Simulator34:
        def __init__(self, model):
            self.model = model

        @property
        def time(self):
            warnings.warn("simulator.time is deprecated, use model.time instead", FutureWarning, stacklevel=2)
            return self.model.time

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        a, b = state_digest(Model34(3.0)), state_digest(Model34(4.0))
        assert ("simulator", _plain(3.0)) in a and digest_difference(a, b) is not None
        model = EXAMPLES["wolf_sheep"](2)
        simulate(model, 3, FeatureRecorder({"energy": lambda a: float(getattr(a, "energy", 0.0))}))
        clock = [e for e in state_digest(model) if e[0] == "simulator"]
    # Mesa >= 3.5's wolf-sheep has no simulator: its clock is model.time, which the digest reads with the model's
    assert clock == ([("simulator", _plain(_clock(model)))] if hasattr(model, "simulator") else [])
    assert _clock(model) == 3


def test_replay_builds_a_model_at_a_given_step():
    factory = lambda: EXAMPLES["schelling"](7)  # noqa: E731
    model = factory()
    simulate(model, 4, _recorder(model))
    at4 = replay(factory, 4)
    assert at4 is not model and digest_difference(state_digest(at4), state_digest(model)) is None
    with pytest.raises(SimulationError, match="non-negative"):
        replay(factory, -1)


def test_override_next_step_lasts_one_step_whether_or_not_it_is_called():
    from tests.simulators.models import BoltzmannWealth

    model = BoltzmannWealth(5, seed=3)
    agent = next(iter(model.agents))
    calls = []
    override_next_step(agent, "step", lambda: calls.append(1))
    assert "step" in vars(agent)
    simulate(model, 1, FeatureRecorder({"wealth": "wealth"}))
    assert calls == [1] and "step" not in vars(agent)
    poor = next(iter(model.agents))
    override_next_step(poor, "remove")  # never called during a step: still undone after it
    simulate(model, 1, FeatureRecorder({"wealth": "wealth"}))
    assert "remove" not in vars(poor)
    with pytest.raises(SimulationError, match="no method 'fly'"):
        override_next_step(poor, "fly")


def test_random_streams_are_not_shared_with_the_original():
    model = EXAMPLES["conway"](2)  # RecursionError under plain deepcopy
    branch = checkpoint(model, strategy="copy")
    assert branch.random is not model.random and branch.rng is not model.rng
    assert branch.random.random() == model.random.random()
    assert np.array_equal(branch.rng.random(3), model.rng.random(3))


class _NoCounter:
    """A model without a ``steps`` counter: only the recorded history tells how far it went."""

    def __init__(self, seed: int = 0) -> None:
        from tests.simulators.models import BoltzmannWealth

        self.inner = BoltzmannWealth(5, seed=seed)
        self.lock = threading.Lock()  # forces replay

    @property
    def agents(self):
        return self.inner.agents

    def step(self) -> None:
        self.inner.step()


def test_checkpoints_taken_during_a_run_know_their_history():
    rec = FeatureRecorder({"wealth": "wealth"})
    model = _NoCounter(2)
    mid = {}

    def keep(m, t):
        if t == 2:  # after the third step, while simulate() is still running
            mid[t] = checkpoint(m, factory=lambda: _NoCounter(2))

    simulate(model, 5, rec, observers=[keep])
    at3 = mid[2]  # replayed from the factory through the three steps recorded so far
    factual = _NoCounter(2)
    simulate(factual, 3, rec)
    assert [a.wealth for a in at3.agents] == [a.wealth for a in factual.agents]
    assert fork(at3, steps=2, recorder=rec).panel.equals(simulate(factual, 2, rec))


@pytest.mark.parametrize("draw", ["numpy", "random"])
def test_a_model_drawing_from_a_process_wide_generator_is_not_forked_by_copy(draw):
    """Agents drawing from np.random.* (as mesa-examples' gis/agents_and_networks does) or the random module shared
    that generator with every copy: the copy check passed, two factual forks differed, neither was the real
    continuation, and each moved the original's future draws. The step is now seen drawing from it; a copy is
    refused (CheckpointError naming the generator) and "auto" falls back to replay, which reproduces the run when
    the factory seeds that generator."""
    import random as pyrandom

    import mesa

    class W(mesa.Agent):
        def __init__(self, m):
            super().__init__(m)
            self.w = 1.0

        def step(self):
            self.w += np.random.normal() if draw == "numpy" else pyrandom.gauss(0.0, 1.0)  # noqa: NPY002

    class M(mesa.Model):
        def __init__(self, seed=0):
            super().__init__(rng=seed)
            np.random.seed(seed)  # noqa: NPY002
            pyrandom.seed(seed)
            W.create_agents(self, 5)

        def step(self):
            self.agents.do("step")

    rec = FeatureRecorder({"w": "w"})
    model = M(0)
    simulate(model, steps=3, recorder=rec)
    name = "numpy's np.random" if draw == "numpy" else "Python's random module"
    with pytest.raises(CheckpointError, match=rf"draws from {name}"):
        checkpoint(model, strategy="copy")
    a = fork(model, steps=2, recorder=rec, factory=lambda: M(0))
    b = fork(model, steps=2, recorder=rec)
    assert a.strategy == b.strategy == "replay" and a.panel.equals(b.panel)
    truth = M(0)
    simulate(truth, steps=3, recorder=rec)
    assert a.panel.equals(simulate(truth, steps=2, recorder=rec))  # the factual continuation, bit for bit


def test_weak_references_between_agents_point_into_the_copy():
    # mesa-examples' virus_antibody keeps an antibody's target as weakref.ref(virus) and marks a knocked-out
    # antibody by weakref.ref(self). deepcopy copies a weakref.ref as itself, so the copy's antibodies chased
    # (and removed) the original's viruses, and `target is self` failed in the copy: AttributeError 'dna'
    # one step after the fork, reported as the scenario's own step() failing.
    import weakref

    import mesa

    class Hunter(mesa.Agent):
        def __init__(self, model):
            super().__init__(model)
            self.target, self.caught = None, 0

        def step(self):
            prey = self.target() if self.target is not None else None
            if prey is self:  # knocked out: rest one step
                self.target = None
            elif prey is not None:
                prey.remove()
                self.caught += 1
                self.target = weakref.ref(self)
            else:
                others = [a for a in self.model.agents if a is not self]
                self.target = weakref.ref(self.random.choice(others)) if others else None

    class Hunt(mesa.Model):
        def __init__(self, seed=0):
            super().__init__(rng=seed)
            Hunter.create_agents(self, 6)

        def step(self):
            self.agents.shuffle_do("step")

    factory = lambda: Hunt(4)  # noqa: E731
    model = factory()
    rec = FeatureRecorder({"caught": "caught"})
    simulate(model, 1, rec)
    before = state_digest(model)
    ids = {id(a) for a in model.agents}
    branch = checkpoint(model, strategy="copy")
    refs = [a.target() for a in branch.agents if a.target is not None]
    assert refs and not any(id(r) in ids for r in refs)  # every live target is an agent of the copy
    assert all(r in set(branch.agents) for r in refs)
    forked = fork(model, steps=3, recorder=rec, strategy="copy")
    assert digest_difference(before, state_digest(model)) is None  # the fork removed none of the original's
    replayed = fork(model, steps=3, recorder=rec, strategy="replay", factory=factory)
    assert forked.panel.equals(replayed.panel)
    assert forked.panel.equals(simulate(model, 3, rec))
