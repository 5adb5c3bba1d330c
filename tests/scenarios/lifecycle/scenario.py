"""A user scenario with births, deaths and re-entry, attached to aumann from the docs alone.

    aumann run tests/scenarios/lifecycle/scenario.py:scenario --runs 2

``foragers`` is a sibling package of this file (imported as ``python scenario.py`` would import it).
The indicator is the variance of energy over the living foragers (the built-in ``var`` is alive-aware:
it averages over the living rows of every step, forks and deletion curves included); the original is
the share of living foragers above the birth threshold's half (a hard step; its C² surrogate is a
sigmoid, :func:`aumann.attribution.smoothing.fraction_above`, alive-aware too).
"""

from foragers import Foragers
from pydantic import Field

from aumann.attribution import indicators
from aumann.attribution.smoothing import fraction_above
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Config(ScenarioConfig):
    agents: int = Field(16, ge=2)
    steps: int = Field(10, ge=2)
    runs: int = 2


def build(cfg: Config, rng, backend=None):
    return Foragers(cfg.agents, seed=int(rng.integers(2**31)))


def resting(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step", a.rest)


SHARE = fraction_above(3.0, temperature=0.25)

scenario = Scenario(
    name="foragers",
    description="foragers that are born, starve, leave and come back: variance of energy of the living",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"energy": "energy"}),
    features=("energy",),
    indicator=lambda cfg: indicators.get("var"),
    original=lambda cfg: indicators.get("var"),
    aggregators=lambda cfg: {"share_above": SHARE, "var": indicators.get("var"), "gini": indicators.get("gini")},
    baseline_action=resting,
    baseline_action_by="id",
    baseline_description="the forager rests this step: no food, no offspring, no travel",
)
