"""A copy that fails because a method calls itself without end is not a deep object graph.

mesa-examples' ``caching_and_replay`` wraps its Schelling model in mesa-replay's ``CacheableModel``, a proxy whose
``__getattr__`` forwards every missing name to ``self.model``. ``copy.deepcopy`` builds the copy without ``__init__``
and asks it for ``__setstate__``; the proxy has no ``model`` yet, so ``__getattr__`` asks itself for ``model`` and
recurses until Python stops it. aumann said "its object graph is deeper than 200,000 nested objects
(RecursionError in copy.deepcopy even on a deep stack)", after a second attempt on a 512 MiB stack with a limit of
200,000 -- pointing the user at the size of their model instead of at the one method to fix.
"""

from __future__ import annotations

import copy
import warnings

import mesa
import pytest

from aumann.errors import CheckpointError, ForkFallbackWarning
from aumann.simulators import FeatureRecorder, fork, simulate
from aumann.simulators.runaway import runaway_function


class Coin(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.wealth = 1.0

    def step(self) -> None:
        self.wealth += self.random.random()


class Pocket(mesa.Model):
    def __init__(self, seed: int = 5) -> None:
        super().__init__(rng=seed)
        Coin.create_agents(self, 4)

    def step(self) -> None:
        self.agents.shuffle_do("step")


class Cached:
    """The mesa-replay pattern: a wrapper that forwards what it lacks to the model it wraps."""

    def __init__(self, model: mesa.Model) -> None:
        self.model = model
        self.cache: list[int] = []

    def step(self) -> None:
        self.model.step()
        self.cache.append(self.model.steps)

    def __getattr__(self, item: str):
        return self.model.__getattribute__(item)


REC = FeatureRecorder({"wealth": "wealth"}, agents=lambda w: w.model.agents)


def test_a_copy_that_recurses_in_getattr_names_the_method_not_the_graph_size():
    wrapped = Cached(Pocket())
    simulate(wrapped, 3, REC)
    with pytest.raises(CheckpointError) as info:
        fork(wrapped, steps=2, recorder=REC, strategy="copy")
    msg = str(info.value)
    assert "Cached.__getattr__" in msg and "test_runaway.py" in msg, msg
    assert "calls itself without end" in msg and "AttributeError" in msg, msg
    assert "deeper than" not in msg, msg


def test_auto_falls_back_to_replay_saying_why_and_reproduces_the_run():
    wrapped = Cached(Pocket())
    simulate(wrapped, 3, REC)
    with pytest.warns(ForkFallbackWarning, match=r"Cached\.__getattr__ .* calls itself without end"):
        branch = fork(wrapped, steps=2, recorder=REC, factory=lambda: Cached(Pocket()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cont = simulate(wrapped, 2, REC)
    assert branch.strategy == "replay" and branch.panel.equals(cont)


def test_runaway_function_tells_a_loop_from_a_deep_chain():
    class Node:
        def __init__(self, nxt: Node | None) -> None:
            self.nxt = nxt

    def loop(n: int) -> int:
        return loop(n + 1)

    try:
        loop(0)
    except RecursionError as exc:
        found = runaway_function(exc)
    assert found is not None and found.startswith(
        "test_runaway_function_tells_a_loop_from_a_deep_chain.<locals>.loop (")

    chain = None
    for _ in range(5_000):
        chain = Node(chain)
    try:
        copy.deepcopy(chain)
    except RecursionError as exc:  # a deep graph: copy's own frames recur, no one function of the user's
        assert runaway_function(exc) is None
    else:  # pragma: no cover - a Python whose limit admits the chain
        pytest.skip("the chain copied within the recursion limit")


class Link:
    """A chain copied by a ``__deepcopy__`` that calls itself directly (no ``copy.deepcopy`` frames between)."""

    def __init__(self, nxt: Link | None) -> None:
        self.nxt, self.w = nxt, 1.0

    def __deepcopy__(self, memo: dict) -> Link:
        new = Link.__new__(Link)
        memo[id(self)] = new
        new.w, new.nxt = self.w, None if self.nxt is None else self.nxt.__deepcopy__(memo)
        return new


class Chained(Pocket):
    def __init__(self, seed: int = 5, length: int = 3_000) -> None:
        super().__init__(seed)
        chain = None
        for _ in range(length):
            chain = Link(chain)
        self.chain = chain


def test_a_deep_chain_copied_by_a_self_calling_deepcopy_still_gets_the_deep_stack():
    """Its first RecursionError looks like a loop (one function, no copy frames) but is depth: it copies on the
    deep stack, as before, and is not refused as a runaway."""
    model = Chained()
    rec = FeatureRecorder({"wealth": "wealth"})
    simulate(model, 2, rec)
    branch = fork(model, steps=2, recorder=rec, strategy="copy")
    assert branch.strategy == "copy" and branch.model.chain is not model.chain
    assert branch.panel.equals(simulate(model, 2, rec))
