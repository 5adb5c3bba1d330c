"""``aumann run --backend NAME`` where NAME's registered factory returns ``None``: the scenario's offline policy
decides (the registry's contract, :func:`aumann.simulators.llm.registry.offline_policy_decides`), and every part
of the run says and does what ``--backend offline`` does -- not only the unused-flag warning and the resume digest
(``tests/cli/test_unused_flags.py``)."""

from __future__ import annotations

import json

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


def test_a_none_backend_run_warns_of_its_backend_flags_leaves_no_cache_and_says_offline_policy(tmp_path, capsys,
                                                                                                nothing):
    """`--backend nothing --model m --rpm 10` ran without a word (check_arguments refuses them for the label
    "offline" only), left an empty llm-cache.sqlite in the run directory, recorded the policy "LLM (nothing)" and
    reported "0 LLM request(s) sent ... backend `nothing`". Now: warned of and in unused_flags, no cache file, and
    the record and report say the offline policy decided."""
    from aumann.cli import main

    out = tmp_path / "a"
    capsys.readouterr()
    assert main([*BASE, "--backend", nothing, "--model", "m", "--rpm", "10", "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().err.split())
    assert ("aumann: warning: --model, --rpm given but unused: the run's decisions come from the offline policy "
            "(--backend nothing, whose factory builds no backend: it returned None)") in text
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["unused_flags"] == ["--model", "--rpm"]
    assert not any(p.name.startswith("llm-cache.sqlite") for p in out.iterdir())
    assert json.loads((out / "runs" / "run-000.json").read_text(encoding="utf-8"))["policy"] == "offline policy"
    assert manifest["policy"] == "offline policy"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**Offline: 0 LLM calls" in report and "LLM request(s) sent" not in report


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


def test_a_none_backend_megascale_run_records_the_offline_policy(tmp_path, nothing):
    """MegaScale's analysis (and its faithfulness table's policy column) said "LLM nothing", the record "LLM
    (nothing)", for a run whose every decision the offline policy made."""
    from aumann.cli import main

    out = tmp_path / "m"
    assert main(["run", "megascale-social", "--agents", "50", "--steps", "3", "--runs", "1", "--no-plots", "--judge",
                 "off", "--backend", nothing, "--out", str(out)]) == 0
    record = json.loads((out / "runs" / "run-000.json").read_text(encoding="utf-8"))
    assert record["policy"] == record["analysis"]["policy"] == "offline policy"


def test_the_megascale_policy_label_follows_the_offline_predicate():
    """MegaScale's analysis labelled a None-backend run "LLM nothing"; it now asks what the run's options know."""
    from aumann.studies.megascale.measures import policy_label

    assert policy_label("nothing", None, offline=True) == "offline policy"
    assert policy_label("openai:m@default", None, offline=False) == "LLM openai:m"
    assert policy_label("offline", None) == "offline policy"  # the label alone, as before


def test_the_cost_section_of_a_none_backend_run_says_offline():
    """manifest.json of such a run: backend "nothing" (the name given), llm {"backend": "offline", ...} (no backend
    object); the cost section read only "backend" and wrote "0 LLM request(s) sent ...; backend `nothing`"."""
    from aumann.studies.sections import llm_blocks

    manifest = {"backend": "nothing", "llm": {"backend": "offline", "note": "offline policy: decisions counted"},
                "llm_usage": {"calls": 0, "decisions": 12}}
    blocks, card = llm_blocks(manifest, offline_reason="Offline.")
    assert card == "offline · $0" and "made 12 decision(s)" in blocks[0].text
    assert llm_blocks({"backend": "nothing", "llm": {"backend": "offline"}}, offline_reason="")[1] == "offline · $0"
    llm = llm_blocks({"backend": "openai", "llm": {"backend": "openai", "model": "m"},
                      "llm_usage": {"calls": 3}}, offline_reason="")
    assert llm[1].startswith("3 calls")


def test_unused_sampling_flags_agrees_with_aumann_run_under_a_none_backend(nothing):
    """llm_options.unused_sampling_flags decided by the label "offline" alone: for `--backend nothing --temperature
    0.7` aumann run warned of --temperature (offline_policy_decides of what build_backend made) and this said []. It
    takes the same predicate now (offline=); without it, the label decides, as before."""
    import warnings

    from aumann.cli import build_parser, llm_options
    from aumann.errors import UnusedArgumentWarning
    from aumann.simulators.llm.registry import offline_policy_decides

    args = build_parser().parse_args([*BASE, "--backend", nothing, "--temperature", "0.7"])
    with pytest.warns(UnusedArgumentWarning, match=r"--backend nothing, whose factory builds no backend"):
        assert llm_options.unused_sampling_flags(args, offline=offline_policy_decides(None, nothing)) == [
            "--temperature"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert llm_options.unused_sampling_flags(args) == []  # no backend known: the label says, as before


def test_analyse_run_of_a_none_backend_run_says_offline_policy(nothing):
    """analyse_run (public; it has no backend, only a label) recorded "LLM (nothing)" for a run the offline policy
    decided, where aumann run records "offline policy": it takes offline_policy= (offline_policy_decides of the backend
    and label) as RunOptions does; without it the label decides, as before."""
    import numpy as np

    from aumann import scenarios
    from aumann.studies import analyse_run

    sc = scenarios.get("midscale-social")
    config = sc.load_config(None, runs=1, agents=6, steps=2, study={"permutations": 4, "ablations": False,
                                                                  "judge": "off"})
    sim_seq, seq = np.random.SeedSequence(0).spawn(2)
    run = sc.simulate(config, rng=np.random.default_rng(sim_seq), backend=None, keep_from=None,
                      strategy=config.study.fork_strategy)
    rec, _ = analyse_run(sc, config, run, seq, backend_label=nothing, offline_policy=True)
    assert rec["policy"] == "offline policy"
    rec, _ = analyse_run(sc, config, run, seq, backend_label="openai:m@default")
    assert rec["policy"] == "LLM (openai:m@default)"


def _register(monkeypatch, name, make, *, needs_model=False):
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, name, registry.BackendEntry(name, make, "a test's", needs_model))
    return name


def test_a_none_factory_registered_with_needs_model_runs_without_a_model(tmp_path, monkeypatch):
    """needs_model=True was checked before the factory ran, so `--backend nothing` (factory: None, needs_model=True)
    without --model was refused ("needs a model") though the offline policy decides and reads no model. The factory
    now runs first; a model it never reads is not demanded (and one given is warned of, as every backend flag is)."""
    monkeypatch.delenv("AUMANN_LLM_MODEL", raising=False)
    name = _register(monkeypatch, "nothing-m", lambda options: None, needs_model=True)
    assert _build(tmp_path, "--backend", name) == (None, name)
    assert not list((tmp_path / "out").iterdir())  # no cache left behind


def test_a_factory_that_builds_a_backend_still_needs_its_model(tmp_path, monkeypatch):
    """With needs_model=True a factory that builds a backend without the model (or raises for want of it) is refused
    as before, after it ran: its backend closed, the cache opened for it removed."""
    from aumann.errors import ConfigError

    monkeypatch.delenv("AUMANN_LLM_MODEL", raising=False)
    closed = []

    class Built:
        usage = None

        def decide(self, messages, schema, **kw):
            raise AssertionError("never asked")

        def close(self):
            closed.append(True)

    built = _register(monkeypatch, "built", lambda options: Built(), needs_model=True)
    with pytest.raises(ConfigError, match="--backend built needs a model: pass --model NAME"):
        _build(tmp_path, "--backend", built)
    assert closed == [True] and not list((tmp_path / "out").iterdir())

    def wants(options):
        return options.model.upper()  # AttributeError on None

    raises = _register(monkeypatch, "wants", wants, needs_model=True)
    with pytest.raises(ConfigError, match="--backend wants needs a model") as got:
        _build(tmp_path, "--backend", raises)
    assert "its factory raised AttributeError" in str(got.value.__cause__)  # what it raised, chained


def test_hostile_factories_are_typed_errors_naming_the_backend(tmp_path, monkeypatch, capsys):
    """A factory that raised surfaced its own RuntimeError (traceback); one that returned 42, or an object with
    decide() alone, stopped aumann run on AttributeError ('int' object has no attribute 'model'; 'X' ... 'usage'). Each
    is now a BackendFactoryError naming the backend, the run's cache is not left behind, and the key handed to the
    factory never appears in the message."""
    from aumann.cli import main
    from aumann.errors import BackendFactoryError, ConfigError
    from aumann.simulators.llm.registry import make_backend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hunter2hunter2")
    monkeypatch.setenv("AUMANN_LLM_BASE_URL", "http://bob:hunter2pw@llm.test/v1")

    def boom(options):
        raise RuntimeError(f"cannot reach {options.base_urls[0]} with key {options.api_key}")

    class DecideOnly:
        def decide(self, messages, schema, **kw):
            raise AssertionError("never asked")

    def quits(options):
        raise SystemExit(0)

    cases = {"boom": (boom, "its factory raised RuntimeError: cannot reach http://***@llm.test/v1 with key ***"),
             "quits": (quits, "its factory called sys.exit(0)"),  # aumann run exited 0, silently, nothing computed
             "forty-two": (lambda options: 42, "its factory returned int, which is no decision backend"),
             "decide-only": (lambda options: DecideOnly(), "its factory returned DecideOnly, which aumann run cannot "
                                                            "account for: it lacks a Usage account at .usage and a "
                                                            "describe() method")}
    for name, (make, said) in cases.items():
        _register(monkeypatch, name, make)
        with pytest.raises(BackendFactoryError) as got:
            _build(tmp_path, "--backend", name)
        assert str(got.value).startswith(f"backend {name!r}: {said}") and "hunter2" not in str(got.value)
        assert isinstance(got.value, ConfigError) and not list((tmp_path / "out").iterdir())
        out = tmp_path / f"cli-{name}"
        capsys.readouterr()
        assert main([*BASE, "--backend", name, "--out", str(out)]) == 2
        assert f"aumann: error: BackendFactoryError: backend {name!r}" in capsys.readouterr().err
    with pytest.raises(BackendFactoryError, match="backend 'forty-two': its factory returned int"):
        make_backend("forty-two")


def _as_written_before(out, old_policy: str) -> bytes:
    """Make ``out`` what aumann wrote before a None factory was known to be the offline policy: its run record's and
    manifest's policy ``old_policy`` (the record sealed again, as it was written then). Returns the record's bytes."""
    from aumann.studies.rundir import seal

    path = out / "runs" / "run-000.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(seal({**rec, "policy": old_policy})), encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    (out / "manifest.json").write_text(json.dumps({**manifest, "policy": old_policy}), encoding="utf-8")
    return path.read_bytes()


def test_a_run_directory_written_before_reads_back_as_the_offline_policy(tmp_path, capsys, nothing):
    """Run directories of a None-backend run written before 0980269 hold "LLM (nothing)" in runs/run-000.json and
    manifest.json. Resumed, the record was read back as it was, and the new manifest (and page) said "decisions: LLM
    (nothing)" again; `aumann report` showed it too. Now both readers show "offline policy" -- the run is resumed
    (same digest), and the record on disk keeps its bytes."""
    from aumann.cli import main

    out = tmp_path / "old"
    argv = [*BASE, "--backend", nothing, "--out", str(out)]
    assert main(argv) == 0
    digest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["config_digest"]
    before = _as_written_before(out, "LLM (nothing)")
    assert main(["report", str(out), "--no-plots"]) == 0
    page = (out / "report.md").read_text(encoding="utf-8")
    assert "LLM (nothing)" not in page and "offline policy" in page
    capsys.readouterr()
    assert main(argv) == 0
    assert "0 run(s) computed, 1 resumed" in " ".join(capsys.readouterr().err.split())
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["policy"] == "offline policy" and manifest["config_digest"] == digest
    assert "LLM (nothing)" not in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "runs" / "run-000.json").read_bytes() == before  # read back, not rewritten


def test_the_old_policy_labels_read_back_only_for_the_backend_named():
    """What the readers map: the record's "LLM (nothing)" and MegaScale's "LLM nothing" (also inside a "; "-joined
    text) of the backend named; an LLM run's label, another backend's and a non-text value are left alone."""
    from aumann.studies.rundir import offline_policy_record, offline_policy_text

    assert offline_policy_text("LLM (nothing)", "nothing") == "offline policy"
    assert offline_policy_text("LLM nothing", "nothing") == "offline policy"
    assert offline_policy_text("LLM nothing; offline policy", "nothing") == "offline policy"
    assert offline_policy_text("LLM (openai:m@default)", "nothing") == "LLM (openai:m@default)"
    assert offline_policy_text("LLM (nothing-else)", "nothing") == "LLM (nothing-else)"
    assert offline_policy_text(None, "nothing") is None and offline_policy_text("LLM ()", "") == "LLM ()"
    rec = {"policy": "LLM (nothing)", "analysis": {"policy": "LLM nothing", "t_star": 2}, "checksum": "c"}
    assert offline_policy_record(rec, "nothing") == {"policy": "offline policy", "checksum": "c",
                                                     "analysis": {"policy": "offline policy", "t_star": 2}}
    assert rec["policy"] == "LLM (nothing)"  # a copy: what was read is left as it is
    same = {"policy": "LLM (openai:m@default)"}
    assert offline_policy_record(same, "nothing") is same


def test_a_megascale_run_directory_written_before_reports_the_offline_policy(tmp_path, nothing):
    """MegaScale wrote "LLM nothing" also in the record's analysis and faithfulness.csv's policy column (from before
    0980269): `aumann report` showed "Decisions: **LLM nothing**." and the column as written; now "offline policy"."""
    import csv

    from aumann.cli import main
    from aumann.studies.rundir import seal

    out = tmp_path / "m"
    assert main(["run", "megascale-social", "--agents", "50", "--steps", "3", "--runs", "1", "--no-plots", "--judge",
                 "off", "--backend", nothing, "--out", str(out)]) == 0
    path = out / "runs" / "run-000.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(seal({**rec, "policy": "LLM (nothing)",
                                     "analysis": {**rec["analysis"], "policy": "LLM nothing"}})), encoding="utf-8")
    with (out / "faithfulness.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(row["policy"] == "offline policy" for row in rows)
    with (out / "faithfulness.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({**row, "policy": "LLM nothing"} for row in rows)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["outputs_sha256"].pop("faithfulness.csv")  # (recorded as an older aumann did: not checked)
    (out / "manifest.json").write_text(json.dumps({**manifest, "policy": "LLM nothing"}), encoding="utf-8")
    assert main(["report", str(out), "--no-plots"]) == 0
    page = (out / "report.md").read_text(encoding="utf-8")
    assert "LLM nothing" not in page and "Decisions: **offline policy**." in page


def test_a_backend_description_is_shown_never_obeyed_nor_formatted(monkeypatch, capsys):
    """A registered description is the registrant's text: "answers 100% yes" stopped `aumann run --help` with
    ValueError: unsupported format character 'y' (argparse %-formats help), and an ESC sequence in it reached the
    terminal raw from both `aumann run --help` and `aumann llm backends`."""
    from aumann.cli import main
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, "percent",
                        registry.BackendEntry("percent", lambda options: None, "answers 100% yes \x1b]0;pwned\x07"))
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "percent: answers 100% yes \\x1b]0;pwned\\x07" in shown and "\x1b" not in shown
    assert main(["llm", "backends"]) == 0
    listed = capsys.readouterr().out
    assert "percent\tanswers 100% yes \\x1b]0;pwned\\x07" in listed and "\x1b" not in listed


def test_replacing_the_offline_backend_is_warned_of(tmp_path, monkeypatch):
    """register_backend("offline", f, replace=True) was accepted without a word, and `aumann run --backend offline`
    never calls f (the name decides: no backend, its flags refused, the offline digest): warned of now, naming that;
    still accepted (make_backend("offline") calls f, as before)."""
    from aumann.errors import AumannWarning
    from aumann.simulators.llm import registry

    monkeypatch.setitem(registry._registry, "offline", registry._registry["offline"])  # restored afterwards
    with pytest.warns(AumannWarning, match=r"backend 'offline' replaced: .* aumann run --backend offline .* never "
                                           "calls it"):
        registry.register_backend("offline", lambda options: "mine", replace=True)
    assert _build(tmp_path, "--backend", "offline") == (None, "offline")  # the run is the offline policy's


def test_a_plugin_that_exits_at_load_is_warned_of_and_the_cli_goes_on(monkeypatch, capsys, caplog):
    """An installed entry point (group aumann.backends) whose import calls sys.exit(3): every command that lists the
    backends (aumann run, its --help, aumann llm backends) ended with status 3 and no word. It is now a broken plug-in
    like one that raises: logged, skipped."""
    import importlib.metadata
    import logging

    from aumann.cli import main
    from aumann.simulators.llm import registry

    class ExitingEntryPoint:
        name, value = "plug", "plug:make"

        def load(self):
            raise SystemExit(3)

    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None, **kw: [ExitingEntryPoint()]
                        if group == "aumann.backends" else real(group=group, **kw))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    with caplog.at_level(logging.WARNING, logger=registry.__name__):
        assert main(["llm", "backends"]) == 0
    assert "offline\t" in capsys.readouterr().out and "plug" not in registry.backend_names()
    assert "backend entry point 'plug' could not be loaded: it called sys.exit(3)" in caplog.text


