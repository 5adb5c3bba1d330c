"""The study's one warning of recorded integers past ±2**53 that float64 rounded, said by the driver from the run
records it holds.

A run's recording counts them in the panel's ``meta["rounded_values"]`` and the study copies that into the run
record (``rec["rounded_values"]``, :func:`~aumann.studies.rundir.rounded_values_record`) and ``manifest.json``.
The recording's own :class:`~aumann.errors.PrecisionLossWarning` is off in the study: it came once per run, from
whichever process simulated the run (a pool's worker printed it in Python's raw format, a Ray worker's may never
reach the console), and never for a resumed run. :func:`warn_rounded_values` says it once per study instead, for
computed and resumed runs alike, with the counts summed over the runs and the largest of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aumann.checks import warn_rounded
from aumann.studies.rundir import rounded_largest, rounded_values

#: the parts of ``meta["rounded_values"]``, as the recording's warning names them
_PARTS = {"features": "feature", "context": "context"}


def rounded_values_lost(scenario: str, records: Sequence[Mapping[str, Any] | None], *, shown: int = 5,
                        written: bool = True) -> list[tuple[str, int, int] | tuple[str, int, int, str]]:
    """``(name, count, largest)`` of every feature or context whose recorded integers float64 rounded in some run of
    ``records`` (counts summed over the runs, the largest of them; the name says which runs, the first ``shown`` by
    number), as :func:`aumann.checks.warn_rounded` takes them; empty when no run rounded any. ``written``: whether
    the study writes an output folder (only then does the name point at manifest.json)."""
    held = [dict(r) for r in records if isinstance(r, Mapping)]
    tally: dict[tuple[str, str, bool], list[Any]] = {}  # (part, name, float32) → [count, largest, runs]
    for d in rounded_values(held):
        for part, word in _PARTS.items():
            entries = d.get(part)
            for name, e in (entries.items() if isinstance(entries, dict) else ()):
                count, big = (e.get("count") if isinstance(e, dict) else None), rounded_largest(e)
                if not isinstance(count, int) or isinstance(count, bool) or count <= 0 or big is None:
                    continue
                single = isinstance(e, dict) and e.get("dtype") == "float32"  # (an ArrayRecorder's float32)
                t = tally.setdefault((word, str(name), single), [0, 0, []])
                t[0] += count
                t[1] = max(t[1], abs(big))
                t[2].append(d["run"])
    where = ", manifest.json" if written else ", StudyResult.records"
    lost: list[tuple[str, int, int] | tuple[str, int, int, str]] = []
    for (word, name, single), (count, big, runs) in tally.items():
        which = ", ".join(f"run {r}" for r in runs[:shown]) + (f" and {len(runs) - shown} more" if len(runs) > shown
                                                                 else "")
        lost.append((f"{scenario}: {word} {name!r} in {len(runs)} of {len(held)} run(s) ({which}; counted in each "
                     f"run record's rounded_values{where})", count, big, *(("float32",) if single else ())))
    return lost


def warn_rounded_values(scenario: str, records: Sequence[Mapping[str, Any] | None], *, written: bool = True) -> None:
    """One :class:`~aumann.errors.PrecisionLossWarning` for the study's runs whose recorded integers float64 rounded
    (none when no run's did); ``written``: whether the study writes an output folder."""
    warn_rounded(rounded_values_lost(scenario, records, written=written), stacklevel=3)


__all__ = ["rounded_values_lost", "warn_rounded_values"]
