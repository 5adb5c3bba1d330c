"""``aumann run``: settings nothing in the run reads are warned of and recorded (``aumann.cli.unused_flags``).

LLM request settings given through ``--set llm.KEY=...`` or a ``--config`` file's ``[llm]`` table with the offline
backend, and ``--assumed-latency`` without ``--dry-run``, were dropped without a word; the sampling flags were
already warned of (``tests/cli/test_run_cli.py``)."""

from __future__ import annotations

import json
import warnings

import pytest

from aumann.errors import UnusedArgumentWarning

BASE = ["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "4",
        "--no-ablations", "--no-plots", "--judge", "off"]


def _args(*argv: str):
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "midscale-social", *argv])
    llm_options.check_arguments(args)
    return args


def _manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("argv", "named", "shown"), [
    (["--set", "llm.temperature=0.7"], ["--set llm.temperature"], "--set llm.temperature=0.7"),
    (["--set", "llm={top_p = 0.9, seed = 3}"], ["--set llm.top_p", "--set llm.seed"],
     "--set llm.top_p=0.9, --set llm.seed=3"),
    (["--set", 'llm.system_prompt="be brief"'], ["--set llm.system_prompt"], "--set llm.system_prompt"),
    (["--llm-seed", "4", "--set", "llm.max_tokens=64"], ["--llm-seed", "--set llm.max_tokens"],
     "--llm-seed 4, --set llm.max_tokens=64"),
])
def test_llm_keys_given_by_set_with_the_offline_backend_are_warned_of(argv, named, shown):
    """`aumann run midscale-social --set llm.temperature=0.7` ran the offline policy without a word, where
    `--temperature 0.7` was warned of: the same warning now names the --set key (its value; never the prompt's text)."""
    from aumann.cli.unused_flags import unused_llm_settings

    args = _args(*argv)
    with pytest.warns(UnusedArgumentWarning) as got:
        assert unused_llm_settings(args) == named
    text = str(got[0].message)
    assert text.startswith(f"{shown} given but unused: ") and "offline policy" in text and "--backend openai" in text
    assert "be brief" not in text


def test_llm_keys_not_read_offline_stay_quiet():
    """An LLM backend reads them; llm.max_invalid_rate is read offline too; other --set keys are not LLM settings."""
    from aumann.cli.unused_flags import unused_llm_settings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for argv in (["--backend", "openai", "--model", "m", "--set", "llm.temperature=0.7"],
                     ["--set", "llm.max_invalid_rate=0.5"], ["--set", "study.permutations=8"], []):
            assert unused_llm_settings(_args(*argv)) == [], argv


