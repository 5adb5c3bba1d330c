"""Mesa's virus-on-network model, attributed: which agents drive the infected share, and when.

    aumann run docs/examples/virus_on_network.py:scenario --runs 2

Baseline action: the agent does not transmit this step (its ``try_to_infect_neighbors`` is a no-op
for that one step; it can still recover). Mesa's model (3.3 and 3.5) draws its random graph from
Python's global ``random``; ``build`` seeds it from the run's seed for the construction only (and restores
it), so runs, forks and replays are reproducible.
"""

import inspect
import random

from mesa.examples import VirusOnNetwork
from mesa.examples.basic.virus_on_network.agents import State
from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Config(ScenarioConfig):
    agents: int = Field(40, ge=2)
    steps: int = Field(16, ge=2)
    runs: int = 2
    degree: float = 4.0
    outbreak: int = 3


def build(cfg: Config, rng, backend=None):
    seed, state = int(rng.integers(2**31)), random.getstate()
    seeding = "seed" if "seed" in inspect.signature(VirusOnNetwork).parameters else "rng"  # Mesa 3.3 | >= 3.5
    random.seed(seed)
    try:
        return VirusOnNetwork(num_nodes=cfg.agents, avg_node_degree=cfg.degree, initial_outbreak_size=cfg.outbreak,
                              **{seeding: seed})
    finally:
        random.setstate(state)


def no_transmission(model, ids):
    for agent in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(agent, "try_to_infect_neighbors")


scenario = Scenario(
    name="virus-on-network",
    description="Mesa's virus on a network (mesa.examples): infected share",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"infected": lambda a: float(a.state is State.INFECTED)}),
    features=("infected",),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=no_transmission,
    baseline_action_by="id",
    baseline_description="the agent does not transmit this step (it can still recover)",
)
