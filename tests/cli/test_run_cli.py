"""``aumann run``: a tiny config end to end through the command, then a resume."""

from __future__ import annotations

import argparse
import json

import pytest

from aumann.cli import run as run_cmd
from aumann.errors import ConfigError
from tests.cli_run import invoke_run as _invoke

TINY = """
agents = 6
steps = 4
runs = 2
seed = 3
[study]
permutations = 20
random_orderings = 2
path_orders = 2
quadrature_steps = 8
"""


def test_run_writes_the_run_directory_and_resumes(tmp_path, capsys):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert _invoke("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots") == 0
    for name in ("faithfulness.csv", "faithfulness.md", "path_ablation.md", "f_sensitivity.csv",
                 "baseline_ablation.csv", "report.md", "manifest.json", "runs/run-001.json"):
        assert (out / name).is_file(), name
    assert (out / "panels" / "run-000.npz").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["agents"] == 6 and manifest["seeds"]["root"] == 3
    assert manifest["computed_runs"] == 2
    capsys.readouterr()
    assert _invoke("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--runs", "2") == 0
    err = capsys.readouterr().err
    assert "resuming" in err and "0 run(s) computed, 2 resumed" in err.replace("\n", " ")


def test_openai_backend_needs_a_model(tmp_path, monkeypatch):
    monkeypatch.delenv("AUMANN_LLM_MODEL", raising=False)
    with pytest.raises(ConfigError, match="model"):
        _invoke("social-llm", "--backend", "openai", "--out", str(tmp_path), "--runs", "1")


@pytest.mark.parametrize("flags", [["--model", "gpt-4o-mini"], ["--base-url", "http://127.0.0.1:9/v1"],
                                   ["--rpm", "5", "--max-calls", "3"], ["--concurrency", "8"], ["--max-cost", "1"],
                                   ["--llm-timeout", "5"], ["--structured-output", "none"], ["--max-retries", "1"]])
