"""A heatmap cell whose agent is not alive at that step (the panel's alive mask) is drawn hatched light grey, with a
legend entry and hover text, never in the colour of a living agent's φ = 0 (white on the diverging scale): the run
page, the trace / attribute page and the run's ``attribution_heatmap.png`` drew a dead wolf as a sheep that did
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.studies import charts
from aumann.studies.charts import Charts


def _cell_means(monkeypatch, values, dead) -> dict[tuple[int, int], float]:
    """The static heatmap of ``values`` drawn with ``not_alive=dead``: the mean grey level of a 7 × 7 pixel square
    at each cell's centre, read from the rendered canvas."""
    seen: dict[tuple[int, int], float] = {}

    def png(fig):
        fig.tight_layout()
        fig.canvas.draw()
        img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float).mean(axis=2)
        ax = fig.axes[0]
        seen["legend"] = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        for r in range(values.shape[0]):
            for c in range(values.shape[1]):
                x, y = ax.transData.transform((c, r))
                px, py = round(float(x)), img.shape[0] - round(float(y))
                seen[(r, c)] = float(img[py - 3:py + 4, px - 3:px + 4].mean())
        return b""

    monkeypatch.setattr(charts, "_png", png)
    Charts(interactive=False).heatmap("h", values, ["a", "b", "c"], ["0", "1", "2", "3"], xlabel="step",
                                      ylabel="agent", value_label="φ_i,t", not_alive=dead)
    return seen


def test_a_static_heatmap_draws_a_dead_agent_unlike_a_living_one_with_phi_zero(monkeypatch):
    values = np.array([[0.5, 0.2, 0.0, 0.0], [0.1, -0.3, 0.0, 0.4], [0.2, 0.2, 0.2, 0.2]])
    dead = np.zeros_like(values, dtype=bool)
    dead[0, 2:] = True  # agent a dies before step 2: φ = 0 there, as for agent b at step 2, which lives
    seen = _cell_means(monkeypatch, values, dead)
    assert seen["legend"] == ["not alive"]
    living_zero = seen[(1, 2)]
    assert living_zero > 240  # the white of φ = 0
    for c in (2, 3):
        assert seen[(0, c)] < living_zero - 20, (seen[(0, c)], living_zero)


@pytest.mark.parametrize("t_star", [0, 3])
def test_the_static_legend_runs_into_neither_the_t_star_label_nor_the_plot(monkeypatch, t_star):
    """Above the plot, the "not alive" entry ran into the ``t*`` label of a target step in the first column (a trace
    whose largest Δv is at its first step) and into a PNG's title; it sits in the figure's corner."""
    boxes = {}

    def png(fig):
        fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes["legend"] = fig.legends[0].get_window_extent(renderer)
        boxes["label"] = [t.get_window_extent(renderer) for t in fig.axes[0].texts]
        boxes["axes"] = fig.axes[0].get_window_extent(renderer)
        return b""

    monkeypatch.setattr(charts, "_png", png)
    dead = np.zeros((3, 4), dtype=bool)
    dead[2, :2] = True
    Charts(interactive=False).heatmap("h", np.ones((3, 4)), ["a", "b", "c"], ["0", "1", "2", "3"], xlabel="step",
                                      ylabel="agent", value_label="φ_i,t", vline=(t_star, "t*"), not_alive=dead)
    assert boxes["label"] and not any(boxes["legend"].overlaps(b) for b in boxes["label"])
    assert not boxes["legend"].overlaps(boxes["axes"])


@pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")
def test_an_interactive_heatmap_says_not_alive_at_step_t_on_hover_and_in_a_legend():
    values = np.array([[0.5, 0.0, 0.0], [0.0, 0.3, 0.0]])
    dead = np.array([[False, True, True], [False, False, False]])
    fig = Charts(interactive=True).heatmap("h", values, ["wolf-1", "sheep-2"], ["7", "8", "9"], xlabel="step",
                                           ylabel="agent", value_label="φ_i,t", not_alive=dead)
    assert fig.html is not None
    assert "not alive at step 8" in fig.html and "not alive at step 9" in fig.html
    assert "not alive at step 7" not in fig.html  # alive there
    assert '"label":{"type":"value","value":"not alive"}' in fig.html  # the legend entry
    assert '"hatch_pattern":{"type":"value","value":"/"}' in fig.html
    plain = Charts(interactive=True).heatmap("h", values, ["wolf-1", "sheep-2"], ["7", "8", "9"], xlabel="step",
                                             ylabel="agent", value_label="φ_i,t")
    assert "not alive" not in plain.html  # no mask: drawn as before


def test_the_run_page_and_its_png_mark_the_animals_that_are_not_alive(tmp_path, monkeypatch):
    """`aumann run` of Mesa's wolf–sheep (births and deaths): the page's heatmap (from the run's panel file) and
    attribution_heatmap.png hatch exactly the cells of run 0's top agents that are not alive."""
    from aumann import scenarios
    from aumann.attribution.metrics import largest_first
    from aumann.panel import Panel
    from aumann.studies import figures
    from aumann.studies.faithfulness import run_study
    from aumann.studies.pages import render_report
    from aumann.studies.report import write_outputs
    from tests.paths import REPO

    sc = scenarios.load(f"{REPO / 'docs' / 'examples' / 'wolf_sheep.py'}:scenario")
    cfg = sc.load_config(agents=16, steps=8, runs=1, wolves=4, size=7,
                         study={"permutations": 10, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 6,
                                "k_del": 3, "ablations": False})
    out = tmp_path / "wolf"
    res = run_study(sc, cfg, out_dir=out)
    panel = Panel.load(out / "panels" / "run-000.npz")
    with np.load(out / "attributions" / "run-000-aumann_shapley.npz", allow_pickle=False) as z:
        phi = z["phi"]
    top = largest_first(phi.sum(axis=0), min(20, phi.shape[1]))
    expected = ~panel.alive[:, top].T
    assert expected.any()  # the check below looks at something: some of these animals die or are born late
    hatched = []
    real = figures.hatch_not_alive

    def recorded(ax, dead, **kw):
        hatched.append(dead)
        return real(ax, dead, **kw)

    monkeypatch.setattr(figures, "hatch_not_alive", recorded)
    write_outputs(res, out, command="aumann run wolf-sheep", seconds=1.0, config=cfg.model_dump(mode="json"),
                  plots=True, interactive=False)
    assert len(hatched) == 1 and (hatched[0] == expected).all()  # attribution_heatmap.png
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Hatched grey: the agent is not alive at that step (φ = 0)." in page
    if charts.bokeh_available():
        render_report(out, interactive=True)
        page = (out / "report.html").read_text(encoding="utf-8")
        t = int(np.argwhere(expected.T)[0][0])
        assert f"not alive at step {t}" in page
