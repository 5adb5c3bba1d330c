"""Recorded integers past ±2**53 that float64 rounded: the study keeps their count in each run record and warns
once, from the run records it holds, computed or resumed.

Before, the :class:`PrecisionLossWarning` came from each run's recording, inside whichever process simulated it: one
warning per run serially; a process pool's worker printed it to its own stderr in Python's raw format (file:line),
a Ray worker's may not reach the console; a resumed run said nothing, and no run record or manifest kept the count
(only the saved panel's meta did). Now the record keeps it (``rounded_values``) and ``run_study`` warns once.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from aumann import scenarios
from aumann.cli import main
from aumann.errors import PrecisionLossWarning
from aumann.simulators import LocalExecutor
from aumann.studies.faithfulness import run_study

ODOMETER = Path(__file__).resolve().parents[1] / "scenarios" / "odometer" / "scenario.py"
STUDY = {"permutations": 20, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off"}
BIG = 2**53 + 1  # the odometers' start (shift 0): a double holds 2**53 or 2**53 + 2, not this


def _study(out: Path, executor=None, shift: int = 0) -> tuple[list[str], object]:
    """The rounding warnings one study of two odometer runs into ``out`` gives in this process, and its result."""
    sc = scenarios.get(f"{ODOMETER}:scenario")
    cfg = sc.load_config(steps=4, runs=2, study=STUDY, assignments=[f"shift={shift}"])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        result = run_study(sc, cfg, out_dir=out, executor=executor)
    return [str(w.message) for w in got if issubclass(w.category, PrecisionLossWarning)], result


def _check(said: list[str], largest: str) -> None:
    assert said == ["integers past ±2**53 changed on their way to float64, the engine's numbers (a double holds "
                    "integers exactly only up to 2**53): odometer: feature 'odometer' in 2 of 2 run(s) (run 0, run 1; "
                    "counted in each run record's rounded_values, manifest.json): 32 value(s), the largest "
                    f"{largest}. They are kept as the nearest double; if their last digits matter, subtract an offset "
                    "or change their unit (ns to s) first"]


def test_computed_and_resumed_runs_are_counted_in_the_record_and_warned_of_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    said, result = _study(out)
    _check(said, "9,007,199,254,740,993 (now 9,007,199,254,740,992)")  # was: the same sentence once per run
    counted = {"features": {"odometer": {"count": 16, "largest": BIG}}}  # 4 cars × 4 steps a run
    assert [r["rounded_values"] for r in result.records] == [counted, counted]  # was: no key
    assert json.loads((out / "runs" / "run-001.json").read_text())["rounded_values"] == counted
    said, result = _study(out)  # resumed: read back from the run records (was: nothing)
    assert result.resumed == 2 and result.computed == 0
    _check(said, "9,007,199,254,740,993 (now 9,007,199,254,740,992)")


def test_integers_past_int64_are_kept_as_text_so_the_runs_still_resume(tmp_path: Path) -> None:
    # a record read back holds only int64 integers (aumann.records): a largest of 2**65 + 2**12 copied as an int made
    # every resume find the record damaged and recompute the run; as its decimal text it resumes
    out = tmp_path / "run"
    big = BIG << 12
    said, result = _study(out, shift=12)
    _check(said, f"{big:,} (now {int(float(big)):,})")
    assert result.records[0]["rounded_values"] == {"features": {"odometer": {"count": 16, "largest": str(big)}}}
    said, result = _study(out, shift=12)
    assert result.resumed == 2 and result.computed == 0 and not result.failed_checks
    _check(said, f"{big:,} (now {int(float(big)):,})")


@pytest.mark.slow
def test_runs_computed_on_a_process_pool_are_warned_of_in_the_driver(tmp_path: Path) -> None:
    # the worker's own warning never reached the driver (was: nothing here); the driver says it from the records
    with LocalExecutor(max_workers=2, mp_context="fork") as pool:
        said, _ = _study(tmp_path / "run", pool)
    _check(said, "9,007,199,254,740,993 (now 9,007,199,254,740,992)")


def test_aumann_run_says_it_once_and_lists_it_in_the_manifest(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    for _ in range(2):  # computed, then resumed: once each time
        assert main(["run", f"{ODOMETER}:scenario", "--steps", "4", "--permutations", "20", "--no-plots",
                     "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
        err = " ".join(capsys.readouterr().err.split())  # (Rich wraps lines)
        assert err.count("integers past ±2**53") == 1
        assert "aumann: warning: integers past ±2**53 changed on their way to float64" in err
        assert "odometer: feature 'odometer' in 2 of 2 run(s) (run 0, run 1;" in err
    counted = {"features": {"odometer": {"count": 16, "largest": BIG}}}
    assert json.loads((out / "manifest.json").read_text())["rounded_values"] == [{"run": 0, **counted},
                                                                                 {"run": 1, **counted}]


def test_direct_simulate_calls_still_warn() -> None:
    sc = scenarios.get(f"{ODOMETER}:scenario")
    with pytest.warns(PrecisionLossWarning, match="feature 'odometer' \\(FeatureRecorder\\): 16 value"):
        run = sc.simulate(sc.load_config(), rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        quiet = sc.simulate(sc.load_config(), rng=0, warn_rounded=False)
    assert run.panel.meta["rounded_values"] == quiet.panel.meta["rounded_values"]  # counted either way


def test_a_hand_edited_record_is_read_without_a_traceback() -> None:
    # records are checksummed, but one edited with its checksum fixed up is still read: a largest that is no decimal
    # integer ("²" passed str.isdigit, and int("²") raised ValueError) or no number at all is skipped, not a crash
    from aumann.studies.rounded_warning import rounded_values_lost

    good = {"run": 0, "rounded_values": {"features": {"v": {"count": 2, "largest": str(2**70)}}}}
    bad = [{"run": 1, "rounded_values": {"features": {"v": {"count": 3, "largest": "²"}}}},
           {"run": 2, "rounded_values": {"features": {"v": {"count": True, "largest": 5}}}},
           {"run": 3, "rounded_values": {"context": "clock"}}, None]
    assert rounded_values_lost("s", [good, *bad]) == [
        ("s: feature 'v' in 1 of 4 run(s) (run 0; counted in each run record's rounded_values, manifest.json)", 2,
         2**70)]


def test_float32_entries_are_warned_of_as_float32():
    """An ArrayRecorder(dtype=float32) records its count with "dtype": "float32": the study's one warning said
    "past ±2**53 ... float64" for it, where float32 changed the integers past ±2**24."""
    import warnings as _w

    from aumann.errors import PrecisionLossWarning
    from aumann.studies.rounded_warning import rounded_values_lost, warn_rounded_values

    recs = [{"run": 0, "rounded_values": {"features": {"x": {"count": 3, "largest": 2**24 + 1, "dtype": "float32"}}}},
            {"run": 1, "rounded_values": {"features": {"y": {"count": 2, "largest": 2**53 + 1}}}}]
    lost = rounded_values_lost("s", recs)
    assert [e[1:] for e in lost] == [(3, 2**24 + 1, "float32"), (2, 2**53 + 1)]
    with _w.catch_warnings(record=True) as got:
        _w.simplefilter("always")
        warn_rounded_values("s", recs)
    (w,) = [g for g in got if issubclass(g.category, PrecisionLossWarning)]
    assert "float32 (past ±2**24" in str(w.message) and "or float64 (past ±2**53)" in str(w.message)


def test_a_study_without_an_output_folder_does_not_point_at_manifest_json() -> None:
    # run_study(out_dir=None) writes no file, yet the warning said "counted in ... rounded_values, manifest.json"
    sc = scenarios.get(f"{ODOMETER}:scenario")
    cfg = sc.load_config(steps=4, runs=2, study=STUDY)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_study(sc, cfg)
    (said,) = [str(w.message) for w in got if issubclass(w.category, PrecisionLossWarning)]
    assert "(run 0, run 1; counted in each run record's rounded_values, StudyResult.records): 32 value(s)" in said
    assert "manifest.json" not in said


def test_a_study_panel_past_int64_can_be_attributed_and_reported(tmp_path: Path, capsys) -> None:
    """`aumann attribute runs/.../panels/run-000.npz` of a study whose odometers passed int64 (shift 12): the panel's
    meta['rounded_values'] holds a largest of 2**65 + 2**12, which the command copied into manifest.json as an int
    that every reader refuses ("ReportError: manifest ... is an integer outside int64 (66 bits)", exit 2), and
    `aumann report` of that directory failed the same way. Both the attribute directory and the study's own directory
    now give their pages."""
    out = tmp_path / "run"
    assert main(["run", f"{ODOMETER}:scenario", "--steps", "4", "--permutations", "20", "--no-plots", "--no-ablations",
                 "--judge", "off", "--set", "shift=12", "--out", str(out)]) == 0
    attr = tmp_path / "attr"
    assert main(["attribute", str(out / "panels" / "run-000.npz"), "--indicator", "lin", "--out", str(attr),
                 "--static"]) == 0
    assert "Error" not in capsys.readouterr().err
    meta = json.loads((attr / "manifest.json").read_text())["panel_meta"]
    assert meta["rounded_values"]["features"]["odometer"]["largest"] == str(BIG << 12)
    for d in (attr, out):
        assert main(["report", str(d), "--static"]) == 0
        assert "Error" not in capsys.readouterr().err
