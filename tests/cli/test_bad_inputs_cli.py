"""Bad input through the command line: exit code 2, one line on stderr naming the offending input, no traceback,
and nothing computed before an unusable ``--out`` is found (issue 10).

Flag values argparse rejects (``--seed -1``, ``--threads -2``, ``--memory-limit banana``, ``--power nan``) name
the flag; everything else is an :class:`~aumann.errors.AumannError` printed as
``aumann: error: <Type>: <message>``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aumann.attribution import Panel
from aumann.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    panel = Panel(np.abs(np.random.default_rng(0).normal(size=(2, 12, 3))), features=["a", "b", "c"])
    good = panel.save(d / "p.npz")
    data = good.read_bytes()
    out = {"d": d, "panel": good}
    noise = np.random.default_rng(11).bytes(300)
    for name, content in {"rand.npz": noise, "empty.npz": b"", "trunc.npz": data[: len(data) // 2],
                          "afile": b"x", "bin.toml": b"\x00\xff\xfe\x81", "bad.toml": b"alpha = [",
                          "inf.toml": b"alpha = inf\n", "nan.toml": b"[study]\npermutations = nan\n",
                          "neg.toml": b"seed = -5\n", "study_inf.toml": b"[study]\npool_fraction = inf\n",
                          "filters_inf.toml": b"[filters]\nmin_account_age_days = inf\n",
                          "ev.jsonl": b'{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","time_us":1775779300000000,'
                                      b'"kind":"identity","identity":{"handle":"x"}}\n'}.items():
        (d / name).write_bytes(content)
        out[name] = d / name
    import gzip

    (d / "ev.jsonl.gz").write_bytes(gzip.compress((d / "ev.jsonl").read_bytes()))
    out["ev.jsonl.gz"] = d / "ev.jsonl.gz"
    (d / "outside.toml").write_bytes(b"min_account_age_days = 3\n[filters]\n")  # a key outside [filters]
    out["outside.toml"] = d / "outside.toml"
    (d / "runs_is_file").mkdir()
    (d / "runs_is_file" / "runs").write_bytes(b"x")  # where finished runs go: a file, found before simulating
    out["big"] = Panel(np.full((2, 5, 3), 1e300)).save(d / "big.npz")
    out["neg"] = Panel(-2 * np.ones((2, 5, 3))).save(d / "neg.npz")
    return out


def _cases(f: dict[str, Path]) -> dict[str, tuple[list[str], str]]:
    d = f["d"]
    att = ["attribute", str(f["panel"]), "--indicator", "heat", "--out", str(d / "o")]
    bp = ["bluesky", "build-panel", str(f["ev.jsonl"]), "--out", str(d / "bp")]
    st = ["bluesky", "study", str(d), "--out", str(d / "st")]
    return {
        "attribute_overflow": (["attribute", str(f["big"]), "--indicator", "heat", "--out", str(d / "o1")],
                               "IndicatorError"),
        "attribute_heat_below_minus_one": (["attribute", str(f["neg"]), "--indicator", "heat", "--out",
                                            str(d / "o2")], "'heat'"),
        "attribute_random_bytes": (["attribute", str(f["rand.npz"]), "--indicator", "heat", "--out", str(d / "o")],
                                   "rand.npz"),
        "attribute_empty_file": (["attribute", str(f["empty.npz"]), "--indicator", "heat", "--out", str(d / "o")],
                                 "empty.npz"),
        "attribute_truncated": (["attribute", str(f["trunc.npz"]), "--indicator", "heat", "--out", str(d / "o")],
                                "trunc.npz"),
        "attribute_directory_as_panel": (["attribute", str(d), "--indicator", "heat", "--out", str(d / "o")],
                                         "directory"),
        "attribute_out_is_file": ([*att[:-1], str(f["afile"])], "afile"),
        "attribute_out_under_file": ([*att[:-1], str(f["afile"] / "x")], "afile"),
        "attribute_steps_zero": ([*att, "--steps", "0"], "--steps"),
        "attribute_steps_fraction": ([*att, "--steps", "2.5"], "--steps"),
        "attribute_power_inf": ([*att, "--power", "inf"], "--power"),
        "attribute_power_nan": ([*att, "--power", "nan"], "--power"),
        "attribute_tol_nan": ([*att, "--tol", "nan"], "--tol"),
        "attribute_baseline_unknown": ([*att, "--baseline", "xyz"], "xyz"),
        "demo_seed_negative": (["demo", "--seed", "-1"], "--seed"),
        "demo_agents_zero": (["demo", "--agents", "0"], "--agents"),
        "demo_agents_beyond_memory": (["demo", "--agents", "1e8", "--steps", "1e6"], "MemoryError"),
        "demo_out_is_file": (["demo", "--agents", "100", "--steps", "2", "--out", str(f["afile"])], "afile"),
        "run_seed_negative": (["run", "social-llm", "--seed", "-1"], "--seed"),
        "run_runs_zero": (["run", "social-llm", "--runs", "0"], "--runs"),
        "run_permutations_one": (["run", "social-llm", "--permutations", "1"], "--permutations"),
        "run_max_calls_negative": (["run", "social-llm", "--max-calls", "-1"], "--max-calls"),
        "run_agents_one": (["run", "social-llm", "--agents", "1", "--out", str(d / "r")], "agents"),
        "run_set_alpha_inf": (["run", "social-llm", "--set", "alpha=inf", "--out", str(d / "r")], "alpha"),
        "run_set_alpha_nan": (["run", "social-llm", "--set", "alpha=nan", "--out", str(d / "r")], "alpha"),
        "run_set_seed_bool": (["run", "social-llm", "--set", "seed=true", "--out", str(d / "r")], "seed"),
        "run_set_seed_negative": (["run", "social-llm", "--set", "seed=-3", "--out", str(d / "r")], "seed"),
        "run_set_ragged_weights": (["run", "econagent", "--set", "indicator.weights=[1,[2]]", "--out",
                                    str(d / "r")], "indicator.weights"),
        "run_set_weights_inf": (["run", "econagent", "--set", "indicator.weights=[1,2,3,4,inf]", "--out",
                                 str(d / "r")], "indicator.weights"),
        "run_config_binary": (["run", "social-llm", "--config", str(f["bin.toml"]), "--out", str(d / "r")],
                              "bin.toml"),
        "run_config_malformed": (["run", "social-llm", "--config", str(f["bad.toml"]), "--out", str(d / "r")],
                                 "bad.toml"),
        "run_config_inf": (["run", "social-llm", "--config", str(f["inf.toml"]), "--out", str(d / "r")], "alpha"),
        "run_config_nan": (["run", "social-llm", "--config", str(f["nan.toml"]), "--out", str(d / "r")],
                           "study.permutations"),
        "run_config_negative_seed": (["run", "social-llm", "--config", str(f["neg.toml"]), "--out", str(d / "r")],
                                     "seed"),
        "run_out_is_file": (["run", "social-llm", "--out", str(f["afile"])], "afile"),
        "run_out_under_file": (["run", "social-llm", "--out", str(f["afile"] / "x")], "afile"),
        "synth_seed_negative": (["bluesky", "synth", "--seed", "-1", "--out", str(d / "s")], "--seed"),
        "synth_users_too_few": (["bluesky", "synth", "--users", "5", "--out", str(d / "s")], "--users"),
        "synth_days_zero": (["bluesky", "synth", "--days", "0", "--out", str(d / "s")], "--days"),
        "synth_out_is_file": (["bluesky", "synth", "--users", "300", "--days", "2", "--out", str(f["afile"])],
                              "afile"),
        "study_seeds_negative": ([*st, "--seeds", "-1"], "--seeds"),
        "study_sizes_zero": ([*st, "--sizes", "0"], "--sizes"),
        "study_sizes_overflow": ([*st, "--sizes", "1e400"], "--sizes"),
        "study_topic_escape": ([*st, "--topics", "../x"], "../x"),
        "study_config_binary": ([*st, "--config", str(f["bin.toml"])], "bin.toml"),
        "study_config_inf": ([*st, "--config", str(f["study_inf.toml"])], "pool_fraction"),
        "study_counts_missing": (["bluesky", "study", str(d / "nope"), "--out", str(d / "st")], "nope"),
        "build_threads_negative": ([*bp, "--threads", "-2"], "--threads"),
        "build_memory_banana": ([*bp, "--memory-limit", "banana"], "--memory-limit"),
        "build_days_typo": ([*bp, "--days", "2026-04-10:2206-04-10"], "2206-04-10"),
        "build_days_one_date": ([*bp, "--days", "2026-04-10"], "--days"),
        "build_out_is_file": ([*bp[:-1], str(f["afile"])], "afile"),
        "build_random_bytes": (["bluesky", "build-panel", str(f["rand.npz"]), "--out", str(d / "bp")], "rand.npz"),
        "build_profiles_binary": ([*bp, "--profiles", str(f["bin.toml"])], "bin.toml"),
        "build_filters_binary": ([*bp, "--filters", str(f["bin.toml"])], "bin.toml"),
        "build_filters_inf": ([*bp, "--filters", str(f["filters_inf.toml"])], "min_account_age_days"),
        "build_dictionary_missing": ([*bp, "--zstd-dictionary", str(d / "nodict")], "nodict"),
        "capture_duration_negative": (["bluesky", "capture", "--out", str(d / "cap"), "--duration", "-1"],
                                      "--duration"),
        "capture_rewind_nan": (["bluesky", "capture", "--out", str(d / "cap"), "--rewind", "nan"], "--rewind"),
        "capture_cursor_negative": (["bluesky", "capture", "--out", str(d / "cap"), "--cursor", "-5"], "--cursor"),
        # found by probing every subcommand beyond the list
        "attribute_out_empty": ([*att[:-1], ""], "--out"),  # an unset shell variable: would write into the cwd
        "attribute_panel_empty_path": (["attribute", "", "--indicator", "heat", "--out", str(d / "o")], "panel"),
        "attribute_steps_beyond_the_rule": ([*att, "--method", "path", "--steps", "5000"], "steps"),
        "report_dir_empty": (["report", " "], "RUN_DIR"),
        "demo_agents_beyond_any_array": (["demo", "--agents", "1e20"], "--agents"),  # capped by the flag (issue 22)
        "demo_out_empty": (["demo", "--out", ""], "--out"),
        "run_agents_beyond_reach": (["run", "midscale-social", "--agents", "1e12", "--out", str(d / "r")], "agents"),
        "run_steps_beyond_reach": (["run", "econagent", "--steps", "1e7", "--out", str(d / "r")], "steps"),
        "run_runs_beyond_reach": (["run", "social-llm", "--runs", "1e9", "--out", str(d / "r")], "runs"),
        "run_permutations_beyond_reach": (["run", "social-llm", "--permutations", "1e9", "--out", str(d / "r")],
                                          "permutations"),
        "run_quadrature_beyond_the_rule": (["run", "social-llm", "--set", "study.quadrature_steps=5000", "--out",
                                            str(d / "r")], "quadrature_steps"),
        "run_runs_folder_is_a_file": (["run", "social-llm", "--agents", "4", "--steps", "3", "--out",
                                       str(d / "runs_is_file")], "runs"),
        "run_config_empty_path": (["run", "social-llm", "--config", "", "--out", str(d / "r")], "--config"),
        "build_gzip_input": (["bluesky", "build-panel", str(f["ev.jsonl.gz"]), "--out", str(d / "bp")], "gzip"),
        "build_same_file_twice": (["bluesky", "build-panel", str(f["ev.jsonl"]), str(f["ev.jsonl"]), "--out",
                                   str(d / "bp")], "twice"),
        "build_filters_key_outside_table": ([*bp, "--filters", str(f["outside.toml"])], "min_account_age_days"),
        "build_memory_beyond_duckdb": ([*bp, "--memory-limit", "100000000TB"], "--memory-limit"),
        "build_out_empty": ([*bp[:-1], ""], "--out"),
        "study_out_empty": ([*st[:-1], ""], "--out"),
    }


CASE_NAMES = sorted(_cases({k: Path("/x") for k in ("d", "panel", "rand.npz", "empty.npz", "trunc.npz", "afile",
                                                    "bin.toml", "bad.toml", "inf.toml", "nan.toml", "neg.toml",
                                                    "study_inf.toml", "filters_inf.toml", "ev.jsonl", "big",
                                                    "neg", "ev.jsonl.gz", "outside.toml")}))


@pytest.mark.parametrize("case", CASE_NAMES, ids=str)
def test_bad_cli_input_exits_2_with_one_line_naming_it(files, capsys, case):
    argv, needle = _cases(files)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err
    last = lines[-1]
    assert needle in last, last
    if last.startswith("aumann: error:"):  # an AumannError: exactly one line (beside a progress bar's record)
        assert [ln for ln in lines if "error" in ln or "Error" in ln] == [last], err
    else:  # argparse: its usage line, then one error line naming the flag
        assert " error: argument " in last or " error: " in last


def test_debug_flag_shows_the_traceback(files):
    from aumann.errors import PanelError

    with pytest.raises(PanelError):
        main(["--debug", "attribute", str(files["rand.npz"]), "--indicator", "heat", "--out", str(files["d"] / "o")])


def test_out_is_checked_before_the_simulation_runs(files, capsys, monkeypatch):
    import aumann.studies.faithfulness as faithfulness

    def never(*a, **k):
        raise AssertionError("the study ran before --out was checked")

    monkeypatch.setattr(faithfulness, "run_study", never)
    assert main(["run", "midscale-social", "--out", str(files["afile"] / "x")]) == 2
    assert "afile" in capsys.readouterr().err


def test_summary_json_of_attribute_is_strict_json(files, tmp_path):
    assert main(["attribute", str(files["panel"]), "--indicator", "var", "--out", str(tmp_path)]) == 0
    json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))


def test_demo_on_a_tiny_panel_without_activity_does_not_crash(tmp_path, capsys):
    # 10 agents: no "top" tier, and heat's Δv can be 0 — shown as "–", stored as null, never a KeyError
    assert main(["demo", "--agents", "10", "--steps", "1", "--seed", "0", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))["rows"]
    assert len(rows) == 5 and all("top" not in r["shares"] for r in rows)


@pytest.mark.parametrize(("flag", "value", "bounds"), [
    ("--agents", "0", "[2, 1e+07]"), ("--agents", "1", "[2, 1e+07]"), ("--agents", "2e7", "[2, 1e+07]"),
    ("--steps", "0", "[2, 1e+06]"), ("--runs", "0", "[1, 100000]"), ("--runs", "1e6", "[1, 100000]"),
])
def test_size_flags_name_the_sizes_a_scenario_takes(capsys, flag, value, bounds):
    # `aumann run midscale-social --agents 0` said "must be an integer in [1, 9.22337e+18]": 1 and the int64 bound,
    # while every scenario takes 2 to 10,000,000 agents (and --agents 1 passed the flag, to fail in the config)
    assert main(["run", "midscale-social", flag, value]) == 2
    last = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()][-1]
    shown = f"{int(float(value))}"  # (the value read exactly: 2e7 is shown as 20000000)
    assert flag in last and f"must be an integer in {bounds}; got {shown}" in last and "e+18" not in last, last


@pytest.mark.parametrize("flags", [["--executor", "ray"], ["--ray-address", "127.0.0.1:6378"],
                                   ["--workers", "2", "--executor", "ray"]])
def test_ray_not_installed_is_said_before_the_run_directory_is_made(tmp_path, capsys, monkeypatch, flags):
    # on a plain `pip install aumann`, `aumann run midscale-social --ray-address ...` said which extra to install, but
    # only once the executor was built: after the run directory was made, which stayed behind, empty
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when it is not installed
    out = tmp_path / "run"
    assert main(["run", "midscale-social", "--agents", "20", "--runs", "1", *flags, "--out", str(out)]) == 2
    last = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()][-1]
    assert "ExecutorError" in last and "pip install 'aumann[ray]'" in last, last
    assert not out.exists()


def test_size_flag_bounds_are_the_configs():
    from aumann.cli.run import SIZE_BOUNDS
    from aumann.scenarios.base import _MIN_SIZES, MAX_SIZES

    assert {k: (_MIN_SIZES[k], MAX_SIZES[k]) for k in SIZE_BOUNDS} == SIZE_BOUNDS


def test_permutations_beyond_the_cap_names_the_real_cap(capsys):
    # the flag's message quoted the int64 bound (9.22337e+18) while study.permutations stops at 10^7
    assert main(["run", "social-llm", "--permutations", "1e20"]) == 2
    last = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()][-1]
    assert "--permutations" in last and ("1e+07" in last or "10000000" in last) and "e+18" not in last, last
    from aumann.cli.run import MAX_PERMUTATIONS
    from aumann.scenarios.base import StudyConfig

    caps = [m.le for m in StudyConfig.model_fields["permutations"].metadata if type(m).__name__ == "Le"]
    assert caps == [MAX_PERMUTATIONS]
