"""What Mesa 3.5 does differently from Mesa 3.3, checked on whichever Mesa is installed (CI has 3.3.1).

Each test builds the 3.5 behaviour it guards against in a few lines (Mesa 3.5 needs Python >= 3.12), so that
the guard runs on Mesa 3.3 too. docs/simulators.md ("Mesa versions") lists the differences."""

from __future__ import annotations

import ast
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


def _scenario(name: str, build):
    """A 4-agent, 2-step scenario of ``build``'s model, recording the sheep's energy."""
    from aumann.scenarios import Scenario, ScenarioConfig

    class Config(ScenarioConfig):
        agents: int = 4
        steps: int = 2

    return Scenario(name=name, description="", config_model=Config, build_model=build,
                    make_recorder=lambda cfg: FeatureRecorder({"energy": "energy"}), features=("energy",),
                    indicator=lambda cfg: "lin", original=lambda cfg: "lin", baseline_action=lambda m, ids: None)


def test_a_model_built_without_a_seed_is_caught_when_mesa_keeps_an_int_seed_anyway():
    # Mesa 3.5's Model() draws an int from its unseeded numpy generator and keeps it in _seed (Mesa 3.3 keeps None):
    # the run read "_seed is not None" as "seeded", built such a model once, and two runs from one seed differed
    # with no word said. An unseeded model.rng now says it, so the two builds are compared and the run refused.
    import numpy as np
    import pytest

    from aumann.errors import ScenarioCodeError
    class Drifter(mesa.Model):
        def __init__(self, n: int) -> None:
            super().__init__()  # no seed: the operating system's entropy
            self._seed = int(self.rng.integers(np.iinfo(np.int32).max))  # what Mesa 3.5's Model() keeps
            self.random.seed(self._seed)
            _Sheep.create_agents(self, n)

        def step(self) -> None:
            self.agents.shuffle_do("step")

    sc = _scenario("drifter", lambda cfg, rng, b=None: Drifter(cfg.agents))
    with pytest.raises(ScenarioCodeError, match="returns a Drifter given no seed"):
        sc.simulate(sc.load_config(), rng=3)


def test_a_model_on_the_runs_own_generator_is_built_once_whatever_seeded_that_generator():
    # a model given the run's generator (Model(rng=rng)) is seeded by the run, even where that generator came from
    # the operating system's entropy (simulate(cfg, rng=np.random.default_rng())): it is not built a second time
    import numpy as np

    builds = []

    class Flock(mesa.Model):
        def __init__(self, n: int, rng: np.random.Generator) -> None:
            super().__init__(rng=rng)
            builds.append(n)
            _Sheep.create_agents(self, n)

        def step(self) -> None:
            self.agents.shuffle_do("step")

    sc = _scenario("flock", lambda cfg, rng, b=None: Flock(cfg.agents, rng))
    sc.simulate(sc.load_config(), rng=np.random.default_rng())
    assert len(builds) == 1


def test_a_cells_links_are_dropped_from_its_pickle_only_when_they_hold_cells():
    """Mesa 3.3 pickles a cell's links as the linked cells and re-links them on unpickling, so aumann's pickler
    drops them (pickling them recursed across the grid); Mesa 3.5 pickles them as coordinates and re-links
    nothing, so dropping those left every cell sent to a worker without neighbours (Boltzmann wealth: cell (3, 4)
    had 0 connections instead of 5). This guards the rule on Mesa 3.3 with 3.3's real cells and 3.5's shape."""
    import random

    from mesa.discrete_space import OrthogonalMooreGrid

    from aumann.simulators.remote import _links_cells

    grid = OrthogonalMooreGrid((4, 4), torus=False, random=random.Random(0))
    cell = grid[(1, 1)]
    assert len(cell.connections) == 8 and _links_cells(cell.connections)  # Mesa 3.3: the cells themselves
    as_coordinates = {k: c.coordinate for k, c in cell.connections.items()}  # Mesa 3.5's __getstate__
    assert not _links_cells(as_coordinates) and not _links_cells({}) and not _links_cells(None)


def _seed_to_mesa(tree: ast.Module) -> list[int]:
    """The lines of ``tree`` that give Mesa's ``Model.__init__`` a ``seed=`` keyword: ``super().__init__(seed=...)``
    in a class whose base is ``Model`` (``mesa.Model``) or such a class of the module without an ``__init__``,
    ``mesa.Model(seed=...)``, and ``Name(seed=...)`` for such a class (``seed=None`` is no seed: not counted)."""

    def is_model(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "Model") or (
            isinstance(node, ast.Attribute) and node.attr == "Model")

    def seeded(call: ast.Call) -> bool:
        return any(k.arg == "seed" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                   for k in call.keywords)

    lines: list[int] = []
    bare: set[str] = set()  # Model subclasses without an __init__ (or of one): their seed= goes to Mesa
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if not any(is_model(b) or (isinstance(b, ast.Name) and b.id in bare) for b in cls.bases):
            continue
        inits = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
        if not inits:
            bare.add(cls.name)
        for call in (c for f in inits for c in ast.walk(f) if isinstance(c, ast.Call)):
            fn = call.func
            if (isinstance(fn, ast.Attribute) and fn.attr == "__init__" and isinstance(fn.value, ast.Call)
                    and isinstance(fn.value.func, ast.Name) and fn.value.func.id == "super" and seeded(call)):
                lines.append(call.lineno)
    for call in (c for c in ast.walk(tree) if isinstance(c, ast.Call) and seeded(c)):
        if is_model(call.func) or (isinstance(call.func, ast.Name) and call.func.id in bare):
            lines.append(call.lineno)
    return sorted(lines)


def test_no_model_of_the_tests_or_benchmarks_gives_mesa_a_seed_keyword():
    # Mesa 3.5 deprecates Model(seed=) with a FutureWarning (rng= is the keyword; Mesa 3.3 takes it too, with the
    # same streams: random.Random(int) and default_rng(int) either way). 29 places in tests and benchmarks passed
    # seed=, so the suite warned on 3.5; this reads their sources, so the guard runs on CI's Mesa 3.3 too.
    from tests.paths import REPO

    found = [f"{path.relative_to(REPO)}:{line}" for root in ("tests", "benchmarks", "docs")
             for path in sorted((REPO / root).rglob("*.py")) for line in _seed_to_mesa(ast.parse(path.read_text()))]
    assert found == []


def test_the_seed_keyword_reader_finds_each_way_of_passing_it():
    src = ("import mesa\n"
           "class A(mesa.Model):\n    def __init__(self, seed=0):\n        super().__init__(seed=seed)\n"
           "class B(mesa.Model):\n    def step(self): pass\n"
           "class C(B):\n    def __init__(self, seed=0):\n        super().__init__(seed=seed)\n"  # B's seed: Mesa's
           "class D(mesa.Model):\n    def __init__(self, seed=0):\n        super().__init__(rng=seed, seed=None)\n"
           "B(seed=1)\nmesa.Model(seed=2)\nA(seed=3)\nD(seed=4)\n")
    assert _seed_to_mesa(ast.parse(src)) == [4, 9, 13, 14]
