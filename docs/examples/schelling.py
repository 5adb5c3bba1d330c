"""Mesa's Schelling model, attributed: which agents' moves drive segregation, and when.

    aumann run docs/examples/schelling.py:scenario --runs 2

Segregation = the mean share of same-type agents among each agent's neighbours. Baseline action:
the agent does not move this step (its ``step`` is a no-op for that one step). The grid density is
``agents / (width × height)``, so the number of agents is ``agents`` on average.
"""

from mesa.examples import Schelling
from pydantic import Field

try:  # Mesa >= 3.5: the model takes its parameters as a Scenario
    from mesa.examples.basic.schelling.model import SchellingScenario
except ImportError:  # Mesa 3.3: keyword arguments and seed=
    SchellingScenario = None

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Config(ScenarioConfig):
    agents: int = Field(50, ge=2)
    steps: int = Field(12, ge=2)
    runs: int = 2
    width: int = 8
    height: int = 8


def build(cfg: Config, rng, backend=None):
    density = min(cfg.agents / (cfg.width * cfg.height), 1.0)
    params, seed = dict(width=cfg.width, height=cfg.height, density=density), int(rng.integers(2**31))
    if SchellingScenario is None:
        return Schelling(**params, seed=seed)
    return Schelling(SchellingScenario(**params, rng=seed))


def similar(agent) -> float:
    neighbours = list(agent.cell.get_neighborhood(radius=agent.radius).agents)
    return sum(n.type == agent.type for n in neighbours) / len(neighbours) if neighbours else 0.0


def stay(model, ids):
    for agent in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(agent, "step")


scenario = Scenario(
    name="schelling",
    description="Mesa's Schelling segregation model (mesa.examples): mean share of similar neighbours",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"similar": similar}),
    features=("similar",),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=stay,
    baseline_action_by="id",
    baseline_description="the agent does not move this step",
)
