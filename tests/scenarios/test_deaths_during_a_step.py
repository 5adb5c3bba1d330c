"""An agent killed during step t: which population the baseline z⁰_t is evaluated on (docs/baselines.md,
"Agents that die during a step").

The smallest case where it matters, worked by hand: a wolf W and two sheep A, B. Before step 2 their energies
are W = 2, A = 3, B = 3. Acting normally, the wolf (first to act) burns 1 and eats A (+4; A is removed before its
turn), and a sheep grazes (+2). The baseline action is to rest (burn 1, eat nothing, kill nothing). So

    run, step 2:              W = 5, A dead, B = 5
    every agent at rest:      W = 1, A = 2,  B = 2   (nobody dies)

and f is the total energy of the living. Three games explain three different changes:

* the masking game with the run's living mask at both ends (aumann's rule: the same population at both ends of
  the path, as the paper's Δv = f_n(z) − f_n(z⁰) at one scale n): v(∅) = 1 + 2 = 3, Δv = 7, φ = (4, 0, 3);
  the victim is out of f at both ends (φ_A = 0), and its death is not part of Δv;
* the masking game with each agent's own living state (dead as in the run inside S, alive as at rest outside):
  v(∅) = 5, Δv = 5, φ = (4, −2, 3): the death is charged to the victim, the killer gets no blame for it;
* the re-simulation game (non-members rest, the step re-run): v(∅) = 5, Δv = 5, φ = (1/2, 3/2, 3): the killer
  shares the loss of A (it is the only one of the three that counts the kill against the wolf).

All three are efficient for their own Δv. The first is what the study computes on the masking side; the third is
its re-simulation side. These tests pin both, with the numbers above.
"""

from __future__ import annotations

from fractions import Fraction

import mesa
import numpy as np
import pytest

from aumann.attribution import AumannShapley, ExactShapley, LeaveOneOut, attribute
from aumann.attribution.evalcontext import EvalContext
from aumann.evaluation.deletion import DeletionOracle, MaskingOracle, resimulation_game
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Wolf(mesa.Agent):
    def __init__(self, model: mesa.Model, energy: float) -> None:
        super().__init__(model)
        self.energy = energy

    def step(self) -> None:
        self.energy -= 1
        if self.model.steps == 2:  # hungry at step 2: eats the first sheep
            prey = min((a for a in self.model.agents if isinstance(a, Sheep)), key=lambda a: a.unique_id)
            prey.eaten = True
            prey.remove()
            self.energy += 4

    def rest(self) -> None:
        self.energy -= 1


class Sheep(mesa.Agent):
    def __init__(self, model: mesa.Model, energy: float) -> None:
        super().__init__(model)
        self.energy = energy
        self.eaten = False

    def step(self) -> None:
        if not self.eaten:
            self.energy += 2

    def rest(self) -> None:
        if not self.eaten:
            self.energy -= 1


class Pasture(mesa.Model):
    def __init__(self) -> None:
        super().__init__(rng=1)
        Wolf(self, 3.0)  # step 1: 3 - 1 = 2
        Sheep(self, 1.0)  # step 1: 1 + 2 = 3
        Sheep(self, 1.0)

    def step(self) -> None:
        self.agents.do("step")  # in order of creation: the wolf first


class Config(ScenarioConfig):
    agents: int = 3
    steps: int = 2
    runs: int = 1


