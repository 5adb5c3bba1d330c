"""A fork by replay of a model built with no seed says so.

Five of mesa-examples' models build ``mesa.Model`` with no seed (bank_reserves, el_farol, color_patches, aco_tsp;
caching_and_replay's wrapper builds its Schelling so): Mesa then seeds ``model.random`` and ``model.rng`` from the
operating system's entropy, and no factory can rebuild such a model. ``fork(..., strategy="replay",
factory=BankReservesModel)`` raised ``ReplayDivergedError: ... ('model', 'rng random', 'd725...') vs (...). The
factory must rebuild the exact initial state (same seed and parameters)``, which sends the user looking for a seed
they never gave. The error now says the model was built with no seed and how to give it one.
"""

from __future__ import annotations

import mesa
import pytest

from aumann.errors import ReplayDivergedError
from aumann.simulators import FeatureRecorder, fork, simulate


class Trader(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.wallet = float(self.random.randint(1, 10))

    def step(self) -> None:
        other = self.random.choice(list(self.model.agents))
        other.wallet += 1
        self.wallet -= 1


class Market(mesa.Model):
    def __init__(self, n: int = 5, seed: int | None = None) -> None:
        super().__init__() if seed is None else super().__init__(rng=seed)  # as bank_reserves: super().__init__()
        Trader.create_agents(self, n)

    def step(self) -> None:
        self.agents.shuffle_do("step")


REC = FeatureRecorder({"wallet": "wallet"})


def test_a_replay_of_a_model_built_with_no_seed_says_so():
    model = Market()
    simulate(model, 3, REC)
    with pytest.raises(ReplayDivergedError) as info:
        fork(model, steps=1, recorder=REC, strategy="replay", factory=Market)
    msg = str(info.value)
    assert "does not reproduce" in msg and "Market was built with no seed" in msg, msg
    assert "rng=" in msg, msg


def test_a_seeded_model_whose_factory_misses_the_seed_is_not_called_unseeded():
    model = Market(seed=3)
    simulate(model, 3, REC)
    with pytest.raises(ReplayDivergedError) as info:
        fork(model, steps=1, recorder=REC, strategy="replay", factory=lambda: Market(seed=4))
    assert "no seed" not in str(info.value)
    assert fork(model, steps=1, recorder=REC, strategy="replay", factory=lambda: Market(seed=3)).strategy == "replay"
