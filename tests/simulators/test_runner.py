"""Forks and executors: a no-op fork replays the factual run; interventions change only the branch;
serial, process-pool and Ray executors give identical results."""

from __future__ import annotations

import copy
import importlib.util
import re

import numpy as np
import pytest

from aumann.errors import UnknownAgentError
from aumann.simulators import (
    CheckpointError,
    ExecutorError,
    FeatureRecorder,
    LocalExecutor,
    RayExecutor,
    checkpoint,
    for_agents,
    fork,
    seeded_specs,
    simulate,
)
from tests.simulators.models import BoltzmannWealth, SIRNetwork, fork_spec_run, wealth_run

REC = FeatureRecorder({"wealth": "wealth"})


def test_noop_fork_replays_the_factual_continuation_bit_identically():
    model = BoltzmannWealth(8, seed=11)
    simulate(model, steps=4, recorder=REC)
    branch = fork(model, steps=5, recorder=REC)
    factual = simulate(model, steps=5, recorder=REC)  # the original continues untouched by the fork
    assert branch.panel.equals(factual)
    assert list(factual.steps) == [5, 6, 7, 8, 9] and branch.model.steps == model.steps


def test_intervention_changes_only_the_branch():
    model = SIRNetwork(14, seed=5)
    simulate(model, steps=2, recorder=FeatureRecorder({"s": "state"}))
    before = checkpoint(model)
    infected = [a.unique_id for a in model.agents if a.state == 1.0]
    assert infected  # the seed gives an outbreak to stop
    cured = fork(model, intervention=for_agents(infected, lambda a: setattr(a, "state", 2.0)),
                 steps=4, recorder=FeatureRecorder({"s": "state"}))
    assert (cured.panel.values == 1.0).sum() == 0  # nobody left to infect anyone
    assert [a.state for a in model.agents] == [a.state for a in before.agents]  # factual untouched


def test_repeated_intervention_forces_an_action_every_step():
    model = BoltzmannWealth(6, seed=2)
    res = fork(model, intervention=for_agents([1], lambda a: setattr(a, "wealth", 0)), steps=4,
               recorder=REC, repeat=True)
    # agent 1 is zeroed before every step, so it can only hold what others gave it during that step
    assert res.panel.values[:, 0, 0].max() <= 5


def test_bad_fork_inputs():
    model = BoltzmannWealth(4)
    with pytest.raises(UnknownAgentError, match="not in the model"):
        fork(model, intervention=for_agents([999], lambda a: None), steps=1, recorder=REC)

    class Unforkable(BoltzmannWealth):
        def __deepcopy__(self, memo):
            raise TypeError("cannot pickle '_thread.lock' object")

    with pytest.raises(CheckpointError, match=r"cannot checkpoint Unforkable.*_thread.lock"):
        fork(Unforkable(3), steps=1, recorder=REC)


def test_checkpoint_is_a_deep_copy():
    model = BoltzmannWealth(4, seed=1)
    cp = checkpoint(model)
    assert cp is not model and next(iter(cp.agents)) is not next(iter(model.agents))
    assert copy.deepcopy(cp).rng.random() == cp.rng.random() == model.rng.random()


def test_seeded_specs_are_deterministic_and_independent():
    a, b = seeded_specs(42, 3), seeded_specs(42, ["x", "y", "z"])
    assert [s.rng().normal() for s in a] == [s.rng().normal() for s in b]
    assert len({s.rng().normal() for s in a}) == 3
    assert [s.params for s in b] == ["x", "y", "z"]


def test_serial_and_process_pool_give_identical_results():
    specs = seeded_specs(2026, 4)
    serial = LocalExecutor(max_workers=1).map(fork_spec_run, specs)
    # "fork" keeps the test fast (spawned workers would each re-import torch via aumann.attribution);
    # the library default is "spawn", which the Ray test's workers exercise in the same way
    pooled = LocalExecutor(max_workers=2, mp_context="fork").map(fork_spec_run, specs)
    for (v1, r1), (v2, r2) in zip(serial, pooled, strict=True):
        np.testing.assert_array_equal(v1, v2)
        assert r1 == r2
    assert not np.array_equal(serial[0][0], serial[1][0])  # distinct seeds → distinct runs


