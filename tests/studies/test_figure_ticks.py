"""The run directory's PNG figures (macro_curve.png, attribution_heatmap.png, deletion_curves.png) tick their
step and k axes at whole numbers: a short run's were ticked 0, 0.5, 1, … (the heatmap −0.5 … 3.5), as if there
were half steps or half an agent deleted."""

from __future__ import annotations

import pytest

from aumann import scenarios
from aumann.studies import figures as figures_mod
from aumann.studies.faithfulness import run_study

STUDY = {"permutations": 10, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off"}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=8, steps=4, runs=1, study=STUDY)
    return run_study(sc, cfg, out_dir=tmp_path_factory.mktemp("ticks"))


@pytest.mark.parametrize("draw", [figures_mod.macro_curve_figure, figures_mod.heatmap_figure,
                                  figures_mod.deletion_curves_figure])
def test_the_step_and_k_axes_tick_whole_numbers(result, draw, tmp_path, monkeypatch):
    seen = []

    def save(fig, path):  # the figure as it would be written: every x tick inside each axes' view
        fig.canvas.draw()
        for ax in fig.axes:
            if ax.get_xlabel() in ("step t", "k (agents deleted at t*)"):
                lo, hi = sorted(ax.get_xlim())
                seen.append([t for t in ax.get_xticks() if lo <= t <= hi])
        return path

    monkeypatch.setattr(figures_mod, "_save", save)
    draw(result, tmp_path)
    assert seen and all(len(ticks) >= 2 for ticks in seen), seen
    assert all(float(t).is_integer() for ticks in seen for t in ticks), seen
