"""Small user-style Mesa models for the simulator tests (top-level so that process pools can pickle)."""

from __future__ import annotations

import mesa
import networkx as nx
import numpy as np


class MoneyAgent(mesa.Agent):
    def __init__(self, model: mesa.Model, wealth: int = 1) -> None:
        super().__init__(model)
        self.wealth = wealth

    def step(self) -> None:
        if self.wealth > 0:
            other = self.random.choice(list(self.model.agents))
            other.wealth += 1
            self.wealth -= 1


class BoltzmannWealth(mesa.Model):
    """Boltzmann wealth; with ``churn`` an agent leaves and a newcomer arrives every few steps."""

    def __init__(self, n: int = 8, *, seed: int = 0, churn: bool = False) -> None:
        super().__init__(rng=seed)
        self.churn = churn
        for _ in range(n):
            MoneyAgent(self)

    def step(self) -> None:
        self.agents.shuffle_do("step")
        if self.churn and self.steps % 3 == 0:
            leaver = next(iter(self.agents.select(lambda a: a.wealth == min(b.wealth for b in self.agents))))
            heir = self.random.choice([a for a in self.agents if a is not leaver])
            heir.wealth += leaver.wealth
            leaver.remove()
            MoneyAgent(self, wealth=0)


class SIRAgent(mesa.Agent):
    def __init__(self, model: mesa.Model, infected: bool) -> None:
        super().__init__(model)
        self.state = 1.0 if infected else 0.0  # 0 susceptible, 1 infected, 2 recovered

    def step(self) -> None:
        if self.state == 1.0:
            for n in self.model.grid.get_neighbors(self.pos, include_center=False):
                if n.state == 0.0 and self.model.rng.random() < self.model.beta:
                    n.next_state = 1.0
            if self.model.rng.random() < self.model.gamma:
                self.next_state = 2.0

    def advance(self) -> None:
        self.state = self.__dict__.pop("next_state", self.state)


class SIRNetwork(mesa.Model):
    """SIR on a small-world network (NetworkGrid)."""

    def __init__(self, n: int = 12, *, seed: int = 0, beta: float = 0.4, gamma: float = 0.2) -> None:
        super().__init__(rng=seed)
        self.beta, self.gamma = beta, gamma
        g = nx.watts_strogatz_graph(n, 4, 0.2, seed=int(self.rng.integers(2**31)))
        self.grid = mesa.space.NetworkGrid(g)
        for node in g.nodes:
            a = SIRAgent(self, infected=node < 2)
            self.grid.place_agent(a, node)

    def step(self) -> None:
        self.agents.shuffle_do("step")
        self.agents.do("advance")


class VectorModel:
    """A vectorised model: agent state in numpy arrays, stepped without per-agent Python."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.wealth = np.ones(n)
        self.active = np.ones(n, dtype=bool)
        self.steps = 0

    def step(self) -> None:
        self.wealth = self.wealth + self.rng.normal(size=self.wealth.shape)
        self.active = self.wealth > -1.0
        self.steps += 1


def fork_spec_run(spec):
    """Run one seeded Boltzmann fork from a RunSpec (used by executor tests)."""
    from aumann.simulators import FeatureRecorder, simulate

    seed = int(spec.seed.generate_state(1)[0])
    model = BoltzmannWealth(n=6, seed=seed)
    panel = simulate(model, steps=5, recorder=FeatureRecorder({"wealth": "wealth"}))
    return panel.values, float(spec.rng().normal())


def give_ten(agent) -> None:
    """A picklable intervention action."""
    agent.wealth += 10


def wealth_run(spec):
    """A light seeded run (no Panel, so workers need not import torch): final wealth by agent id."""
    seed = int(spec.seed.generate_state(1)[0])
    model = BoltzmannWealth(n=6, seed=seed)
    for _ in range(5):
        model.step()
    return [a.wealth for a in sorted(model.agents, key=lambda a: a.unique_id)], float(spec.rng().normal())
