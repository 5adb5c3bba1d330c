"""Recorders can put the presence mask into the context, for indicators over the living."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.errors import FeatureValueError
from aumann.simulators import ArrayRecorder, FeatureRecorder, simulate
from tests.simulators.models import BoltzmannWealth


def test_feature_recorder_alive_context_matches_the_mask():
    model = BoltzmannWealth(6, seed=2, churn=True)
    panel = simulate(model, 7, FeatureRecorder({"wealth": "wealth"}, alive_context="alive"))
    assert panel.alive is not None and not panel.alive.all()
    np.testing.assert_array_equal(panel.context["alive"], panel.alive.astype(float))
    steady = simulate(BoltzmannWealth(4, seed=1), 3, FeatureRecorder({"wealth": "wealth"}, alive_context="here"))
    assert steady.alive is None and np.array_equal(steady.context["here"], np.ones((3, 4)))


def test_array_recorder_alive_context_and_clashes():
    class Vec:
        def __init__(self):
            self.x = np.arange(4.0)
            self.steps = 0

        def step(self):
            self.steps += 1
            self.x = self.x - 1

    rec = ArrayRecorder(lambda m: {"x": m.x}, alive=lambda m: m.x >= 0, alive_context="alive")
    panel = simulate(Vec(), 3, rec)
    np.testing.assert_array_equal(panel.context["alive"], panel.alive.astype(float))
    clash = FeatureRecorder({"w": "wealth"}, alive_context="price")
    with pytest.raises(FeatureValueError, match="clashes"):
        simulate(BoltzmannWealth(3), 2, clash, context={"price": lambda m: 1.0})
    with pytest.raises(FeatureValueError, match="alive_context"):
        FeatureRecorder({"w": "wealth"}, alive_context="")