def test_llm_keys_in_the_config_file_are_warned_of_and_recorded(tmp_path, capsys):
    """A --config file's [llm] table under the offline backend: named in the warning (with the file) and in
    manifest.json's unused_flags, after the flags; the keys it sets beyond [llm] are not named."""
    from aumann.cli import main

    cfg = tmp_path / "llm.toml"
    cfg.write_text("steps = 2\n[llm]\ntemperature = 0.7\nseed = 3\nmax_invalid_rate = 0.5\n", encoding="utf-8")
    capsys.readouterr()
    assert main([*BASE, "--config", str(cfg), "--top-p", "0.9", "--out", str(tmp_path / "a")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"aumann: warning: --top-p 0.9, llm.temperature = 0.7, llm.seed = 3 in --config {cfg} given but unused"
            in err)
    manifest = _manifest(tmp_path / "a")
    assert manifest["unused_flags"] == ["--top-p", "--config llm.temperature", "--config llm.seed"]
    assert manifest["config"]["llm"]["temperature"] == 0.7 and manifest["config"]["llm"]["top_p"] == 0.9


def test_llm_keys_of_the_packaged_defaults_are_not_warned_of(tmp_path, capsys, monkeypatch):
    """A scenario's packaged config is nobody's choice: an [llm] table there (none of the built-ins has one; a
    scenario's own may) is read into the config, and the run says nothing of it."""
    from aumann import configs
    from aumann.cli import main

    packaged = configs.path("midscale-social.toml")
    ours = tmp_path / "midscale-social.toml"
    ours.write_text(packaged.read_text(encoding="utf-8") + "\n[llm]\ntemperature = 0.3\n", encoding="utf-8")
    real = configs.path
    monkeypatch.setattr(configs, "path", lambda name: ours if name == "midscale-social.toml" else real(name))
    capsys.readouterr()
    assert main([*BASE, "--out", str(tmp_path / "a")]) == 0
    assert "given but unused" not in capsys.readouterr().err
    manifest = _manifest(tmp_path / "a")
    assert manifest["config"]["llm"]["temperature"] == 0.3 and "unused_flags" not in manifest


def test_set_llm_keys_are_recorded_in_the_manifest(tmp_path, capsys):
    from aumann.cli import main

    capsys.readouterr()
    assert main([*BASE, "--set", "llm.temperature=0.7", "--out", str(tmp_path / "a")]) == 0
    assert "aumann: warning: --set llm.temperature=0.7 given but unused" in " ".join(capsys.readouterr().err.split())
    assert _manifest(tmp_path / "a")["unused_flags"] == ["--set llm.temperature"]


def test_assumed_latency_without_dry_run_is_warned_of_and_recorded(tmp_path, capsys):
    """`aumann run ... --assumed-latency 0.5` (no --dry-run) ran without a word: the flag only sets the dry run's
    time estimate. Warned of (naming it and --dry-run) and recorded, not refused."""
    from aumann.cli import main

    capsys.readouterr()
    assert main([*BASE, "--assumed-latency", "0.5", "--out", str(tmp_path / "a")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "aumann: warning: --assumed-latency 0.5 given but unused: it sets only the seconds per LLM request of " \
           "--dry-run's time estimate" in err
    assert _manifest(tmp_path / "a")["unused_flags"] == ["--assumed-latency"]


def test_assumed_latency_with_dry_run_or_left_out_is_quiet():
    from aumann.cli.unused_flags import unused_dry_run_flags

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry = _args("--backend", "openai", "--model", "m", "--dry-run", "--assumed-latency", "0.5")
        assert unused_dry_run_flags(dry) == [] and dry.assumed_latency == 0.5
        assert unused_dry_run_flags(_args("--backend", "openai", "--model", "m")) == []
        assert unused_dry_run_flags(_args()) == []
    with pytest.warns(UnusedArgumentWarning, match="--assumed-latency 2 given but unused"):
        assert unused_dry_run_flags(_args("--backend", "openai", "--model", "m", "--assumed-latency", "2")) == [
            "--assumed-latency"]


def test_a_dry_run_without_assumed_latency_estimates_at_one_second_a_request(tmp_path, capsys):
    """--assumed-latency has no default value of its own now (so a given one is told from a left-out one): the dry
    run's estimate still assumes 1 s a request when it is left out, and says nothing of unused flags."""
    from aumann.cli import main

    cfg = tmp_path / "tiny.toml"
    cfg.write_text("agents = 6\nsteps = 2\nruns = 1\n[study]\npermutations = 8\nrandom_orderings = 2\n"
                   "path_orders = 2\nquadrature_steps = 8\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["run", "social-llm", "--config", str(cfg), "--backend", "openai", "--model", "m", "--base-url",
                 "http://127.0.0.1:9/v1", "--dry-run", "--out", str(tmp_path / "never")]) == 0  # port 9: nothing
    got = capsys.readouterr()
    assert "and 1 s per request" in got.out and "given but unused" not in got.err
    assert not (tmp_path / "never").exists()


def test_a_registered_backend_whose_factory_returns_none_is_the_offline_policy_for_warning_and_resume(
        tmp_path, capsys, monkeypatch):
    """``register_backend("nothing", lambda options: None)``: the scenario's offline policy decides (the registry's
    contract for None), yet only the label "offline" was tested, so ``--backend nothing --temperature 0.7`` ran
    without a word and hashed the temperature into the resume digest: the run finished without it was computed
    again ("not resuming"). Both now ask one predicate, offline_policy_decides: warned of, recorded, resumed."""
    from aumann.cli import main
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, "nothing",
                        registry.BackendEntry("nothing", lambda options: None, "the offline policy, renamed"))
    assert registry.offline_policy_decides(registry.make_backend("nothing"), "nothing")
    out = tmp_path / "a"
    assert main([*BASE, "--backend", "nothing", "--out", str(out)]) == 0
    record = (out / "runs" / "run-000.json").read_bytes()
    capsys.readouterr()
    assert main([*BASE, "--backend", "nothing", "--temperature", "0.7", "--out", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("aumann: warning: --temperature 0.7 given but unused: the run's decisions come from the offline policy "
            "(--backend nothing, whose factory builds no backend: it returned None)") in err
    assert _manifest(out)["unused_flags"] == ["--temperature"]
    assert "resuming in" in err and "0 run(s) computed, 1 resumed" in err and "removing" not in err
    assert (out / "runs" / "run-000.json").read_bytes() == record
