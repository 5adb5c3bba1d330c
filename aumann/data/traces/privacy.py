"""Traces of real people: opaque agent indices and activity tiers (the project's convention, paper Appendix I).

The agents of OASIS, AgentSociety 2 and Concordia runs are simulated, and a trace's agent ids are the
simulator's own (OASIS ``user_id`` is the agent's index; its ``user`` table's names and bios are never
read). A log can nonetheless record real people (an LLM-augmented platform, a real event table read as a
long table): with ``real_people = true`` in the spec (or ``aumann attribute --real-people``) the panel
is keyed by opaque indices 0 … N−1 in order of the sorted ids, agents are labelled with activity tiers
(``top`` / ``mid`` / ``tail``: the top 1 %, next 9 %, last 90 % by total activity over the trace,
:func:`aumann.tiers.tiers_by_rank`) so the report shows tier
shares R_G, and the real ids leave the process only with an explicit ``--export-identifiers``
(``identifiers.csv``: index, id).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aumann.tiers import tiers_by_rank


def pseudonymise(panel: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(panel keyed by opaque indices with a ``tier`` group, [{index, id}] mapping kept for an explicit export)."""
    ids = panel.agent_ids
    mapping = [{"index": i, "id": v.item() if hasattr(v, "item") else v} for i, v in enumerate(ids)]
    meta = dict(panel.meta, identifiers="opaque")
    return retier(panel._derive(agent_ids=np.arange(panel.N), meta=meta)), mapping


def retier(panel: Any) -> Any:
    """The panel with its ``tier`` group made from its own features' total activity (after a feature selection:
    the tiers of the activity the indicator sees)."""
    activity = np.asarray(panel.values, dtype=np.float64).sum(axis=(0, 2))
    return panel._derive(groups={**panel.groups, "tier": tiers_by_rank(activity)})


__all__ = ["pseudonymise", "retier"]