def resting(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step", a.rest)


def total_energy_of_the_living(z, context=None, alive=None):
    return z[..., 0].sum(-1) if alive is None else (alive * z[..., 0]).sum(-1)


SCENARIO = Scenario(
    name="pasture", description="a wolf eats a sheep at step 2", config_model=Config,
    build_model=lambda cfg, rng, backend=None: Pasture(),
    make_recorder=lambda cfg: FeatureRecorder({"energy": "energy"}), features=("energy",),
    indicator=lambda cfg: total_energy_of_the_living, original=lambda cfg: total_energy_of_the_living,
    baseline_action=resting, baseline_action_by="id")

T2 = 1  # panel position of step 2
W, A, B = 0, 1, 2  # panel positions (agents by unique_id)


@pytest.fixture(scope="module")
def run():
    cfg = Config()
    run = SCENARIO.simulate(cfg, rng=np.random.default_rng(0), keep_from=0)
    z0 = SCENARIO.baselines(run, cfg, agent_ids=run.panel.agent_ids)
    return cfg, run, z0


def test_the_run_and_its_baseline_are_the_hand_worked_ones(run):
    _, r, z0 = run
    assert r.panel.values[T2, :, 0].tolist() == [5.0, 0.0, 5.0]  # A's row is dead (held at 0)
    assert r.panel.alive[T2].tolist() == [True, False, True]
    assert z0[T2, :, 0].tolist() == [1.0, 2.0, 2.0]  # everyone rests: A lives, at 2


@pytest.mark.parametrize("method", [AumannShapley(steps=4), ExactShapley(), LeaveOneOut()], ids=lambda m: m.name)
def test_masking_applies_the_runs_living_mask_to_the_baseline(run, method):
    """f(z⁰_t) over the run's living at t: 1 + 2 = 3 (A, killed during the step, is out at both ends), so
    Δv = 10 − 3 = 7 = Σ φ and the victim gets φ = 0 — not f(z⁰) = 5 over the population that lives at rest."""
    _, r, z0 = run
    res = attribute(total_energy_of_the_living, r.panel, method=method, baseline=z0)
    assert res.f_values[T2] == 10.0 and res.f_baseline[T2] == 3.0 and res.delta_v[T2] == 7.0
    np.testing.assert_allclose(res.phi[T2], [4.0, 0.0, 3.0], rtol=0, atol=1e-12)
    assert abs(res.phi[T2].sum() - res.delta_v[T2]) < 1e-12


def test_the_masking_deletion_oracle_plays_the_same_game(run):
    _, r, z0 = run
    oracle = MaskingOracle(total_energy_of_the_living, total_energy_of_the_living,
                           EvalContext.at_step(r.panel, T2), z0[T2])
    assert oracle.values([W, A, B])[0] == 3.0  # every player at the baseline, A still out of f
    assert oracle.values([W])[0] == 6.0  # the wolf at rest: the sheep it ate stays dead


def test_resimulation_counts_the_kill_against_the_killer(run):
    """The re-simulation game's v(∅) is the fork where everyone rests (A lives: 1 + 2 + 2 = 5), and its exact
    Shapley value (1/2, 3/2, 3) charges the wolf for the sheep it ate."""
    cfg, r, _ = run
    f = total_energy_of_the_living
    ids = r.panel.agent_ids
    model = r.before(T2)
    players = SCENARIO.present(model, ids)
    assert players.tolist() == [W, A, B]
    oracle = DeletionOracle(SCENARIO, cfg, model, f, f, agent_ids=ids)
    game = resimulation_game(oracle, len(ids), players=players, cache=True)
    res = ExactShapley().attribute_game(game)
    assert res.f_values[0] == 10.0 and res.f_baseline[0] == 5.0
    want = [Fraction(1, 2), Fraction(3, 2), Fraction(3)]
    np.testing.assert_allclose(res.phi[0], [float(w) for w in want], rtol=0, atol=1e-12)
    assert oracle.values([W])[0] == 1.0 + 5.0 + 5.0  # the wolf at rest: A lives and grazes


def test_the_rule_is_recorded_where_a_step_has_dead_rows(run):
    _, r, z0 = run
    res = attribute(total_energy_of_the_living, r.panel, baseline=z0)
    assert res.provenance["baseline_alive"] == "run"
    everyone = attribute(total_energy_of_the_living, r.panel.select_steps([0]), baseline=z0[:1])
    assert "baseline_alive" not in everyone.provenance  # nobody dead: no rule applies (and nothing moves)


def test_the_study_records_and_reports_which_living_set_the_baseline_used(tmp_path):
    """The run record, the manifest and the report say that z⁰_t* was evaluated over the run's living, and give
    both v(∅): 3 (the masking side) and 5 (every player resting, re-simulated: the sheep lives)."""
    import json

    from aumann.studies.faithfulness import run_study
    from aumann.studies.report import write_outputs
    from aumann.studies.rundir import RunDir

    cfg = SCENARIO.load_config(study={"permutations": 8, "random_orderings": 2, "path_orders": 2,
                                      "quadrature_steps": 4, "ablations": False})
    result = run_study(SCENARIO, cfg, out_dir=tmp_path)
    rec = result.records[0]
    assert rec["t_star"] == T2
    assert rec["dead_rows"] == {"baseline_alive": "run", "died_at_t_star": 1, "f_baseline_t_star": 3.0,
                                "f_all_at_baseline_action": 5.0}
    assert rec["delta_v"] == 7.0
    write_outputs(result, tmp_path, command="aumann run pasture", seconds=1.0, plots=False,
                  config=cfg.model_dump(mode="json"))
    manifest = json.loads(RunDir(tmp_path).manifest.read_text())
    assert manifest["dead_rows"] == [{"run": 0, **rec["dead_rows"]}]
    page = (tmp_path / "report.md").read_text()
    assert "baseline_alive = run" in page
    assert "run 0: 1 died during step t*; f(z⁰_t*) over the run's living = 3" in page


def test_the_per_agent_state_masking_game_of_the_docs_charges_the_victim(run):
    """docs/baselines.md's recipe on the recorded step: members as in the run (A dead), the others as at rest (A
    alive at 2): v(∅) = 5, φ = (4, −2, 3) — the death is the victim's, the wolf still gets no blame for it."""
    import torch

    from aumann.attribution import FunctionGame

    _, r, z0 = run
    z_t, z0_t = torch.tensor(r.panel.values[T2]), torch.tensor(z0[T2])
    alive_t, alive0_t = torch.tensor(r.panel.alive[T2]), torch.ones(3, dtype=torch.bool)

    def own_state(masks):
        m = torch.tensor(masks)  # (a copy: the masks are read-only)
        return total_energy_of_the_living(torch.where(m[..., None], z_t, z0_t), alive=torch.where(m, alive_t, alive0_t))

    res = ExactShapley().attribute_game(FunctionGame(own_state, n_players=3))
    assert res.f_baseline[0] == 5.0 and res.delta_v[0] == 5.0
    np.testing.assert_allclose(res.phi[0], [4.0, -2.0, 3.0], rtol=0, atol=1e-12)
