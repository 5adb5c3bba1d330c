"""Foragers: each step an agent finds food (random), burns its metabolism, dies at zero energy, splits in
two above the birth threshold (a newborn with half its energy), and now and then leaves the colony for one to
three steps and comes back (the same agent, the same ``unique_id``, re-registered with the model)."""

from __future__ import annotations

import mesa


class Forager(mesa.Agent):
    def __init__(self, model: Foragers, energy: float) -> None:
        super().__init__(model)
        self.energy = float(energy)
        self.away = 0

    def forage(self) -> None:
        m = self.model
        self.energy += m.food * m.random.random() - m.metabolism
        if self.energy <= 0:
            self.energy = 0.0
            self.remove()  # starved
            return
        if self.energy > m.birth_energy:
            self.energy /= 2
            Forager(m, self.energy)  # a newborn
        if m.random.random() < m.p_leave:
            self.away = 1 + m.random.randrange(3)
            m.abroad.append(self)
            self.remove()  # leaves; comes back later with the same unique_id

    def rest(self) -> None:
        """The baseline action: no foraging, no offspring, no travel this step (metabolism still burns)."""
        self.energy = max(0.0, self.energy - self.model.metabolism)
        if self.energy <= 0:
            self.remove()

    def step(self) -> None:
        self.forage()


class Foragers(mesa.Model):
    def __init__(self, n: int = 20, *, food: float = 2.0, metabolism: float = 0.8, birth_energy: float = 6.0,
                 p_leave: float = 0.08, seed: int = 0) -> None:
        super().__init__(rng=seed)
        self.food, self.metabolism, self.birth_energy, self.p_leave = food, metabolism, birth_energy, p_leave
        self.abroad: list[Forager] = []
        for _ in range(n):
            Forager(self, 1.0 + 3.0 * self.random.random())

    def step(self) -> None:
        self.agents.shuffle_do("step")
        back = [a for a in self.abroad if a.away <= 1]
        for a in self.abroad:
            a.away -= 1
        self.abroad = [a for a in self.abroad if a.away > 0]
        for a in back:  # re-entry: the same agent object and id
            uid = a.unique_id
            self.register_agent(a)
            a.unique_id = uid  # Mesa >= 3.4.2's register_agent gives it the next id; Mesa 3.3's keeps it
