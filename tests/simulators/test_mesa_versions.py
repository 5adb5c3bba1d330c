"""What Mesa 3.5 does differently from Mesa 3.3, checked on whichever Mesa is installed (CI has 3.3.1).

Each test builds the 3.5 behaviour it guards against in a few lines (Mesa 3.5 needs Python >= 3.12), so that
the guard runs on Mesa 3.3 too. docs/simulators.md ("Mesa versions") lists the differences."""

from __future__ import annotations

import warnings

import mesa

from aumann.simulators import FeatureRecorder, simulate


class _Sheep(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.energy = float(self.random.randint(1, 9))

    def step(self) -> None:
        self.energy += self.random.random() - 0.5


class _Grass(mesa.Agent):
    def step(self) -> None:
        pass


class _Meadow(mesa.Model):
    def __init__(self, rng: int = 0) -> None:
        super().__init__(rng=rng)
        for _ in range(3):
            _Sheep(self)
            _Grass(self)

    def step(self) -> None:
        self.agents.shuffle_do("step")


def _mesa35_attribute_reporter(attribute_name: str, name: str):
    """Mesa 3.5's ``DataCollector`` attribute reporter: a getattr that raises, closing over the reporter's name
    too (Mesa 3.3's closes over the attribute name only and gives ``None``)."""

    def attr_reporter(agent):
        try:
            return getattr(agent, attribute_name)
        except AttributeError as e:
            raise AttributeError(f"Agent {agent.unique_id} has no attribute '{attribute_name}' (reporter: '{name}')"
                                 ) from e

    return attr_reporter


def test_a_mesa35_attribute_reporter_is_read_as_its_attribute_name():
    # Mesa 3.5's reporter closes over ("attribute_name", "name"): the adapter matched Mesa 3.3's closure only, so it
    # recorded the function, and a type without the attribute was skipped as "energy (its function raised
    # AttributeError)" instead of "energy" (the attribute the type lacks), unlike the same DataCollector on Mesa 3.3
    dc = mesa.DataCollector()
    dc.agent_reporters["energy"] = _mesa35_attribute_reporter("energy", "energy")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        panel = simulate(_Meadow(rng=4), 3, FeatureRecorder.from_datacollector(dc))
        ref = simulate(_Meadow(rng=4), 3, FeatureRecorder({"energy": "energy"}))
    assert panel.meta["skipped_agent_types"] == {"_Grass": "energy"}
    assert panel.equals(ref)
