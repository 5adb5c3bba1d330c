"""Every model in ``mesa.examples`` at a small size, with a factory that rebuilds its initial state."""

from __future__ import annotations

import random
import warnings
from contextlib import contextmanager

import mesa
import numpy as np

warnings.filterwarnings("ignore", message=".*Random number generator not specified.*")


@contextmanager
def global_random(seed: int):
    """Mesa 3.3's VirusOnNetwork draws its graph from Python's global ``random`` (no seed is passed
    to networkx): seed it for the construction only and restore the global state afterwards."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _virus(seed: int):
    from mesa.examples import VirusOnNetwork

    with global_random(seed):
        try:
            return VirusOnNetwork(num_nodes=20, avg_node_degree=3, seed=seed)
        except TypeError:  # Mesa >= 3.4 takes rng=
            return VirusOnNetwork(num_nodes=20, avg_node_degree=3, rng=seed)


def _wolf_sheep(seed: int):
    from mesa.examples.advanced.wolf_sheep import model

    params = dict(width=8, height=8, initial_sheep=20, initial_wolves=6)
    if hasattr(model, "WolfSheepScenario"):  # Mesa >= 3.5: a scenario, events on the model (no ABMSimulator, which
        return model.WolfSheep(model.WolfSheepScenario(**params, rng=seed))  # 3.5 deprecates with a FutureWarning)
    from mesa.experimental.devs import ABMSimulator

    return model.WolfSheep(**params, seed=seed, simulator=ABMSimulator())


def _build(cls_name: str, seed: int, **params):
    """Build a mesa.examples model with the keyword arguments of Mesa 3.3, or its Scenario (3.5)."""
    import importlib
    import inspect

    import mesa.examples as ex

    cls = getattr(ex, cls_name)
    accepted = inspect.signature(cls.__init__).parameters
    if "seed" in accepted:
        return cls(**params, seed=seed)
    if "rng" in accepted:
        return cls(**params, rng=seed)
    mod = importlib.import_module(cls.__module__)
    scen = next(v for k, v in vars(mod).items() if k.endswith("Scenario") and k != "Scenario")
    direct = {k: v for k, v in params.items() if k in accepted}
    rest = {k: v for k, v in params.items() if k not in accepted}
    return cls(**direct, scenario=scen(**rest, rng=seed))


EXAMPLES = {
    "boltzmann": lambda s: _build("BoltzmannWealth", s, n=20, width=5, height=5),
    "schelling": lambda s: _build("Schelling", s, width=8, height=8),
    "virus": _virus,
    "wolf_sheep": _wolf_sheep,
    "sugarscape": lambda s: _build("SugarscapeG1mt", s, initial_population=30),
    "epstein": lambda s: _build("EpsteinCivilViolence", s, width=10, height=10),
    "pd_grid": lambda s: _build("PdGrid", s, width=6, height=6),
    "boids": lambda s: _build("BoidFlockers", s, population_size=20),
    "conway": lambda s: _build("ConwaysGameOfLife", s, width=8, height=8),
    "alliance": lambda s: _build("MultiLevelAllianceModel", s, n=20),
}


def numeric_features(agent: mesa.Agent) -> dict[str, float]:
    """Every public number, bool or enum an agent holds (what a generic recorder can read)."""
    out = {}
    for k, v in vars(agent).items():
        if k.startswith("_"):
            continue
        if isinstance(v, bool | int | float | np.integer | np.floating):
            out[k] = float(v)
        elif hasattr(v, "value") and isinstance(getattr(v, "value", None), int):
            out[k] = float(v.value)
    return out
