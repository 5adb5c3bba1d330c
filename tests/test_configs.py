"""Packaged defaults and how user configs layer over them (``--config``, ``--set``, ``--agents``)."""

from __future__ import annotations

import json
import traceback

import pytest

from aumann import configs, scenarios
from aumann.errors import ConfigError


def test_packaged_defaults_are_package_data():
    for name in ("social-llm.toml", "midscale-social.toml", "econagent.toml", "bluesky-ingest.toml",
                 "bluesky-study.toml"):
        assert configs.path(name).is_file(), name
    topics = sorted(p.name for p in configs.path("topics").glob("*.toml"))
    assert "mythos.toml" in topics and len(topics) == 5
    with pytest.raises(ConfigError, match=r"no packaged config 'nope\.toml'"):
        configs.path("nope.toml")


def test_deep_merge_changes_only_the_keys_given():
    base = {"agents": 10, "study": {"permutations": 1000, "k_del": 5}, "tags": [1, 2]}
    out = configs.deep_merge(base, {"study": {"permutations": 50}, "tags": [3]})
    assert out == {"agents": 10, "study": {"permutations": 50, "k_del": 5}, "tags": [3]}
    assert base["study"]["permutations"] == 1000  # the defaults are not mutated


@pytest.mark.parametrize(("text", "expected"), [
    ("agents=200", {"agents": 200}),
    ("study.permutations=200", {"study": {"permutations": 200}}),
    ("interaction=synchronous", {"interaction": "synchronous"}),
    ("study.ablations=false", {"study": {"ablations": False}}),
    ('name="a b"', {"name": "a b"}),
    ("x=0.25", {"x": 0.25}),
])
def test_assignments_parse_toml_literals_or_strings(text, expected):
    assert configs.parse_assignment(text) == expected


@pytest.mark.parametrize("bad", ["agents", "=3", "study..k=1", ".x=1"])
def test_malformed_assignments_are_config_errors_naming_the_input(bad):
    with pytest.raises(ConfigError, match="KEY=VALUE") as err:
        configs.parse_assignment(bad)
    assert repr(bad) in str(err.value)


def test_a_user_file_overrides_only_what_it_sets(tmp_path):
    sc = scenarios.get("social-llm")
    default = sc.load_config()
    user = tmp_path / "user.toml"
    user.write_text("[study]\npermutations = 7\n")
    cfg = sc.load_config(user)
    assert cfg.study.permutations == 7
    assert cfg.agents == default.agents and cfg.steps == default.steps  # kept from the packaged defaults
    assert cfg.study.quadrature_steps == default.study.quadrature_steps


def test_set_and_shortcuts_layer_last(tmp_path):
    sc = scenarios.get("social-llm")
    user = tmp_path / "user.toml"
    user.write_text("agents = 9\n")
    cfg = sc.load_config(user, agents=None, steps=5, assignments=["study.permutations=11", "agents=7"])
    assert (cfg.agents, cfg.steps, cfg.study.permutations) == (7, 5, 11)


def test_unknown_keys_and_bad_values_name_the_key(tmp_path):
    sc = scenarios.get("social-llm")
    with pytest.raises(ConfigError, match="no_such_key"):
        sc.load_config(assignments=["no_such_key=1"])
    with pytest.raises(ConfigError, match="permutations"):
        sc.load_config(assignments=["study.permutations=-3"])


@pytest.mark.parametrize(("config", "assignments", "key"), [
    # a Ray runtime environment's env_vars outside [execution] (extra key): the whole table was printed
    ('[ray_runtime_env.env_vars]\nHF_TOKEN = "hf_SECRET1234567890"\n', [], "ray_runtime_env"),
    # inside [execution] but with a value JSON cannot carry: the validator's error printed the table
    ('[execution.ray_runtime_env.env_vars]\nWANDB_API_KEY = "SECRETwandb1234567"\n'
     '[execution.ray_runtime_env.conda]\nx = nan\n', [], "execution.ray_runtime_env"),
    # a key where the config has none (keys are read from the environment): the value was printed
    ('[llm]\napi_key = "SECRETllmkey123456"\n', [], "llm.api_key"),
    ("", ['llm.api_key="SECRETset123456789"'], "llm.api_key"),
    ("", ['study.base_url="http://bob:SECRETpw12345@host/v1"'], "study.base_url"),
])
def test_a_config_error_never_shows_a_secret_it_was_given(tmp_path, config, assignments, key):
    user = tmp_path / "user.toml"
    user.write_text(config)
    with pytest.raises(ConfigError) as err:
        scenarios.get("social-llm").load_config(user, assignments=assignments)
    assert key in str(err.value)  # the error still names the key ...
    assert "SECRET" not in str(err.value)  # ... but not the secret under it
    # nor does the traceback `aumann --debug` prints: pydantic's chained ValidationError showed input_value=...
    assert "SECRET" not in "".join(traceback.format_exception(err.value))


