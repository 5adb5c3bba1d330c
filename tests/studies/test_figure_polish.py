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


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """``aumann run`` of T = 2 steps and K_del = 1, pages and figures written."""
    from tests.cli_run import invoke_run

    out = tmp_path_factory.mktemp("polish-run")
    assert invoke_run("midscale-social", "--agents", "8", "--steps", "2", "--runs", "1", "--permutations", "10",
                      "--no-ablations", "--judge", "off", "--set", "study.k_del=1", "--set",
                      "study.random_orderings=2", "--set", "study.quadrature_steps=8", "--out", str(out)) == 0
    return out


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


def test_one_point_deletion_curves_set_every_method_apart_and_say_so(result, tmp_path, monkeypatch):
    """At K_del = 1 every method's curve is one point, and the methods that delete the same top agent sat on one
    spot: six of seven were hidden. Each now has its own place (side by side at k = 1) and its own marker, named
    under it, and the title says what the plot shows."""
    fig = _drawn(figures_mod.deletion_curves_figure, result, tmp_path, monkeypatch)
    methods = figures_mod.methods_of(result)
    assert len(methods) >= 4
    for ax in fig.axes:
        points = [(float(line.get_xdata()[0]), line.get_marker()) for line in ax.get_lines()]
        assert len(points) == len(methods), points
        assert len({x for x, _ in points}) == len(points)  # no two on one spot
        assert len({m for _, m in points}) == len(points)  # told apart without colour
        assert all(0.5 < x < 1.5 for x, _ in points)  # all at k = 1
        assert "K_del = 1" in ax.get_title()
        assert [t.get_text() for t in ax.get_xticklabels()] == methods  # each named under its point


def test_a_page_with_one_point_deletion_curves_shows_them_as_a_table(run_dir):
    """The page drew the K_del = 1 "curves" as plots whose methods hid each other; it is now a table, one row per
    method, one column per oracle, the drops of faithfulness.csv (deletion_auc = the drop at k = 1 here)."""
    import csv

    from aumann.studies.page import Figure, Table
    from aumann.studies.pages import build_document

    doc = build_document(run_dir, interactive=False)
    blocks = _walk(doc)
    tables = [b for b in blocks if isinstance(b, Table) and b.id == "deletion-one-k"]
    assert len(tables) == 1
    table = tables[0]
    assert "K_del = 1" in table.caption
    assert not [b for b in blocks if isinstance(b, Figure) and b.title.startswith("Deletion curves") and not b.md_only]
    with open(run_dir / "faithfulness.csv", newline="") as fh:
        faith = {r["method"]: r for r in csv.DictReader(fh)}
    col = table.columns.index("re-simulation [%]")
    masking = table.columns.index("masking [%]")
    assert [r[0] for r in table.rows] == list(faith)
    for row in table.rows:
        assert row[col] == pytest.approx(100 * float(faith[row[0]]["deletion_auc"]), rel=1e-9)
        assert row[masking] == pytest.approx(100 * float(faith[row[0]]["deletion_auc_masking"]), rel=1e-9)


def _walk(node):
    """Every block of a page, depth first."""
    from aumann.studies.page import Details, Document, Section

    if isinstance(node, Document):
        return [b for s in node.sections for b in _walk(s)]
    if isinstance(node, Section | Details):
        return [b for c in node.blocks for b in _walk(c)]
    if isinstance(node, list | tuple):
        return [b for c in node for b in _walk(c)]
    return [node]
