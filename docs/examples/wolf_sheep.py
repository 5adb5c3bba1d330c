"""Mesa's wolf–sheep predation model, attributed: which animals move the mean energy of the living.

    aumann run docs/examples/wolf_sheep.py:scenario --runs 2

Births and deaths: the panel keeps a row per animal ever seen; rows of animals not yet born or
already dead are absent (``Panel.alive``); lambs eaten in the step they are born, and animals that
die in the first step, are present at no capture (counted in each run panel's
``meta["transient_agents"]`` and said once, ``TransientAgentsWarning``). The indicator averages energy
over the living only: it takes the ``alive`` keyword, so every evaluation (the engine, forks, deletion
curves) hands it the step's living mask (the built-in ``"lin"`` does the same), and its value never
depends on what dead rows hold. The recorder records the animals (grass patches have no ``energy``). Grass regrows through
events: on Mesa 3.3 those of an ``ABMSimulator`` (aumann steps such a model with
``model.simulator.run_for(1)``), on Mesa 3.5 those the model schedules itself (``model.step()``). Baseline
action: the animal rests this step — it does not move, eat or reproduce, but still burns one unit
of energy (and dies below zero) — by replacing its ``step`` for that one step.
"""

from mesa.examples.advanced.wolf_sheep import model as wolf_sheep
from pydantic import Field

from aumann.errors import ConfigError
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Config(ScenarioConfig):
    agents: int = Field(40, ge=2)
    steps: int = Field(16, ge=2)
    runs: int = 2
    wolves: int = Field(8, ge=0)
    size: int = 12


def build(cfg: Config, rng, backend=None):
    if cfg.agents <= cfg.wolves:  # the sheep are the agents that are not wolves
        raise ConfigError(f"--agents {cfg.agents} leaves no sheep beside {cfg.wolves} wolves: pass more agents")
    params = dict(width=cfg.size, height=cfg.size, initial_sheep=cfg.agents - cfg.wolves, initial_wolves=cfg.wolves)
    if hasattr(wolf_sheep, "WolfSheepScenario"):  # Mesa >= 3.5: parameters as a Scenario
        return wolf_sheep.WolfSheep(wolf_sheep.WolfSheepScenario(**params, rng=int(rng.integers(2**31))))
    from mesa.experimental.devs import ABMSimulator  # Mesa 3.3: keyword arguments, seed=, a DEVS simulator

    return wolf_sheep.WolfSheep(**params, seed=int(rng.integers(2**31)), simulator=ABMSimulator())


def mean_energy_of_the_living(z, context=None, alive=None):  # alive=: the living mask (None: all alive)
    return z[..., 0].mean(-1) if alive is None else (alive * z[..., 0]).sum(-1) / alive.sum(-1)


def rest(animal):
    animal.energy -= 1
    if animal.energy < 0:
        animal.remove()


def resting(model, ids):
    for animal in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(animal, "step", lambda a=animal: rest(a))


scenario = Scenario(
    name="wolf-sheep",
    description="Mesa's wolf–sheep predation (mesa.examples): mean energy of the living animals",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"energy": "energy"}),
    features=("energy",),
    indicator=lambda cfg: mean_energy_of_the_living, original=lambda cfg: mean_energy_of_the_living,
    baseline_action=resting,
    baseline_action_by="id",
    baseline_description="the animal rests this step: no move, no food, no offspring (it still burns energy)",
)