def test_a_factory_out_of_memory_is_not_renamed(monkeypatch):
    """call_factory wraps a factory's exceptions in BackendFactoryError, but a MemoryError (an Exception too) is the
    machine's, not the registration's: it passes as it is, for the CLI's one-line memory message."""
    from aumann.simulators.llm.registry import make_backend

    def hungry(options):
        raise MemoryError("cannot allocate the model")

    _register(monkeypatch, "hungry", hungry)
    with pytest.raises(MemoryError, match="cannot allocate the model") as got:
        make_backend("hungry")
    assert type(got.value) is MemoryError


def test_a_factory_message_cut_short_or_an_exit_code_never_shows_part_of_the_key(monkeypatch):
    """The key was replaced in the factory's message after it was cut to 300 characters, so a key straddling the cut
    matched nothing and its first characters were shown ('... key sk-SECRETSEC...'); and a factory's sys.exit(text)
    showed the text as it was, key and all. Both now show none of it."""
    from aumann.errors import BackendFactoryError
    from aumann.simulators.llm.options import BackendOptions
    from aumann.simulators.llm.registry import make_backend

    key = "sk-SECRETSECRETSECRETSECRET1234567890"

    def long_message(options):
        raise ValueError("y" * 280 + " key " + options.api_key)

    def exits_with_it(options):
        raise SystemExit(f"bad key {options.api_key}")

    for name, make in {"long-message": long_message, "exits-with-it": exits_with_it}.items():
        _register(monkeypatch, name, make)
        with pytest.raises(BackendFactoryError, match=f"backend {name!r}") as got:
            make_backend(name, BackendOptions(api_key=key))
        assert "sk-SECRET" not in str(got.value)


def test_the_traceback_of_a_factory_error_never_shows_the_key(monkeypatch, tmp_path, capsys):
    """BackendFactoryError redacted its own message but chained the factory's exception, whose message (key and all)
    `aumann --debug` printed in the traceback, as would any log of the error. The chained cause now carries the
    factory's traceback under the redacted message."""
    import traceback

    from aumann.errors import BackendFactoryError
    from aumann.simulators.llm.options import BackendOptions
    from aumann.simulators.llm.registry import make_backend

    key = "sk-SECRETSECRETSECRETSECRET1234567890"
    password = "hunter" + "2"  # (the traceback shows the factory's source line: no secret written in it)

    def leaks(options):
        raise ValueError(f"cannot use key {options.api_key} at http://bob:{password}@example.org")

    def exits(options):
        raise SystemExit(f"bad key {options.api_key}")

    for name, make in {"leaks": leaks, "exits": exits}.items():
        _register(monkeypatch, name, make)
        with pytest.raises(BackendFactoryError) as got:
            make_backend(name, BackendOptions(api_key=key))
        shown = "".join(traceback.format_exception(got.value))
        assert "SECRET" not in shown and "hunter2" not in shown, shown
        assert f"in {make.__name__}" in shown  # (the factory's own frame is still shown)
