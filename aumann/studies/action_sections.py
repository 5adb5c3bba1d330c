"""Report blocks for the two deletion games, action attribution, the re-simulation reference and the judge.

Built from the run directory alone (``action_attribution.csv``, ``resimulation_agreement.csv``,
``judge_overlap.csv`` and the run records), like the rest of :mod:`aumann.studies.pages`, which
places them in the "How sure" and "Cost" sections of ``report.html`` / ``report.md``. A part that
did not run says so in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.studies.page import Note, Text, fmt
from aumann.studies.sections import merged_table, read_csv

GAMES = (
    "Two games are scored with the same formulas. **Re-simulation** (`deletion_auc`, `drop_at_5`): the top-k "
    "agents take the baseline action at t* and step t* is re-simulated, so what their actions did to other agents "
    "is removed too. **Masking** (`deletion_auc_masking`, `drop_at_5_masking`): the top-k agents' feature rows at "
    "t* are set to their baseline rows and nothing is re-simulated — the game `aumann_shapley`, `sampled_shapley` "
    "and `leave_one_out` explain; `action_aumann_shapley` explains the re-simulation game. Agents are ranked by "
    "signed φ (who pushed f up first); the ranking by |φ| (the paper's wording) is in the extended table "
    "(`*_magnitude` columns). `deletion_auc` is the mean relative drop over k = 1 … K_del, `drop_at_5` the drop (%) "
    "after five; higher is more faithful. Mean ± std over runs; every column and row of `faithfulness.csv`."
)


def _finite(vals: Sequence[Any]) -> np.ndarray:
    arr = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    return arr[np.isfinite(arr)]


def _max(vals: Sequence[Any]) -> float:
    arr = _finite(vals)
    return float(arr.max()) if arr.size else math.nan


def _mean(vals: Sequence[Any]) -> float:
    arr = _finite(vals)
    return float(arr.mean()) if arr.size else math.nan


def action_blocks(d: Path, recs: Sequence[dict[str, Any]]) -> list[Any]:
    """Action attribution through the simulator: what it is, efficiency against the forks, G-vs-fork gaps,
    cost next to sampled Shapley's on the same game, and the per-run table."""
    acts = [r["action"] for r in recs if r.get("action")]
    if not acts:
        return [Note("No `action_aumann_shapley` row: the scenario has no step map (or `study.action_attribution` is "
                     "off).", "skipped")]
    exact = all(a.get("exact_map") for a in acts)
    holds = acts[0].get("holds") or ""
    rr = [r["cost"]["sampled_shapley_resimulation"] for r in recs
          if (r.get("cost") or {}).get("sampled_shapley_resimulation")]
    masking_evals = _mean([(r.get("cost") or {}).get("sampled_shapley", {}).get("evaluations") for r in recs])
    if rr:
        cost = (f"sampled Shapley on the same game (`sampled_shapley_resimulation`): "
                f"{fmt(_mean([c['step_evals'] for c in rr]))} forks (one-step re-simulations) per run")
    else:
        cost = ("sampled Shapley on the same game was not run (`study.resimulation_reference = true` or "
                "`--resimulation-reference` runs it)"
                + (f"; with the same permutations it would take {fmt(masking_evals)} forks per run"
                   if math.isfinite(masking_evals) else ""))
    kind = ("G equals the simulator at every corner of the cube (decisions at t read only the state before t)"
            if exact else f"G holds {holds}; it equals the simulator at λ = 1 and λ = 0 only")
    text = (
        "`action_aumann_shapley` is the Aumann–Shapley value of the re-simulation game at t* through the scenario's "
        "step map G (the step as a torch function of the agents' participation intensities λ ∈ [0, 1]^N; λ = 1 the "
        "recorded action, λ = 0 the baseline action): φ_i = ∫₀¹ ∂f(G(τ·1))/∂λ_i dτ, so an agent is credited for "
        f"what its action did to the others. {kind}. Efficiency against the fork-measured Δv = v(N) − v(∅): max "
        f"relative gap {fmt(_max([a.get('relative_efficiency_gap') for a in acts]), 2)} over runs; G-vs-fork gap at "
        f"λ = 1 and λ = 0: max {fmt(_max([a.get('fork_gap') for a in acts]), 2)}; on the coalitions the deletion "
        f"curves re-simulated: max {fmt(_max([(a.get('coalition_gap') or {}).get('max_rel') for a in acts]), 3)}, "
        f"mean {fmt(_mean([(a.get('coalition_gap') or {}).get('mean_rel') for a in acts]), 3)} (relative to |Δv|). "
        f"Cost per run: {fmt(_mean([a.get('step_evals') for a in acts]))} step evaluations of G "
        f"({fmt(_mean([a.get('grad_evals') for a in acts]))} forward + backward, the rest forward only); {cost}. "
        "Their wall-clock seconds are under Cost (the one part of the page that differs between two runs with "
        "the same config and seed)."
    )
    rows = read_csv(d / "action_attribution.csv")
    out: list[Any] = [Text(text)]
    if rows:
        out.append(merged_table(rows, caption="Per run (action_attribution.csv)", id="action-attribution"))
    return out


