"""Forks of any object graph (issue 21): copies of models whose agents keep neighbourhoods recurse once per
agent; they copy on a deep stack instead of failing with a RecursionError (and thousands of traceback lines),
and when ``auto`` falls back to replay it says so once, with the reason. The recorder's default agents are the
types that have every requested feature."""

from __future__ import annotations

import itertools
import sys
import traceback
import warnings

import mesa
import numpy as np
import pytest

from aumann.errors import CheckpointError, ForkFallbackWarning, RecorderWarning, UnknownAttributeError
from aumann.simulators import FeatureRecorder, branching, checkpoint, fork, simulate

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Linked(mesa.Agent):
    """Each agent keeps its neighbour (a chain through the whole population: deepcopy recurses N deep)."""

    def __init__(self, model, prev):
        super().__init__(model)
        self.prev = prev
        self.wealth = 1.0

    def step(self):
        if self.prev is not None and self.random.random() < 0.5:
            self.prev.wealth += 0.5
            self.wealth -= 0.5


class Chain(mesa.Model):
    def __init__(self, n=3000, seed=0):
        super().__init__(rng=seed)
        agents = [Linked(self, None) for _ in range(n)]
        for a, b in itertools.pairwise(agents):  # each points at the next one created: a copy starting from the
            a.prev = b  # first recurses through the whole chain

    def step(self):
        self.agents.shuffle_do("step")


def _recorder():
    return FeatureRecorder({"wealth": "wealth"})


def test_a_deep_chain_copies_bit_for_bit_where_plain_deepcopy_hits_the_recursion_limit():
    model = Chain(seed=1)
    simulate(model, 2, _recorder())
    with pytest.raises(RecursionError):
        branching._deepcopy(model)  # what copy.deepcopy alone does at the default limit
    limit = sys.getrecursionlimit()
    branch = checkpoint(model, strategy="copy")
    assert sys.getrecursionlimit() == limit  # restored
    assert branching.digest_difference(branching.state_digest(model), branching.state_digest(branch)) is None
    a = simulate(model, 3, _recorder())
    b = simulate(branch, 3, _recorder())
    assert a.equals(b)  # the copy continues exactly as the original


def test_epstein_civil_violence_forks_by_copy_after_a_few_steps():
    from tests.simulators.mesa_examples import _build

    model = _build("EpsteinCivilViolence", 1, width=40, height=40)  # Mesa 3.3's keywords, or 3.5's Scenario
    rec = FeatureRecorder({"jail": lambda a: float(getattr(a, "jail_sentence", 0))},
                          agents=lambda m: m.agents)
    simulate(model, 5, rec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ForkFallbackWarning)  # a copy works: no fallback
        res = fork(model, steps=2, recorder=rec, strategy="auto")
    assert res.strategy == "copy"
    assert res.panel.equals(simulate(model, 2, rec))


def test_an_impossible_copy_is_short_and_auto_says_once_that_it_replays():
    class Locked(mesa.Model):
        def __init__(self, seed=0):
            super().__init__(rng=seed)
            import threading

            self.lock = threading.Lock()  # cannot be copied
            Linked(self, None)

        def step(self):
            self.agents.shuffle_do("step")

    model = Locked(seed=2)
    simulate(model, 2, _recorder())
    with pytest.raises(CheckpointError) as info:
        checkpoint(model, strategy="copy")
    text = "".join(traceback.format_exception(info.value))
    assert len(text.splitlines()) < 60 and "lock" in str(info.value).lower()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            res = fork(model, steps=1, recorder=_recorder(), strategy="auto", factory=lambda: Locked(seed=2))
            assert res.strategy == "replay"
    said = [w for w in caught if issubclass(w.category, ForkFallbackWarning)]
    assert len(said) == 1 and "replay" in str(said[0].message) and "lock" in str(said[0].message).lower()


# ------------------------------------------------------------------ the recorder's default agents
class Patch(mesa.Agent):
    def __init__(self, model):
        super().__init__(model)
        self.grass = 1.0


class Animal(mesa.Agent):
    def __init__(self, model):
        super().__init__(model)
        self.energy = 2.0


class Meadow(mesa.Model):
    def __init__(self, seed=0):
        super().__init__(rng=seed)
        for _ in range(4):
            Patch(self)
        for _ in range(3):
            Animal(self)

    def step(self):
        for a in self.agents.select(lambda a: isinstance(a, Animal)):
            a.energy += self.random.random()


def test_the_default_recorder_skips_types_without_the_features_and_says_which():
    with pytest.warns(RecorderWarning, match="Patch have no 'energy'"):
        panel = simulate(Meadow(seed=1), 3, FeatureRecorder({"energy": "energy"}))
    assert panel.N == 3 and panel.meta["skipped_agent_types"] == {"Patch": "energy"}
    with pytest.warns(RecorderWarning, match="Animal have no 'grass'"):
        patches = simulate(Meadow(seed=1), 2, FeatureRecorder({"grass": "grass"}))
    assert patches.N == 4  # only the patches have grass


def test_no_type_with_every_feature_is_a_clear_error():
    with pytest.raises(UnknownAttributeError, match="no agents have the requested features"):
        simulate(Meadow(seed=1), 2, FeatureRecorder({"energy": "energy", "grass": "grass"}))


def test_explicit_agents_stay_strict():
    with pytest.raises(UnknownAttributeError, match="Patch have no attribute 'energy'"):
        simulate(Meadow(seed=1), 2, FeatureRecorder({"energy": "energy"}, agents=lambda m: m.agents))


def test_a_panel_with_skipped_types_still_saves(tmp_path):
    with pytest.warns(RecorderWarning):
        panel = simulate(Meadow(seed=1), 2, FeatureRecorder({"energy": "energy"}))
    from aumann.attribution import Panel

    back = Panel.load(panel.save(tmp_path / "p.npz"))
    np.testing.assert_array_equal(back.values, panel.values)
