"""LLM-as-judge attribution (MAST / Who&When style): ask a judge which agents drove the rise of f.

The judge is shown a compact trace of the target step t* — the macro curve f(z_0) … f(z_t*), and for
each candidate agent its features before the step (z_{t*−1}), after it (z_t*: what it did at t*) and
under the baseline action (z⁰) — and asked for the K agents most responsible for the rise of f at t*,
most responsible first. Candidates are all agents when N ≤ ``max_candidates`` (50), otherwise a
stated shortlist: the ``max_candidates`` agents whose features at t* differ most from their baseline
rows, Σ_d |z_{i,d} − z⁰_{i,d}| / s_d with s_d the spread (standard deviation over agents) of
feature d at t*. The judge satisfies none of the four axioms (no efficiency, symmetry, dummy or
linearity guarantee) and returns a ranking, not values.

Judges are :class:`~aumann.simulators.llm.DecisionBackend` s answering the schema
:class:`JudgeVerdict` (``{"agents": [id, ...]}``):

* an OpenAI-compatible server (:class:`~aumann.simulators.llm.OpenAIBackend`, with its response
  cache, retries and cost guard) — the LLM judge;
* :func:`heuristic_judge` — the offline default: a deterministic **stand-in, not an LLM**. It reads
  the same trace and ranks candidates by their normalised footprint,
  Σ_d (z_{i,d} − z⁰_{i,d}) / max_j |z_{j,d} − z⁰_{j,d}| over the candidates (who did the most,
  relative to the baseline action), ties by id. It exists so the row is reproducible without a
  server; its numbers say nothing about LLM judges.

A reply is cleaned, never trusted: ids that are not candidates or repeat are dropped and counted
(``invalid``), and a short list is completed from the candidate order (``filled``), so the deletion
test always gets K agents; both counts are reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from aumann.attribution.metrics import largest_first
from aumann.errors import MethodError

SYSTEM = ("You are an expert analyst of multi-agent simulations. You read a compact trace of one step and name "
          "the agents responsible for a change in a macro indicator. Reply with a single JSON object only.")


_ID = re.compile(r"[+-]?\d{1,20}")
#: a float past this names no agent exactly (a double skips integers past 2**53; int() made a 309-digit id of 1e308)
_MAX_FLOAT_ID = 2**53
#: integers (JSON integers, digits) name an agent exactly in the range of the panels' ids, int64 and uint64
_INT_IDS = range(-(2**63), 2**64)
_MAX_TEXT_ID = 64  # characters of a text agent id a judge may name (a UUID is 36)


def _int_id(x: Any) -> int | None:
    """``x`` as an integer agent id (``"3"``, ``3.0``), or ``None``: int() took 3.7 for agent 3, true for agent 1
    and 1e308 for a 309-digit id, so garbage made a ranking. Integers and digits are exact up to the int64/uint64
    range of panel ids (a JSON integer is read exactly: 9007199254740993 was dropped as past 2**53, so the judge
    could never name such an agent); an integral float only up to 2**53, past which it names no integer exactly."""
    if isinstance(x, str) and _ID.fullmatch(x.strip()):
        x = int(x.strip())
    elif isinstance(x, float) and x.is_integer():
        x = int(x) if abs(x) <= _MAX_FLOAT_ID else None
    return x if isinstance(x, int) and not isinstance(x, bool) and x in _INT_IDS else None


class JudgeVerdict(BaseModel):
    """The judge's reply: agent ids, most responsible first."""

    model_config = ConfigDict(extra="ignore")

    agents: list[int] = Field(min_length=1, max_length=64)

    @field_validator("agents", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> list[int]:
        if not isinstance(v, list | tuple):
            return []
        # an unusable entry is dropped here, and counted as missing when the list is completed
        return [i for i in map(_int_id, v) if i is not None]


class JudgeTextVerdict(BaseModel):
    """The judge's reply where the agents have text ids (a Mesa model's own ``"fish-3"``, a pair labelled
    ``"(3, 0)"``): agent ids, most responsible first, as integers or as text. :class:`JudgeVerdict` (integers only)
    dropped every such id, so the reply was empty and the judge's row failed; it stays the schema of integer ids,
    whose JSON schema (part of every cached request's key) is unchanged."""

    model_config = ConfigDict(extra="ignore")

    agents: list[int | Annotated[str, StringConstraints(max_length=_MAX_TEXT_ID)]] = Field(min_length=1,
                                                                                          max_length=64)

    @field_validator("agents", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> list[int | str]:
        if not isinstance(v, list | tuple):
            return []
        out: list[int | str] = []
        for x in v:  # an unusable entry is dropped here, and counted as missing when the list is completed
            i = _int_id(x)
            if i is not None:
                out.append(i)
            elif isinstance(x, str) and 0 < len(x.strip()) <= _MAX_TEXT_ID:
                out.append(x.strip())
        return out


def verdict_schema(agent_ids: Sequence[Any]) -> type[BaseModel]:
    """The reply schema for a trace showing these ids: :class:`JudgeVerdict` when every id is an integer, else
    :class:`JudgeTextVerdict`."""
    ints = all(isinstance(a, int | np.integer) and not isinstance(a, bool | np.bool_) for a in agent_ids)
    return JudgeVerdict if ints else JudgeTextVerdict


@dataclass(frozen=True)
class JudgeResult:
    """A judge's ranking of K agents (panel positions) and how it was obtained.

    Attributes:
        ranking: (K,) panel positions, most responsible first.
        candidates: the positions the judge was shown (in the order shown).
        shortlist: whether the candidates are a shortlist (N > ``max_candidates``).
        rule: how candidates were chosen, in words.
        judge: the backend's name (``"heuristic"`` for the offline stand-in).
        invalid: reply entries dropped (not a candidate, or a repeat).
        filled: ranks completed from the candidate order because the reply was short.
        reply: the cleaned reply (agent ids as returned).
    """

    ranking: np.ndarray
    candidates: np.ndarray
    shortlist: bool
    rule: str
    judge: str
    invalid: int = 0
    filled: int = 0
    reply: list[int | str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"judge": self.judge, "shortlist": self.shortlist, "candidates": int(self.candidates.size),
                "rule": self.rule, "invalid": self.invalid, "filled": self.filled,
                "ranking": [int(x) for x in self.ranking]}


def _footprint(z: np.ndarray, z0: np.ndarray) -> np.ndarray:
    spread = z.std(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    return (np.abs(z - z0) / spread).sum(axis=1)


def judge_trace(features: Sequence[str], z_before: np.ndarray | None, z: np.ndarray, z0: np.ndarray,
                f_curve: Sequence[float], t_star: int, k: int, *, agent_ids: Sequence[Any] | None = None,
                max_candidates: int = 50, indicator: str = "f") -> dict[str, Any]:
    """The compact trace a judge sees (a JSON-able dict; ``"candidates"`` holds panel positions too).

    Args:
        features: feature names (D).
        z_before: (N, D) features before the step (``None`` at t* = 0), z: (N, D) after, z0: (N, D)
            under the baseline action.
        f_curve: f(z_0) … f(z_t*).
        t_star: the target step. k: how many agents to name.
        agent_ids: labels shown to the judge (default 0 … N−1).
        max_candidates: all agents up to this N, else the shortlist described in the module docstring.
        indicator: the indicator's name, for the prompt.
    """
    z, z0 = np.asarray(z, dtype=np.float64), np.asarray(z0, dtype=np.float64)
    n = z.shape[0]
    if not 1 <= k <= n:
        raise MethodError(f"the judge must name between 1 and N = {n} agents; got k={k}")
    if max_candidates < k:
        raise MethodError(f"max_candidates ({max_candidates}) must be ≥ k ({k})")
    ids = list(range(n)) if agent_ids is None else [a.item() if hasattr(a, "item") else a for a in agent_ids]
    if n <= max_candidates:
        cand = np.arange(n)
        rule = f"all {n} agents"
    else:
        cand = np.sort(largest_first(_footprint(z, z0), max_candidates))
        rule = (f"shortlist of the {max_candidates} of {n} agents whose features at step {t_star} differ most from "
                "their baseline rows (sum over features of |z - z0| / spread of the feature over agents)")
    rows = []
    for i in cand:
        row = {"position": int(i), "id": ids[i], "after": dict(zip(features, np.round(z[i], 6).tolist())),
               "baseline": dict(zip(features, np.round(z0[i], 6).tolist()))}
        if z_before is not None:
            row["before"] = dict(zip(features, np.round(np.asarray(z_before)[i], 6).tolist()))
        rows.append(row)
    return {"kind": "judge", "indicator": indicator, "t_star": int(t_star), "k": int(k),
            "f_curve": [round(float(x), 6) for x in f_curve], "features": list(features), "rule": rule,
            "shortlist": bool(n > max_candidates), "n_agents": int(n), "candidates": rows}


def judge_messages(trace: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages for ``trace`` (system + one user message)."""
    curve = ", ".join(f"t={t}: {v}" for t, v in enumerate(trace["f_curve"]))
    lines = []
    for row in trace["candidates"]:
        parts = [f"id {row['id']}:"]
        if "before" in row:
            parts.append(f"before {json.dumps(row['before'])}")
        parts += [f"after {json.dumps(row['after'])}", f"baseline {json.dumps(row['baseline'])}"]
        lines.append(" ".join(parts))
    user = (
        f"A simulation with {trace['n_agents']} agents. The macro indicator {trace['indicator']} over steps: {curve}. "
        f"At step {trace['t_star']} it peaks. Candidates ({trace['rule']}): each agent's features before the "
        f"step, after it (what it did at step {trace['t_star']}), and what they would be had it taken the baseline "
        f"action (neutral / inactive) instead. Features: {', '.join(trace['features'])}.\n"
        + "\n".join(lines)
        + f"\n\nName the {trace['k']} agents most responsible for the rise of {trace['indicator']} at step "
        f"{trace['t_star']}, most responsible first, counting effects on other agents. Reply with JSON "
        f'{{"agents": [id, ...]}} listing exactly {trace["k"]} distinct ids from the candidates.'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def heuristic_judge(context: Mapping[str, Any], schema: Any = None, rng: Any = None) -> dict[str, Any]:
    """The offline stand-in judge (not an LLM): candidates by normalised footprint (module docstring)."""
    rows = list(context["candidates"])
    feats = list(context["features"])
    if not rows:
        return {"agents": []}
    d = np.array([[r["after"][f] - r["baseline"][f] for f in feats] for r in rows], dtype=np.float64)
    scale = np.abs(d).max(axis=0)
    score = (d / np.where(scale > 0, scale, 1.0)).sum(axis=1)
    order = sorted(range(len(rows)), key=lambda j: (-score[j], str(rows[j]["id"])))
    return {"agents": [rows[j]["id"] for j in order[: int(context["k"])]]}


def heuristic_backend() -> Any:
    """The heuristic stand-in as a DecisionBackend (an OfflineBackend named ``"heuristic"``)."""
    from aumann.simulators.llm import OfflineBackend

    return OfflineBackend(heuristic_judge, name="heuristic")


class JudgeFallback:
    """A backend's fallback that also knows the judge: :class:`JudgeVerdict` requests get the heuristic
    stand-in, every other request goes to ``inner`` (the scenario's offline policy). A dry run puts
    the fallback in the loop in place of the model, and the scenario's policy cannot answer a judge."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.judge = heuristic_backend()
        self.name = getattr(inner, "name", "fallback")

    def decide(self, messages: Any, schema: Any, *, context: Mapping[str, Any] | None = None,
               seed: int | None = None, **kw: Any) -> Any:
        if schema is JudgeVerdict or schema is JudgeTextVerdict:
            return self.judge.decide(messages, schema, context=context, seed=seed)
        return self.inner.decide(messages, schema, context=context, seed=seed, **kw)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # during unpickling, before __dict__ is filled
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_judge_fallback(backend: Any) -> Any:
    """``backend``, its ``fallback`` (when it has one) made judge-aware (:class:`JudgeFallback`, once)."""
    fb = getattr(backend, "fallback", None)
    if fb is not None and not isinstance(fb, JudgeFallback):
        backend.fallback = JudgeFallback(fb)
    return backend


def _name(backend: Any) -> str:
    name = str(getattr(backend, "name", type(backend).__name__))
    model = getattr(backend, "model", None)
    return f"{name}:{model}" if isinstance(model, str) and model else name


def ask_judge(trace: Mapping[str, Any], backend: Any = None, *, seed: int | None = None) -> JudgeResult:
    """Ask ``backend`` (default: the heuristic stand-in) for the trace's K agents; clean the reply."""
    backend = backend if backend is not None else heuristic_backend()
    from aumann.simulators.llm import decide_all

    schema = verdict_schema([row["id"] for row in trace["candidates"]])
    out = decide_all(backend, [{"messages": judge_messages(trace), "schema": schema, "context": dict(trace),
                                "seed": seed}], return_exceptions=True)[0]
    if isinstance(out, BaseException):
        raise out  # an abstention: the study records the llm_judge row as failed and goes on
    verdict = out if isinstance(out, schema) else schema.model_validate(
        out.model_dump() if isinstance(out, BaseModel) else out)
    rows = trace["candidates"]
    pos_of = {}
    for row in rows:
        pos_of.setdefault(row["id"], row["position"])
        pos_of.setdefault(str(row["id"]), row["position"])
    k = int(trace["k"])
    ranking: list[int] = []
    invalid = 0
    for a in verdict.agents:
        p = pos_of.get(a, pos_of.get(str(a)))
        if p is None or p in ranking:
            invalid += 1
            continue
        ranking.append(p)
    ranking = ranking[:k]
    filled = 0
    for row in rows:
        if len(ranking) >= k:
            break
        if row["position"] not in ranking:
            ranking.append(row["position"])
            filled += 1
    return JudgeResult(ranking=np.asarray(ranking, dtype=np.int64),
                       candidates=np.asarray([r["position"] for r in rows], dtype=np.int64),
                       shortlist=bool(trace["shortlist"]), rule=str(trace["rule"]),
                       judge=_name(backend), invalid=invalid, filled=filled,
                       reply=list(verdict.agents))


__all__ = ["SYSTEM", "JudgeFallback", "JudgeResult", "JudgeTextVerdict", "JudgeVerdict", "ask_judge",
           "heuristic_backend", "heuristic_judge", "judge_messages", "judge_trace", "verdict_schema",
           "with_judge_fallback"]
