"""report.html / report.md of an `aumann run` directory: structure, the who-table against the saved
attributions, self-containment, the cost section, skipped parts, `aumann report` and its errors."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from aumann.cli import main
from aumann.cli import run as run_cmd
from aumann.errors import ReportError
from aumann.io import file_digests
from aumann.studies.pages import render_report
from tests.studies import htmlcheck

TINY = """
agents = 8
steps = 6
runs = 2
seed = 3
[study]
permutations = 20
random_orderings = 2
path_orders = 2
quadrature_steps = 8
"""


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", *argv])
    try:
        return args.func(args)
    finally:  # as aumann.cli.main does: the output folder the command locked is free again when it returns
        from aumann.io import release_output_locks

        release_output_locks()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    cfg = root / "tiny.toml"
    cfg.write_text(TINY)
    out = root / "social"
    assert _run("social-llm", "--config", str(cfg), "--out", str(out)) == 0
    return out


def _expected_ids(npz: Path, k: int) -> list[str]:
    """Top-k agent ids by Φ_i = Σ_t φ_{i,t}, descending, ties by position — straight from the saved arrays."""
    with np.load(npz, allow_pickle=False) as z:
        phi, ids = z["phi"], z["agent_ids"]
    total = phi.sum(axis=0)
    order = sorted(range(phi.shape[1]), key=lambda i: (-total[i], i))[:k]
    return [str(ids[i].item()) for i in order], total[order]


def test_page_has_who_when_how_sure_and_cost(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert htmlcheck.section_ids(page) == ["who", "when", "how-sure", "cost"]
    text = htmlcheck.text(page)
    for phrase in ("Who drove it", "When did it turn", "How sure", "Cost", "Efficiency gap", "Provenance",
                   "Deletion faithfulness", "Agreement with sampled Shapley", "noise ceiling", "Smoothing gap",
                   "Wall time per stage", "t*"):
        assert phrase in text, phrase
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    for heading in ("## Who drove it", "## When did it turn", "## How sure", "## Cost"):
        assert heading in md
    assert not re.search(r"<(div|span|table|td|img|script|section)\b", md)  # the twin is plain text, no HTML


def test_who_tables_hold_the_right_ids_in_the_right_order(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    tabs = htmlcheck.tables(page)
    for r in range(2):
        ids, phi = _expected_ids(run_dir / "attributions" / f"run-{r:03d}-aumann_shapley.npz", 20)
        tab = tabs[f"who-run-{r:03d}"]
        col = tab["head"].index("agent")
        assert [row[col]["text"] for row in tab["rows"]] == ids
        assert all(row[col]["children"] == 0 for row in tab["rows"])  # the id alone in its cell
        phi_col = tab["head"].index("Φ_i")
        np.testing.assert_allclose([float(row[phi_col]["attrs"]["data-sort"]) for row in tab["rows"]], phi,
                                   rtol=1e-12)
        assert [int(row[0]["text"]) for row in tab["rows"]] == list(range(1, len(ids) + 1))
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    ids0, _ = _expected_ids(run_dir / "attributions" / "run-000-aumann_shapley.npz", 20)
    md_ids = [line.split("|")[2].strip() for line in md.splitlines() if re.match(r"\| \d+ \| ", line)][: len(ids0)]
    assert md_ids == ids0


def test_the_page_loads_nothing_from_elsewhere(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    urls = htmlcheck.resource_urls(page)
    assert urls, "the parser found no URL at all (anchors are expected)"
    bad = [u for u in urls if not (u.startswith("data:") or u.startswith("#"))]
    assert not bad, bad
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert (run_dir / "report.html").stat().st_size < 3_000_000


def test_agreement_table_shows_an_undefined_tau_as_a_dash_and_the_rest_as_the_csv_holds_them(run_dir):
    """The heuristic judge returns a ranking only, so its Kendall τ is empty in faithfulness.csv: its agreement
    cell reads "–", not "– ± –" (as the faithfulness table already showed it); every other cell is the CSV's
    mean ± std, to the shown precision."""
    import csv

    page = (run_dir / "report.html").read_text(encoding="utf-8")
    tab = htmlcheck.tables(page)["agreement"]
    with (run_dir / "faithfulness.csv").open(newline="") as fh:
        csv_rows = {r["method"]: r for r in csv.DictReader(fh)}
    cols = {"kendall_tau": 1, "jaccard_top10": 2}
    seen_empty = 0
    for row in tab["rows"]:
        method = row[0]["text"]
        if method not in csv_rows:  # the noise-ceiling row
            continue
        for c, j in cols.items():
            cell = row[j]["text"]
            assert "– ±" not in cell and "± –" not in cell, (method, c, cell)
            if csv_rows[method][c] == "":
                assert cell == "–", (method, c, cell)
                seen_empty += 1
            else:
                mean, std = cell.replace("−", "-").split(" ± ")
                assert float(mean) == pytest.approx(float(csv_rows[method][c]), rel=1e-3, abs=1e-12)
                assert float(std) == pytest.approx(float(csv_rows[method][c + "_std"]), rel=0.05, abs=1e-12)
    assert seen_empty, "the fixture's run should have a method without a Kendall τ (llm_judge)"
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "– ± –" not in md


def test_static_fallback_embeds_png_data_uris(run_dir, tmp_path, monkeypatch):
    d = shutil.copytree(run_dir, tmp_path / "copy")
    import aumann.studies.charts as charts

    monkeypatch.setattr(charts, "bokeh_available", lambda: False)  # as if the report extra were not installed
    render_report(d)
    page = (d / "report.html").read_text(encoding="utf-8")
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(imgs) >= 4 and all(u.startswith("data:image/png;base64,") for u in imgs)
    assert "Bokeh" not in page
    assert all(u.startswith(("data:", "#")) for u in htmlcheck.resource_urls(page))


def test_cost_section_says_offline_in_words(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    text = htmlcheck.text(page)
    assert "Offline: 0 LLM calls, 0 cache hits, 0 tokens, estimated cost $0.00" in text
    stages = htmlcheck.tables(page)["stage-times"]
    names = [row[0]["text"] for row in stages["rows"]]
    for stage in ("simulate", "attribute (all steps)", "sampled Shapley (plain)", "deletion forks", "ablations",
                  "tables and plots", "total (wall)"):
        assert stage in names
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(manifest["stage_seconds"]) >= {"simulate", "deletion forks"}
    assert all(v >= 0 for v in manifest["stage_seconds"].values())
    assert "Offline: 0 LLM calls" in (run_dir / "report.md").read_text(encoding="utf-8")


def test_cost_section_reads_llm_usage_from_the_manifest(run_dir, tmp_path):
    d = shutil.copytree(run_dir, tmp_path / "llm")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["backend"] = "openai:some-model"
    manifest["llm_usage"] = {"calls": 1234, "cache_hits": 56, "retries": 3, "failures": 1, "prompt_tokens": 98765,
                             "completion_tokens": 4321, "decisions": 1290, "planned_calls": 1234,
                             "latency_p50_s": 0.42, "latency_p95_s": 1.9, "cost_usd": 0.5678, "fork_decisions": 10,
                             "fork_calls": 7}
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(d), "--no-plots"]) == 0
    text = htmlcheck.text((d / "report.html").read_text(encoding="utf-8"))
    assert "1,241 LLM request(s) sent" in text and "$0.5678" in text and "103,086 tokens" in text
    for key in ("cache hits", "prompt tokens", "completion tokens", "latency p95", "fork calls"):
        assert key in text
    assert "Offline" not in text
    md = (d / "report.md").read_text(encoding="utf-8")
    assert "$0.5678" in md and "1,241 LLM request(s)" in md
    # each value carries its own unit, so the label does not name one ("latency p50 s: 420 ms" before)
    for line in ("* latency p50: 420 ms", "* latency p95: 1.9 s", "* cost: $0.5678"):
        assert line in md.splitlines(), line
    assert "latency p50 s" not in md and "latency p50 s" not in text and "cost usd" not in text


def test_offline_cost_line_counts_the_cache_hits_the_usage_table_shows(run_dir, tmp_path):
    """An offline MegaScale run memoises identical archetype requests, so its llm_usage has cache hits: the
    bold offline line said "0 cache hits" right above a usage table reading "cache hits 1,599"."""
    d = shutil.copytree(run_dir, tmp_path / "memo")
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["backend"] == "offline"
    manifest["llm_usage"] = {**manifest["llm_usage"], "calls": 0, "fork_calls": 0, "cache_hits": 1599,
                             "decisions": 40, "fork_decisions": 887}
    (d / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(d), "--no-plots"]) == 0
    for text in (htmlcheck.text((d / "report.html").read_text(encoding="utf-8")),
                 (d / "report.md").read_text(encoding="utf-8")):
        assert "0 cache hits" not in text
        assert "Offline: 0 LLM calls, 1,599 cache hits, 0 tokens, estimated cost $0.00" in text
        assert "made 927 decision(s)" in text


def _reseal(d, r: int) -> None:
    """Record the new SHA-256 of run ``r``'s arrays (and the record's own checksum), as a writer would."""
    import json

    from aumann.io import sha256_file
    from aumann.studies.rundir import seal

    rec_path = d / "runs" / f"run-{r:03d}.json"
    rec = json.loads(rec_path.read_text())
    rec["arrays_sha256"] = sha256_file(d / "runs" / f"run-{r:03d}.npz")
    rec_path.write_text(json.dumps(seal(rec)))


def _rerecord(d, name: str) -> None:
    """Record the new SHA-256 of the table ``name`` in the manifest, as a writer would."""
    import json

    from aumann.io import sha256_file

    manifest = json.loads((d / "manifest.json").read_text())
    manifest["outputs_sha256"][name] = sha256_file(d / name)
    (d / "manifest.json").write_text(json.dumps(manifest))


def test_new_columns_rows_and_curves_appear_without_code_changes(run_dir, tmp_path):
    """The study's masking columns, its action / judge rows and masking curves are rendered as the tables hold
    them, and so is a column, row or curve variant the page has never heard of."""
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    tab = htmlcheck.tables(page)["faithfulness"]
    assert "deletion_auc_masking (mean ± std)" in tab["head"]
    methods = [row[0]["text"] for row in tab["rows"]]
    assert {"action_aumann_shapley", "llm_judge"} <= set(methods) and methods[-1] == "random"
    text = htmlcheck.text(page)
    assert "Deletion curves under the masking oracle" in text
    assert "Action attribution through the simulator" in text and "heuristic stand-in" in text
    d = shutil.copytree(run_dir, tmp_path / "generic")
    lines = (d / "faithfulness.csv").read_text().splitlines()
    head = lines[0] + ",deletion_auc_future,deletion_auc_future_std"
    width = len(lines[0].split(","))
    rows = [ln + ",0.5,0.01" for ln in lines[1:]]
    rows.append(",".join(["social-llm", "future_method", "0.4", "30"] + [""] * (width - 4) + ["0.2", "0.01"]))
    (d / "faithfulness.csv").write_text("\n".join([head, *rows]) + "\n")
    for r in range(2):
        npz = d / "runs" / f"run-{r:03d}.npz"
        with np.load(npz) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["curve_future_aumann_shapley"] = arrays["curve_aumann_shapley"] * 0.5
        np.savez(npz, **arrays)
        _reseal(d, r)  # the report verifies a run's arrays against its record, as resume does
    _rerecord(d, "faithfulness.csv")  # and each table against the manifest's SHA-256 of it
    render_report(d, interactive=False)
    page = (d / "report.html").read_text(encoding="utf-8")
    tab = htmlcheck.tables(page)["faithfulness"]
    assert "deletion_auc_future (mean ± std)" in tab["head"]
    assert [row[0]["text"] for row in tab["rows"]][-1] == "future_method"
    assert "Deletion curves (future)" in htmlcheck.text(page)


def test_skipped_parts_say_so_in_one_line(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY.replace("runs = 2", "runs = 1"))
    out = tmp_path / "noabl"
    assert _run("social-llm", "--config", str(cfg), "--out", str(out), "--no-ablations", "--no-plots") == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    text = htmlcheck.text(page)
    assert "Ablations were skipped (--no-ablations)" in text
    assert not any(k in htmlcheck.tables(page) for k in ("path_ablation", "f_sensitivity", "baseline_ablation"))
    assert "Figures were left out (--no-plots)" in text
    assert "<img" not in page and "Bokeh" not in page
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "> Ablations were skipped (`--no-ablations`)" in md


def test_report_command_rewrites_the_reports_without_recomputing(run_dir, tmp_path, monkeypatch, capsys):
    d = shutil.copytree(run_dir, tmp_path / "again")
    before = (d / "report.md").read_text(encoding="utf-8")
    for name in ("report.html", "report.md"):
        (d / name).unlink()
    stamps = {p: p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file() and p.name != "manifest.json"}
    manifest = json.loads((d / "manifest.json").read_text())

    def boom(*a, **k):
        raise AssertionError("aumann report must not recompute")

    import aumann.attribution.engine as engine
    import aumann.studies.faithfulness as faithfulness

    monkeypatch.setattr(engine, "attribute", boom)
    monkeypatch.setattr(faithfulness, "analyse_run", boom)
    assert main(["report", str(d)]) == 0
    assert "report.html" in capsys.readouterr().out
    assert (d / "report.html").is_file()
    after = (d / "report.md").read_text(encoding="utf-8")
    strip = lambda s: re.sub(r"figures: .*", "", s)  # noqa: E731
    assert strip(after) == strip(before)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # nothing else was touched
    recorded = json.loads((d / "manifest.json").read_text())  # but the pages' SHA-256 recorded as aumann's
    assert recorded.pop("outputs_sha256") == {**manifest.pop("outputs_sha256"),
                                              **file_digests(d, ["report.html", "report.md"])}
    assert recorded == manifest


def test_report_on_what_is_not_a_finished_run_is_a_clear_error(run_dir, tmp_path, capsys):
    cases = {}
    cases["missing"] = tmp_path / "nope"
    (tmp_path / "empty").mkdir()
    cases["no manifest"] = tmp_path / "empty"
    f = tmp_path / "file.txt"
    f.write_text("x")
    cases["a file"] = f
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"command": "aumann bluesky synth"}))
    cases["other command"] = other
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    cases["bad manifest"] = broken
    partial = shutil.copytree(run_dir, tmp_path / "partial")
    (partial / "runs" / "run-001.json").unlink()
    cases["missing run"] = partial
    for label, path in cases.items():
        with pytest.raises(ReportError) as exc:
            render_report(path)
        assert str(path) in str(exc.value), label
        assert main(["report", str(path)]) == 2, label
        err = capsys.readouterr().err
        assert "ReportError" in err and len(err.strip().splitlines()) == 1, label
    with pytest.raises(ReportError, match=r"run-001\.json"):
        render_report(partial)
    with pytest.raises(ReportError, match="top"):
        render_report(run_dir, top=0)


def test_the_macro_curve_ticks_whole_steps(tmp_path, monkeypatch):
    """Steps are whole numbers, but the f(z_t) figure of an ``aumann run`` page ticked its step axis at
    0, 0.5, 1, 1.5, … (the Φ_t bars beside it ticked whole steps)."""
    from aumann.studies import charts

    drawn = []

    def png(fig):  # every static figure as it would be rendered: its axis labels and step ticks
        fig.canvas.draw()
        ax = fig.axes[0]
        drawn.append((ax.get_ylabel(), [t.get_position()[0] for t in ax.get_xticklabels()
                                        if ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]))
        return b"png"

    cfg = tmp_path / "short.toml"
    cfg.write_text(TINY.replace("steps = 6", "steps = 3").replace("runs = 2", "runs = 1"))
    d = tmp_path / "short"
    assert _run("social-llm", "--config", str(cfg), "--out", str(d), "--no-ablations", "--no-plots") == 0
    monkeypatch.setattr(charts, "_png", png)
    render_report(d, interactive=False)
    ticks = dict(drawn)
    assert {"f(z_t)", "Φ_t"} <= set(ticks)
    for label in ("f(z_t)", "Φ_t"):
        assert ticks[label] and all(float(x).is_integer() for x in ticks[label]), (label, ticks[label])


def test_deletion_curves_with_nothing_to_draw_are_a_line_not_empty_frames(tmp_path):
    """A run whose every deletion drop is undefined (megascale-social at 4 agents, 2 steps: f(z_t*) = 0) drew six
    deletion-curve figures that were empty frames with a legend of methods; they are now one line saying why, and a
    figure with something to draw is drawn as before."""
    from types import SimpleNamespace

    from aumann.studies.charts import Charts
    from aumann.studies.page import Figure, Note
    from aumann.studies.rundir import RunDir
    from aumann.studies.study_how_sure import _faithfulness

    nan = np.full(3, np.nan)
    page = SimpleNamespace(
        recs=[], faith=[{"method": "aumann_shapley", "deletion_auc": float("nan")}], d=RunDir(tmp_path),
        arrs=[{"curve_aumann_shapley": nan, "curve_random": nan, "curve_masking_aumann_shapley": np.array([0.1, 0.2]),
               "curve_masking_random": nan}],
        methods=["aumann_shapley", "random"], plots=True, charts=Charts(interactive=False), synthetic=False,
        figure_ref=lambda name: None)
    blocks = _faithfulness(page)
    figures = [b for group in blocks if isinstance(group, list) for b in group if isinstance(b, Figure)]
    assert [f.title for f in figures] == ["Deletion curves under the masking oracle"]
    notes = [b.text for b in blocks if isinstance(b, Note) and b.text.startswith("Not drawn")]
    assert len(notes) == 1 and "Deletion curves (attributed indicator, agents ranked by φ)" in notes[0]


def test_the_provenance_baseline_of_an_array_reads_as_its_shape_not_a_call():
    """econagent's provenance read "baseline: array(2, 2, 7) — each agent's features under the baseline action",
    the attribution's label for an array baseline, which reads like a call; it names the shape."""
    from aumann.studies.study_how_sure import _baseline_text

    assert _baseline_text("array(2, 2, 7)") == "an array of shape (T, N, D) = (2, 2, 7)"
    assert _baseline_text("array(5, 3)") == "an array of shape (N, D) = (5, 3)"
    assert _baseline_text("array(3,)") == "an array of shape (D,) = (3,)"
    assert _baseline_text("zero") == "zero" and _baseline_text("pre-event") == "pre-event"