def resimulation_blocks(d: Path) -> list[Any]:
    """Agreement of every method with sampled Shapley on the re-simulation game, with its noise ceiling."""
    rows = read_csv(d / "resimulation_agreement.csv")
    if not rows:
        return [Note("Sampled Shapley on the re-simulation game was not run (off by default: "
                     "`study.resimulation_reference = true` or `--resimulation-reference`).", "skipped")]
    r0 = rows[0]
    return [Text(f"Kendall τ and top-k Jaccard of each method against `sampled_shapley_resimulation` "
                 f"({fmt(r0.get('permutations'))} permutations); the noise ceiling is the agreement of two such runs "
                 f"with different seeds (τ = {fmt(r0.get('kendall_tau_ceiling'), 3)}, "
                 f"J = {fmt(r0.get('jaccard_ceiling'), 3)})."),
            merged_table(rows, caption="resimulation_agreement.csv", id="resimulation-agreement")]


def judge_blocks(d: Path, recs: Sequence[dict[str, Any]]) -> list[Any]:
    """The LLM-as-judge row: which judge, what it saw, its top-k overlap with every method."""
    rows = read_csv(d / "judge_overlap.csv")
    js = [r["judge"] for r in recs if r.get("judge")]
    if not rows or not js:
        return [Note("No `llm_judge` row (`study.judge = \"off\"`).", "skipped")]
    j = js[0]
    who = ("the offline **heuristic stand-in** (a deterministic rule, not an LLM: candidates ranked by their "
           "normalised footprint Σ_d (z − z⁰)/max|z − z⁰|)" if j.get("judge") == "heuristic"
           else f"the LLM `{j.get('judge')}` through the OpenAI-compatible backend (responses cached)")
    return [Text(f"Judge: {who}. It sees the macro curve up to t* and, for each candidate, its features before t*, "
                 f"after t* and under the baseline action, and names the {j.get('k')} agents most responsible for "
                 f"the rise of f (candidates: {j.get('rule')}). It returns a ranking, not values: its magnitude "
                 f"columns and Kendall τ are undefined (–). Reply entries dropped as invalid, mean per run: "
                 f"{fmt(_mean([x.get('invalid') for x in js]), 2)}; ranks completed from the candidate order: "
                 f"{fmt(_mean([x.get('filled') for x in js]), 2)}."),
            merged_table(rows, caption=f"Top-{j.get('top_k')} overlap with each method (judge_overlap.csv)",
                         id="judge-overlap")]


def action_cost_rows(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """("what", value) rows for the "Work done" table: action attribution's cost."""
    acts = [r["action"] for r in recs if r.get("action")]
    if not acts:
        return []
    return [("action attribution: step evaluations of G (per run)", fmt(_mean([a.get("step_evals") for a in acts]))),
            ("action attribution: seconds (per run)", fmt(_mean([a.get("seconds") for a in acts]), 3))]


def resimulation_cost_rows(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """("what", value) rows for the "Work done" table: sampled Shapley on the re-simulation game."""
    rr = [r["cost"]["sampled_shapley_resimulation"] for r in recs
          if (r.get("cost") or {}).get("sampled_shapley_resimulation")]
    if not rr:
        return []
    return [("sampled Shapley on the re-simulation game: forks (per run)", fmt(_mean([c.get("step_evals")
                                                                                     for c in rr]))),
            ("sampled Shapley on the re-simulation game: seconds (per run)", fmt(_mean([c.get("seconds")
                                                                                       for c in rr]), 3))]


def cost_rows(recs: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Both of the above."""
    return action_cost_rows(recs) + resimulation_cost_rows(recs)


def table_columns_note() -> Text:
    """The one-line key to the extended table's columns."""
    return Text("Columns `*_magnitude` rank agents by |φ| (largest effect either way first); the other columns rank "
                "by signed φ, as the headline table; `*_masking*` columns use the masking oracle.")


__all__ = ["GAMES", "action_blocks", "action_cost_rows", "cost_rows", "judge_blocks", "resimulation_blocks",
           "resimulation_cost_rows", "table_columns_note"]
