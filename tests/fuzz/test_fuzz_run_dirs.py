"""Fuzz what reads a run directory back: resume (verify_run over run records, arrays and every checksummed file),
the report (manifest, records, tables, attributions, panels) and the raw-counts folder (counts.json, Parquet)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import strategies as st

from aumann.errors import IngestError, ReportError
from tests.fuzz.harness import fuzz_target, scratch_dir, typed_or_result


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    from aumann import scenarios
    from aumann.studies import run_study, write_outputs
    from tests.tiny import TINY_STUDY

    sc = scenarios.get("social-llm")
    cfg = sc.load_config(agents=5, steps=4, runs=1, study={**TINY_STUDY, "ablations": False, "judge": "off"})
    out = tmp_path_factory.mktemp("fuzzrun") / "run"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=False, interactive=False)
    return sc, cfg, out


FILES = ["runs/run-000.json", "runs/run-000.npz", "manifest.json", "faithfulness.csv", "timings/run-000.json",
         "panels/run-000.npz", "attributions/run-000-aumann_shapley.npz", "attributions/run-000-sampled_shapley.npz",
         "faithfulness_extended.csv", "llm-usage.json"]

json_edit = st.one_of(
    st.tuples(st.sampled_from(["t_star", "f_t_star", "run", "digest", "methods", "checksum", "files_sha256",
                               "seconds", "command", "report_kind", "runs", "config", "stage_seconds"]),
              st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=10),
                        st.just([]), st.just({}), st.just("[" * 100)))
)
byte_edit = st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["flip", "truncate", "insert"]))


def _damage(path: Path, edits_json, edits_bytes) -> None:
    if not path.exists():
        return
    raw = path.read_bytes()
    if path.suffix == ".json" and edits_json:
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for k, v in edits_json:
                obj[k] = v
            try:
                raw = json.dumps(obj).encode()
            except ValueError:  # NaN/inf: written as the literal an editor would type
                raw = json.dumps(obj, allow_nan=True).encode()
    b = bytearray(raw)
    for pos, val, kind in edits_bytes:
        if not b:
            break
        i = pos % len(b)
        if kind == "flip":
            b[i] ^= val or 1
        elif kind == "truncate":
            del b[i:]
        else:
            b[i:i] = bytes([val])
    path.write_bytes(bytes(b))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", ["resume", "report"])
def test_fuzz_damaged_run_directories(base_run, target, fuzz_budget):
    from aumann.studies import render_report
    from aumann.studies.faithfulness import config_digest, verify_run

    sc, cfg, out = base_run
    digest = config_digest(sc, cfg, "offline")

    @fuzz_target(examples=15, seconds=120, which=st.lists(st.sampled_from(FILES), min_size=1, max_size=3),
                 edits_json=st.lists(json_edit, max_size=3), edits_bytes=st.lists(byte_edit, max_size=3))
    def check(which, edits_json, edits_bytes):
        with scratch_dir() as d:
            run = Path(d) / "run"
            shutil.copytree(out, run)
            for name in which:
                _damage(run / name, edits_json, edits_bytes)
            if target == "resume":
                status, why, rec, arrays = verify_run(run / "runs" / "run-000.json", digest)
                assert status in ("done", "todo", "corrupt")
                assert (status == "corrupt") == (why is not None)
                if status == "done":  # only an undamaged (or byte-identical) run verifies
                    assert rec["t_star"] >= 0 and arrays
            else:
                _, err = typed_or_result(render_report, run, interactive=False, plots=False)
                assert err is None or isinstance(err, ReportError) or "cannot be read" in str(err)

    check(fuzz_budget)


test_fuzz_damaged_run_directories.fuzz = True


@pytest.fixture(scope="module")
def base_counts(tmp_path_factory):
    from aumann.data.bluesky.synth import SynthConfig, generate

    return generate(SynthConfig(users=200, days=2, seed=3)).save(tmp_path_factory.mktemp("counts") / "c")


@pytest.mark.timeout(900)
def test_fuzz_damaged_counts_folders(base_counts, fuzz_budget):
    from aumann.data.bluesky.counts import RawCounts

    @fuzz_target(examples=20, which=st.lists(st.sampled_from(["counts.json", "users.parquet", "daily.parquet",
                                                              "follows.parquet"]), min_size=1, max_size=2),
                 edits_json=st.lists(st.tuples(st.sampled_from(["days", "topics", "meta", "format"]),
                                               st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=5),
                                                         st.lists(st.text(max_size=4), max_size=3),
                                                         st.just(["../x"]), st.just({}))), max_size=2),
                 edits_bytes=st.lists(byte_edit, max_size=3))
    def check(which, edits_json, edits_bytes):
        with scratch_dir() as d:
            c = Path(d) / "c"
            shutil.copytree(base_counts, c)
            for name in which:
                _damage(c / name, edits_json, edits_bytes)
            counts, err = typed_or_result(RawCounts.load, c)
            assert err is None or isinstance(err, IngestError) or type(err).__name__ == "UnsafeNameError"
            if counts is not None:
                for topic in counts.topics[:1]:
                    counts.window_panel(topic)

    check(fuzz_budget)


test_fuzz_damaged_counts_folders.fuzz = True
