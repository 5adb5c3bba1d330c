"""A study run again into its folder with other settings showed the earlier study's results as its own: the page drew
every cell file there (an earlier study's other sizes), and a table the new settings do not write (the heat
indicator's, here) stayed in tables/, on the page and in the manifest as this study's -- numbers of another study, on
other counts. The page reads the cells its summary lists, and the study removes the tables an earlier one recorded
before it writes its own."""

from __future__ import annotations

import json

from aumann.cli import main


def _synth(counts, seed: str) -> None:
    assert main(["bluesky", "synth", "--users", "300", "--days", "2", "--seed", seed, "--out", str(counts)]) == 0


def test_a_study_run_again_with_fewer_sizes_draws_only_its_own_cells(tmp_path) -> None:
    """The page read every cells/<topic>/*__*.json: a study run again into its folder with fewer sizes (here on other
    counts) left the earlier study's size-200 cells there, and its page drew them as its own (a count on the page
    32 where the study has 16 cells). It reads the cells of its summary's protocols and sizes now."""
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "study"
    _synth(first, "1")
    _synth(second, "2")
    assert main(["bluesky", "study", str(first), "--out", str(out), "--sizes", "100", "200", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    assert main(["bluesky", "study", str(second), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    page = (out / "report.md").read_bytes()
    stale = sorted(out.glob("cells/*/*__200.json"))
    assert stale  # (the earlier study's, kept: the study removes no cell)
    for p in stale:
        p.unlink()
    assert main(["report", str(out), "--static"]) == 0
    assert (out / "report.md").read_bytes() == page  # the page never drew them


def test_a_study_run_again_without_a_table_does_not_keep_the_earlier_one(tmp_path) -> None:
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "study"
    _synth(first, "1")
    _synth(second, "2")
    assert main(["bluesky", "study", str(first), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    assert (out / "tables" / "numbers-app.csv").is_file()  # (written with the heat indicator)
    config = tmp_path / "lin.toml"
    config.write_text('indicators = ["lin"]\nsizes = [100]\nseeds = [0]\n')
    assert main(["bluesky", "study", str(second), "--out", str(out), "--config", str(config), "--no-progress",
                 "--static"]) == 0
    for name in ("numbers-app", "topics-jaccard", "kol-anchors"):
        assert not (out / "tables" / f"{name}.csv").exists()
        assert name not in (out / "report.md").read_text()
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert "tables/numbers-app.csv" not in recorded and "tables/flip-main.csv" in recorded


def test_a_table_of_your_own_among_an_earlier_studys_is_refused_before_the_grid(tmp_path, capsys) -> None:
    counts, out = tmp_path / "counts", tmp_path / "study"
    _synth(counts, "1")
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    (out / "tables" / "numbers-app.csv").write_text("my,own\n")
    capsys.readouterr()
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 2
    assert "numbers-app.csv" in capsys.readouterr().err
    assert (out / "tables" / "numbers-app.csv").read_text() == "my,own\n"


def test_a_table_of_your_own_in_a_fresh_study_folder_is_refused_and_kept(tmp_path, capsys) -> None:
    """Only the pages, summary and manifest were checked: a tables/flip-main.csv of the user's own in --out was
    overwritten by the study's without a word."""
    counts, out = tmp_path / "counts", tmp_path / "study"
    _synth(counts, "1")
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "flip-main.csv").write_text("my,own\n")
    capsys.readouterr()
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 2
    assert "flip-main.csv" in capsys.readouterr().err
    assert (out / "tables" / "flip-main.csv").read_text() == "my,own\n"
    assert not (out / "cells").exists()  # refused before the grid
