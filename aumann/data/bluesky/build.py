"""Write what ``aumann bluesky build-panel`` produces from a :class:`RawCounts` and its report.

Layout of ``out/``::

    users.parquet, daily.parquet, follows.parquet, counts.json   RawCounts.save (opaque user ids)
    panels/window/<topic>.npz                                     T = 1 Panel per topic
    panels/daily/<topic>.npz                                      T = len(days) Panel per topic
                                                                  (no other .npz: an earlier build's are removed)
                                                                  (an earlier synth's calibration.json is removed)
    ingest_report.json                                            events, malformed lines, drops, days
    identifiers.parquet                                           only with export_identifiers
    manifest.json

Privacy (paper, Appendix I): every table and panel is keyed by the opaque index ``user``. By
default the ``did`` column of ``users.parquet`` is written empty and ``handle`` as null, so no file
carries a DID or handle; ``export_identifiers=True`` writes the real values into ``users.parquet``
and also a separate ``identifiers.parquet`` (``user, did, handle``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.counts_folder import BUILD_COMMAND, COUNTS_OUTPUTS, checked_others, remove_others
from aumann.io import (
    OUTPUTS_COMPLETE,
    atomic_path,
    file_digests,
    journaled,
    output_lock,
    settle_journal,
    write_json,
)


def redact_identifiers(counts: RawCounts) -> RawCounts:
    """A copy of ``counts`` whose users table carries no DIDs or handles."""
    users = counts.users.copy()
    users["did"] = ""
    users["handle"] = None
    meta = dict(counts.meta, identifiers="redacted")
    return dataclasses.replace(counts, users=users, meta=meta)


#: the ingest report's wall-clock entries: in manifest.json (``ingest``), not in ingest_report.json
INGEST_WALL_CLOCK = ("seconds", "throughput_mb_s")


def write_build_outputs(
    counts: RawCounts,
    report: dict[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    export_identifiers: bool = False,
    command: str = BUILD_COMMAND,
    config: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write raw counts, per-topic window and daily panels, the report and a manifest; return paths."""
    from aumann.manifest import write_manifest

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # one writer per folder from the checks to the last file (re-entrant: `aumann bluesky build-panel` holds it)
    with output_lock(out, command=command):
        # a file is replaced or removed only when an earlier build recorded writing it (its manifest's
        # outputs_sha256, or the journal of one interrupted); a file of your own with an output's name is kept and
        # stops the build
        # (the raw counts of an earlier `aumann bluesky synth` too: its files that this build does not write —
        # calibration.json — are removed, so that real counts never sit beside a SYNTHETIC population's files)
        panels = [f"panels/{scale}/{topic}.npz" for topic in counts.topics for scale in ("window", "daily")]
        names = [*COUNTS_OUTPUTS, "ingest_report.json", *panels]
        if export_identifiers:
            names.append("identifiers.parquet")
        _, stale = checked_others(out, names)  # every file checked before any is written or removed
        # ingest_report.json holds what the captures and the flags determine (the same bytes on every build); how
        # long the read took is the manifest's
        timing = {k: report[k] for k in INGEST_WALL_CLOCK if k in report}
        report = {k: v for k, v in report.items() if k not in INGEST_WALL_CLOCK}
        with journaled(out):
            written = _write(counts, report, out, export_identifiers=export_identifiers, stale=stale)
            written["manifest"] = write_manifest(
                out, command, config or {}, seeds=None,
                extra={"outputs": sorted(str(p.relative_to(out)) for p in written.values()),
                       OUTPUTS_COMPLETE: True, "outputs_sha256": file_digests(out, names),
                       "synthetic": False, "identifiers": "exported" if export_identifiers else "redacted",
                       **({"ingest": timing} if timing else {})},
            )
        settle_journal(out)
    return written


def _write(counts: RawCounts, report: dict[str, Any], out: Path, *, export_identifiers: bool,
           stale: list[str]) -> dict[str, Path]:
    written: dict[str, Path] = {}
    if export_identifiers:
        ids = counts.users[["user", "did", "handle"]]
        with atomic_path(out / "identifiers.parquet") as tmp:
            ids.to_parquet(tmp, index=False)
        written["identifiers"] = out / "identifiers.parquet"
        saved = counts
    else:
        saved = redact_identifiers(counts)
    # an earlier build's (a panel of a topic this build does not have; identifiers not exported) or synth's
    # (calibration.json); each checked by the caller
    remove_others(out, stale)
    written["counts"] = saved.save(out)
    for topic in counts.topics:
        window, daily = counts.topic_panels(topic)  # (the topic's counts gathered once for both)
        written[f"window/{topic}"] = window.save(out / "panels" / "window" / f"{topic}.npz")
        written[f"daily/{topic}"] = daily.save(out / "panels" / "daily" / f"{topic}.npz")
    rep = out / "ingest_report.json"
    write_json(rep, report, indent=2)
    written["report"] = rep
    return written


__all__ = ["INGEST_WALL_CLOCK", "redact_identifiers", "write_build_outputs"]
