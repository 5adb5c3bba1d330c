"""One run of Mesa's ``batch_run`` read as a panel: ``pd.DataFrame(mesa.batch_run(...))`` has a row per agent and
step, ``RunId, iteration, Step, <parameters>, <model reporters>, AgentID, <agent reporters>``. The run labels,
the parameters and the model reporters were taken as per-agent features (every numeric column is one by default),
so the built-in indicators, which sum an agent's features, silently added ``RunId + iteration + n + ... + mean`` to
every agent's wealth; several runs were a DuplicateIdError that did not say why."""

from __future__ import annotations

import mesa
import numpy as np
import pandas as pd
import pytest

from aumann.attribution import Panel, attribute
from aumann.errors import PanelError

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Trader(mesa.Agent):
    def __init__(self, model: mesa.Model, wealth: float) -> None:
        super().__init__(model)
        self.wealth = wealth

    def step(self) -> None:
        if self.wealth >= 1:
            self.random.choice(list(self.model.agents)).wealth += 1
            self.wealth -= 1


class Market(mesa.Model):
    def __init__(self, n: int = 6, churn: int = 2, seed: int = 0) -> None:
        super().__init__(rng=seed)
        self.churn = churn
        for k in range(n):
            Trader(self, float(k % 3))
        self.datacollector = mesa.DataCollector(
            model_reporters={"mean_wealth": lambda m: float(np.mean([a.wealth for a in m.agents]))},
            agent_reporters={"wealth": "wealth"})
        self.datacollector.collect(self)

    def step(self) -> None:
        self.agents.shuffle_do("step")
        if self.steps % self.churn == 0:  # the poorest leaves, a newcomer arrives
            min(self.agents, key=lambda a: (a.wealth, a.unique_id)).remove()
            Trader(self, 2.0)
        self.datacollector.collect(self)


def _batch(iterations: int = 1) -> pd.DataFrame:
    """Runs of Market seeded 5. Mesa 3.3's batch_run takes the seed as a parameter; newer Mesa (main, 3.4.0.dev)
    deprecates ``iterations`` for ``rng=`` (one seed per run) and, given ``iterations``, passes ``seed=None`` over
    the parameter's seed (unseeded runs). Told apart by batch_run's signature."""
    import inspect

    if "rng" in inspect.signature(mesa.batch_run).parameters:
        seeds = {"parameters": {"n": 6, "churn": 2}, "rng": [5] * iterations}
    else:
        seeds = {"parameters": {"n": 6, "churn": 2, "seed": 5}, "iterations": iterations}
    rows = mesa.batch_run(Market, **seeds, max_steps=5, number_processes=1, data_collection_period=1,
                          display_progress=False)
    return pd.DataFrame(rows)


def test_one_batch_run_gives_the_runs_own_agent_frame():
    df = _batch()
    assert list(df.columns[:3]) == ["RunId", "iteration", "Step"] and "AgentID" in df.columns
    got = Panel.from_dataframe(df)
    assert got.features == ("wealth",)
    assert got.meta["skipped_columns"] == ["RunId", "iteration", "n", "churn", "seed", "mean_wealth"]
    model = Market(n=6, churn=2, seed=5)  # the same run, by hand: its own DataCollector frame (batch_run keeps
    for _ in range(5):                    # steps 0-5 of max_steps=5)
        model.step()
    ref = Panel.from_dataframe(model.datacollector.get_agent_vars_dataframe())
    np.testing.assert_array_equal(got.values, ref.values)
    np.testing.assert_array_equal(got.alive, ref.alive)
    assert got.alive is not None and not got.alive.all()  # agents left and arrived
    assert got.agent_ids.tolist() == ref.agent_ids.tolist() and got.steps.tolist() == ref.steps.tolist()
    # the mean wealth of the living is the model's own reporter
    means = df.groupby("Step")["mean_wealth"].first().to_numpy()
    np.testing.assert_allclose(attribute("lin", got).f_values, means, rtol=0, atol=1e-12)
    # a column asked for by name is still read
    assert Panel.from_dataframe(df, features=["wealth", "mean_wealth"]).features == ("wealth", "mean_wealth")


def test_several_batch_runs_are_refused_naming_the_run_column():
    with pytest.raises(PanelError, match=r"column 'RunId' \(Mesa's batch_run: several runs\)"):
        Panel.from_dataframe(_batch(iterations=2))
    df = _batch(iterations=2)
    assert Panel.from_dataframe(df[df["RunId"] == 1]).features == ("wealth",)