def test_a_malformed_set_does_not_echo_a_secret_named_value():
    with pytest.raises(ConfigError, match=r"got 'execution\.\.HF_TOKEN=\*\*\*'"):
        configs.parse_assignment("execution..HF_TOKEN=hf_SECRET1234567890")
    with pytest.raises(ConfigError, match=r"got 'study\.\.permutations=20'"):  # a plain value is still shown
        configs.parse_assignment("study..permutations=20")


def test_a_config_error_still_shows_the_offending_plain_value():
    with pytest.raises(ConfigError, match=r"agents: .* \(got 1\)"):
        scenarios.get("social-llm").load_config(assignments=["agents=1"])
    with pytest.raises(ConfigError, match=r"\(got \{'conda': \{'x': nan\}\}\)"):
        scenarios.get("social-llm").load_config(assignments=["execution.ray_runtime_env.conda.x=nan"])


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00binary", b"agents = = 3\n"])
def test_binary_or_malformed_toml_is_a_config_error_naming_the_file(tmp_path, content):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        scenarios.get("social-llm").load_config(bad)
    assert "bad.toml" in str(err.value)


def test_cli_set_and_agents_reach_the_manifest(tmp_path):
    from aumann.cli import main

    out = tmp_path / "run"
    rc = main(["run", "social-llm", "--runs", "1", "--agents", "6", "--steps", "4", "--no-plots", "--no-ablations",
               "--set", "study.permutations=12", "--set", "study.random_orderings=2", "--set", "seed=5",
               "--out", str(out)])
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    cfg = manifest["config"]
    assert (cfg["agents"], cfg["steps"], cfg["seed"], cfg["study"]["permutations"]) == (6, 4, 5, 12)
    assert cfg["study"]["random_orderings"] == 2 and cfg["study"]["ablations"] is False
    # the merged config holds the packaged defaults for everything not set
    default = scenarios.get("social-llm").load_config()
    assert cfg["study"]["quadrature_steps"] == default.study.quadrature_steps


@pytest.mark.parametrize("value, shown", [('"1000"', "'1000'"), ("0o17", "'0o17'"), ("0x10", "'0x10'"),
                                          ("0b11", "'0b11'"), ("1.5", "1.5"), ("1e-3", "0.001"), ("1e400", "inf"),
                                          ("true", "True")])
def test_an_int_key_takes_decimal_integers_only(value, shown):
    """--set study.permutations="1000" / 0o17 went through as 1000, 15 (pydantic's lax int and TOML's other bases):
    a quoted or mistyped number ran a study of another size without a word."""
    sc = scenarios.get("social-llm")
    with pytest.raises(ConfigError) as err:
        sc.load_config(None, assignments=[f"study.permutations={value}"])
    msg = str(err.value)
    assert "study.permutations" in msg and f"(got {shown})" in msg
    assert ("a number, not a boolean" if value == "true" else "expected an integer") in msg
    assert "Traceback" not in msg and "\n" not in msg


@pytest.mark.parametrize("value, want", [("1e3", 1000), ("1000.0", 1000), ("1_000.0", 1000), ("2E+2", 200),
                                         ("9.007199254740993e15", 9007199254740993)])
def test_an_int_key_takes_float_notation_of_an_exact_integer_as_the_integer_flags_do(value, want):
    """`aumann run --permutations 1e3` was accepted (the integer flags read float notation exactly) while
    `--set study.permutations=1e3` was refused: one rule now, every digit kept (not the float's ...992)."""
    from aumann.cli.args import integer

    sc = scenarios.get("social-llm")
    got = sc.load_config(None, assignments=[f"study.permutations={value}"]).study.permutations if want < 10**7 \
        else sc.load_config(None, assignments=[f"seed={value}"]).seed  # (past the cap of permutations: a seed)
    assert got == want and type(got) is int
    assert integer()(value) == want  # the flag's reading: the same integer


