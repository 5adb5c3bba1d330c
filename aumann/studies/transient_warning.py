"""The study's one warning of agents present at no capture (born and removed within one step, or removed in the
first step before any capture), said by the driver from the run records it holds.

A run's recording counts such agents in the panel's ``meta["transient_agents"]`` and the study copies that into
the run record (``rec["transient_agents"]``). The recording's own :class:`~aumann.errors.TransientAgentsWarning`
is off in the study: it came once per run, from whichever process simulated the run (a pool's or Ray's worker,
where the driver's console never saw it), and never for a resumed run. :func:`warn_transient_agents` says it once
per study instead, for computed and resumed runs alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from aumann.errors import TransientAgentsWarning
from aumann.simulators.transients import transient_text
from aumann.studies.rundir import transient_agents


def transient_agents_warning(scenario: str, records: Sequence[Mapping[str, Any] | None], steps: int, *,
                             shown: int = 3, written: bool = True) -> str | None:
    """The warning's text for the runs of ``records`` with agents present at no capture (the first ``shown`` of
    them in full, by step), or ``None`` when no run has any. ``steps``: the steps each run recorded; ``written``:
    whether the study writes an output folder (only then does the text point at manifest.json and the report)."""
    held = [dict(r) for r in records if isinstance(r, Mapping)]
    found = [d for d in transient_agents(held) if isinstance(d.get("total"), int) and d["total"] > 0
             and isinstance(d.get("steps"), list) and isinstance(d.get("types"), dict)]
    if not found:
        return None
    runs = "; ".join(f"run {d['run']}: {transient_text(d, steps)}" for d in found[:shown])
    more = f"; and {len(found) - shown} more run(s)" if len(found) > shown else ""
    where = "manifest.json, the report" if written else "the study result's records"
    return (f"{scenario}: agents present at no capture in {len(found)} of {len(held)} run(s): {runs}{more}. They "
            "have no φ, and f never saw them; they are counted in each run record's transient_agents "
            f"({where}); to keep what they did, record it as world state (the scenario's context: "
            "name → fn(model), e.g. a count the model keeps), or let them live until the step ends")


def warn_transient_agents(scenario: str, records: Sequence[Mapping[str, Any] | None], steps: int, *,
                          written: bool = True) -> None:
    """One :class:`~aumann.errors.TransientAgentsWarning` for the study's runs with agents present at no capture
    (none when no run has any); ``written``: whether the study writes an output folder."""
    text = transient_agents_warning(scenario, records, steps, written=written)
    if text is not None:
        warnings.warn(TransientAgentsWarning(text), stacklevel=3)


__all__ = ["transient_agents_warning", "warn_transient_agents"]
