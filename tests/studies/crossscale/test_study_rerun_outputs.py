"""A study run again into its folder with other settings showed the earlier study's results as its own: the page drew
every cell file there (an earlier study's other sizes), and a table the new settings do not write (the heat
indicator's, here) stayed in tables/, on the page and in the manifest as this study's -- numbers of another study, on
other counts. The page reads the cells its summary lists, and the study removes the tables an earlier one recorded
before it writes its own.

The earlier study's other cells stayed in cells/ for ever (20 size-200 cells after a re-run with sizes 100 alone):
the study removes now the cells an earlier study recorded writing (its manifest's outputs_sha256, or the journal of
one interrupted before its manifest) that it does not write, each checked unchanged first; a changed one is refused
(and kept) before the grid, and a file no record names is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    assert sorted(out.glob("cells/*/*__200.json")) == []  # (the earlier study's: removed, test below)
    assert main(["report", str(out), "--static"]) == 0
    assert (out / "report.md").read_bytes() == page


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


def _study(counts: Path, out: Path, *sizes: str) -> int:
    return main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", *sizes, "--seeds", "0",
                 "--no-progress", "--static"])


def _cells(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "cells").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def counts(tmp_path_factory) -> Path:
    c = tmp_path_factory.mktemp("counts") / "counts"
    _synth(c, "1")
    return c


def test_a_study_run_again_with_fewer_sizes_removes_the_earlier_studys_other_cells(counts, tmp_path, capsys) -> None:
    out = tmp_path / "study"
    assert _study(counts, out, "100", "200") == 0
    before = _cells(out)
    mine = out / "cells" / "mythos" / "notes.txt"  # a file no record names: left alone
    mine.write_text("mine")
    capsys.readouterr()
    assert _study(counts, out, "100") == 0
    said = capsys.readouterr()
    after = _cells(out)
    gone = sorted(set(before) - set(after))
    assert len(gone) == 20 and all(n.endswith("__200.json") for n in gone)  # 5 topics x 4 protocols
    assert {n: before[n] for n in after if n in before} == {n: b for n, b in after.items() if n in before}
    assert mine.read_text() == "mine"
    assert "removed 20 cell(s) of an earlier study" in said.out + said.err
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert not [n for n in recorded if n.endswith("__200.json")]


def test_a_cell_changed_since_the_earlier_study_is_refused_and_kept_before_the_grid(counts, tmp_path, capsys) -> None:
    out = tmp_path / "study"
    assert _study(counts, out, "100", "200") == 0
    edited = out / "cells" / "mythos" / "RAND__200.json"
    edited.write_bytes(edited.read_bytes().replace(b'"size"', b'"size" ', 1))
    before = _cells(out)
    manifest = (out / "manifest.json").read_bytes()
    capsys.readouterr()
    assert _study(counts, out, "100") == 2
    err = capsys.readouterr().err
    assert "OutputError" in err and "RAND__200.json" in err and "not the file an earlier aumann run" in err, err
    assert _cells(out) == before and (out / "manifest.json").read_bytes() == manifest  # nothing removed nor written


def test_cells_of_a_study_interrupted_before_its_manifest_are_known_as_a_studys(counts, tmp_path, monkeypatch) -> None:
    """A study interrupted after its grid (before its manifest) left cells no manifest records; the study now
    journals each cell as it writes it, so the next study that does not write them removes them."""
    from aumann.studies.crossscale import tables

    out = tmp_path / "study"
    assert _study(counts, out, "100") == 0

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(tables, "write_tables", killed)
        assert _study(counts, out, "100", "200") != 0  # (aumann: interrupted)
    assert len(list(out.glob("cells/*/*__200.json"))) == 20
    assert _study(counts, out, "100") == 0
    assert list(out.glob("cells/*/*__200.json")) == []


def test_a_csv_of_yours_in_tables_is_neither_recorded_nor_drawn_nor_removed(counts, tmp_path) -> None:
    """The study recorded every tables/*.csv as its own (outputs_sha256) and its page drew each as a study table: a
    tables/mine.csv of yours showed on the page as table "mine", and the next study removed it as an earlier
    study's table, without a word."""
    out = tmp_path / "study"
    (out / "tables").mkdir(parents=True)
    mine = out / "tables" / "mine.csv"
    mine.write_text("topic,value\nmy-own-row,42\n")
    for _ in range(2):
        assert _study(counts, out, "100") == 0
        recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
        assert "tables/mine.csv" not in recorded and "tables/flip-main.csv" in recorded
        assert "my-own-row" not in (out / "report.md").read_text()
        assert mine.read_text() == "topic,value\nmy-own-row,42\n"


def _lin_config(tmp_path: Path) -> Path:
    config = tmp_path / "lin.toml"
    config.write_text('indicators = ["lin"]\nsizes = [100]\nseeds = [0]\n')
    return config


def _as_older_study(out: Path) -> None:
    """The folder as a study before the tables' .md twins were recorded wrote it: none of them in outputs_sha256,
    and no outputs_complete."""
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["outputs_sha256"] = {k: v for k, v in manifest["outputs_sha256"].items() if not k.endswith(".md")}
    manifest.pop("outputs_complete", None)
    path.write_text(json.dumps(manifest))


TWINS_NOT_WRITTEN_BY_LIN = ("kol-anchors", "numbers-app", "residual-law", "topics-jaccard")


def test_the_tables_md_twins_are_recorded_removed_and_verified_with_their_csvs(counts, tmp_path, capsys) -> None:
    """The tables' .md twins (tables/<name>.md) were not in the manifest: a study that removed an earlier table left
    its .md (numbers-app.md of a study with the heat indicator, after one without), and `aumann report` did not
    check them (one edited by hand passed)."""
    out = tmp_path / "study"
    assert _study(counts, out, "100") == 0
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert "tables/flip-main.md" in recorded and "tables/numbers-app.md" in recorded
    twin = out / "tables" / "flip-main.md"
    kept = twin.read_bytes()
    twin.write_bytes(kept + b"| an edited row |\n")
    capsys.readouterr()
    assert main(["report", str(out), "--static"]) == 2
    assert "ReportError" in capsys.readouterr().err
    twin.write_bytes(kept)
    assert main(["report", str(out), "--static"]) == 0
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--config", str(_lin_config(tmp_path)),
                 "--no-progress", "--static"]) == 0
    for name in TWINS_NOT_WRITTEN_BY_LIN:
        assert not (out / "tables" / f"{name}.csv").exists() and not (out / "tables" / f"{name}.md").exists(), name
    assert (out / "tables" / "flip-main.md").is_file()


def test_a_twin_changed_since_is_refused_and_kept_before_the_grid(counts, tmp_path, capsys) -> None:
    out = tmp_path / "study"
    assert _study(counts, out, "100") == 0
    twin = out / "tables" / "numbers-app.md"
    twin.write_text("my notes\n")
    capsys.readouterr()
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--config", str(_lin_config(tmp_path)),
                 "--no-progress", "--static"]) == 2
    assert "numbers-app.md" in capsys.readouterr().err
    assert twin.read_text() == "my notes\n" and (out / "tables" / "numbers-app.csv").is_file()


def test_a_study_folder_from_before_the_twins_were_recorded_still_reports_and_reruns(counts, tmp_path) -> None:
    out = tmp_path / "study"
    assert _study(counts, out, "100") == 0
    _as_older_study(out)
    assert main(["report", str(out), "--static"]) == 0  # no twin recorded: none refused
    # the older rule: the twin of a table that older study recorded is taken as its own, and goes with it
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--config", str(_lin_config(tmp_path)),
                 "--no-progress", "--static"]) == 0
    for name in TWINS_NOT_WRITTEN_BY_LIN:
        assert not (out / "tables" / f"{name}.md").exists(), name
    assert main(["report", str(out), "--static"]) == 0


def test_a_file_of_yours_with_an_outputs_name_in_a_study_folder_is_refused(counts, tmp_path, capsys) -> None:
    """A study's manifest never said it lists every output (outputs_complete), so the older rule held in every study
    folder: a file there with an output's name that the manifest does not list was taken as aumann's. A
    tables/numbers-app.csv of yours beside a study without the heat indicator was overwritten by the next study
    with it, without a word. The study's manifest now says its records are complete, and such a file is refused."""
    out = tmp_path / "study"
    config = _lin_config(tmp_path)
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--config", str(config), "--no-progress",
                 "--static"]) == 0
    mine = out / "tables" / "numbers-app.csv"
    mine.write_text("my,own\n")
    capsys.readouterr()
    assert _study(counts, out, "100") == 2, mine.read_text()
    assert json.loads((out / "manifest.json").read_text()).get("outputs_complete") is True
    err = capsys.readouterr().err
    assert "OutputError" in err and "numbers-app.csv" in err and "a file of your own" in err, err
    assert mine.read_text() == "my,own\n"
    mine.unlink()
    assert _study(counts, out, "100") == 0  # (its own earlier pages and tables: replaced, not refused)
    assert _study(counts, out, "100") == 0


def test_a_study_folder_an_older_study_wrote_still_reruns(counts, tmp_path) -> None:
    """No outputs_complete (an older study's manifest): a file with an output's name that it does not list is taken
    as that study's, as before."""
    out = tmp_path / "study"
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--config", str(_lin_config(tmp_path)),
                 "--no-progress", "--static"]) == 0
    _as_older_study(out)
    (out / "tables" / "numbers-app.csv").write_text("an,older,study's\n")
    assert _study(counts, out, "100") == 0
    assert json.loads((out / "manifest.json").read_text())["outputs_complete"] is True
    assert "older" not in (out / "tables" / "numbers-app.csv").read_text()


def test_the_study_records_every_output_it_writes(counts, tmp_path) -> None:
    """outputs_complete says the manifest lists every output: the per-user files too; and an earlier study's pages,
    which the new manifest does not list, go before it (a study that writes no page leaves none of another's)."""
    from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale

    out = tmp_path / "study"
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--export-per-user", "--no-progress", "--static"]) == 0
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    per_user = sorted(p.relative_to(out).as_posix() for p in (out / "per_user").glob("*.parquet"))
    assert per_user and all(n in recorded for n in per_user)
    assert "report.html" in recorded and "report.md" in recorded
    run_crossscale(counts, out, CrossScaleConfig(sizes=[100], seeds=[0]), log=lambda *a: None, report=False)
    assert not (out / "report.html").exists() and not (out / "report.md").exists()
    assert main(["report", str(out), "--static"]) == 0
