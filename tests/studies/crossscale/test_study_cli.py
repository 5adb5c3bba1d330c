"""End to end: `synth` then `study` through the CLI functions on a tiny SYNTHETIC panel; resume."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from aumann import configs
from aumann.cli.bluesky import register_study, register_synth
from aumann.studies.crossscale.study import CrossScaleConfig, DeepSetSettings, StudyError, run_crossscale


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aumann bluesky")
    sub = p.add_subparsers()
    register_synth(sub)
    register_study(sub)
    return p


def _run(*argv: str) -> int:
    args = _parser().parse_args(list(argv))
    try:
        return args.func(args)
    finally:  # as aumann.cli.main does: the output folder the command locked is free again when it returns
        from aumann.io import release_output_locks

        release_output_locks()


@pytest.fixture(scope="module")
def study_dirs(tmp_path_factory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("bsky")
    counts, out = root / "counts", root / "study"
    assert _run("synth", "--users", "20000", "--seed", "1", "--out", str(counts)) == 0
    assert _run("study", str(counts), "--out", str(out), "--sizes", "100", "1000", "1e5", "full",
                "--seeds", "0", "1", "2", "--no-progress") == 0
    return counts, out, ""


def test_summary_has_required_keys_and_says_synthetic(study_dirs) -> None:
    _, out, _ = study_dirs
    s = json.loads((out / "summary.json").read_text())
    for key in ("residual_law_max_deviation", "epsilon", "flip_cells_positive", "synthetic", "timings"):
        assert key in s
    assert s["synthetic"] is True and "SYNTHETIC" in s["data"]
    assert set(s["epsilon"]) == {"lin", "heat", "var", "gini"}
    assert s["epsilon"]["lin"] < 1e-10
    assert all(s["epsilon"][k] > 1e-3 for k in ("heat", "var", "gini"))
    assert s["residual_law_max_deviation"] <= 1e-8
    pos, total = map(int, s["flip_cells_positive"].split("/"))
    assert total == 20 and pos >= 18  # small U and 3 seeds: the flip, allowing seed noise
    assert s["sizes_skipped"] == [100000]
    assert json.loads((out / "manifest.json").read_text())["command"] == "aumann bluesky study"


def test_tables_and_figures_written(study_dirs) -> None:
    _, out, _ = study_dirs
    for name in ("flip-main", "flip-app-cross-f", "theorem-test", "residual-law", "numbers-app", "topics-jaccard",
                 "strategies", "kol-anchors", "peak-days", "cross-day-stability"):
        assert (out / "tables" / f"{name}.csv").exists(), name
        assert (out / "tables" / f"{name}.md").read_text().startswith("> **SYNTHETIC"), name
    for fig in ("heatmap.png", "teaser.png"):
        assert (out / "figures" / fig).stat().st_size > 1000


def test_outputs_are_aggregates_without_identifiers(study_dirs) -> None:
    _, out, _ = study_dirs
    assert not (out / "per_user").exists()
    text = "".join(p.read_text() for p in out.rglob("*.json")) + "".join(p.read_text() for p in out.rglob("*.csv"))
    assert "did:" not in text


def test_resume_skips_every_finished_cell(study_dirs, capsys) -> None:
    counts, out, _ = study_dirs
    before = {p: p.stat().st_mtime_ns for p in (out / "cells").rglob("*.json")}
    assert _run("study", str(counts), "--out", str(out), "--sizes", "100", "1000", "1e5", "full",
                "--seeds", "0", "1", "2", "--no-progress") == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["cells_skipped_on_resume"] == s["cells"] == len(before)
    assert s["timings"]["cells_computed"] == 0
    assert "already finished" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (out / "cells").rglob("*.json")} == before


def test_interrupted_cell_is_recomputed(study_dirs) -> None:
    counts, out, _ = study_dirs
    victim = out / "cells" / "mythos" / "RAND__100.json"
    victim.unlink()
    cfg = CrossScaleConfig(sizes=[100, 1000, 100000, "full"], seeds=[0, 1, 2])
    s = run_crossscale(counts, out, cfg, log=lambda *_: None)
    assert s["timings"]["cells_computed"] == 1 and victim.exists()


def test_export_per_user_keyed_by_opaque_index(study_dirs, tmp_path) -> None:
    import pandas as pd

    counts, _, _ = study_dirs
    cfg = CrossScaleConfig(sizes=[100], seeds=[0], topics=["mythos"], protocols=["RAND"], export_per_user=True)
    run_crossscale(counts, tmp_path, cfg, log=lambda *_: None)
    df = pd.read_parquet(tmp_path / "per_user" / "mythos.parquet")
    assert list(df.columns[:2]) == ["user", "tier_code"] and not any("did" in c or "handle" in c for c in df.columns)


def test_unknown_topic_is_a_clear_error(study_dirs, tmp_path) -> None:
    counts, _, _ = study_dirs
    with pytest.raises(StudyError, match="unknown topics"):
        run_crossscale(counts, tmp_path, CrossScaleConfig(topics=["nope"]), log=lambda *_: None)


def test_shipped_config_loads_and_bad_config_is_typed(tmp_path) -> None:
    cfg = CrossScaleConfig.from_toml(configs.path("bluesky-study.toml"))
    assert cfg.sizes[-1] == "full" and cfg.seeds == list(range(10)) and cfg.deepset_settings.steps == 120
    bad = tmp_path / "bad.toml"
    bad.write_text("[study]\nprotocols = ['BIAS_nope']\n")
    with pytest.raises(StudyError, match="invalid study config"):
        CrossScaleConfig.from_toml(bad)


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("seeds", [0, 1, 1], "1"), ("sizes", [100, "full", 100], "100"), ("sizes", ["full", "full"], "'full'"),
    ("topics", ["mythos", "mythos"], "'mythos'"), ("protocols", ["RAND", "RAND"], "'RAND'"),
    ("indicators", ["lin", "gini", "lin"], "'lin'"), ("deepset_settings", {"sizes": [64, 64]}, "64"),
])
def test_a_value_listed_twice_in_the_grid_is_refused(tmp_path, key, value, shown) -> None:
    """seeds [0, 1, 1] drew seed 1's subsets twice and weighed them twice in every mean and std (the RAND mean shift
    -0.56 pp where seeds [0, 1] give -0.18 pp; residual_law_runs 60 for 40 distinct runs), without a word."""
    with pytest.raises(StudyError, match=rf"{key}(\.sizes)?: Value error, {shown} is listed more than once"):
        CrossScaleConfig(**{key: value})
    bad = tmp_path / "twice.toml"
    bad.write_text(f"[study]\n{key} = {json.dumps(value)}\n" if key != "deepset_settings"
                   else f"[study.deepset_settings]\nsizes = {json.dumps(value['sizes'])}\n")
    with pytest.raises(StudyError, match=r"is listed more than once"):
        CrossScaleConfig.from_toml(bad)
    if key == "deepset_settings":  # each value once: accepted as given
        assert CrossScaleConfig(deepset_settings={"sizes": [64]}).deepset_settings.sizes == [64]
    else:
        assert getattr(CrossScaleConfig(**{key: list(dict.fromkeys(value))}), key) == list(dict.fromkeys(value))


def test_the_cli_refuses_a_seed_given_twice_with_exit_2(study_dirs, tmp_path, capsys) -> None:
    from aumann.cli import main

    counts, _, _ = study_dirs
    assert main(["bluesky", "study", str(counts), "--out", str(tmp_path / "s"), "--no-progress", "--sizes", "100",
                 "--seeds", "0", "1", "1"]) == 2
    assert "seeds: Value error, 1 is listed more than once" in capsys.readouterr().err
    assert not (tmp_path / "s" / "summary.json").exists()


def test_topic_without_activity_is_skipped_and_reported(tmp_path) -> None:
    from aumann.data.bluesky.synth import SynthConfig, generate

    counts = generate(SynthConfig(users=3000, seed=5, participation={"mythos": 0.05, "wrestlemania": 0.0}))
    counts.save(tmp_path / "c")
    cfg = CrossScaleConfig(sizes=[100, "full"], seeds=[0], topics=["mythos", "wrestlemania"])
    s = run_crossscale(tmp_path / "c", tmp_path / "o", cfg, log=lambda *_: None)
    assert "wrestlemania" in s["topics_skipped"] and s["topics"] == ["mythos", "wrestlemania"]
    assert (tmp_path / "o" / "tables" / "flip-main.csv").exists()


def test_study_runs_on_an_ingested_capture(tmp_path) -> None:
    """The real 10-event Jetstream sample: build-panel, then study (tiny U: sizes skipped, topics without
    activity skipped and reported, never a crash)."""
    from aumann.cli import main
    from tests.paths import JETSTREAM_SAMPLE as sample
    from tests.paths import SHARED_MISSING

    if not sample.exists():
        pytest.skip(SHARED_MISSING)
    assert main(["bluesky", "build-panel", str(sample), "--out", str(tmp_path / "c")]) == 0
    s = run_crossscale(tmp_path / "c", tmp_path / "o", CrossScaleConfig(), log=lambda *_: None)
    assert s["synthetic"] is False and s["data"] == "ingested capture"
    assert s["sizes_skipped"] == [100, 1000, 10000, 100000, 1000000]
    assert set(s["topics_skipped"]) <= set(s["topics"])
    assert (tmp_path / "o" / "summary.json").exists() and (tmp_path / "o" / "manifest.json").exists()


def test_report_page_of_the_study(study_dirs) -> None:
    import numpy as np

    from aumann.attribution import attribute, indicators
    from aumann.data.bluesky.counts import RawCounts
    from tests.studies import htmlcheck

    counts_dir, out, _ = study_dirs
    page = (out / "report.html").read_text(encoding="utf-8")
    assert htmlcheck.section_ids(page) == ["who", "when", "how-sure", "cost"]
    assert all(u.startswith(("data:", "#")) for u in htmlcheck.resource_urls(page))
    text = htmlcheck.text(page)
    assert "SYNTHETIC panel — generated by aumann bluesky synth, not real Bluesky data" in text
    assert "Offline: 0 LLM calls" in text and "No smoothing gap" in text
    assert "(--deepset not given)" in text.replace("( ", "(")
    # top users of the first topic, recomputed from the counts: Φ_i of f_heat on the per-day panel
    counts = RawCounts.load(counts_dir)
    topic = json.loads((out / "summary.json").read_text())["topics"][0]
    phi = attribute(indicators.get("heat"), counts.daily_panel(topic)).phi
    total = phi.sum(axis=0)
    top = np.lexsort((np.arange(total.size), -total))[:20]
    tab = htmlcheck.tables(page)[f"who-{topic}"]
    assert [int(r[1]["text"]) for r in tab["rows"]] == top.tolist()
    assert "tier-shares" in htmlcheck.tables(page)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.splitlines()[2].startswith("> **SYNTHETIC") and "## Who drove it [SYNTHETIC]" in md
    # `aumann report` rewrites it from the cells (static figures this time)
    from aumann.cli import main

    assert main(["report", str(out), "--static"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and "Bokeh" not in page
    assert [int(r[1]["text"]) for r in htmlcheck.tables(page)[f"who-{topic}"]["rows"]] == top.tolist()


@pytest.mark.parametrize("name", ["report.html", "summary.json"])
def test_a_page_or_summary_of_your_own_in_a_fresh_study_folder_stops_the_study_and_is_kept(study_dirs, tmp_path,
                                                                                             name) -> None:
    # the study writes its manifest (with no record of its outputs) before it renders its pages, so the page check
    # took a report.html of your own for an earlier study's and replaced it; now the folder is checked first
    from aumann.errors import OutputError

    counts, _, _ = study_dirs
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("mine")
    with pytest.raises(OutputError, match=name):
        _run("study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0", "--no-progress")
    assert (out / name).read_text() == "mine" and not (out / "manifest.json").exists()


def test_a_study_run_again_into_its_own_folder_still_replaces_its_pages(study_dirs) -> None:
    counts, out, _ = study_dirs
    before = (out / "report.html").stat().st_mtime_ns
    assert _run("study", str(counts), "--out", str(out), "--sizes", "100", "1000", "1e5", "full",
                "--seeds", "0", "1", "2", "--no-progress") == 0
    assert (out / "report.html").stat().st_mtime_ns > before


def test_the_same_study_twice_writes_the_same_bytes_but_its_wall_clock(study_dirs, tmp_path) -> None:
    """Every cell held its wall-clock seconds (and a checksum over them) and summary.json the grid's, the stages'
    and the total seconds: two studies of the same counts with the same settings differed in every cell."""
    from tests.cli.test_run_same_bytes import _files, _wall_clock_lines

    counts, _, _ = study_dirs
    cfg = CrossScaleConfig(sizes=[100, "full"], seeds=[0, 1], topics=["mythos"], protocols=["RAND", "BIAS_visibility"])
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        run_crossscale(counts, out, cfg, log=lambda *_: None, interactive=False)
    fa, fb = _files(outs[0]), _files(outs[1])
    assert sorted(fa) == sorted(fb) and "cells/mythos/RAND__100.json" in fa and "summary.json" in fa
    assert {n for n in fa if fa[n] != fb[n]} <= {"manifest.json", "report.md", "report.html"}  # when, how long
    assert _wall_clock_lines(fa["report.md"].decode()) == _wall_clock_lines(fb["report.md"].decode())
    manifest = json.loads(fa["manifest.json"])
    assert manifest["cell_seconds"]["cells/mythos/RAND__100.json"] >= 0 and manifest["grid_seconds"] >= 0


def test_the_same_study_with_deepset_twice_writes_the_same_summary(study_dirs, tmp_path) -> None:
    """With --deepset, summary.json and deepset/deepset.json held the DeepSet's train, attribution and reference
    seconds and their time_ratio: two studies of the same counts differed there. They are the manifest's
    (deepset_seconds) and the page's Cost section's now."""
    from tests.cli.test_run_same_bytes import _files

    counts, _, _ = study_dirs
    cfg = CrossScaleConfig(sizes=[100, "full"], seeds=[0], topics=["mythos"], protocols=["RAND"], deepset=True,
                           deepset_settings=DeepSetSettings(topic="mythos", width=8, train_steps=20, batch=8,
                                                            sizes=[64], steps=20))
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        run_crossscale(counts, out, cfg, log=lambda *_: None, interactive=False)
    fa, fb = _files(outs[0]), _files(outs[1])
    assert "deepset/deepset.json" in fa and "train_seconds" not in fa["summary.json"].decode()
    assert {n for n in fa if fa[n] != fb[n]} <= {"manifest.json", "report.md", "report.html"}  # when, how long
    seconds = json.loads(fa["manifest.json"])["deepset_seconds"]
    assert seconds["time_ratio"] > 0 and seconds["train_seconds"] > 0
    assert "wall time (--deepset)" in fa["report.md"].decode()


def test_a_topic_with_only_degenerate_cells_shows_a_dash_not_nan_in_the_tables(tmp_path) -> None:
    """At N = 2 on 100 synthetic users, every BIAS_v cell of a topic can be degenerate (Δv = 0): topics-jaccard.md
    printed "| earth-day-climate | nan |" and cross-day-stability.md "| mythos | BIAS_v | 2 | nan | nan | 0 |"
    where every other table prints "–" (the CSVs leave the cells blank, or have no row)."""
    from aumann.data.bluesky.synth import SynthConfig, generate

    counts = tmp_path / "counts"
    generate(SynthConfig(users=100, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    cfg = CrossScaleConfig(sizes=[2, "full"], seeds=[0, 1], headline_size=2)
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        summary = run_crossscale(counts, out, cfg, log=lambda *_: None, report=False)
    assert summary["degenerate_runs"] > 0  # the case this test is about
    # numpy's "Mean of empty slice" and "Degrees of freedom <= 0" (with their source lines) reached the study's
    # stderr for every cell with no valid day
    assert [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)] == []
    md = (out / "tables" / "topics-jaccard.md").read_text(encoding="utf-8")
    kept = [t for t in summary["topics"] if t not in summary["topics_skipped"]]
    for topic in kept:
        assert f"| {topic} |" in md  # every topic keeps its line ...
    assert "nan" not in md and "| – |" in md  # ... and a missing value is "–"
    stability = (out / "tables" / "cross-day-stability.md").read_text(encoding="utf-8")
    assert "| – | – | 0 |" in stability  # the cell with no valid day
    for table in sorted((out / "tables").glob("*.md")):
        assert " nan " not in table.read_text(encoding="utf-8").replace("|", " "), table.name

    # topics-jaccard.csv had no row for such a topic (a reader could not tell it from one never studied): now a row
    # with blank values, n = 0 and its degenerate runs counted, the table's columns as they were and one at the end
    import csv

    with open(out / "tables" / "topics-jaccard.csv", newline="", encoding="utf-8") as fh:
        header, *rows = list(csv.reader(fh))
    assert header == ["topic", "size", "mean", "std", "n", "synthetic", "degenerate"]
    got = {r[0]: r for r in rows}
    assert sorted(got) == sorted(kept) and len(rows) == len(kept)  # one size studied (N = 2): a row per topic
    all_degenerate = 0
    for topic in kept:
        seeds = json.loads((out / "cells" / topic / "BIAS_visibility__2.json").read_text())["seeds"]
        n_deg = sum("degenerate" in r["ind"]["heat"] for r in seeds)
        assert got[topic][1] == "2" and int(got[topic][4]) == len(seeds) - n_deg and int(got[topic][6]) == n_deg
        if n_deg == len(seeds):
            all_degenerate += 1
            assert got[topic][2:4] == ["", ""]  # blank, as the CSV writer writes a missing value
        else:
            assert float(got[topic][2]) >= 0
    assert all_degenerate > 0  # the case this test is about

    # so did flip-main.csv, theorem-test.csv and theorem-test-all.csv for a cell of every run degenerate: a row for
    # every (protocol, N, indicator, topic) cell the grid ran, its degenerate runs counted in the last column
    cells = {}
    for path in sorted((out / "cells").glob("*/*__2.json")):
        rec = json.loads(path.read_text())
        for ind in rec["seeds"][0]["ind"]:
            cells[(rec["protocol"], ind, rec["topic"])] = (
                len(rec["seeds"]), sum("degenerate" in r["ind"][ind] for r in rec["seeds"]))
    assert any(n_deg == n for n, n_deg in cells.values())
    for name, proto, at in [("flip-main", 1, 0), ("theorem-test-all", 0, 2), ("theorem-test", 0, 2)]:
        with open(out / "tables" / f"{name}.csv", newline="", encoding="utf-8") as fh:
            header, *rows = list(csv.reader(fh))
        assert header[-2:] == ["synthetic", "degenerate"] and "degenerate" not in header[:-1]
        got = {(r[proto], r[at], r[header.index("topic")]): r for r in rows}
        want = {k: v for k, v in cells.items() if name != "theorem-test" or k[0] == "BIAS_visibility"}
        assert sorted(got) == sorted(want) and len(rows) == len(want), name
        for key, (n, n_deg) in want.items():
            row = got[key]
            assert int(row[-1]) == n_deg, (name, key)
            if n_deg == n:
                assert row[header.index("mean")] == "" and row[header.index("n")] == "0", (name, key)



def test_a_grid_whose_every_run_is_degenerate_writes_its_tables_with_blank_cells(tmp_path) -> None:
    """No run with a value anywhere in the grid: runs_frame had no R_top, A_… or eps column, and the tables stage
    failed with pandas' KeyError 'Column not found: R_top'. Now every table is written, its cells blank, and the
    summary holds no NaN."""
    import csv

    from aumann.studies.crossscale.tables import write_tables

    deg = {"degenerate": "delta_v = 0 (no topic activity in S)"}
    full = {"topic": "t", "protocol": "FULL", "size": 100, "ind": {"heat": {
        "R": {"top": 0.1, "mid": 0.2, "tail": 0.7}, "anchors": {"posts": 0.1, "replies": 0.1}}}}
    cell = {"topic": "t", "protocol": "BIAS_visibility", "size": 2,
            "seeds": [{"seed": s, "n_top": 0, "ind": {"heat": deg}} for s in (0, 1)]}
    summary = write_tables([full, cell], tmp_path, synthetic=True, headline_size=2)
    assert summary["degenerate_runs"] == 2 and summary["epsilon"] == {} and summary["flip_cells_positive"] == "0/0"
    json.dumps(summary, allow_nan=False)  # (raises on a NaN)
    with open(tmp_path / "flip-main.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["topic"], r["mean"], r["n"], r["full"], r["degenerate"]) for r in rows] == [("t", "", "0", "10.0", "2")]
    with open(tmp_path / "kol-anchors.csv", newline="", encoding="utf-8") as fh:
        assert [(r["anchor"], r["bias_v"], r["full"]) for r in csv.DictReader(fh)] == [
            ("followers (G_top)", "", "10.0"), ("topic posts (G_2)", "", "10.0"),
            ("replies received (G_3)", "", "10.0")]


@pytest.mark.parametrize("damage", ["emptied", "no_synthetic_key"])
def test_report_refuses_a_study_summary_without_its_keys(tmp_path, damage) -> None:
    """`aumann report` on a study whose summary.json was emptied to {} wrote a page of no topics that called the
    SYNTHETIC panel's study "ingested" data (exit 0): the marker came from summary.json alone. Now a summary without
    the keys every study writes is refused by name, and the page is SYNTHETIC when the manifest says so too."""
    from aumann.errors import ReportError
    from aumann.studies.pages import render_report

    counts, out = tmp_path / "counts", tmp_path / "study"
    assert _run("synth", "--users", "300", "--days", "3", "--seed", "1", "--out", str(counts)) == 0
    assert _run("study", str(counts), "--out", str(out), "--sizes", "100000", "--seeds", "0", "--no-progress") == 0
    summary = json.loads((out / "summary.json").read_text())
    render_report(out, interactive=False, plots=False)
    assert "SYNTHETIC" in (out / "report.md").read_text(encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["outputs_sha256"]  # (a study of an older aumann: no checksums; this one's are tested below)
    del manifest["outputs_complete"]  # (nor the flag that says the checksums list every output)
    (out / "manifest.json").write_text(json.dumps(manifest))
    damaged = {} if damage == "emptied" else {k: v for k, v in summary.items() if k != "synthetic"}
    (out / "summary.json").write_text(json.dumps(damaged))
    with pytest.raises(ReportError, match=r"summary\.json' lacks \[.*'synthetic'"):
        render_report(out, interactive=False, plots=False)
    (out / "summary.json").write_text(json.dumps({**summary, "synthetic": False}))  # the manifest still says so
    render_report(out, interactive=False, plots=False)
    assert (out / "report.md").read_text(encoding="utf-8").splitlines()[2].startswith("> **SYNTHETIC")


@pytest.mark.parametrize("damage", ["summary", "table", "cell"])
def test_report_refuses_a_study_file_that_is_not_the_one_the_study_wrote(tmp_path, damage) -> None:
    """`aumann report` drew a study folder's page from its files as they were: a number edited by hand in
    summary.json, a table or a cell was shown as the study's result (exit 0). The manifest now records the SHA-256
    of every file the page reads, as an `aumann run` folder's does of its tables; one that changed is refused."""
    from aumann.errors import ReportError
    from aumann.studies.pages import render_report

    counts, out = tmp_path / "counts", tmp_path / "study"
    assert _run("synth", "--users", "300", "--days", "3", "--seed", "1", "--out", str(counts)) == 0
    assert _run("study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0", "--no-progress") == 0
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert "summary.json" in recorded and any(n.startswith("tables/") for n in recorded)
    assert any(n.startswith("cells/") and n.endswith("FULL.json") for n in recorded)
    render_report(out, interactive=False, plots=False)  # as the study wrote it: drawn
    if damage == "summary":
        target = out / "summary.json"
        target.write_text(json.dumps({**json.loads(target.read_text()), "users": 10**9}))
    elif damage == "table":
        target = out / sorted(n for n in recorded if n.startswith("tables/"))[0]
        target.write_text(target.read_text().replace("0", "9", 1))
    else:
        target = out / next(n for n in recorded if n.endswith("FULL.json"))
        target.write_text(target.read_text().replace("0", "9", 1))
    with pytest.raises(ReportError, match=rf"'.*{target.name}' is not the one the run wrote: .*`aumann bluesky "
                                          r"study` command"):
        render_report(out, interactive=False, plots=False)


