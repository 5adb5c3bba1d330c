"""``aumann run --backend NAME`` where NAME's registered factory returns ``None``: the scenario's offline policy
decides (the registry's contract, :func:`aumann.simulators.llm.registry.offline_policy_decides`), and every part
of the run says and does what ``--backend offline`` does -- not only the unused-flag warning and the resume digest
(``tests/cli/test_unused_flags.py``)."""

from __future__ import annotations

import pytest

BASE = ["run", "midscale-social", "--agents", "6", "--steps", "2", "--runs", "1", "--permutations", "4",
        "--no-ablations", "--no-plots", "--judge", "off"]


@pytest.fixture
def nothing(monkeypatch):
    """``register_backend("nothing", lambda options: None)``, for this test only."""
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, "nothing",
                        registry.BackendEntry("nothing", lambda options: None, "the offline policy, renamed"))
    return "nothing"


def test_a_dry_run_of_a_none_backend_is_refused_as_a_dry_run_of_offline_is(tmp_path, capsys, nothing):
    """`--backend nothing --dry-run` crashed with AttributeError: 'NoneType' object has no attribute 'model' (the dry
    run read backend.model); `--backend offline --dry-run` is refused with a ConfigError, and so is this now."""
    from aumann.cli import main

    out = tmp_path / "never"
    assert main([*BASE, "--backend", nothing, "--dry-run", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("aumann: error: ConfigError: --dry-run estimates an LLM run, and --backend nothing builds no LLM backend "
            "(its factory returned None)") in err and "0 requests" in err
    assert not out.exists()


def test_backend_flags_under_a_none_backend_are_warned_of_by_name_never_refused(nothing):
    """check_arguments refuses --model, --rpm, --cache ... for the label "offline" only; a None factory is known only
    after it ran, so they are warned of then (by name: a --base-url may hold credentials) and recorded, not refused."""
    import warnings

    from aumann.cli import build_parser, llm_options
    from aumann.cli.unused_flags import unused_run_flags
    from aumann.errors import UnusedArgumentWarning

    args = build_parser().parse_args([*BASE, "--backend", nothing, "--model", "m", "--base-url",
                                      "http://user:hunter2@h/v1", "--cache", "c.sqlite", "--cache-mode", "off"])
    llm_options.check_arguments(args)  # not refused
    with pytest.warns(UnusedArgumentWarning) as got:
        assert unused_run_flags(args, offline=True) == ["--model", "--base-url", "--cache", "--cache-mode"]
    assert len(got) == 1 and "hunter2" not in str(got[0].message)
    assert str(got[0].message).startswith("--model, --base-url, --cache, --cache-mode given but unused: ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert unused_run_flags(args, offline=False) == []  # a backend was built: it reads them


def _build(tmp_path, *argv: str):
    from aumann import scenarios
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args([*BASE, *argv])
    llm_options.check_arguments(args)
    sc = scenarios.get("midscale-social")
    return llm_options.build_backend(args, tmp_path / "out", sc, sc.load_config(None))


def test_a_none_backend_removes_the_cache_it_made_and_keeps_one_that_was_there(tmp_path, nothing):
    """build_backend opens the cache before the factory runs, and a run whose factory returned None was left an empty
    <out>/llm-cache.sqlite (12 288 bytes): the cache it made (and the folders it made for --cache) is removed again;
    a cache file that was there before is closed and kept."""
    assert _build(tmp_path, "--backend", nothing) == (None, "nothing")
    assert (tmp_path / "out").is_dir() and not list((tmp_path / "out").iterdir())  # no <out>/llm-cache.sqlite
    made = tmp_path / "new" / "deeper" / "c.sqlite"
    assert _build(tmp_path, "--backend", nothing, "--cache", str(made)) == (None, "nothing")
    assert not (tmp_path / "new").exists()
    from aumann.simulators.llm import ResponseCache

    kept = tmp_path / "kept.sqlite"
    ResponseCache(kept).open().close()
    before = kept.read_bytes()
    assert _build(tmp_path, "--backend", nothing, "--cache", str(kept)) == (None, "nothing")
    assert kept.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("kept")) == ["kept.sqlite"]
