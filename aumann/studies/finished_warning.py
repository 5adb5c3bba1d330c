"""The study's one warning of models that set ``running = False`` and were stepped on, said by the driver from the
run records it holds.

A run's ``simulate`` keeps the step where its model finished in the panel's ``meta["model_finished"]``, and the
study copies that into the run record (``rec["model_finished"]``) when steps followed it. The runner's own
:class:`~aumann.errors.ModelFinishedWarning` is off in the study: it came once per run, from whichever process
simulated the run (a pool's worker printed it in Python's raw format, a Ray worker's may never reach the console),
and never for a resumed run. :func:`warn_model_finished` says it once per study instead, for computed and resumed
runs alike (``aumann run`` says the same per run in its own "model finished:" lines, and does not show this one).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from aumann.errors import ModelFinishedWarning
from aumann.studies.rundir import model_finished


def _at(d: Mapping[str, Any]) -> str:
    label = "" if d.get("model_step") is None else f" (model step {d['model_step']})"
    return (f"run {d['run']}: before the first step{label}" if d["step"] < 0
            else f"run {d['run']}: at panel step {d['step']}{label}")


def finished_prefix(scenario: str) -> str:
    """How the study's warning for ``scenario`` begins (a command that says it in its own words filters on it)."""
    return f"{scenario}: the model set running = False, the step where Mesa's batch_run stops, in "


def model_finished_warning(scenario: str, records: Sequence[Mapping[str, Any] | None], *,
                           shown: int = 3, written: bool = True) -> str | None:
    """The warning's text for the runs of ``records`` whose model set ``running = False`` before their last step
    (the first ``shown`` of them by name), or ``None`` when no run has one. ``written``: whether the study writes an
    output folder (only then does the text point at manifest.json and the report)."""
    held = [dict(r) for r in records if isinstance(r, Mapping)]
    found = [d for d in model_finished(held) if isinstance(d.get("step"), int) and isinstance(d.get("steps"), int)
             and d["step"] < d["steps"] - 1]
    if not found:
        return None
    runs = "; ".join(_at(d) for d in found[:shown])
    more = f"; and {len(found) - shown} more run(s)" if len(found) > shown else ""
    where = "manifest.json, the report" if written else "the study result's records"
    stop = max(max(d["step"] for d in found) + 1, 1)  # where the last of them finished: no run is cut short
    return (f"{finished_prefix(scenario)}{len(found)} of {len(held)} run(s): {runs}{more}. aumann kept stepping it "
            f"for all {found[0]['steps']} steps, so the "
            "steps after are of a finished model (usually unchanged, so f is flat there and Δv can be 0 at a t* "
            f"among them); each run record keeps it (model_finished; {where}); pass "
            f"steps={stop} (aumann run --steps {stop}) to stop where {'it' if len(found) == 1 else 'the last of them'} "
            "finished")


def warn_model_finished(scenario: str, records: Sequence[Mapping[str, Any] | None], *, written: bool = True) -> None:
    """One :class:`~aumann.errors.ModelFinishedWarning` for the study's runs whose model finished before their last
    step (none when no run's did); ``written``: whether the study writes an output folder."""
    text = model_finished_warning(scenario, records, written=written)
    if text is not None:
        warnings.warn(ModelFinishedWarning(text), stacklevel=3)


__all__ = ["finished_prefix", "model_finished_warning", "warn_model_finished"]
