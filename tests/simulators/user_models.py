"""Mesa models written the way users write them (mesa-examples style), each stressing what the bundled examples do
not: several agent classes with different attribute sets, agents born and removed within one step, text
unique_ids, a step that raises late, a cell space with a property layer and a DataCollector's agent reporters.
Top-level so that process pools can pickle them."""

from __future__ import annotations

import types

import mesa
import numpy as np
from mesa.discrete_space import Cell, CellAgent, FixedAgent, OrthogonalMooreGrid, PropertyLayer


def mesa_collects_missing_attributes() -> bool:
    """Whether Mesa's ``DataCollector`` attribute reporter gives ``None`` for an agent without the attribute (Mesa
    3.3) rather than raising ``AttributeError`` (Mesa 3.5): only then can one DataCollector with an attribute
    reporter collect a model whose agent types differ in their attributes."""
    reporter = mesa.DataCollector(agent_reporters={"a": "a"}).agent_reporters["a"]
    try:
        return reporter(types.SimpleNamespace(unique_id=0)) is None
    except AttributeError:
        return False


class Fish(mesa.Agent):
    """Has ``energy`` and ``size``; spawns fry, about half of which are eaten in the step they are born."""

    def __init__(self, model: Pond, energy: float = 5.0) -> None:
        super().__init__(model)
        self.unique_id = f"fish-{self.unique_id}"  # text ids: Mesa assigns an int, the model renames it
        self.energy = energy
        self.size = 1.0

    def step(self) -> None:
        self.energy -= 1
        self.size += 0.1
        if self.energy > 6 and self.random.random() < 0.5:
            self.energy -= 3
            fry = Fish(self.model, energy=3.0)
            self.model.born += 1
            if self.random.random() < 0.5:  # eaten at once: born and removed within this step
                fry.remove()
                self.model.eaten_at_birth += 1
        if self.energy <= 0:
            self.remove()


class Plankton(mesa.Agent):
    """Has ``energy`` and ``density`` (no ``size``); keeps Mesa's int id unless the pond renames every id."""

    def __init__(self, model: Pond) -> None:
        super().__init__(model)
        if model.string_ids:
            self.unique_id = f"plankton-{self.unique_id}"
        self.energy = 2.0
        self.density = self.random.random()

    def step(self) -> None:
        self.energy += self.density


class Pond(mesa.Model):
    """Fish and plankton; ``string_ids=False`` leaves the plankton with Mesa's integer ids beside the fish's text."""

    def __init__(self, n_fish: int = 6, n_plankton: int = 4, *, rng: int | None = None,
                 string_ids: bool = True) -> None:
        super().__init__(rng=rng)
        self.string_ids = string_ids
        self.born = self.eaten_at_birth = 0
        Fish.create_agents(self, n_fish, energy=list(self.rng.uniform(4, 10, n_fish)))
        Plankton.create_agents(self, n_plankton)

    def step(self) -> None:
        self.agents_by_type[Plankton].do("step")
        fish = self.agents_by_type.get(Fish)
        if fish is not None:
            fish.shuffle_do("step")
            for f in fish:
                f.energy += 1.5 * self.random.random()


class Walker(mesa.Agent):
    def __init__(self, model: Fragile) -> None:
        super().__init__(model)
        self.x = 0.0

    def step(self) -> None:
        self.x += self.random.gauss(0, 1)


class Fragile(mesa.Model):
    """A random walk whose step raises at Mesa step ``crash_at`` (a late bug in a user's model)."""

    def __init__(self, n: int = 5, crash_at: int = 7, seed: int = 0) -> None:
        super().__init__(rng=seed)
        self.crash_at = crash_at
        Walker.create_agents(self, n)

    def step(self) -> None:
        if self.steps == self.crash_at:
            raise RuntimeError(f"boom at step {self.steps}")
        self.agents.do("step")


class Grazer(CellAgent):
    """Moves on a torus, eats the cell's grass (a property layer), splits when fed, dies when starved."""

    def __init__(self, model: Meadow, cell: Cell) -> None:
        super().__init__(model)
        self.cell = cell
        self.food = 3.0

    def step(self) -> None:
        self.cell = self.cell.neighborhood.select_random_cell()
        self.food += self.cell.grass - 0.5
        self.cell.grass = 0.0
        if self.food > 6:
            self.food -= 3
            Grazer(self.model, self.cell)
        elif self.food <= 0:
            self.remove()


class Tuft(FixedAgent):
    """A fixed agent with ``height``, no ``food``: skipped by a recorder of ``food``."""

    def __init__(self, model: Meadow, cell: Cell) -> None:
        super().__init__(model)
        self.cell = cell
        self.height = cell.grass


class Meadow(mesa.Model):
    """``mesa.discrete_space`` grid with a ``grass`` property layer, and a DataCollector with agent reporters (an
    attribute name, and lambdas that read every agent class)."""

    def __init__(self, width: int = 6, height: int = 6, n: int = 5, *, rng: int | None = None) -> None:
        super().__init__(rng=rng)
        self.grid = OrthogonalMooreGrid((width, height), torus=True, random=self.random)
        self.grass = PropertyLayer("grass", (width, height), default_value=1.0)
        self.grid.add_property_layer(self.grass)
        cells = list(self.grid.all_cells.cells)
        for c in self.rng.choice(cells, 4):
            Tuft(self, c)
        for c in self.rng.choice(cells, n):
            Grazer(self, c)
        self.datacollector = mesa.DataCollector(agent_reporters={
            "food": "food",
            "hungry": lambda a: float(getattr(a, "food", 9.0) < 2),
            "x": lambda a: a.cell.coordinate[0],
        })

    def step(self) -> None:
        self.agents_by_type[Grazer].shuffle_do("step")
        self.grass.data[:] = np.minimum(self.grass.data + 0.3, 2.0)
        if mesa_collects_missing_attributes():  # Mesa 3.5's own collect() raises for the tufts' missing "food"
            self.datacollector.collect(self)


class Patch(mesa.Agent):
    """A patch keyed by its coordinates: ``unique_id = (x, y)`` (a panel labels it ``"(x, y)"``)."""

    def __init__(self, model: Field, xy: tuple[int, int]) -> None:
        super().__init__(model)
        self.unique_id = xy
        self.level = self.random.random()

    def step(self) -> None:
        self.level = 0.5 * self.level + 0.5 * self.random.random()


class Field(mesa.Model):
    """n × n patches with tuple ids; the centre patch is removed at step 2."""

    def __init__(self, n: int = 3, *, rng: int | None = None) -> None:
        super().__init__(rng=rng)
        for x in range(n):
            for y in range(n):
                Patch(self, (x, y))

    def step(self) -> None:
        self.agents.do("step")
        if self.steps == 2:
            next(a for a in self.agents if a.unique_id == (1, 1)).remove()