def test_float_notation_is_the_integer_to_a_top_level_int_key_and_the_float_to_a_float_key():
    sc = scenarios.get("social-llm")
    cfg = sc.load_config(None, assignments=["steps=1e1", "step_timeout=1e1"])
    assert (cfg.steps, cfg.step_timeout) == (10, 10.0) and type(cfg.steps) is int and type(cfg.step_timeout) is float


@pytest.mark.parametrize("literal", ["1e3", "1000.0"])
def test_a_config_file_takes_toml_integers_only_and_its_error_says_what_to_write(tmp_path, literal):
    """One rule, stated where it bites: --set and the integer flags read text, so `1e3` written there is 1000; a
    --config file is TOML, which has integers of its own, so `permutations = 1e3` there is a float and refused. The
    refusal said "plain decimal digits ... not a float" and nothing of the other two; it now says what to write and
    why the file differs from --set."""
    from aumann.cli.args import integer

    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(f"[study]\npermutations = {literal}\n", encoding="utf-8")
    sc = scenarios.get("social-llm")
    with pytest.raises(ConfigError) as err:
        sc.load_config(cfg_file)
    msg = str(err.value)
    assert "study.permutations" in msg and "write 1000" in msg and "--config" in msg and "TOML float" in msg, msg
    assert "--set" in msg and "\n" not in msg
    # the same number, written the way each place takes it, is the same config
    cfg_file.write_text("[study]\npermutations = 1000\n", encoding="utf-8")
    by_file = sc.load_config(cfg_file).study.permutations
    by_set = sc.load_config(None, assignments=[f"study.permutations={literal}"]).study.permutations
    assert by_file == by_set == integer()(literal) == 1000


def test_an_int_key_refusing_a_fraction_names_every_form_it_takes():
    """--set study.permutations=1.5 was told "plain decimal digits" although --set takes 1e3 too; the integer flags'
    refusal named no form at all."""
    import argparse

    from aumann.cli.args import integer

    sc = scenarios.get("social-llm")
    with pytest.raises(ConfigError) as err:
        sc.load_config(None, assignments=["study.permutations=1.5"])
    msg = str(err.value)
    assert "1_000" in msg and "1e3" in msg and "--config" in msg and "plain decimal digits" not in msg, msg
    with pytest.raises(argparse.ArgumentTypeError) as flag_err:
        integer(2)("1.5")
    assert "got 1.5" in str(flag_err.value) and "1e3" in str(flag_err.value)


def test_an_int_key_takes_decimal_digits_with_underscores():
    sc = scenarios.get("social-llm")
    for value, want in (("200", 200), ("1_000", 1000), ("+30", 30)):
        assert sc.load_config(None, assignments=[f"study.permutations={value}"]).study.permutations == want
    assert configs.parse_assignment("llm.model=0x10") == {"llm": {"model": "0x10"}}  # a name, not 16


def test_a_config_files_relative_paths_are_read_from_its_folder(tmp_path, monkeypatch):
    """fixture = "my_fixture.json" in cfgs/run.toml was read from the current directory: run from anywhere but
    cfgs/, the run failed ("fixture 'my_fixture.json' does not exist") or read another file of that name."""
    from aumann.scenarios.midscale_social.fixture import FIXTURE_PATH, load_fixture

    folder = tmp_path / "cfgs"
    folder.mkdir()
    (folder / "my_fixture.json").write_text(FIXTURE_PATH.read_text())
    (folder / "mid.toml").write_text('fixture = "my_fixture.json"\n')
    (folder / "mega.toml").write_text(f'fixture = "{FIXTURE_PATH}"\nnetwork = "edges.txt"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = scenarios.get("midscale-social").load_config("../cfgs/mid.toml")
    assert cfg.fixture == str(folder / "my_fixture.json") and load_fixture(cfg.fixture)["personas"]
    mega = scenarios.get("megascale-social").load_config(folder / "mega.toml")
    assert (mega.fixture, mega.network) == (str(FIXTURE_PATH), str(folder / "edges.txt"))  # absolute: unchanged
    assert scenarios.get("megascale-social").load_config().network == "ba"  # a word, not a file
    given = scenarios.get("midscale-social").load_config("../cfgs/mid.toml", assignments=["fixture=x.json"])
    assert given.fixture == "x.json"  # --set: from the current directory, as any command-line path
