"""Where the page's interactive charts put their axes, legends and labels: ranges that fit the data (no phantom
step), legends and the ``t*`` label off the data."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.studies import charts
from aumann.studies.charts import Charts, Point

pytestmark = pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")


@pytest.fixture
def drawn(monkeypatch):
    """The Bokeh figures a :class:`Charts` embeds, as models."""
    models: list = []

    def embed(self, p):
        models.append(p)
        return "<div></div>"

    monkeypatch.setattr(Charts, "_embed", embed)
    return models


def test_a_bar_chart_of_steps_0_to_15_has_no_step_16_on_its_axis(drawn):
    """The Φ_t bars of a 16-step run (steps 0 … 15) sat on an axis that ran to 16, a step the run does not have."""
    x = list(range(16))
    Charts(interactive=True).lines("Φ_t", [], xlabel="step t", ylabel="Φ_t", bars=(x, np.linspace(1, 0.2, 16), "Φ_t"),
                                   points=[Point(15, 0.2, "t*")])
    (p,) = drawn
    lo, hi = p.x_range.start, p.x_range.end
    assert lo is not None and hi is not None, type(p.x_range).__name__  # a range of its own, not Bokeh's padding
    assert -1 < lo <= -0.4 and 15.4 <= hi < 16, (lo, hi)  # each bar whole (0.8 wide), and no 16
