"""Axis labels are drawn shortened past LABEL_CHARS characters: matplotlib lays out every character of a tick label,
so 20 agent ids of 100,000 characters made a 5 × 20 report take minutes. The full ids stay in the tables."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aumann.studies import charts
from aumann.studies.charts import LABEL_CHARS, Charts, short_label


def test_short_label_keeps_short_text_and_cuts_the_middle_of_long_text():
    assert short_label("agent-7") == "agent-7"
    assert short_label(12345) == "12345"
    long = "x" * 10_000 + "-tail17"
    cut = short_label(long)
    assert len(cut) == LABEL_CHARS and "…" in cut and cut.startswith("xxx") and cut.endswith("-tail17")
    assert short_label("a" * LABEL_CHARS) == "a" * LABEL_CHARS
    assert len(short_label("b" * (LABEL_CHARS + 1))) == LABEL_CHARS


def test_a_static_heatmap_draws_long_ids_shortened(monkeypatch):
    drawn = {}

    def png(fig):  # what would be rendered
        ax = fig.axes[0]
        drawn["y"] = [t.get_text() for t in ax.get_yticklabels()]
        drawn["x"] = [t.get_text() for t in ax.get_xticklabels()]
        return b""

    monkeypatch.setattr(charts, "_png", png)
    rows = ["agent-" + "x" * 100_000 + str(i) for i in range(20)]
    cols = [f"step {'y' * 500} {j}" for j in range(5)]
    Charts(interactive=False).heatmap("h", np.ones((20, 5)), rows, cols, xlabel="t", ylabel="agent", value_label="φ")
    assert drawn["y"] == [short_label(r) for r in rows] and all(len(t) == LABEL_CHARS for t in drawn["y"])
    assert drawn["x"] == [short_label(c) for c in cols]


@pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")
def test_an_interactive_heatmap_labels_long_ids_shortened_and_keeps_them_whole_in_the_hover_text():
    rows = ["agent-" + "x" * 5_000 + str(i) for i in range(3)]
    fig = Charts(interactive=True).heatmap("h", np.ones((3, 2)), rows, ["0", "1"], xlabel="t", ylabel="agent",
                                           value_label="φ")
    assert fig.html is not None
    for r in rows:
        tick = short_label(r)  # the tick label, its "…" escaped once or twice by Bokeh's JSON in a script
        assert any(tick.replace("…", esc) in fig.html for esc in ("…", "\\u2026", "\\\\u2026"))
        assert r in fig.html  # the hover text


def test_long_agent_ids_are_shortened_in_page_cells_and_cards_but_sorted_whole():
    from aumann.studies.sections import driver_card, id_cell

    long = "did:" + "x" * 100_000 + "-7"
    cell = id_cell(long)
    assert cell.text == short_label(long) and cell.sort == long
    assert id_cell(np.int64(12)).text == "12" and id_cell(np.int64(12)).sort == 12
    card = driver_card("Top driver", [long, "b"], np.array([2.0, 1.0]), 3.0)
    assert card.value == f"agent {short_label(long)}"


def _static_bar_labels(monkeypatch, categories):
    drawn = {}

    def png(fig):  # the figure as it would be rendered
        fig.canvas.draw()
        labels = fig.axes[0].get_xticklabels()
        drawn["text"] = [t.get_text() for t in labels]
        drawn["rotation"] = [t.get_rotation() for t in labels]
        drawn["boxes"] = [t.get_window_extent() for t in labels]
        return b""

    monkeypatch.setattr(charts, "_png", png)
    n = len(categories)
    Charts(interactive=False).grouped_bars("R_top", categories, {"FULL": [1.0] * n, "BIAS_v": [2.0] * n,
                                                                 "RAND": [0.5] * n}, ylabel="R_top (%)")
    return drawn


def test_static_grouped_bars_slant_category_labels_that_would_run_into_each_other(monkeypatch):
    """The Bluesky study's five topics drew as 'the-mastersearth-day-climatewrestlemania' on the static
    R_top figure: the labels were laid out side by side whatever their length."""
    topics = ["mythos", "trump-tariffs", "the-masters", "earth-day-climate", "wrestlemania"]
    drawn = _static_bar_labels(monkeypatch, topics)
    assert drawn["text"] == topics
    flat_overlap = any(a.x1 > b.x0 for a, b in itertools.pairwise(drawn["boxes"]))
    assert not flat_overlap or all(r == 30 for r in drawn["rotation"]), drawn
    assert all(r == 30 for r in drawn["rotation"])  # these five do not fit side by side at the figure's width
    short = _static_bar_labels(monkeypatch, ["top", "mid", "tail"])
    assert short["rotation"] == [0, 0, 0]  # labels that fit stay level
    long = _static_bar_labels(monkeypatch, ["topic-" + "x" * 10_000])
    assert long["text"] == [short_label("topic-" + "x" * 10_000)]  # drawn shortened, like every axis label


@pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")
@pytest.mark.parametrize("labels, upright", [([f"04-{d:02d}" for d in range(7, 21)], True),
                                             ([str(t) for t in range(16)], False)])
def test_an_interactive_heatmap_labels_few_enough_columns_to_read_on_a_phone(labels, upright):
    """At 390 px the heatmap's plot is ~160 px wide beside its colour bar: the Bluesky study's 14 days "04-07" …
    "04-20", slanted, ran together into one smear, and a run's 16 steps "0" … "15" into "1011121314". Each label
    now has the room of an eighth of the plot (every column stays in the hover text), set upright when long."""
    import json
    import math
    import re

    fig = Charts(interactive=True).heatmap("h", np.ones((3, len(labels))), ["a", "b", "c"], labels, xlabel="day",
                                           ylabel="user", value_label="φ")
    (ticks,) = [json.loads(t) for t in re.findall(r'"ticks":(\[[^\]]*\])', fig.html)]
    assert len(ticks) <= 8 and ticks == list(range(0, len(labels), 2)), ticks
    slant = re.findall(r'"major_label_orientation":([0-9.e+-]+)', fig.html)
    assert (float(slant[0]) == pytest.approx(math.pi / 2)) if upright else not slant, slant
    assert all(day in fig.html for day in labels)  # the hover text keeps every column