def test_local_executor_rejects_bad_worker_counts():
    with pytest.raises(ExecutorError, match="max_workers"):
        LocalExecutor(max_workers=-1)


@pytest.mark.ray
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_ray_executor_matches_the_local_pool():
    import ray

    specs = seeded_specs(7, 3)
    local = LocalExecutor(max_workers=1).map(wealth_run, specs)
    try:
        remote = RayExecutor(num_cpus=1).map(wealth_run, specs)
    finally:
        ray.shutdown()
    assert remote == local and len({str(w) for w, _ in local}) == 3


def test_ray_executor_without_ray_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ExecutorError, match=r"aumann\[ray\]"):
        RayExecutor()


def test_agents_created_in_a_fork_get_fresh_ids_matching_the_factual_branch():
    model = BoltzmannWealth(5, seed=3, churn=True)
    simulate(model, steps=2, recorder=REC)  # churn happens at steps 3, 6, ...
    branch = fork(model, steps=4, recorder=REC)
    factual = simulate(model, steps=4, recorder=REC)
    ids = [a.unique_id for a in branch.model.agents]
    assert len(ids) == len(set(ids))  # no collision with living agents
    assert branch.panel.equals(factual) and {6, 7} <= set(factual.agent_ids.tolist())  # newcomers


def test_fork_many_serial_and_process_pool_agree_and_match_single_forks():
    from aumann.simulators import fork_many
    from tests.simulators.models import give_ten

    model = BoltzmannWealth(6, seed=8)
    simulate(model, steps=3, recorder=REC)
    arms = {"factual": None, "windfall": for_agents([2, 4], give_ten)}
    serial = fork_many(model, arms, steps=4, recorder=REC, keep_models=True)
    pooled = fork_many(model, arms, steps=4, recorder=REC,
                       executor=LocalExecutor(max_workers=2, mp_context="fork"))
    for name, intervention in arms.items():
        single = fork(model, intervention=intervention, steps=4, recorder=REC).panel
        assert serial[name].panel.equals(single) and pooled[name].panel.equals(single)
    assert pooled["factual"].model is None and serial["factual"].model is not None
    assert serial["windfall"].panel.values.sum() == serial["factual"].panel.values.sum() + 4 * 20
    total = fork_many(model, arms, steps=4, recorder=REC, indicator=lambda z: z[..., 0].sum(-1))
    np.testing.assert_array_equal(total["windfall"].f_values, serial["windfall"].panel.values.sum(axis=(1, 2)))
    np.testing.assert_array_equal(total["factual"].f_values, np.full(4, 6.0))  # wealth is conserved


def _burnout(burn: int = 3, n: int = 4, seed: int = 1):
    """A model that sets ``running = False`` after step ``burn`` (mesa-examples' forest fire when no tree burns)."""
    import mesa

    class Tree(mesa.Agent):
        heat = 0.0

        def step(self):
            if self.model.running:
                self.heat += 1.0 + self.random.random()

    class Burnout(mesa.Model):
        def step(self):
            self.agents.shuffle_do("step")
            if self.steps >= burn:
                self.running = False

    m = Burnout(rng=seed)
    for _ in range(n):
        Tree(m)
    return m


