"""Class 2 of issue 22, numbers from outside (the non-LLM part): every study count and loop bound is capped, every
numeric CLI flag is bounded, and records read back from a run directory fit one schema per kind (finite, ranged,
typed fields)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from aumann import records, scenarios
from aumann.cli import main
from aumann.errors import ConfigError, IngestError, ReportError, StudyError, SynthError

BIG = 10**15


@pytest.mark.parametrize("key", ["random_orderings", "path_orders", "k_del", "top_k", "judge_candidates",
                                 "permutations", "ceiling_permutations", "quadrature_steps"])
@pytest.mark.timeout(60)  # refused when the config is read, not after hours of work
def test_every_study_count_is_capped(key):
    with pytest.raises(ConfigError, match=f"study.{key}"):
        scenarios.get("social-llm").load_config(study={key: BIG})


@pytest.mark.parametrize("name,kw,key", [
    ("social-llm", {"ba_m": BIG}, "ba_m"), ("midscale-social", {"ba_m": BIG}, "ba_m"),
    ("econagent", {"period": BIG}, "period"), ("megascale-social", {"ba_m": BIG}, "ba_m"),
    ("megascale-social", {"large": {"random_orderings": BIG}}, "random_orderings"),
    ("megascale-social", {"large": {"path_orders": BIG}}, "path_orders"),
    ("megascale-social", {"tier_panel_size": BIG}, "tier_panel_size"),
    ("social-llm", {"seed": 2**64}, "seed"), ("econagent", {"seed": 2**63}, "seed"),
    ("social-llm", {"study": {"action_tol": 5.0}}, "action_tol"),
])
def test_scenario_counts_are_capped(name, kw, key):
    with pytest.raises(ConfigError, match=key):
        scenarios.get(name).load_config(**kw)


@pytest.mark.timeout(120)
def test_the_issue_example_random_orderings_1e15_is_an_exit_2_not_a_hang(tmp_path, capsys):
    rc = main(["run", "social-llm", "--set", "study.random_orderings=1000000000000000", "--out", str(tmp_path)])
    assert rc == 2 and "random_orderings" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_a_run_whose_panel_cannot_fit_in_memory_is_refused_before_the_model_is_built(tmp_path, capsys):
    """Each size within its cap, the product not: 10⁶ steps × 10⁷ agents × 5 features is a panel of 186 TiB at
    least (float32). The run built 10⁷ agents for minutes and stepped on for as long as it was let."""
    rc = main(["run", "midscale-social", "--agents", "10000000", "--steps", "1000000", "--runs", "1",
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2
    assert ("MemoryBudgetError: scenario 'midscale-social': 1,000,000 steps × 10,000,000 agents × 5 feature(s) "
            "record a panel of at least 186,264.5 GiB (float32)") in err
    assert not (tmp_path / "run").exists()


def test_the_library_simulate_refuses_the_same_run_and_runs_one_that_fits(monkeypatch):
    import aumann.io
    from aumann.errors import MemoryBudgetError

    sc = scenarios.get("social-llm")
    monkeypatch.setattr(aumann.io, "memory_bytes", lambda: 6 * 4 * 5 * 4)  # a float32 panel of 6 × 4 × 5
    assert sc.simulate(sc.load_config(agents=6, steps=4), rng=0).panel.shape == (4, 6, 5)
    with pytest.raises(MemoryBudgetError, match=r"5 steps × 6 agents × 5 feature\(s\) record a panel of at least"):
        sc.simulate(sc.load_config(agents=6, steps=5), rng=0)


@pytest.mark.parametrize("kw,key", [
    ({"seeds": list(range(20_000))}, "seeds"), ({"sizes": [10**12]}, "sizes"), ({"sizes": [0]}, "sizes"),
    ({"sizes": list(range(2, 400))}, "sizes"), ({"k_min": BIG}, "k_min"), ({"headline_size": BIG}, "headline_size"),
    ({"deepset_settings": {"width": BIG}}, "width"), ({"deepset_settings": {"train_steps": BIG}}, "train_steps"),
    ({"deepset_settings": {"steps": BIG}}, "steps"), ({"deepset_settings": {"batch": BIG}}, "batch"),
    ({"deepset_settings": {"reference_passes": BIG}}, "reference_passes"),
])
def test_crossscale_counts_and_list_lengths_are_capped(kw, key):
    from aumann.studies.crossscale import CrossScaleConfig

    with pytest.raises(StudyError, match=key):
        CrossScaleConfig(**kw)


@pytest.mark.parametrize("kw,key", [({"users": BIG}, "users"), ({"max_followers": 10**30}, "max_followers")])
def test_synthetic_generator_sizes_are_capped(kw, key):
    from aumann.data.bluesky.synth import SynthConfig

    with pytest.raises(SynthError, match=key):
        SynthConfig(**kw)


FLAGS = [
    ("run social-llm", "--runs"), ("run social-llm", "--seed"), ("run social-llm", "--agents"),
    ("run social-llm", "--steps"), ("run social-llm", "--permutations"), ("run social-llm", "--step-timeout"),
    ("demo", "--agents"), ("demo", "--steps"), ("demo", "--seed"), ("report .", "--top"),
    ("attribute p.npz --indicator heat --out o", "--steps"), ("attribute p.npz --indicator heat --out o", "--power"),
    ("attribute p.npz --indicator heat --out o", "--tol"),
    ("bluesky build-panel x.jsonl --out o", "--max-days"), ("bluesky build-panel x.jsonl --out o", "--threads"),
    ("bluesky synth --out o", "--users"), ("bluesky synth --out o", "--days"), ("bluesky synth --out o", "--seed"),
    ("bluesky capture --out o", "--duration"), ("bluesky capture --out o", "--cursor"),
    ("bluesky capture --out o", "--rewind"),
]


@pytest.mark.parametrize("value", ["1e400", "nan", "-inf", "1e30", "-1", "abc", "9223372036854775808"])
@pytest.mark.parametrize("cmd,flag", FLAGS, ids=lambda x: x if isinstance(x, str) and x.startswith("--") else None)
def test_numeric_flags_refuse_absurd_values_naming_the_flag(cmd, flag, value, capsys):
    rc = main([*cmd.split(), flag, value])
    err = capsys.readouterr().err
    assert rc == 2 and f"argument {flag}" in err, err[-300:]


# --------------------------------------------------------------------------- records read back
def _good_record() -> dict:
    return {"run": 0, "digest": "0123456789abcdef", "t_star": 3, "f_t_star": 1.5, "methods": {"a": {"x": 0.1}},
            "ceiling": {}, "smoothing_gap": {}, "arrays_sha256": "a" * 64, "checksum": "b" * 64}


@pytest.mark.parametrize("edit,needle", [
    ({"t_star": -1}, "t_star"), ({"t_star": 10**7}, "t_star"), ({"t_star": True}, "t_star"),
    ({"t_star": "3"}, "t_star"), ({"f_t_star": float("inf")}, "f_t_star is inf"),
    ({"f_t_star": float("nan")}, "not a finite"), ({"run": -1}, "run"), ({"run": True}, "run"),
    ({"digest": "../x"}, "digest"), ({"arrays_sha256": "zz"}, "arrays_sha256"),
    ({"methods": {"a": {"x": float("inf")}}}, "methods.a.x"), ({"methods": [1]}, "methods"),
    ({"k_del": -5}, "k_del"), ({"extra": 2**70}, "int64"), ({"extra": "x" * 1_000_001}, "characters"),
    ({"files_sha256": {"panels/x.npz": "nothex"}}, "files_sha256"),
])
def test_run_records_fit_one_schema(edit, needle):
    rec = {**_good_record(), **edit}
    with pytest.raises(StudyError, match=needle):
        records.check(records.RunRecord, rec, error=StudyError, what="run record")


@pytest.mark.parametrize("kind,data,needle", [
    (records.RunTiming, {"run": 0, "digest": "d", "seconds": {"x": -1.0}}, "seconds.x"),
    (records.RunTiming, {"run": 0, "digest": "d", "seconds": {"x": 1e300}}, "seconds.x"),
    (records.Manifest, {"command": 3}, "command"),
    (records.Manifest, {"command": "aumann run", "report_kind": "evil"}, "report_kind"),
    (records.Manifest, {"command": "aumann run", "stage_seconds": {"a": -2}}, "stage_seconds"),
    (records.Manifest, {"command": "aumann run", "runs": 1.5}, "runs"),
    (records.CountsMeta, {"days": ["d"] * 100_001, "topics": []}, "days"),
    (records.CountsMeta, {"days": [], "topics": [], "meta": {"x": float("inf")}}, "meta.x"),
    (records.OutsideRecord, [1, 2], "JSON object"),
])
def test_other_records_fit_their_schema(kind, data, needle):
    with pytest.raises(StudyError, match=needle):
        records.check(kind, data, error=StudyError, what="record")


def test_good_records_pass_unchanged():
    rec = _good_record()
    assert records.check(records.RunRecord, rec, error=StudyError, what="r") is rec


def _rewrite(path, **edit) -> None:
    from aumann.io import record_checksum

    rec = json.loads(path.read_text())
    rec.update(edit)
    body = {k: v for k, v in rec.items() if k != "checksum"}
    rec["checksum"] = record_checksum(body)  # a forger who fixes the checksum up
    path.write_text(json.dumps(rec))


def test_t_star_minus_one_with_a_fixed_up_checksum_is_recomputed_on_resume(run_copy):
    from aumann.studies import run_study

    sc, cfg, copy_dir = run_copy
    _rewrite(copy_dir / "runs" / "run-000.json", t_star=-1)
    again = run_study(sc, cfg, out_dir=copy_dir)
    assert again.computed == 1 and again.resumed == 1 and "t_star" in again.failed_checks[0]["reason"]
    assert again.records[0]["t_star"] >= 0


@pytest.mark.parametrize("t_star", [-1, 99])
def test_t_star_outside_the_run_is_never_rendered(run_copy, t_star):
    from aumann.studies import render_report

    _, _, copy_dir = run_copy
    _rewrite(copy_dir / "runs" / "run-000.json", t_star=t_star)
    with pytest.raises(ReportError, match="t_star"):
        render_report(copy_dir, interactive=False)


def test_a_manifest_with_infinite_seconds_is_a_report_error(run_copy):
    from aumann.studies import render_report

    _, _, copy_dir = run_copy
    m = json.loads((copy_dir / "manifest.json").read_text())
    m["seconds"] = "MARK"
    (copy_dir / "manifest.json").write_text(json.dumps(m).replace('"MARK"', "1e400"))
    with pytest.raises(ReportError, match="seconds"):
        render_report(copy_dir, interactive=False)


# --------------------------------------------------------------------------- counts that would wrap an int64
def _counts():
    from aumann.data.bluesky.synth import SynthConfig, generate

    return generate(SynthConfig(users=300, days=2, seed=1))


@pytest.mark.parametrize("table,col", [("daily", "posts"), ("daily", "replies_received"),
                                       ("follows", "follows_received"), ("users", "followers")])
@pytest.mark.parametrize("value", [2**63 - 1, 10**12 + 1])
def test_a_count_that_would_wrap_int64_sums_is_refused_and_counted(table, col, value):
    from aumann.data.bluesky.counts import RawCounts

    c = _counts()
    parts = {k: copy.deepcopy(getattr(c, k)) for k in ("users", "daily", "follows")}
    df = parts[table]
    if not len(df):
        pytest.skip("no rows to edit")
    df.loc[df.index[0], col] = value
    with pytest.raises(IngestError, match="holds 1 count\\(s\\) above 1,000,000,000,000"):
        RawCounts(**parts, days=c.days, topics=c.topics)


def test_uint64_counts_above_int64_are_refused_not_wrapped():
    from aumann.data.bluesky.counts import RawCounts

    c = _counts()
    daily = c.daily.copy()
    daily["posts"] = daily["posts"].astype(np.uint64)
    daily.loc[daily.index[0], "posts"] = np.uint64(2**64 - 1)
    with pytest.raises(IngestError, match="above"):
        RawCounts(users=c.users, daily=daily, follows=c.follows, days=c.days, topics=c.topics)


@pytest.mark.parametrize("text,needle", [("[" * 5000 + "]" * 5000, "nests"), ('{"days": [], "topics": [], '
                                          '"meta": {"x": 1e400}}', "meta.x"), ("NaN", "not valid JSON")])
def test_counts_json_goes_through_the_bounded_reader_and_its_schema(tmp_path, text, needle):
    from aumann.data.bluesky.counts import RawCounts

    out = _counts().save(tmp_path / "c")
    (out / "counts.json").write_text(text)
    with pytest.raises(IngestError, match=needle):
        RawCounts.load(out)


@pytest.mark.parametrize("tick", ["1e309", '"1e309"', "-1e400", '"-inf"', '"Infinity"'])
def test_an_infinite_step_is_a_counted_bad_record_not_an_overflow(tmp_path, tick):
    # 1e309 reads as inf: a step that is inf (a JSON number, or text of one) ended every trace read, --skip-bad or
    # not, in a bare OverflowError ("cannot convert float infinity to integer") from the step coder
    from aumann.data.traces import read_trace
    from aumann.errors import TraceRecordError

    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}]}
    p = tmp_path / "t.jsonl"
    p.write_text('{"agent": "a", "tick": 0, "action": "buy"}\n'
                 f'{{"agent": "b", "tick": {tick}, "action": "buy"}}\n'
                 '{"agent": "c", "tick": "1", "action": "buy"}\n')
    spans = tmp_path / "spans.jsonl"
    spans.write_text("".join(
        f'{{"name": "llm", "context": {{"trace_id": "t{i}", "span_id": "s{i}"}}, '
        f'"resource": {{"attributes": {{"agent.id": "{a}"}}}}, "attributes": {{"agent.tick": {t}}}}}\n'
        for i, (a, t) in enumerate((("a", "0"), ("b", tick), ("c", '"1"')))))
    for path, sp in ((p, spec), (spans, None)):
        got = read_trace(path, sp, on_bad="skip")
        assert got.panel.agent_ids.tolist() == ["a", "c"], path.name
        assert got.report.n_skipped == 1 and got.panel.values.sum() == 2, path.name
        with pytest.raises(TraceRecordError, match=r"(line|row) 2\b"):
            read_trace(path, sp)


@pytest.mark.parametrize(("flag", "value", "key"), [
    ("--llm-seed", 9_007_199_254_740_993, "llm.seed=9007199254740993"),
    ("--llm-seed", 2**63 - 1, f"llm.seed={2**63 - 1}"),
    ("--max-calls", 9_007_199_254_740_991, None),
])
def test_integer_llm_flags_keep_every_digit(flag, value, key):
    """``type=float`` rounded an integer past 2⁵³ to its neighbour: ``--llm-seed 9007199254740993`` ran, and was
    recorded in the config, as the seed 9007199254740992; 2⁶³ − 1 became 2⁶³ and was refused."""
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", flag, str(value)])
    llm_options.check_arguments(args)
    assert getattr(args, flag[2:].replace("-", "_")) == value
    if key is not None:
        assert llm_options.llm_assignments(args) == [key]


@pytest.mark.parametrize("value", ["9223372036854775808", "1" + "0" * 400, "1" + "0" * 5000])
def test_an_llm_seed_past_int64_is_refused_naming_the_bound(value):
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", "--llm-seed", value])
    with pytest.raises(ConfigError, match=r"--llm-seed must be an integer >= 0 and <= 9223372036854775807; got "):
        llm_options.check_arguments(args)


@pytest.mark.parametrize(("text", "value"), [
    ("9.007199254740993e15", 9_007_199_254_740_993),
    ("9007199254740993e0", 9_007_199_254_740_993),
    ("9.223372036854775807e18", 2**63 - 1),
    ("1e3", 1000),
    ("9007199254740993", 9_007_199_254_740_993),
])
def test_integer_flags_read_float_notation_exactly(text, value):
    """``float()`` rounded float notation past 2⁵³: ``aumann demo --seed 9.007199254740993e15`` ran as the seed
    9007199254740992, and ``9.223372036854775807e18`` (2⁶³ − 1) became 2⁶³ and was refused."""
    from aumann.cli import build_parser

    args = build_parser().parse_args(["demo", "--seed", text, "--out", "x"])
    assert args.seed == value and isinstance(args.seed, int)


@pytest.mark.parametrize("text", ["9007199254740992.5", "9.0071992547409925e15", "1.5", "nan", "1e400",
                                  "9.223372036854775808e18"])
def test_integer_flags_refuse_float_notation_that_is_no_integer(text, capsys):
    """``9007199254740992.5`` is no integer, but the float it reads as is 2⁵³: it ran as the seed 9007199254740992."""
    from aumann.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["demo", "--seed", text, "--out", "x"])
    assert exc.value.code == 2
    assert "argument --seed: must be an integer in [0, " in capsys.readouterr().err


@pytest.mark.parametrize(("text", "value"), [("9.007199254740993e15", 9_007_199_254_740_993), ("1e3", 1000.0)])
def test_llm_integer_flags_read_float_notation_past_2_53_exactly(text, value):
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", "--llm-seed", text])
    llm_options.check_arguments(args)
    assert args.llm_seed == value and isinstance(args.llm_seed, int)


def test_an_llm_integer_flag_refuses_a_non_integer_past_2_53(capsys):
    from aumann.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m",
                                   "--max-calls", "9007199254740992.5"])
    assert "argument --max-calls: 9007199254740992.5 is past 2**53 and not an integer" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "text", "needle"), [
    ("--llm-timeout", "1e300", "--llm-timeout must be a number >= 0.001 and <= 86400; got 1e300"),
    ("--retry-after-max", "1e300", "--retry-after-max must be a number >= 0 and <= 86400; got 1e300"),
    ("--llm-seed", "1e300", "--llm-seed must be an integer >= 0 and <= 9223372036854775807; got 1e300"),
    ("--max-calls", "1e20", "--max-calls must be an integer >= 0 and <= 9007199254740992; got 1e20"),
])
def test_an_llm_flag_past_every_range_is_refused_by_its_range(flag, text, needle):
    """``--llm-timeout 1e300`` was refused as 'past 2**53 and not an integer (a float would round it to' and the
    300 digits of the float's integer: a real-valued flag, and a value that writes an integer, refused for the wrong
    reason and shown digit by digit. Past 2**64 (where exact_integer stops) it is out of every flag's range."""
    from aumann.cli import build_parser, llm_options

    args = build_parser().parse_args(["run", "social-llm", "--backend", "openai", "--model", "m", flag, text])
    with pytest.raises(ConfigError) as info:
        llm_options.check_arguments(args)
    assert str(info.value) == needle