def test_llm_backend_flags_with_the_offline_backend_are_refused(tmp_path, capsys, flags):
    """`aumann run midscale-social --model gpt-4o --rpm 5 --max-calls 3` (no --backend: offline, the default) ran
    the offline policy, exit 0, manifest "backend": "offline": the flags were dropped without a word, where the
    user meant an LLM run. Now a ConfigError names them and says to add --backend openai, before any work."""
    from aumann.cli import main

    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["run", "midscale-social", "--agents", "6", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and flags[0] in err and "--backend openai" in err
    assert not out.exists()


@pytest.mark.parametrize(("flags", "shown"), [
    (["--temperature", "0.7"], "--temperature 0.7"), (["--top-p", "0.9"], "--top-p 0.9"),
    (["--max-tokens", "64"], "--max-tokens 64"), (["--llm-seed", "3"], "--llm-seed 3"),
    (["--system-prompt", "be brief"], "--system-prompt"),
])
def test_llm_sampling_flags_with_the_offline_backend_are_warned_of(flags, shown):
    """The backend's flags (--model, --rpm, ...) are refused with the offline backend; the sampling ones were dropped
    without a word: `aumann run midscale-social --temperature 0.7` ran the offline policy, which sends no request.
    They are warned of (not refused: they were accepted before), naming each flag and why it has no effect."""
    import warnings

    from aumann.cli import build_parser, llm_options
    from aumann.errors import UnusedArgumentWarning

    args = build_parser().parse_args(["run", "midscale-social", *flags])
    llm_options.check_arguments(args)
    with pytest.warns(UnusedArgumentWarning) as got:
        assert llm_options.unused_sampling_flags(args) == [flags[0]]
    text = str(got[0].message)
    assert text.startswith(f"{shown} given but unused: ") and "offline policy" in text and "--backend openai" in text
    assert "be brief" not in text  # the prompt's text is the user's: named, not shown
    with warnings.catch_warnings():  # an LLM backend reads them, and a run without them is told nothing
        warnings.simplefilter("error")
        for argv in (["--backend", "openai", "--model", "m", *flags], [], ["--max-invalid-rate", "0.5"]):
            args = build_parser().parse_args(["run", "midscale-social", *argv])
            llm_options.check_arguments(args)
            assert llm_options.unused_sampling_flags(args) == [], argv


def test_llm_sampling_flags_unused_offline_are_recorded_in_the_manifest(tmp_path, capsys):
    """The command says the warning and manifest.json lists the flags under unused_flags (as `aumann attribute`
    records its unused path-integral flags); the run itself is the offline run it was."""
    from aumann.cli import main

    base = ["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "4",
            "--no-ablations", "--no-plots", "--judge", "off"]
    capsys.readouterr()
    assert main([*base, "--temperature", "0.7", "--llm-seed", "3", "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "aumann: warning: --temperature 0.7, --llm-seed 3 given but unused" in err.replace("\n", " ")
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["unused_flags"] == ["--temperature", "--llm-seed"] and manifest["backend"] == "offline"
    assert main([*base, "--out", str(tmp_path / "b")]) == 0
    assert "given but unused" not in capsys.readouterr().err
    assert "unused_flags" not in json.loads((tmp_path / "b" / "manifest.json").read_text())


def test_llm_sampling_settings_offline_do_not_stop_a_resume(tmp_path, capsys):
    """Adding --temperature to an offline run made its finished runs another config's: "not resuming", every run
    computed afresh and the finished ones removed, for the same outputs (the offline policy sends no request).
    They resume now, and their files stay."""
    from aumann.cli import main

    base = ["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "4",
            "--no-ablations", "--no-plots", "--judge", "off", "--out", str(tmp_path / "a")]
    assert main(base) == 0
    record = (tmp_path / "a" / "runs" / "run-000.json").read_bytes()
    capsys.readouterr()
    assert main([*base, "--temperature", "0.7", "--set", "llm.seed=3"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "resuming in" in err and "0 run(s) computed, 1 resumed" in err and "removing" not in err
    assert (tmp_path / "a" / "runs" / "run-000.json").read_bytes() == record


def test_reference_estimator_cv_on_the_resimulation_game_is_refused(tmp_path, capsys):
    """On reference_game = "resimulation" the reference is plain sampled Shapley whatever reference_estimator says
    (reference_row): `--reference-game resimulation --reference-estimator sampled_shapley_cv` ran the study, exit 0,
    with plain sampling as the reference and the flag unread. Now a ConfigError says so before any work."""
    from aumann.cli import main

    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "8",
                 "--no-ablations", "--no-plots", "--judge", "off", "--reference-game", "resimulation",
                 "--reference-estimator", "sampled_shapley_cv", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and "--reference-estimator sampled_shapley_cv" in err and "masking" in err
    assert not out.exists()


def test_run_is_registered_as_a_command():
    import aumann.cli as cli

    assert "aumann.cli.run" in cli._COMMAND_MODULES


def test_unknown_scenario_is_a_clear_error_through_the_main_cli(capsys):
    from aumann.cli import main

    assert main(["run", "no-such-scenario"]) == 2
    err = capsys.readouterr().err
    assert "UnknownScenarioError" in err and "social-llm" in err


def test_resimulation_reference_flag_and_judge_option(tmp_path):
    import csv

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY.replace("runs = 2", "runs = 1").replace("permutations = 20", "permutations = 4"))
    out = tmp_path / "out"
    assert _invoke("midscale-social", "--config", str(cfg), "--out", str(out), "--no-plots", "--no-ablations",
                   "--resimulation-reference", "--judge", "off") == 0
    with open(out / "faithfulness.csv", newline="") as fh:
        methods = [r["method"] for r in csv.DictReader(fh)]
    assert methods == ["aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out",
                       "action_aumann_shapley", "sampled_shapley_resimulation", "random"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["study"]["resimulation_reference"] is True
    assert (out / "resimulation_agreement.csv").is_file() and (out / "action_attribution.csv").is_file()


def test_strict_flag_reaches_the_study(monkeypatch, tmp_path):
    from aumann.studies import faithfulness

    seen = {}

    class Stop(Exception):
        pass

    def fake_run_study(sc, config, **kw):
        seen["strict"] = config.study.strict
        raise Stop

    monkeypatch.setattr(faithfulness, "run_study", fake_run_study)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    for argv, want in ((["--strict"], True), ([], False)):
        args = parser.parse_args(["run", "midscale-social", "--agents", "10", "--out", str(tmp_path / str(want)),
                                  *argv])
        with pytest.raises(Stop):
            args.func(args)
        assert seen["strict"] is want


def test_reference_estimator_flag_reaches_the_study(monkeypatch, tmp_path):
    from aumann.studies import faithfulness

    seen = {}

    class Stop(Exception):
        pass

    def fake_run_study(sc, config, **kw):
        seen["reference_estimator"] = config.study.reference_estimator
        raise Stop

    monkeypatch.setattr(faithfulness, "run_study", fake_run_study)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    for argv, want in ((["--reference-estimator", "sampled_shapley"], "sampled_shapley"),
                       ([], "sampled_shapley_cv")):
        args = parser.parse_args(["run", "midscale-social", "--agents", "10", "--out", str(tmp_path / want), *argv])
        with pytest.raises(Stop):
            args.func(args)
        assert seen["reference_estimator"] == want
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "midscale-social", "--reference-estimator", "leave_one_out"])


def test_the_manifest_records_the_whole_command_after_top_level_options(tmp_path, monkeypatch):
    """`aumann --debug run social-llm --config ... --runs 1` was recorded as `aumann run social-llm`: the manifest and
    both reports showed a command that does not reproduce the run."""
    import sys

    from aumann.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    argv = ["run", "social-llm", "--config", str(cfg), "--runs", "1", "--out", str(out), "--no-plots", "--static"]
    monkeypatch.setattr(sys, "argv", ["aumann", "--debug", *argv])
    assert main(["--debug", *argv]) == 0
    assert json.loads((out / "manifest.json").read_text())["command"] == "aumann " + " ".join(argv)
    assert f"`aumann {' '.join(argv)}`" in (out / "report.md").read_text()


def test_the_recorded_command_is_shell_quoted(tmp_path, monkeypatch):
    """The manifest joined the words with spaces: an --out or --config path with a space or a quote could not be run
    again by copy and paste (the shell split it, or stopped at the quote)."""
    import shlex
    import sys

    from aumann.cli import main

    cfg = tmp_path / "it's tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "my out"
    argv = ["run", "social-llm", "--config", str(cfg), "--runs", "1", "--out", str(out), "--no-plots", "--static"]
    monkeypatch.setattr(sys, "argv", ["aumann", *argv])
    assert main(argv) == 0
    command = json.loads((out / "manifest.json").read_text())["command"]
    assert shlex.split(command) == ["aumann", *argv]
    assert f"`{command}`" in (out / "report.md").read_text()


def test_the_resume_message_says_whether_anything_is_resumed(tmp_path, capsys):
    """`resuming in OUT: 1 finished run file(s) found` was printed when the run directory held a run of another config
    (here another seed), though nothing was read back and every run was computed afresh."""
    from aumann.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"

    def run(seed):
        argv = ["run", "social-llm", "--config", str(cfg), "--runs", "1", "--seed", str(seed), "--out", str(out),
                "--no-plots", "--static", "--no-ablations"]
        capsys.readouterr()
        assert main(argv) == 0
        return " ".join(capsys.readouterr().err.split())

    first = run(3)
    assert "resuming" not in first
    other = run(4)
    assert "resuming" not in other.replace("not resuming", "")
    assert "not resuming: none of the 1 run record(s)" in other and "0 resumed" in other
    # and the earlier seed's run is removed, said so, not left beside this one's
    assert "removing: 1 run(s) of another config" in other and "run-000" in other
    same = run(4)
    assert "resuming in" in same and "1 of 1 run(s) were finished with this config" in same and "1 resumed" in same


def test_report_top_beyond_the_agents_says_all_are_shown(tmp_path):
    """aumann report --top 1000 on runs of 6 and 12 agents showed them all with no word that --top asked for more
    (the flag takes 1 … 10⁷; a top beyond the agents is clamped to them)."""
    from aumann.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    run, demo = tmp_path / "run", tmp_path / "demo"
    assert main(["run", "social-llm", "--config", str(cfg), "--runs", "1", "--out", str(run), "--no-plots",
                 "--static", "--no-ablations"]) == 0
    assert main(["demo", "--agents", "12", "--steps", "2", "--out", str(demo), "--static"]) == 0
    for d, n in ((run, 6), (demo, 12)):
        assert main(["report", str(d), "--top", "1000", "--static", "--no-plots"]) == 0
        assert f"the run has {n}, so all {n} are shown" in (d / "report.md").read_text()
        assert main(["report", str(d), "--top", str(n), "--static", "--no-plots"]) == 0
        assert "are shown" not in (d / "report.md").read_text()
    assert main(["report", str(run), "--top", "-5"]) == 2 and main(["report", str(run), "--top", "0"]) == 2


def test_rerun_removes_only_the_tables_an_earlier_run_recorded(tmp_path, capsys):
    """write_tables removed an optional table this study has no rows for by name alone: a file of your own called
    judge_overlap.csv in --out was deleted (in a fresh folder too). Now only the earlier run's own file (its name and
    SHA-256 in that run's manifest) goes; yours is kept and the run says so before it could pass for this run's."""
    from aumann.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    out.mkdir()
    (out / "judge_overlap.csv").write_text("my,own\n1,2\n")

    def run(*flags):
        return main(["run", "social-llm", "--config", str(cfg), "--runs", "1", "--out", str(out), "--no-plots",
                     "--static", "--no-ablations", *flags])

    capsys.readouterr()
    assert run("--judge", "off") == 2
    assert "judge_overlap.csv" in capsys.readouterr().err
    assert (out / "judge_overlap.csv").read_text() == "my,own\n1,2\n"
    (out / "judge_overlap.csv").unlink()
    assert run() == 0 and (out / "judge_overlap.csv").is_file()  # the judge's table, recorded as this run's
    assert "judge_overlap.csv" in json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert run("--judge", "off") == 0  # the earlier run's own table: never shown as this run's
    assert not (out / "judge_overlap.csv").exists() and not (out / "judge_overlap.md").exists()


def test_report_lists_at_most_a_thousand_agents_and_says_so(tmp_path):
    """aumann report --top 1000000 on a run of many agents listed every one of them in the who-table and the heatmap:
    8.8 MB of HTML at 20,000 agents (hundreds of MB at 10⁶, a page no browser opens). A page now lists at most
    PAGE_TOP_MAX = 1,000 and says so (as --top beyond the agents already did); the .npz keeps every agent."""
    from aumann.cli import main

    out, cap = tmp_path / "demo", 1000  # aumann.studies.sections.PAGE_TOP_MAX
    assert main(["demo", "--agents", "1500", "--steps", "2", "--out", str(out), "--static"]) == 0
    for top, rows, says in ((1_000_000, cap, "a page lists at most 1,000"), (1500, cap,
                            "the top 1,000 of the run's 1,500 are shown"), (999, 999, None)):
        assert main(["report", str(out), "--top", str(top), "--static", "--no-plots"]) == 0
        html = (out / "report.html").read_text()
        at = html.index('id="who-run-000"')
        assert html[at:html.index("</table>", at)].count("<tr") == rows + 1, top  # the header and the rows
        md = (out / "report.md").read_text()
        assert (says in md) if says else "Asked for the top" not in md, top
