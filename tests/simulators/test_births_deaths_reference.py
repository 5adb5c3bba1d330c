"""A compact wolf–sheep (births, deaths by starvation, deaths by predation mid-step) through the recorder, checked
against what the model itself logs: who was alive after each step, their energies, and the attribution of the
mean energy of the living (efficiency, exact zeros on dead rows, closed form against the path integral)."""

from __future__ import annotations

import mesa
import numpy as np
import pytest

from aumann.attribution import AumannShapley, attribute
from aumann.simulators import FeatureRecorder, simulate

pytestmark = [pytest.mark.filterwarnings("ignore:Random number generator not specified"),
              pytest.mark.filterwarnings("ignore:FeatureRecorder. agents of type Grass")]


class Animal(mesa.Agent):
    def __init__(self, model: mesa.Model, energy: float) -> None:
        super().__init__(model)
        self.energy = energy

    def step(self) -> None:
        self.energy -= 1.0
        self.feed()
        if self.energy < 0:
            self.remove()
        elif self.random.random() < self.model.p_birth:
            self.energy /= 2
            type(self)(self.model, self.energy)  # a newborn: it steps from the next step on


class Sheep(Animal):
    def feed(self) -> None:
        self.energy += 2.0 * self.random.random()


class Wolf(Animal):
    def feed(self) -> None:
        prey = [a for a in self.model.agents if isinstance(a, Sheep)]
        if prey and self.random.random() < 0.3:
            self.random.choice(prey).remove()  # eaten, possibly before its own turn
            self.energy += 3.0


class Grass(mesa.Agent):  # no energy: skipped by the recorder
    def step(self) -> None:
        pass


class Meadow(mesa.Model):
    def __init__(self, seed: int = 0, sheep: int = 12, wolves: int = 4, p_birth: float = 0.15) -> None:
        super().__init__(rng=seed)
        self.p_birth = p_birth
        Grass.create_agents(self, 3)
        for _ in range(sheep):
            Sheep(self, 3.0 * self.random.random())
        for _ in range(wolves):
            Wolf(self, 4.0 * self.random.random())

    def step(self) -> None:
        self.agents.shuffle_do("step")


def test_alive_mask_values_and_attribution_match_the_model_itself():
    model = Meadow(seed=4)
    log = []  # the model's own animals after each step: {unique_id: energy}
    panel = simulate(model, steps=15, recorder=FeatureRecorder({"energy": "energy"}),
                     observers=[lambda m, t: log.append({a.unique_id: a.energy for a in m.agents
                                                         if isinstance(a, Animal)})])
    ids = panel.agent_ids.tolist()
    born = set().union(*log) - {a for a in ids if a <= 19}  # ids 1-3 are grass, 4-19 the first animals
    assert born and any(len(log[t]) < len(log[t - 1]) for t in range(1, 15))  # births and deaths both happen
    assert set(ids) == set().union(*log)  # one row per animal ever seen, grass left out
    alive = np.array([[i in log[t] for i in ids] for t in range(15)])
    energy = np.array([[log[t].get(i, 0.0) for i in ids] for t in range(15)])
    assert np.array_equal(panel.alive, alive)
    assert np.array_equal(panel.values[..., 0], energy)

    mean_living = np.array([np.mean(list(log[t].values())) for t in range(15)])
    for baseline in ("zero", "pre-event"):
        closed = attribute("lin", panel, baseline=baseline)
        path = attribute(lambda z, context=None, alive=None: (alive * z[..., 0]).sum(-1) / alive.sum(-1),
                         panel, method=AumannShapley(closed_form=False), baseline=baseline)
        for res in (closed, path):
            np.testing.assert_allclose(res.f_values, mean_living, rtol=0, atol=1e-12)
            np.testing.assert_allclose(res.phi.sum(1), res.delta_v, rtol=0, atol=1e-12)
            assert np.all(res.phi[~alive] == 0.0)
        np.testing.assert_allclose(closed.phi, path.phi, rtol=0, atol=1e-12)
    # zero baseline: φ_i,t = e_i,t / n_t for the living (the mean's closed form, computed here)
    n = alive.sum(1, keepdims=True)
    np.testing.assert_allclose(attribute("lin", panel).phi, np.where(alive, energy / n, 0.0), rtol=0, atol=1e-14)
