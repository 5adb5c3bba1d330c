"""Mesa's Boltzmann wealth model, attributed: which agents drive wealth inequality (Gini), and when.

    aumann run docs/examples/boltzmann_wealth.py:scenario --runs 2

Baseline action: the agent gives nothing this step (it still moves and can still receive); its
``give_money`` is replaced by a no-op for that one step (``override_next_step``), Mesa's class is
untouched. Forks copy the model (the grid is copied cell by cell and checked).
"""

from mesa.examples import BoltzmannWealth
from pydantic import Field

try:  # Mesa >= 3.5: the model takes its parameters as a Scenario
    from mesa.examples.basic.boltzmann_wealth_model.model import BoltzmannScenario
except ImportError:  # Mesa 3.3: keyword arguments and seed=
    BoltzmannScenario = None

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Config(ScenarioConfig):
    agents: int = Field(30, ge=2)
    steps: int = Field(20, ge=2)
    runs: int = 2
    width: int = 6
    height: int = 6


def build(cfg: Config, rng, backend=None):
    params, seed = dict(n=cfg.agents, width=cfg.width, height=cfg.height), int(rng.integers(2**31))
    if BoltzmannScenario is None:
        return BoltzmannWealth(**params, seed=seed)
    return BoltzmannWealth(BoltzmannScenario(**params, rng=seed))


def give_nothing(model, ids):
    for agent in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(agent, "give_money")


scenario = Scenario(
    name="boltzmann-wealth",
    description="Mesa's Boltzmann wealth model (mesa.examples): Gini of wealth",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"wealth": "wealth"}),
    features=("wealth",),
    indicator=lambda cfg: indicators.get("gini"),
    original=lambda cfg: indicators.get("gini"),
    baseline_action=give_nothing,
    baseline_action_by="id",
    baseline_description="the agent gives nothing this step (it still moves and can receive)",
)
