"""A baseline action under which every agent dies: the per-step baseline z⁰ gives each of them 0, as it does one
agent that dies under it (Scenario.baseline_features: "agents absent from the fork's recording get 0"); the step
re-simulated with every agent at it holds nobody (features (0, D), its context kept), where an alive-aware
indicator is undefined (NoLivingAgentsError) and one without the keyword is evaluated on no rows.

Before, the fork of that step recorded nobody, its recorder raised FeatureValueError("no agents were ever present
during the recording; nothing to record") and ``aumann run`` stopped in its attribute stage, naming no fork.
"""

from __future__ import annotations

import mesa
import numpy as np
import pytest

from aumann.attribution import ExactShapley, attribute, evaluate
from aumann.errors import NoAgentsRecordedError, NoLivingAgentsError
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step, simulate

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Grazer(mesa.Agent):
    def __init__(self, model: mesa.Model, energy: float) -> None:
        super().__init__(model)
        self.energy = energy

    def step(self) -> None:
        self.energy += 1.0

    def starve(self) -> None:  # the baseline action: no food, and these grazers cannot go a step without
        self.remove()


class Meadow(mesa.Model):
    def __init__(self, fragile: int) -> None:
        super().__init__(rng=3)
        for k in range(3):
            Grazer(self, float(k + 1))
        self.fragile = fragile

    def step(self) -> None:
        self.agents.do("step")
        if self.steps == self.fragile and len(self.agents):  # one grazer dies in the run too (dead rows)
            min(self.agents, key=lambda a: a.unique_id).remove()


class Config(ScenarioConfig):
    agents: int = 3
    steps: int = 4
    runs: int = 1


def starving(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step", a.starve)


def total_energy(z, context=None, alive=None):
    return z[..., 0].sum(-1) if alive is None else (alive * z[..., 0]).sum(-1)


SCENARIO = Scenario(
    name="meadow", description="every grazer starves at the baseline action", config_model=Config,
    build_model=lambda cfg, rng, backend=None: Meadow(fragile=3),
    make_recorder=lambda cfg: FeatureRecorder({"energy": "energy"}), features=("energy",),
    indicator=lambda cfg: total_energy, original=lambda cfg: total_energy,
    baseline_action=starving, baseline_action_by="id", context=lambda cfg: {"rain": lambda m: 10.0 + m.steps})


def test_every_agent_dead_at_the_baseline_action_gets_a_zero_baseline_and_phi_stays_efficient():
    cfg = Config()
    run = SCENARIO.simulate(cfg, rng=np.random.default_rng(0), keep_from=0)
    panel = run.panel
    assert panel.alive is not None and not panel.alive[2:, 0].any()  # the run's own death at step 3
    z0 = SCENARIO.baselines(run, cfg, agent_ids=panel.agent_ids)
    assert z0.shape == panel.shape and not z0.any()  # every grazer starves in every baseline step
    for method in (None, ExactShapley()):
        att = attribute(total_energy, panel, baseline=z0, **({} if method is None else {"method": method}))
        # Δv_t = the run's total energy of the living (z⁰ = 0), split over the living; the dead grazer gets 0
        want = (panel.values[..., 0] * panel.alive).sum(-1)
        np.testing.assert_allclose(np.asarray(att.delta_v), want)
        np.testing.assert_allclose(att.phi.sum(-1), want, atol=1e-9)
        assert not att.phi[2:, 0].any()


def test_a_model_with_no_agents_is_still_refused_with_a_typed_error():
    class Empty(mesa.Model):
        def step(self) -> None:
            pass

    with pytest.raises(NoAgentsRecordedError, match="no agents were ever present"):
        simulate(Empty(rng=0), steps=2, recorder=FeatureRecorder({"energy": "energy"}))


def plain_total(z, context=None):  # no alive keyword: evaluated on every row it is given
    return z[..., 0].sum(-1) + 0.0 * context["rain"]


def test_the_step_re_simulated_with_everyone_dying_holds_nobody_and_keeps_its_context():
    cfg = Config()
    run = SCENARIO.simulate(cfg, rng=np.random.default_rng(0), keep_from=0)
    ids = run.panel.agent_ids
    state = SCENARIO.step_state(run.before(1), cfg, range(len(ids)), agent_ids=ids)
    assert state.z.shape == (0, 1) and float(state.context["rain"]) == 12.0  # model step 2
    assert float(evaluate(plain_total, state)) == 0.0
    with pytest.raises(NoLivingAgentsError, match="n_t = 0"):
        evaluate(total_energy, state)


def test_the_study_records_no_value_for_f_with_everyone_at_the_baseline_action(tmp_path):
    from aumann.studies.faithfulness import run_study

    cfg = SCENARIO.load_config(study={"permutations": 8, "random_orderings": 2, "path_orders": 2,
                                      "quadrature_steps": 4, "ablations": False})
    rec = run_study(SCENARIO, cfg, out_dir=tmp_path).records[0]
    assert rec["dead_rows"]["f_all_at_baseline_action"] is None  # nobody lives: f over the living is undefined
    assert rec["dead_rows"]["f_baseline_t_star"] == 0.0
    # and the page says so in words, not with a bare dash where a number would be
    from types import SimpleNamespace

    from aumann.studies.study_how_sure import _deaths_text

    died = {**rec, "dead_rows": {**rec["dead_rows"], "died_at_t_star": 1}}  # (the page's text is for a death at t*)
    text = " ".join(part.text for part in _deaths_text(SimpleNamespace(recs=[died])))
    assert "undefined (no agent lives when every player takes the baseline action)" in text