def test_a_model_that_sets_running_false_is_said_once_with_its_step_and_kept_in_the_panel():
    """Mesa models say they are done with ``model.running = False`` (forest fire when no tree burns; batch_run
    stops there); ``simulate`` never read it and stepped the finished model for every step asked for, silently:
    the forest-fire study then picked t* among the flat steps (Δv = 0) and its whole table was '–'. The panel
    keeps its shape (a model that never sets running is recorded exactly as before), but the step is said once
    (ModelFinishedWarning, forks from it say nothing more) and kept in ``panel.meta["model_finished"]``."""
    import warnings

    from aumann.errors import ModelFinishedWarning

    rec = FeatureRecorder({"heat": "heat"})
    with pytest.warns(ModelFinishedWarning) as caught:
        m = _burnout(burn=3)
        panel = simulate(m, 8, rec)
    msgs = [str(w.message) for w in caught if issubclass(w.category, ModelFinishedWarning)]
    assert len(msgs) == 1
    assert "Burnout set running = False at panel step 2 (model step 3)" in msgs[0]
    assert "last 5 of 8 step(s)" in msgs[0] and "pass steps=3" in msgs[0]
    assert panel.shape[0] == 8 and panel.meta["model_finished"] == {"step": 2, "model_step": 3, "steps": 8}
    assert np.array_equal(panel.values[2], panel.values[7])  # stepped on: the finished model's steps are flat
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFinishedWarning)
        fork(m, steps=2, recorder=rec)  # a branch of a finished model: said already
        with_initial = simulate(_burnout(burn=3), 4, rec, initial=True, warn_finished=False)
    assert with_initial.meta["model_finished"] == {"step": 3, "model_step": 3, "steps": 5}
    with pytest.warns(ModelFinishedWarning, match="already finished .running = False. before the first step"):
        done = simulate(m, 2, rec)
    assert done.meta["model_finished"]["step"] == -1
    with warnings.catch_warnings():  # finished on the last step: no step of a finished model to warn about
        warnings.simplefilter("error", ModelFinishedWarning)
        last = simulate(_burnout(burn=4), 4, rec)
    assert last.meta["model_finished"] == {"step": 3, "model_step": 4, "steps": 4}
    with warnings.catch_warnings():  # never finished (burn beyond the run): nothing said, nothing in meta
        warnings.simplefilter("error", ModelFinishedWarning)
        plain = simulate(_burnout(burn=99), 8, rec)
    assert "model_finished" not in plain.meta


class _Hits:
    """A model stand-in whose agents count how often an intervention acted on them."""

    def __init__(self, ids):
        from types import SimpleNamespace

        self.agents = [SimpleNamespace(unique_id=u, hits=0) for u in ids]
        self.steps = 0

    def hits(self) -> dict:
        return {a.unique_id: a.hits for a in self.agents}


def _hit(agent) -> None:
    agent.hits += 1


@pytest.mark.parametrize("mask", [[True, False, True], np.array([True, False, True])], ids=["list", "array"])
def test_for_agents_refuses_a_boolean_mask_it_read_as_the_ids_1_and_0(mask):
    """``for_agents(mask, g)`` took True and False as the ids 1 and 0 (``True == 1`` in Python): on agents 0, 1, 2
    the mask [True, False, True] acted twice on agent 1, once on agent 0 and never on agent 2, silently."""
    with pytest.raises(UnknownAgentError, match=r"booleans, not agent ids.*a mask over agents"):
        for_agents(mask, _hit)


@pytest.mark.parametrize(("ids", "shown"), [("ab", "'ab'"), (3, "3"), (None, "None"), (np.int64(3), "3")])
def test_for_agents_of_a_single_id_says_to_pass_a_list(ids, shown):
    """``for_agents("ab", g)`` acted on the agents 'a' and 'b' (the text's characters), not on 'ab', silently;
    ``for_agents(3, g)`` was Python's bare ``TypeError: 'int' object is not iterable``."""
    with pytest.raises(UnknownAgentError, match=rf"single id {re.escape(shown)}: pass \[{re.escape(shown)}\]"):
        for_agents(ids, _hit)
    model = _Hits(["a", "b", "ab"])
    for_agents(["ab"], _hit)(model)
    assert model.hits() == {"a": 0, "b": 0, "ab": 1}


def test_for_agents_acts_once_on_an_agent_named_twice():
    """"action(agent) on every agent whose unique_id is in ids": an id given twice (or as 1 and 1.0, or a tuple and
    its label) acted twice on its agent, so ``lambda a: setattr(a, "wealth", a.wealth / 2)`` quartered it."""
    model = _Hits([0, 1, (0, 1)])
    for_agents([1, 1, 1.0, (0, 1), "(0, 1)"], _hit)(model)
    assert model.hits() == {0: 0, 1: 1, (0, 1): 1}
