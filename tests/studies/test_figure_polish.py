"""What a reader trips on in the run directory's PNG figures and the page's charts: braces drawn literally in a
colour-bar label, a phantom step on a bar chart's axis, a legend or a label over the data, methods hiding each other
on a one-point deletion curve."""

from __future__ import annotations

import pytest

from aumann import scenarios
from aumann.studies import figures as figures_mod
from aumann.studies.faithfulness import run_study

STUDY = {"permutations": 10, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off",
         "k_del": 1}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """A run of T = 2 steps and K_del = 1 (every deletion curve is one point)."""
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=8, steps=2, runs=1, study=STUDY)
    return run_study(sc, cfg, out_dir=tmp_path_factory.mktemp("polish"))


def _drawn(draw, result, tmp_path, monkeypatch):
    """The figure ``draw`` saves, drawn (its text laid out), without writing it."""
    got = []

    def save(fig, path):
        fig.canvas.draw()
        got.append(fig)
        return path

    monkeypatch.setattr(figures_mod, "_save", save)
    draw(result, tmp_path)
    return got[0]


def test_the_heatmap_colour_bar_label_is_phi_sub_i_t_not_its_braces(result, tmp_path, monkeypatch):
    """attribution_heatmap.png's colour bar read "φ_{i,t}", braces and all (the figures draw plain text)."""
    fig = _drawn(figures_mod.heatmap_figure, result, tmp_path, monkeypatch)
    labels = [ax.yaxis.label for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(labels) == 1
    label = labels[0]
    text = label.get_text()
    # mathtext (parsed: φ with the subscript i,t) or plain text without TeX's braces
    assert (label.get_parse_math() and text.startswith("$") and text.endswith("$")) or "{" not in text, text
    assert "varphi" in text or "φ" in text