def test_the_r_top_figure_says_which_bars_are_missing_and_why(tmp_path) -> None:
    """A (topic, protocol) whose every seed's sub-panel was degenerate (Δv = 0) has no R_top: its bar was
    simply not drawn, which reads as R_top = 0. The figure's caption now names each missing bar and why."""
    import re

    from aumann.data.bluesky.synth import SynthConfig, generate
    from tests.studies import htmlcheck

    counts = tmp_path / "counts"
    generate(SynthConfig(users=100, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    cfg = CrossScaleConfig(sizes=[2, "full"], seeds=[0, 1], headline_size=2, protocols=["BIAS_visibility", "RAND"])
    run_crossscale(counts, out, cfg, log=lambda *_: None)
    want, have = [], []
    for proto, key in (("BIAS_visibility", "BIAS_v"), ("RAND", "RAND")):
        for path in sorted((out / "cells").glob(f"*/{proto}__2.json")):
            rec = json.loads(path.read_text())
            every = all("degenerate" in r["ind"]["heat"] for r in rec["seeds"])
            (want if every else have).append(f"{rec['topic']} · {key}")
    assert want and have  # both cases occur in this grid
    text = htmlcheck.text((out / "report.html").read_text(encoding="utf-8"))
    said = re.findall(r"No bar for ([^:]*): no seed's sub-panel had activity on the topic", text)
    assert len(said) == 1
    assert sorted(said[0].split(", ")) == sorted(want)


def test_the_markdown_twin_links_no_png_under_the_r_top_figure_title(tmp_path) -> None:
    """report.md showed figures/teaser.png under the title "R_top (f_heat): the full panel against small panels",
    but teaser.png is the first topic's three tier shares (figures.py), not R_top of every topic: the Markdown
    reader saw another figure under this one's title. It now points to report.html, as for any figure without
    a PNG of its own."""
    import re

    from aumann.data.bluesky.synth import SynthConfig, generate

    counts = tmp_path / "counts"
    generate(SynthConfig(users=300, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    run_crossscale(counts, out, CrossScaleConfig(sizes=[20, "full"], seeds=[0, 1], headline_size=20),
                   log=lambda *_: None)
    assert (out / "figures" / "teaser.png").is_file()  # the study drew it: the old link would have been made
    md = (out / "report.md").read_text(encoding="utf-8")
    links = dict((alt, ref) for alt, ref in re.findall(r"!\[([^\]]*)\]\(([^)]*)\)", md))
    assert not any(alt.startswith("R_top (f_heat)") for alt in links), links
    assert "_Figure: R_top (f_heat): the full panel against small panels (SYNTHETIC) — in report.html._" in md


def test_the_markdown_twin_links_the_every_topic_heatmap_under_its_own_title(tmp_path) -> None:
    """report.md linked figures/heatmap.png, which draws every topic's |M(t, p)| side by side, as the first topic's
    figure ("mythos: |M(t, p)| by follower-percentile bin × day"): it is linked once, under a title that says it
    holds every topic, and both pages name the file; each topic's own heatmap is in report.html."""
    import re

    from aumann.data.bluesky.synth import SynthConfig, generate

    counts = tmp_path / "counts"
    generate(SynthConfig(users=300, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    run_crossscale(counts, out, CrossScaleConfig(sizes=[20, "full"], seeds=[0, 1], headline_size=20),
                   log=lambda *_: None)
    assert (out / "figures" / "heatmap.png").is_file()
    topics = json.loads((out / "summary.json").read_text())["topics"]
    assert len(topics) > 1
    md = (out / "report.md").read_text(encoding="utf-8")
    links = re.findall(r"!\[([^\]]*)\]\(figures/heatmap\.png\)", md)
    assert links == ["Every topic: log10 |M(t, p)| by follower-percentile bin × day, side by side (SYNTHETIC)"]
    for t in topics:
        assert f"_Figure: {t}: |M(t, p)| by follower-percentile bin × day (log10) (SYNTHETIC) — in report.html._" in md
    line = "`figures/heatmap.png` beside this page draws every topic's |M(t, p)| side by side"
    assert line in md
    from tests.studies import htmlcheck

    page = (out / "report.html").read_text(encoding="utf-8")
    assert line.replace("`", "") in htmlcheck.text(page)


def test_the_percentile_heatmap_says_what_its_grey_cells_are(tmp_path) -> None:
    """The |M(t, p)| heatmap (log10) drew a bin with no attribution that day, M = 0, light grey, the colour of no
    value on its scale, and nothing on the page said so; its caption now does (only where there is such a cell)."""
    from aumann.data.bluesky.synth import SynthConfig, generate

    counts = tmp_path / "counts"
    generate(SynthConfig(users=300, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    run_crossscale(counts, out, CrossScaleConfig(sizes=[20, "full"], seeds=[0, 1], headline_size=20),
                   log=lambda *_: None)
    from tests.studies import htmlcheck

    text = htmlcheck.text((out / "report.html").read_text(encoding="utf-8"))
    assert "light grey: M(t, p) = 0 (no attribution in that bin that day, no log10)" in text  # 300 users, 100 bins


def test_the_deepset_part_of_the_page_is_a_table_and_labelled_values_not_json(tmp_path) -> None:
    """With --deepset, How sure showed summary.json's DeepSet entry as JSON text: 'settings {"topic": …}',
    'training {"heldout_r2": {"random": 0.9823561906814575, …}}' and the tier-share table itself as
    'table {"FULL": {"R": {"top": 4.145674407482147, …'. The shares are now a table (as deepset.md has them)
    and the nested settings and training figures one labelled value each."""
    from aumann.data.bluesky.synth import SynthConfig, generate
    from tests.studies import htmlcheck

    counts = tmp_path / "counts"
    generate(SynthConfig(users=300, days=3, seed=0)).save(counts)
    out = tmp_path / "study"
    cfg = CrossScaleConfig(sizes=[20, "full"], seeds=[0, 1], headline_size=20, deepset=True,
                           deepset_settings=DeepSetSettings(width=8, train_steps=20, batch=8, sizes=[64], steps=20))
    summary = run_crossscale(counts, out, cfg, log=lambda *_: None)
    ds = summary["deepset"]
    for page_text in (htmlcheck.text((out / "report.html").read_text(encoding="utf-8")),
                      (out / "report.md").read_text(encoding="utf-8")):
        assert '{"' not in page_text and '": ' not in page_text  # no JSON object shown to the reader
        assert "training · heldout_r2 · random" in page_text
    tab = htmlcheck.tables((out / "report.html").read_text(encoding="utf-8"))["deepset"]
    assert tab["head"] == ["panel", "R_top (%)", "R_mid (%)", "R_tail (%)", "ε", "degenerate seeds"]
    assert [r[0]["text"] for r in tab["rows"]] == list(ds["table"])
    for row in tab["rows"]:
        want = ds["table"][row[0]["text"]]
        for j, tier in enumerate(("top", "mid", "tail"), start=1):
            if want["R"] is None:
                assert row[j]["text"] == "–"
            else:
                assert float(row[j]["attrs"]["data-sort"]) == pytest.approx(want["R"][tier], rel=1e-12)
