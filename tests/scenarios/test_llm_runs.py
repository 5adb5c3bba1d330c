"""LLM scenarios at real latency: batched steps, the two SocialLLM interaction modes, forks whose
requests share the pool, and ``aumann run`` with usage, dry runs, caps, resume and executors --
against the loopback OpenAI-compatible server of tests/llm_loopback.py."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from aumann.scenarios.social_llm import model as social_model
from aumann.simulators.llm import BudgetExceededError, OfflineBackend, OpenAIBackend, ResponseCache
from tests.cli_run import invoke_run as _invoke
from tests.llm_loopback import LoopbackLLM
from tests.simulators.llm_fakes import SECRET
from tests.tiny import tiny_config


def _backend(srv, **kw):
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("max_retries", 6)
    return OpenAIBackend(model="m", base_url=srv.base_url, **kw)


def test_reaction_waves_never_share_an_agent_or_a_post_and_keep_the_order():
    rng = random.Random(4)
    pairs = [(i, j) for i in range(30) for j in rng.sample(range(30), rng.randint(0, 6))]
    waves = social_model.reaction_waves(pairs)
    assert sorted(k for w in waves for k in w) == list(range(len(pairs)))
    where = {k: w for w, ks in enumerate(waves) for k in ks}
    for ks in waves:
        assert len({pairs[k][0] for k in ks}) == len(ks) and len({pairs[k][1] for k in ks}) == len(ks)
    for a in range(len(pairs)):
        for b in range(a):
            if pairs[a][0] == pairs[b][0] or pairs[a][1] == pairs[b][1]:
                assert where[b] < where[a]  # a reaction comes after every one it depends on
    assert len(waves) < len(pairs) / 2  # and the waves are much fewer than the reactions


@pytest.mark.parametrize("with_backend", [False, True])
def test_sequential_waves_give_exactly_the_one_by_one_run(monkeypatch, with_backend):
    from aumann.scenarios.social_llm.agents import rule_policy

    sc, cfg = tiny_config("social-llm", agents=16, steps=5)
    backend = OfflineBackend(rule_policy) if with_backend else None
    waves = sc.simulate(cfg, rng=3, backend=backend).panel
    monkeypatch.setattr(social_model, "reaction_waves", lambda pairs: [[k] for k in range(len(pairs))])
    one_by_one = sc.simulate(cfg, rng=3, backend=backend).panel
    assert waves.equals(one_by_one) and waves.values[:, :, 3:].sum() > 0  # reactions happened


@pytest.mark.parametrize(("name", "overrides"), [("social-llm", {"interaction": "sequential"}),
                                                 ("social-llm", {"interaction": "synchronous"}),
                                                 ("econagent", {"agents": 6})])
def test_panels_are_byte_identical_at_concurrency_1_and_32(tmp_path, name, overrides):
    panels = []
    for conc in (1, 32):
        sc, cfg = tiny_config(name, steps=3, **overrides)
        if name == "social-llm":
            cfg = cfg.model_copy(update={"agents": 10})
        with LoopbackLLM(latency=0.002, jitter=0.002, error_rate=0.05, retry_after=0) as srv:
            b = _backend(srv, concurrency=conc, cache=ResponseCache(tmp_path / f"{conc}.sqlite"))
            panels.append(sc.simulate(cfg, rng=11, backend=b).panel)
            assert b.usage.total_calls == srv.stats()["requests"] > 0
    a, b = panels
    assert a.values.tobytes() == b.values.tobytes()
    assert all(np.asarray(a.context[k]).tobytes() == np.asarray(b.context[k]).tobytes() for k in a.context)


def test_synchronous_mode_is_one_batch_per_phase_and_has_its_own_cache_keys(tmp_path):
    cache = tmp_path / "llm.sqlite"
    runs = {}
    for mode in ("sequential", "synchronous"):
        sc, cfg = tiny_config("social-llm", agents=12, steps=4, interaction=mode)
        with LoopbackLLM() as srv:
            b = _backend(srv, concurrency=64, cache=ResponseCache(cache))
            runs[mode] = (sc.simulate(cfg, rng=5, backend=b).panel, b.usage.copy())
    seq, sync = runs["sequential"], runs["synchronous"]
    assert sync[1].cache_hits == 0  # identical step-0 post prompts, but another scope: no shared answers
    assert sync[1].rounds <= 2 * 4 < seq[1].rounds  # one post batch + one reaction batch per step
    assert not seq[0].equals(sync[0])  # the modes are different simulations
    assert len(ResponseCache(cache)) == seq[1].planned_calls + sync[1].planned_calls


def test_econagent_decides_each_month_and_each_reflection_as_one_batch():
    sc, cfg = tiny_config("econagent", agents=5, steps=3)
    with LoopbackLLM(latency=0.02) as srv:
        b = _backend(srv, concurrency=16)
        sc.simulate(cfg, rng=2, backend=b)
        stats = srv.stats()
    assert b.usage.rounds == 3 + 1  # three months, one quarterly reflection
    assert stats["requests"] == 5 * 3 + 5 and stats["max_in_flight"] >= 3


def test_study_forks_share_the_pool_and_are_counted_apart_from_the_runs(tmp_path):
    from aumann.studies.faithfulness import run_study

    records = []
    for conc in (1, 16):
        study = {"permutations": 20, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 8}
        sc, cfg = tiny_config("social-llm", agents=8, steps=3, study=study)
        with LoopbackLLM() as srv:
            b = _backend(srv, concurrency=conc, cache=ResponseCache(tmp_path / f"s{conc}.sqlite"))
            res = run_study(sc, cfg, backend=b, backend_label="openai:m@loopback")
            stats = srv.stats()
        u = b.usage
        assert u.total_calls == stats["requests"] and u.fork_calls > 0 and u.fork_decisions > 0
        assert (u.prompt_tokens, u.completion_tokens) == (stats["prompt_tokens"], stats["completion_tokens"])
        assert res.usage.total_calls == u.total_calls
        records.append(json.dumps(res.records, default=float, sort_keys=True))
    assert records[0] == records[1]


# ---------------------------------------------------------------------- aumann run
TINY = """
agents = 8
steps = 4
runs = {runs}
seed = 3
[study]
permutations = {perms}
random_orderings = 2
path_orders = 2
quadrature_steps = 8
reference_game = "{game}"
"""


def _cfg(tmp_path, runs=1, perms=12, game="masking"):
    p = tmp_path / f"tiny-{runs}-{perms}-{game}.toml"
    p.write_text(TINY.format(runs=runs, perms=perms, game=game))
    return p


def test_dry_run_prints_the_estimate_and_sends_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    assert _invoke("social-llm", "--config", str(_cfg(tmp_path)), "--out", str(out), "--backend", "openai",
                   "--model", "gpt-4o-mini", "--base-url", "http://127.0.0.1:9/v1", "--dry-run",
                   "--concurrency", "8", "--assumed-latency", "0.5") == 0  # port 9: nothing listens
    text = capsys.readouterr().out
    assert not out.exists()
    assert "nothing was sent" in text and "requests after the cache" in text and "cost: ~$" in text
    assert "at concurrency 8 and 0.5 s per request" in text
    calls = int(text.split("requests after the cache: ")[1].split(" ")[0].replace(",", ""))
    assert calls > 0 and "~$" in text
    with pytest.raises(Exception, match="--dry-run estimates an LLM run"):
        _invoke("social-llm", "--out", str(out), "--dry-run")


def test_dry_run_counts_the_requests_after_the_cache(tmp_path, capsys):
    import shutil

    cfg = _cfg(tmp_path)
    out = tmp_path / "warm"
    with LoopbackLLM() as srv:
        args = ["social-llm", "--config", str(cfg), "--out", str(out), "--backend", "openai", "--model", "m",
                "--base-url", srv.base_url]
        assert _invoke(*args, "--no-plots") == 0
        shutil.rmtree(out / "runs")  # the answers stay in the cache, the runs are to be computed again
        capsys.readouterr()
        assert _invoke(*args, "--dry-run") == 0
        assert srv.stats()["requests"] == json.loads((out / "llm-usage.json").read_text())["manifest"]["calls"] + \
            json.loads((out / "llm-usage.json").read_text())["manifest"]["fork_calls"]  # the dry run sent nothing
    text = capsys.readouterr().out
    import re

    m = re.search(r"requests after the cache: (\d+) .*; (\d+) served by the cache; (\d+) decisions", text)
    # the run replays the recorded answers, so the cache answers every request: nothing left to send
    assert m and int(m.group(1)) == 0 and int(m.group(2)) == int(m.group(3)) > 0 and "1 run(s) to compute" in text


def test_a_dry_run_after_a_capped_run_estimates_what_is_left(tmp_path, capsys):
    """After --max-calls stopped a run (when "how much more?" is asked) the dry run opened the partial cache in replay
    mode above its stand-in and died on the first miss (CacheMissError). The cache answers its hits, the stand-in
    the misses, and nothing is sent."""
    import re

    from aumann.simulators.llm import BudgetExceededError

    cfg = _cfg(tmp_path)
    out = tmp_path / "capped"
    with LoopbackLLM() as srv:
        args = ["social-llm", "--config", str(cfg), "--out", str(out), "--backend", "openai", "--model", "m",
                "--base-url", srv.base_url]
        with pytest.raises(BudgetExceededError):
            _invoke(*args, "--no-plots", "--max-calls", "5")
        sent = srv.stats()["requests"]
        capsys.readouterr()
        assert _invoke(*args, "--dry-run") == 0
        assert srv.stats()["requests"] == sent == 5  # the dry run sent nothing
    m = re.search(r"requests after the cache: (\d+) .*; (\d+) served by the cache", capsys.readouterr().out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0


def test_run_records_usage_stops_cleanly_at_the_cap_and_a_resume_adds_to_it(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    cfg = _cfg(tmp_path, runs=2)
    out = tmp_path / "out"
    with LoopbackLLM() as srv:
        url = f"http://user:{SECRET}@127.0.0.1:{srv.port}/v1"
        base = ["social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--backend", "openai",
                "--model", "gpt-4o-mini", "--base-url", url, "--concurrency", "8"]
        monkeypatch.setattr(sys, "argv", ["aumann", "run", *base])
        with pytest.raises(BudgetExceededError, match="max_calls=25"):
            _invoke(*base, "--max-calls", "25")
        first = json.loads((out / "llm-usage.json").read_text())["manifest"]
        assert first["calls"] + first["fork_calls"] == 25 == srv.stats()["requests"]
        stopped = json.loads((out / "manifest.json").read_text())
        assert stopped["status"] == "stopped" and "max_calls=25" in stopped["stopped_because"]
        assert _invoke(*base, "--max-calls", "100000") == 0
        stats = srv.stats()
    manifest = json.loads((out / "manifest.json").read_text())
    u = manifest["llm_usage"]
    assert u["calls"] + u["fork_calls"] == stats["requests"] > 25  # both invocations, exactly the server's count
    assert (u["prompt_tokens"], u["completion_tokens"]) == (stats["prompt_tokens"], stats["completion_tokens"])
    assert u["decisions"] > 0 and u["fork_decisions"] > 0 and u["cost_usd"] > 0 and u["latency_p95_s"] > 0
    assert manifest["llm"]["invocations"] == 2 and manifest["llm"]["structured_output"] == "json_schema"
    report = (out / "report.md").read_text()
    assert "LLM usage" in report and "2 invocation(s)" in report  # the report's cost section (issue 16 layout)
    for f in ("manifest.json", "report.md", "llm-usage.json", "llm-cache.sqlite"):
        assert SECRET.encode() not in (out / f).read_bytes(), f
    assert "http://***@127.0.0.1" in manifest["command"]


def test_offline_runs_report_decisions_and_zero_calls(tmp_path):
    out = tmp_path / "off"
    assert _invoke("econagent", "--config", str(_cfg(tmp_path)), "--out", str(out), "--no-plots") == 0
    u = json.loads((out / "manifest.json").read_text())["llm_usage"]
    assert u["calls"] == u["fork_calls"] == 0 and u["decisions"] == 8 * 4 + 8  # months + one reflection
    assert u["fork_decisions"] > 0


def test_a_rerun_with_another_config_counts_only_its_own_runs_decisions(tmp_path):
    """The runs of another config that a re-run removes took their decisions with them only from the folder: a 1-run
    study with another seed into a 3-run study's folder reported 120 decisions (three runs') in llm_usage."""
    out = tmp_path / "off"
    assert _invoke("econagent", "--config", str(_cfg(tmp_path)), "--runs", "3", "--out", str(out), "--no-plots",
                   "--no-ablations") == 0
    assert json.loads((out / "manifest.json").read_text())["llm_usage"]["decisions"] == 3 * (8 * 4 + 8)
    assert _invoke("econagent", "--config", str(_cfg(tmp_path)), "--seed", "4", "--out", str(out), "--no-plots",
                   "--no-ablations") == 0
    assert json.loads((out / "manifest.json").read_text())["llm_usage"]["decisions"] == 8 * 4 + 8
    assert list(json.loads((out / "llm-usage.json").read_text())["run_counts"]) == ["0"]


def test_ray_missing_is_a_clear_typed_error(monkeypatch):
    import sys

    from aumann.errors import ExecutorError
    from aumann.simulators.executors import make_executor

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ExecutorError, match=r"pip install 'aumann\[ray\]'"):
        make_executor("ray", 2)
    assert make_executor("local", 1) is None and make_executor("local", 2).max_workers == 2


def _outputs(out):
    files = [*sorted((out / "runs").glob("run-*.json")), out / "faithfulness.csv"]
    return {f.name: f.read_bytes() for f in files}


@pytest.fixture(scope="module")
def serial_two_runs(tmp_path_factory):
    """(config, run directory) of the serial two-run study that the executor tests compare against (only read)."""
    root = tmp_path_factory.mktemp("serial-two-runs")
    cfg = _cfg(root, runs=2, perms=4)
    assert _invoke("social-llm", "--config", str(cfg), "--out", str(root / "serial"), "--no-plots") == 0
    return cfg, root / "serial"


@pytest.mark.slow
def test_workers_2_is_bit_identical_to_serial_and_merges_usage_back(tmp_path, serial_two_runs):
    cfg, serial = serial_two_runs
    pooled = tmp_path / "pool"
    assert _invoke("social-llm", "--config", str(cfg), "--out", str(pooled), "--no-plots", "--workers", "2") == 0
    assert _outputs(serial) == _outputs(pooled)
    a = json.loads((serial / "manifest.json").read_text())["llm_usage"]
    b = json.loads((pooled / "manifest.json").read_text())["llm_usage"]
    assert a == b and a["decisions"] > 0  # the workers' usage is merged back, exactly


@pytest.mark.slow
def test_the_resimulation_game_and_deletion_forks_over_a_process_pool_equal_serial():
    from aumann.simulators import LocalExecutor
    from aumann.studies.faithfulness import compute_run

    sc, cfg = tiny_config("social-llm", agents=6, steps=3,
                          study={"permutations": 4, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 8,
                                 "reference_game": "resimulation", "ablations": False})
    serial = compute_run(sc, cfg, 0, np.random.SeedSequence(9), None, None, "d")
    with LocalExecutor(max_workers=2) as pool:
        fanned = compute_run(sc, cfg, 0, np.random.SeedSequence(9), None, None, "d", executor=pool)
    assert json.dumps(serial[0], default=float, sort_keys=True) == json.dumps(fanned[0], default=float, sort_keys=True)
    assert serial[0]["forks"] == fanned[0]["forks"] > 0
    assert serial[3].fork_decisions == fanned[3].fork_decisions > 0  # workers' decisions merged back


@pytest.mark.slow
@pytest.mark.ray
def test_ray_executor_is_bit_identical_to_serial(tmp_path, serial_two_runs):
    pytest.importorskip("ray")
    cfg, serial = serial_two_runs
    rayed = tmp_path / "ray"
    assert _invoke("social-llm", "--config", str(cfg), "--out", str(rayed), "--no-plots", "--executor", "ray",
                   "--workers", "2") == 0
    assert _outputs(serial) == _outputs(rayed)


def test_an_interrupted_and_resumed_run_reports_the_reliability_of_an_uninterrupted_one(tmp_path):
    """Resuming served the unfinished run's decisions again from the cache and counted them again (decisions,
    abstentions, cache hits): the interrupted run's llm_reliability differed from the straight run's (and could
    flip UNRELIABLE) though every result file was the same. The spend still counts every request sent."""
    import hashlib

    from tests.llm_loopback import smart_reply

    def reply(body):  # a quarter of the prompts get no usable answer, whatever the retry
        first = json.dumps([m for m in body["messages"] if m["role"] != "user" or "not usable" not in m["content"]][:2])
        return "I cannot decide" if int(hashlib.sha256(first.encode()).hexdigest(), 16) % 4 == 0 else smart_reply(body)

    def run(out, *extra):
        return _invoke("social-llm", "--agents", "3", "--steps", "2", "--runs", "2", "--permutations", "4",
                       "--no-ablations", "--no-plots", "--set", "study.random_orderings=1",
                       "--set", "study.action_attribution=false", "--backend", "openai", "--model", "m",
                       "--base-url", srv.base_url, "--concurrency", "1", "--out", str(out), *extra)

    with LoopbackLLM(reply) as srv:
        assert run(tmp_path / "straight") == 0
        total = srv.stats()["requests"]
        srv.reset()
        for cap in (total // 4, total * 5 // 8):
            with pytest.raises(BudgetExceededError):
                run(tmp_path / "resumed", "--max-calls", str(cap))
        assert run(tmp_path / "resumed") == 0
        sent = srv.stats()["requests"]

    def manifest(name):
        return json.loads((tmp_path / name / "manifest.json").read_text())

    straight, resumed = manifest("straight"), manifest("resumed")
    assert straight["llm_reliability"]["invalid_decisions"] > 0
    assert resumed["llm_reliability"] == straight["llm_reliability"]
    for k in ("decisions", "fork_decisions", "invalid_decisions"):
        assert resumed["llm_usage"][k] == straight["llm_usage"][k], k
    for f in ("runs/run-000.json", "runs/run-001.json", "faithfulness.csv"):
        assert (tmp_path / "straight" / f).read_bytes() == (tmp_path / "resumed" / f).read_bytes(), f
    u = resumed["llm_usage"]  # the spend: every request of the three invocations, once
    assert u["calls"] + u["fork_calls"] == sent and resumed["llm"]["invocations"] == 3


def test_the_report_says_what_an_abstention_did_in_the_scenario_not_no_action(tmp_path):
    """The report said every invalid decision was 'recorded as abstentions (no action)' and, when unreliable, that
    'the run's agents mostly abstained' -- for MidScale-Social, whose one LLM decision per run is its fixture and
    whose invalid reply makes the run use the committed fixture: nobody abstained. Each scenario now says what an
    abstention does (Scenario.abstention_description, into manifest.json's llm_reliability), and the report
    prints that."""
    from aumann import scenarios
    from aumann.studies.sections import reliability_blocks

    with LoopbackLLM(lambda body: "I cannot decide") as srv:
        assert _invoke("midscale-social", "--agents", "40", "--steps", "4", "--runs", "1", "--permutations", "4",
                       "--no-ablations", "--no-plots", "--judge", "off", "--set", "study.random_orderings=1",
                       "--set", "study.action_attribution=false", "--backend", "openai", "--model", "m",
                       "--base-url", srv.base_url, "--concurrency", "1", "--out", str(tmp_path / "mid")) == 0
    rel = json.loads((tmp_path / "mid" / "manifest.json").read_text())["llm_reliability"]
    assert rel["unreliable"] and rel["abstention"] == scenarios.get("midscale-social").abstention_description
    report = " ".join((tmp_path / "mid" / "report.md").read_text().split())
    assert "recorded as abstentions (the run uses the committed fixture" in report
    assert "(no action)" not in report and "mostly abstained" not in report
    # every built-in scenario describes its own; a scenario without one is not said to have taken 'no action'
    said = {"social-llm": "no post, no reaction", "econagent": "original EconAgent's fallback",
            "megascale-social": "key does nothing", "midscale-social": "committed fixture"}
    for name, words in said.items():
        blocks, _ = reliability_blocks({"llm_reliability": {**rel, "abstention":
                                                            scenarios.get(name).abstention_description}})
        assert words in blocks[0].text, name
    blocks, _ = reliability_blocks({"llm_reliability": {**rel, "abstention": ""}})
    assert "the scenario gave no abstention_description" in blocks[0].text and "(no action)" not in blocks[0].text
