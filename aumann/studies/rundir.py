"""The run directory of ``aumann run``: its layout, the typed run record, writing and verifying runs.

One module owns where everything lives; the study (:mod:`aumann.studies.faithfulness`) writes through
it, and the tables, the pages, resume and ``aumann run`` read through it. The layout::

    <out>/
      manifest.json                  config, seeds, versions, stage summary (written last: "finished")
      faithfulness.csv / .md         the headline table, one row per registered row (method) the runs have
      <table>.csv / .md              every other table (faithfulness_extended, action_attribution, ...)
      report.html, report.md         built from the files alone (``aumann report``)
      macro_curve.png, attribution_heatmap.png, deletion_curves.png   the figures
      runs/run-NNN.json              the run record (:class:`RunRecord`), with its SHA-256 checksum
      runs/run-NNN.npz               the run's arrays (f over steps, φ, deletion curves, ...)
      timings/run-NNN.json           the run's wall-clock seconds (kept out of the record: same config, same bytes)
      panels/run-NNN.npz             the simulated panel
      attributions/run-NNN-<label>.npz   the attributions (``Attribution.load``)

A run is written atomically as soon as its required stages are done (record + checksum), and again
after each optional stage: :meth:`RunDir.write_run`. :meth:`RunDir.verify_run` checks a run found on
disk before a resume reuses it.

The directory is confined: every file here is written and read through :mod:`aumann.io` with
``within=`` the run directory (:func:`aumann.io.confine`: nothing is read or written through a
symbolic link that leaves it), and the record carries the SHA-256 of every other file a resume or the
report reads back (``files_sha256``: the panel, the timing, the attributions), so a truncated, edited or
swapped-in file makes :meth:`RunDir.verify_run` recompute the run (docs/hardening.md). The record's JSON
structure is documented in ``docs/scenarios.md`` ("Run records"); :class:`RunRecord` is its typed form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from aumann.errors import OutputError, PathEscapeError, StudyError
from aumann.io import (
    check_digests,
    check_stale,
    confine,
    ensure_output_dir,
    file_digests,
    plain,
    read_json,
    read_npz,
    record_checksum,
    remove_stale,
    sha256_file,
    write_json,
    write_npz,
)
from aumann.manifest import int64_digits

RUNS, PANELS, ATTRIBUTIONS, TIMINGS = "runs", "panels", "attributions", "timings"
#: bytes a finished run leaves in the run directory per agent-step (MegaScale-Social: 176 MB for 2·10⁵ agents ×
#: 30 steps, its compressed panel, arrays and attributions), and what a run of
#: :data:`~aumann.studies.context.LARGE_N` agents or more spills to the temporary directory while it runs (its
#: panel of three float64 features and φ, 32 bytes): estimates for :meth:`RunDir.room_warning`
RUN_BYTES_PER_AGENT_STEP = 32
SPILL_BYTES_PER_AGENT_STEP = 32
MANIFEST = "manifest.json"
OFFLINE_POLICY = "offline policy"
"""The decision policy of a run whose decisions the scenario's offline policy made (records, manifest, tables)."""
REPORT_HTML, REPORT_MD = "report.html", "report.md"
FAITHFULNESS = "faithfulness"
"""The headline table's name (``faithfulness.csv``)."""
MACRO_CURVE, HEATMAP, DELETION_CURVES = "macro_curve.png", "attribution_heatmap.png", "deletion_curves.png"
"""The PNG figures (``--no-plots``: none)."""


class StageRecord(TypedDict):
    """What happened to one stage of one run (``rec["stages"][name]``)."""

    status: Literal["ok", "failed", "skipped", "pending"]
    optional: bool
    error: NotRequired[str]  # the exception's type name (failed)
    message: NotRequired[str]  # what went wrong (failed), or why the stage did not run (skipped)


class RunRecord(TypedDict):
    """The JSON record of one finished run (``runs/run-NNN.json``); see docs/scenarios.md, "Run records".

    Only what the config and the seed determine is in it (wall-clock seconds live in ``timings/``).
    """

    run: int
    digest: str
    scenario: str
    seed_spawn_key: list[int]
    t_star: int
    f_t_star: float
    f_original_t_star: float
    efficiency_gap: float
    delta_v: float
    methods: dict[str, dict[str, float | None]]  # row name → its metrics, in table order
    cost: dict[str, dict[str, Any]]
    fork_strategy: str
    players: int
    k_del: int
    top_k: int
    policy: str
    ceiling: dict[str, float | None]
    reference: NotRequired[dict[str, Any]]  # the reference row: method, game, permutations, median_stderr
    forks: int
    pooled_fallback: NotRequired[str]  # why the deletion forks were evaluated in full (DeletionOracle.pooled_fallback)
    dead_rows: NotRequired[dict[str, Any]]  # births or deaths: the living set z⁰_t* is evaluated over (stages.py)
    model_finished: NotRequired[dict[str, Any]]  # the model set running = False: {step, model_step, steps}
    #: agents present at no capture (born and removed within a step, or removed in the first step): the panel's
    #: ``meta["transient_agents"]`` ({total, types, steps, removed_before_first_capture}); absent when none
    transient_agents: NotRequired[dict[str, Any]]
    #: recorded integers float64 (an ``ArrayRecorder(dtype=float32)``'s features: float32) could not hold, kept as the
    #: nearest value: the panel's ``meta["rounded_values"]`` (``{"features"|"context": {name: {count, largest[,
    #: dtype]}}}``, a largest past int64 as its digits); absent when none
    rounded_values: NotRequired[dict[str, Any]]
    zero_delta_v: NotRequired[dict[str, Any]]  # Δv(t*) = 0 (every row undefined): stages.zero_delta_v_record
    stages: dict[str, StageRecord]
    arrays_sha256: str
    files_sha256: NotRequired[dict[str, str]]  # SHA-256 of the panel, timing and attributions (relative names)
    checksum: str
    log_k_grid: NotRequired[list[int]]
    action: NotRequired[dict[str, Any]]
    judge: NotRequired[dict[str, Any]]
    resimulation_reference: NotRequired[dict[str, Any]]
    smoothing_gap: NotRequired[dict[str, Any]]
    ablations: NotRequired[dict[str, Any]]
    analysis: NotRequired[dict[str, Any]]


#: keys every finished run record holds; a record without one of them is recomputed (records written before
#: stages were recorded have no ``stages``: they are read as if every stage had run)
RUN_KEYS = ("run", "digest", "t_star", "f_t_star", "methods", "ceiling", "arrays_sha256", "checksum")
#: arrays every finished run's ``.npz`` holds
RUN_ARRAYS = ("f_values", "f_original_values", "phi_all", "phi_ceiling",
              *(f"{kind}_{m}" for m in ("aumann_shapley", "sampled_shapley", "leave_one_out")
                for kind in ("phi", "curve", "curve_original", "curve_magnitude")),
              "curve_random", "curve_original_random")


def _name(r: int) -> str:
    return f"run-{r:03d}"


@dataclass(frozen=True)
class OtherConfigRun:
    """A finished run in the run directory computed under another config (:meth:`RunDir.other_config_runs`): its
    index, that config's digest and the files it wrote (names relative to the run directory, its record first)."""

    run: int
    digest: str
    files: tuple[str, ...]
    #: each file's (device, inode, size, mtime, ctime) when its SHA-256 was checked (``None``: no file there), in the
    #: order of ``files``: :meth:`RunDir.remove_other_config_runs` removes a file still so, without hashing it again
    checked: tuple[tuple[int, ...] | None, ...] = ()

    @property
    def name(self) -> str:
        """``run-NNN``."""
        return _name(self.run)


def _stat_signature(path: Path) -> tuple[int, ...] | None:
    """(device, inode, size, mtime, ctime) of the file at ``path`` itself (a link not followed), ``None`` if none."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def other_config_text(stale: list[OtherConfigRun]) -> str:
    """The runs of another config that a study removes, in words (the console, ``aumann run``)."""
    names = [s.name for s in stale]
    shown = ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, …, {names[-1]}"
    digests = sorted({s.digest for s in stale})
    return (f"{len(stale)} run(s) of another config (digest {', '.join(digests)}: {shown}) are removed with their "
            "arrays, panels, attributions and timings, so the folder never holds runs of two configs (another --out "
            "keeps each config's runs)")


@dataclass(frozen=True)
class RunDir:
    """The run directory at ``root``: every path in it, and reading, writing and verifying runs."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    # ------------------------------------------------------------------ paths
    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def record(self, r: int) -> Path:
        """``runs/run-NNN.json``."""
        return self.root / RUNS / f"{_name(r)}.json"

    def arrays(self, r: int) -> Path:
        """``runs/run-NNN.npz``."""
        return self.root / RUNS / f"{_name(r)}.npz"

    def timing(self, r: int) -> Path:
        """``timings/run-NNN.json``."""
        return self.root / TIMINGS / f"{_name(r)}.json"

    def panel(self, r: int) -> Path:
        """``panels/run-NNN.npz``."""
        return self.root / PANELS / f"{_name(r)}.npz"

    def attribution(self, r: int, label: str) -> Path:
        """``attributions/run-NNN-<label>.npz`` (label: a row name, or e.g. ``sampled_shapley_ceiling``)."""
        return self.root / ATTRIBUTIONS / f"{_name(r)}-{label}.npz"

    def table(self, name: str, ext: str = "csv") -> Path:
        """``<name>.csv`` (or ``.md``)."""
        return self.root / f"{name}.{ext}"

    def figure(self, name: str) -> Path:
        """A figure (:data:`MACRO_CURVE`, :data:`HEATMAP`, :data:`DELETION_CURVES`)."""
        return self.root / name

    def finished_records(self) -> list[Path]:
        """The run records on disk (``runs/run-*.json``), sorted."""
        folder = self.root / RUNS
        return sorted(folder.glob("run-*.json")) if folder.is_dir() else []

    def same_config_runs(self, runs: int, digest: str) -> list[int]:
        """The runs among ``0 .. runs - 1`` whose record on disk says it was computed under the config ``digest``:
        those a resume reads back (once :meth:`verify_run` checks them); a record of another config, an unreadable
        one or one past ``runs`` is not among them."""
        same = []
        for r in range(runs):
            path = self.record(r)
            if not path.is_file():
                continue
            try:
                rec = read_json(path, error=StudyError, what="run record", within=self.root, object_only=True)
            except (StudyError, PathEscapeError, OSError):
                continue
            if rec.get("digest") == digest:
                same.append(r)
        return same

    def other_config_runs(self, digest: str) -> list[OtherConfigRun]:
        """The runs on disk that an earlier ``aumann run`` computed under another config than ``digest`` (any index,
        past this config's ``runs`` too), each with every file it wrote: its record, arrays, timing, panel and
        attributions (the names its record lists in ``files_sha256``).

        Only a record aumann wrote, unchanged, counts (its checksum verifies and it names its own index): one that
        does not is not known as aumann's and is left alone (a file of yours, or a run of this config interrupted
        mid-write, which resume recomputes). Every file of such a run is checked to be the one the record vouches
        for (:func:`~aumann.io.check_stale`): a file changed since, or a link, is refused with an
        :class:`~aumann.errors.OutputError` naming it, before anything is removed
        (:meth:`remove_other_config_runs` removes them). Runs of this config past ``runs`` are not among them: a
        later run with more runs resumes them."""
        stale = []
        for path in self.finished_records():
            index = _index_of(path)
            if index is None or path.is_symlink():
                continue
            try:
                rec = read_json(path, error=StudyError, what="run record", within=self.root, object_only=True)
            except (StudyError, PathEscapeError, OSError):
                continue
            if rec.get("run") != index or rec.get("digest") == digest or not isinstance(rec.get("digest"), str) \
                    or record_checksum({k: v for k, v in rec.items() if k != "checksum"}) != rec.get("checksum"):
                continue
            rel = path.relative_to(self.root).as_posix()
            recorded: dict[str, str] = {rel: sha256_file(path, within=self.root)}  # vouched for by its checksum
            arrays = self.arrays(index).relative_to(self.root).as_posix()
            if isinstance(rec.get("arrays_sha256"), str):
                recorded[arrays] = rec["arrays_sha256"]
            listed = rec.get("files_sha256") if isinstance(rec.get("files_sha256"), dict) else {}
            panel = self.panel(index).relative_to(self.root).as_posix()
            own = f"{ATTRIBUTIONS}/{_name(index)}-"  # (a listed name of another run, or elsewhere, is not removed)
            recorded.update({k: str(v) for k, v in listed.items()
                             if isinstance(k, str) and (k == panel or (k.startswith(own) and k.endswith(".npz")
                                                                       and "/" not in k[len(ATTRIBUTIONS) + 1:]))})
            timing = self.timing(index)
            names = [rel, arrays, *sorted(n for n in recorded if n not in (rel, arrays))]
            if timing.is_file() or timing.is_symlink():
                name = timing.relative_to(self.root).as_posix()
                if not timing.is_symlink() and self.checked_timing(index) is not None:  # vouched for by its checksum
                    recorded[name] = sha256_file(timing, within=self.root)
                names.append(name)
            checked = []
            for name in names:  # every file checked before any is removed
                before = _stat_signature(self.root / name)
                check_stale(self.root / name, within=self.root, recorded=recorded)
                checked.append(before if _stat_signature(self.root / name) == before else None)
            stale.append(OtherConfigRun(index, rec["digest"], tuple(names), tuple(checked)))
        return stale

    def remove_other_config_runs(self, stale: list[OtherConfigRun]) -> int:
        """Remove the files of :meth:`other_config_runs` (each checked there, once: ``aumann run`` checks them before
        the study starts and passes them along), the record of each run last (an interrupted removal leaves the
        record that vouches for what is left, and the next run removes the rest); how many files were there.

        A file that is no longer the one checked (its size, times or inode changed since, or one has appeared) is
        refused with an :class:`~aumann.errors.OutputError` naming it, before anything is removed: the files are
        hashed once (a MegaScale folder's runs are GBs), so the check is not repeated, only confirmed."""
        for run in stale:
            for name, sig in zip(run.files, run.checked, strict=False):
                if _stat_signature(self.root / name) != sig:
                    raise OutputError(f"{str(self.root / name)!r} changed after it was checked as a file of "
                                      f"{run.name} of another config, which this run removes: it is kept, and nothing "
                                      "is removed; run again")
        removed = 0
        for run in stale:
            for name in (*run.files[1:], run.files[0]):
                removed += remove_stale(self.root / name, within=self.root)
        return removed

    # ------------------------------------------------------------------ writing
    def prepare(self) -> None:
        """Create every folder a finished run is written to (before the first simulation); a folder that is a
        symbolic link leading out of the run directory is a :class:`~aumann.errors.PathEscapeError`."""
        for folder in (self.root, self.root / RUNS, self.root / PANELS, self.root / ATTRIBUTIONS,
                       self.root / TIMINGS):
            confine(folder, self.root, what="study output directory")
            ensure_output_dir(folder, "study output directory")

    def room_warning(self, agents: int, steps: int, runs: int) -> str | None:
        """A sentence when the disk of this run directory (and that of the temporary directory, where a large
        run spills its panel and φ) has clearly less room than ``runs`` runs of ``agents`` × ``steps`` are
        likely to need; ``None`` when it looks enough or the free space cannot be read.

        The need is an estimate from the sizes MegaScale-Social writes (about :data:`RUN_BYTES_PER_AGENT_STEP`
        bytes per agent-step of each run here, :data:`SPILL_BYTES_PER_AGENT_STEP` of one run in the temporary
        directory): a 10⁷-agent, 30-step run needs about 20 GB. A warning, never an error: the estimate is
        rough, and a run that finds no room fails with the disk's own error when it writes."""
        import shutil
        import tempfile

        need_out = RUN_BYTES_PER_AGENT_STEP * agents * steps * runs
        need_tmp = SPILL_BYTES_PER_AGENT_STEP * agents * steps
        tmp = Path(tempfile.gettempdir())
        try:
            same = self.root.stat().st_dev == tmp.stat().st_dev
            needs = [(self.root, need_out + (need_tmp if same else 0))] + ([] if same else [(tmp, need_tmp)])
            short = [(where, need, shutil.disk_usage(where).free) for where, need in needs]
        except OSError:
            return None
        short = [(where, need, free) for where, need, free in short if free < need]
        if not short:
            return None
        return "; ".join(f"{str(where)!r} has {free / 1e9:.1f} GB free and this study will likely write about "
                         f"{need / 1e9:.1f} GB there" for where, need, free in short) + (
            f" ({runs} run(s) of {agents:,} agents × {steps} steps; the large arrays of a run are written when it "
            "finishes, so a full disk shows only then). Free some space, or choose --out (and TMPDIR) on a "
            "larger disk")

    def save_panel(self, r: int, panel: Any) -> Path:
        """``panels/run-NNN.npz`` (confined to the run directory)."""
        return panel.save(self.panel(r), within=self.root)

    def save_attribution(self, r: int, label: str, res: Any) -> Path:
        """``attributions/run-NNN-<label>.npz`` (confined to the run directory), without the wall-clock seconds
        of its provenance (they live in ``timings/``): same config and seed, same bytes, so the record can carry
        its checksum."""
        import copy

        timed = copy.copy(res)
        object.__setattr__(timed, "provenance", _without_seconds(res.provenance))
        return timed.save(self.attribution(r, label), within=self.root)

    def read_files(self, r: int) -> list[str]:
        """The files of run ``r`` besides its record, arrays and timing that resume and the report read back
        (relative names: its panel, its attributions), as far as they exist. (The timing carries its own
        checksum: its seconds differ from run to run, the record's bytes may not.)"""
        names = [p.relative_to(self.root).as_posix() for p in (self.panel(r),) if p.is_file()]
        folder = self.root / ATTRIBUTIONS
        if folder.is_dir():
            names += sorted(f"{ATTRIBUTIONS}/{p.name}" for p in folder.glob(f"{_name(r)}-*.npz"))
        return names

    def write_run(self, r: int, rec: dict[str, Any], arrays: dict[str, np.ndarray], *,
                  timing: dict[str, Any] | None = None, digest: str = "") -> RunRecord:
        """Write run ``r`` atomically: arrays, then the record with their SHA-256 and its own checksum
        (``timing``: the seconds, to ``timings/``). Returns the record exactly as written."""
        npz = write_npz(self.arrays(r), arrays, within=self.root)
        rec = dict(rec)
        name = npz.relative_to(self.root).as_posix()
        rec["arrays_sha256"] = file_digests(self.root, [name])[name]  # a big one was hashed as it was written
        if timing is not None:
            body = plain({"run": r, "digest": digest, "seconds": timing})
            write_json(self.timing(r), {**body, "checksum": record_checksum(body)}, within=self.root)
        rec["files_sha256"] = file_digests(self.root, self.read_files(r))  # every other file read back
        return self._write_record(r, rec)

    def _write_record(self, r: int, rec: dict[str, Any]) -> RunRecord:
        rec = seal(rec)
        write_json(self.record(r), rec, within=self.root)
        return rec

    # ------------------------------------------------------------------ reading
    def read_timing(self, r: int) -> dict[str, Any]:
        """The seconds of run ``r`` (``{}`` when absent, unreadable, not run ``r``'s, or not finite non-negative
        seconds: :class:`aumann.records.RunTiming`)."""
        seconds = self.checked_timing(r)
        return {} if seconds is None else seconds

    def checked_timing(self, r: int) -> dict[str, Any] | None:
        """The seconds of run ``r`` if its timing file is there and verifies (schema, run index, checksum), else
        ``None``."""
        from aumann.records import RunTiming, check

        try:
            data = check(RunTiming, read_json(self.timing(r), error=StudyError, what="run timing", within=self.root,
                                              max_bytes=2**20), error=StudyError, what="run timing")
        except (StudyError, OSError):
            return None
        if data["run"] != r or record_checksum({k: v for k, v in data.items() if k != "checksum"}) != data.get(
                "checksum"):
            return None
        return data["seconds"]

    def verify_run(self, r: int, digest: str) -> tuple[str, str | None, RunRecord | None,
                                                        dict[str, np.ndarray] | None]:
        """Check run ``r`` on disk before resuming it → (status, reason, record, arrays).

        ``status`` is ``"done"`` (the record's checksum and the arrays' SHA-256 verify, every key and array is
        there, same config digest), ``"todo"`` (computed under another config: recomputed, not an error) or
        ``"corrupt"`` (unreadable or truncated JSON or ``.npz``, missing keys or arrays, an edited number — the
        checksum does not match); ``reason`` says what failed.
        """
        return verify_run(self.record(r), digest)


def _without_seconds(prov: Any) -> Any:
    """``prov`` without its wall-clock entries (keys ``seconds`` / ``*_seconds``, at any depth)."""
    if isinstance(prov, dict):
        return {k: _without_seconds(v) for k, v in prov.items()
                if not (isinstance(k, str) and (k == "seconds" or k.endswith("_seconds")))}
    return prov


def seal(rec: dict[str, Any]) -> RunRecord:
    """``rec`` exactly as its JSON file holds it (NaN → None) with its checksum (the last key)."""
    rec = plain({k: v for k, v in rec.items() if k != "checksum"})
    rec["checksum"] = record_checksum(rec)
    return rec  # type: ignore[return-value]


def verify_run(rec_path: Path, digest: str, *, reuse: bool = False) -> tuple[str, str | None, RunRecord | None,
                                                                            dict[str, np.ndarray] | None]:
    """:meth:`RunDir.verify_run` for the record at ``rec_path`` (its arrays beside it, in ``<run dir>/runs/``).

    Everything is read confined to the run directory and bounded; the record must fit its schema
    (:class:`aumann.records.RunRecord`: finite, ranged, typed — a ``t_star`` of −1 with a fixed-up checksum is
    still damaged) and every file it lists in ``files_sha256`` must match (a record without them, from an older
    aumann, is recomputed too). ``reuse``: the checksums this process took of files it wrote or read and that
    are still the same files are trusted (:func:`aumann.io.check_digests`; the report of the run just written).
    """
    from aumann.records import RunRecord as RecordSchema
    from aumann.records import check

    rec_path = Path(rec_path)
    npz = rec_path.with_suffix(".npz")
    root = rec_path.parent.parent
    if not rec_path.is_file() and not rec_path.is_symlink():
        return "corrupt", "the record (.json) is missing", None, None
    try:
        rec = read_json(rec_path, error=StudyError, what="run record", within=root, object_only=True)
    except (StudyError, PathEscapeError) as exc:
        return "corrupt", f"the record is unreadable: {exc}", None, None
    missing = [k for k in RUN_KEYS if k not in rec]
    if missing:
        return "corrupt", f"the record lacks {missing}", None, None
    if record_checksum({k: v for k, v in rec.items() if k != "checksum"}) != rec["checksum"]:
        return "corrupt", "the record's checksum does not match (edited or damaged)", None, None
    try:
        check(RecordSchema, rec, error=StudyError, what="the record")
    except StudyError as exc:
        return "corrupt", str(exc), None, None
    index = _index_of(rec_path)
    if index is not None and rec["run"] != index:  # a verified pair of another run's files copied into this place
        return "corrupt", f"the record is run {rec['run']}'s, not run {index}'s (another run's files)", None, None
    if rec["digest"] != digest:
        return "todo", None, None, None
    if not npz.is_file() and not npz.is_symlink():
        return "corrupt", "its arrays (.npz) are missing", None, None
    if check_digests(root, {f"{RUNS}/{npz.name}": rec["arrays_sha256"]}, reuse=reuse):
        return "corrupt", "its arrays (.npz) do not match their checksum (truncated, edited or replaced)", None, None
    if rec.get("files_sha256") is None:
        return "corrupt", "the record has no checksums of its panel and attribution files (an older aumann)", None, None
    bad = check_digests(root, rec["files_sha256"], reuse=reuse)
    timing = root / TIMINGS / f"{rec_path.stem}.json"
    if (timing.is_file() or timing.is_symlink()) and RunDir(root).checked_timing(int(rec["run"])) is None:
        bad.append((f"{TIMINGS}/{timing.name}", "does not match its checksum (truncated, edited or replaced)"))
    if bad:
        return "corrupt", "; ".join(f"{name} {why}" for name, why in bad[:3]), None, None
    try:
        arrays, _ = read_npz(npz, error=StudyError, what="run arrays", within=root)
    except (StudyError, PathEscapeError) as exc:
        return "corrupt", str(exc), None, None
    lacking = [k for k in RUN_ARRAYS if k not in arrays]
    if lacking:
        return "corrupt", f"its arrays lack {lacking[:5]}", None, None
    return "done", None, rec, arrays  # type: ignore[return-value]


def _index_of(rec_path: Path) -> int | None:
    """The run index a record's file name gives (``run-007.json`` → 7); ``None`` for another name."""
    stem = rec_path.stem
    digits = stem[len("run-"):]
    return int(digits) if stem.startswith("run-") and digits.isdigit() else None


#: the prefix of a scenario analysis' seconds in a run's timing (``rec["analysis"]["timings"]``: MegaScale-Social's
#: ``analysis/cascade_exact``, ...)
ANALYSIS_TIMING = "analysis/"


def split_timing(rec: dict[str, Any]) -> dict[str, float]:
    """Take the wall-clock seconds out of a run record (in place) and return them per method.

    Run records hold only what the config and seed determine (same config + seed → same bytes,
    whatever the executor or machine load); the seconds live beside them in ``timings/run-NNN.json``
    and :func:`with_timing` puts them back for tables and reports: each row's ``cost`` seconds, action
    attribution's and a scenario analysis' ``rec["analysis"]["timings"]`` (as ``analysis/<key>``)."""
    timing: dict[str, float] = {}
    act = rec.get("action")
    if isinstance(act, dict) and "seconds" in act:
        timing["action_aumann_shapley"] = act.pop("seconds")
    for m, c in (rec.get("cost") or {}).items():
        if isinstance(c, dict) and "seconds" in c:
            sec = c.pop("seconds")
            timing.setdefault(m, sec)
    analysis = rec.get("analysis")
    if isinstance(analysis, dict) and isinstance(analysis.get("timings"), dict):  # a scenario's analysis stages
        timing.update({f"{ANALYSIS_TIMING}{k}": v for k, v in analysis.pop("timings").items()})
    return timing


def with_timing(rec: dict[str, Any], timing: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of run record ``rec`` with the seconds of :func:`split_timing` back in place (missing: None)."""
    import copy

    out = copy.deepcopy(rec)
    timing = timing or {}
    if isinstance(out.get("action"), dict):
        out["action"]["seconds"] = timing.get("action_aumann_shapley")
    for m, c in (out.get("cost") or {}).items():
        if isinstance(c, dict):
            c["seconds"] = timing.get(m)
    analysis = {k[len(ANALYSIS_TIMING):]: v for k, v in timing.items() if k.startswith(ANALYSIS_TIMING)}
    if analysis and isinstance(out.get("analysis"), dict):
        out["analysis"]["timings"] = analysis
    return out


def read_timing(run_dir: Path, r: int) -> dict[str, Any]:
    """The seconds of run ``r`` in ``run_dir`` (``timings/run-NNN.json``; ``{}`` when absent or unreadable)."""
    return RunDir(Path(run_dir)).read_timing(r)


def offline_policy_text(text: Any, backend: str) -> Any:
    """``text``, a run's decision policy (a record's ``policy`` or ``analysis.policy``, ``manifest.json``'s ``policy``,
    ``faithfulness.csv``'s ``policy`` column: labels joined by ``"; "``), as read back from a run whose decisions the
    offline policy made under the registered backend ``backend`` (its factory returned ``None``): the labels run
    directories written before that was known hold for it -- ``"LLM (nothing)"`` (the record) and ``"LLM nothing"``
    (MegaScale's analysis) for ``backend="nothing"`` -- read as ``"offline policy"``, what ``aumann run`` records now.
    Anything else is returned as it is. Only what is shown changes: the files keep their bytes (and their checksums),
    and the resume digest is the run's config and label, never this text."""
    if not isinstance(text, str) or not backend:
        return text
    old = {f"LLM ({backend})", f"LLM {backend}"}
    parts = [OFFLINE_POLICY if part in old else part for part in text.split("; ")]
    return "; ".join(sorted(set(parts))) if parts != text.split("; ") else text


def offline_policy_record(rec: dict[str, Any], backend: str) -> dict[str, Any]:
    """Run record ``rec`` as read back from a run the offline policy decided under the registered backend
    ``backend`` (:func:`offline_policy_text` of its ``policy`` and ``analysis.policy``): a copy where either changes,
    else ``rec`` itself. Its ``checksum`` stays the file's."""
    policy = offline_policy_text(rec.get("policy"), backend)
    analysis = rec.get("analysis")
    inner = offline_policy_text(analysis.get("policy"), backend) if isinstance(analysis, dict) else None
    if policy == rec.get("policy") and (not isinstance(analysis, dict) or inner == analysis.get("policy")):
        return rec
    out = {**rec, "policy": policy} if "policy" in rec else dict(rec)
    if isinstance(analysis, dict) and "policy" in analysis:
        out["analysis"] = {**analysis, "policy": inner}
    return out


def stage_failures(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every stage that did not finish, over the runs: ``{run, stage, status, error, message}``."""
    out = []
    for i, rec in enumerate(records):
        for name, st in (rec.get("stages") or {}).items():
            if isinstance(st, dict) and st.get("status") in ("failed", "pending"):
                out.append({"run": rec.get("run", i), "stage": name, "status": st.get("status"),
                            "error": st.get("error", ""), "message": st.get("message", "")})
    return out


def pooled_fallbacks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run whose deletion forks were evaluated in full although both indicators declare a pooled form
    (:attr:`~aumann.evaluation.deletion.DeletionOracle.pooled_fallback`): ``{run, reason}``."""
    return [{"run": rec.get("run", i), "reason": str(rec["pooled_fallback"])}
            for i, rec in enumerate(records) if rec.get("pooled_fallback")]


def dead_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run with births or deaths (``rec["dead_rows"]``, :func:`aumann.studies.stages.dead_rows_record`):
    ``{run, baseline_alive, died_at_t_star, f_baseline_t_star, f_all_at_baseline_action}``."""
    return [{"run": rec.get("run", i), **rec["dead_rows"]} for i, rec in enumerate(records)
            if isinstance(rec.get("dead_rows"), dict)]


def model_finished(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run whose model set ``running = False`` (``rec["model_finished"]``, the panel's
    ``meta["model_finished"]``): ``{run, step, model_step, steps}``."""
    return [{"run": rec.get("run", i), **rec["model_finished"]} for i, rec in enumerate(records)
            if isinstance(rec.get("model_finished"), dict)]


def transient_agents(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run with agents present at no capture (``rec["transient_agents"]``, the panel's
    ``meta["transient_agents"]``): ``{run, total, types, steps, ...}``."""
    return [{"run": rec.get("run", i), **rec["transient_agents"]} for i, rec in enumerate(records)
            if isinstance(rec.get("transient_agents"), dict)]


def rounded_largest(e: Any) -> int | None:
    """The ``largest`` of one ``rounded_values`` entry (an int, or its decimal text past int64), or ``None``."""
    return _record_integer(e.get("largest") if isinstance(e, dict) else None)


def _record_integer(v: Any) -> int | None:
    """An integer a record holds as a number, or as its digits past int64 (:func:`aumann.manifest.int64_digits`);
    ``None`` for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and len(v) < 400 and v[v.startswith("-"):].isdecimal() and v.isascii():
        return int(v)  # (digits only: "²" is a digit to str.isdigit, and int() refuses it)
    return None


def transient_agents_text(d: dict[str, Any]) -> str:
    """One run's agents that no capture saw, in words (report): how many, of which types, how, in how many steps."""
    return f"run {d.get('run')}: {transient_agents_words(d)}"


def transient_agents_words(d: dict[str, Any]) -> str:
    """A panel's ``meta["transient_agents"]`` in words: how many, of which types, how, in how many steps."""
    total = d.get("total")
    types = d.get("types") if isinstance(d.get("types"), dict) else {}
    steps = d.get("steps") if isinstance(d.get("steps"), list) else []
    before = d.get("removed_before_first_capture") or 0
    born = total - before if isinstance(total, int) and isinstance(before, int) else None
    what = [", ".join(f"{v} {k}" for k, v in types.items()),
            *([f"{born} born and removed within one step"] if born else []),
            *([f"{before} there before the first step and removed in it"] if before else [])]
    said = "; ".join(w for w in what if w)
    return f"{total}{f' ({said})' if said else ''} in {len(steps)} step(s)"


def rounded_values_record(meta: Any) -> dict[str, Any] | None:
    """A panel's ``meta["rounded_values"]`` for a run record: the entries that counted some (``count`` > 0), as
    they are, with a ``largest`` past int64 as its digits (records hold int64 integers only, :mod:`aumann.records`);
    ``None`` when nothing was counted (or the meta is not of that shape)."""
    if not isinstance(meta, dict):
        return None
    out: dict[str, Any] = {}
    for part in ("features", "context"):
        entries = meta.get(part)
        if not isinstance(entries, dict):
            continue
        kept = {str(k): int64_digits(e) for k, e in entries.items()
                if isinstance(e, dict) and _count(e.get("count")) > 0}
        if kept:
            out[part] = kept
    return out or None


def _count(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def rounded_values(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run whose recorded integers were rounded (``rec["rounded_values"]``): ``{run, features, context}``."""
    return [{"run": rec.get("run", i), **rec["rounded_values"]} for i, rec in enumerate(records)
            if isinstance(rec.get("rounded_values"), dict) and rounded_values_words(rec["rounded_values"])]


def rounded_values_words(d: Any, quote: Callable[[str], str] = repr) -> str:
    """A panel's ``meta["rounded_values"]`` in words: per feature and context, how many values, the largest (and
    float32 where the recorder stored float32); ``""`` when it counts none (absent, zero, or not of that shape).
    ``quote`` shows a name (a page passes one that keeps Markdown in a user's feature name from being read)."""
    if not isinstance(d, dict):
        return ""
    said = []
    for part, noun in (("features", "feature"), ("context", "context")):
        entries = d.get(part)
        for name, e in (entries.items() if isinstance(entries, dict) else ()):
            n = _count(e.get("count")) if isinstance(e, dict) else 0
            if n <= 0:
                continue
            single = e.get("dtype") == "float32"
            big = stored_integer_text(e.get("largest"), single)
            said.append(f"{noun} {quote(str(name))}{' (float32)' if single else ''}: {n:,} value(s)"
                        + (f", the largest {big}" if big else ""))
    return "; ".join(said)


def stored_integer_text(v: Any, single: bool = False) -> str | None:
    """An integer (or its digits, as a record holds one past int64) with thousands separators and the value it was
    stored as (float64, or float32 with ``single``); ``None`` for anything else."""
    v = _record_integer(v)
    if v is None:
        return None
    try:
        with np.errstate(over="ignore"):
            now = f"{int(np.float32(float(v)) if single else float(v)):,}"
    except OverflowError:
        now = "inf"
    return f"{v:,} (stored as {now})"


def rounded_values_text(d: dict[str, Any], quote: Callable[[str], str] = repr) -> str:
    """One run's rounded integers, in words (report)."""
    return f"run {d.get('run')}: {rounded_values_words(d, quote)}"


#: what a rounded-integers line of a page adds after the counts
ROUNDED_VALUES_NOTE = ("recorded integers past ±2⁵³ (float32: ±2²⁴), which the panel's numbers cannot all hold, "
                       "kept as the nearest value (f and φ saw those)")


def zero_delta_v(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run with Δv = 0 at t* (``rec["zero_delta_v"]``, :func:`aumann.studies.stages.zero_delta_v_record`):
    ``{run, t_star, window, largest_abs_delta_v_step, largest_abs_delta_v}``."""
    return [{"run": rec.get("run", i), **rec["zero_delta_v"]} for i, rec in enumerate(records)
            if isinstance(rec.get("zero_delta_v"), dict)]


def model_finished_text(d: dict[str, Any]) -> str:
    """One run's finished model, in words (console, report)."""
    label = "" if d.get("model_step") is None else f" (model step {d['model_step']})"
    at = int(d["step"])
    when = "before the first step" if at < 0 else f"at panel step {at}{label}"
    return (f"run {d['run']}: the model set running = False {when}, where Mesa's batch_run stops; aumann kept "
            f"stepping it for all {d['steps']} steps, so the last {int(d['steps']) - 1 - at} are of a finished model "
            f"(pass --steps {max(at + 1, 1)} to stop where it finished)")


def zero_delta_v_text(d: dict[str, Any]) -> str:
    """One run's Δv(t*) = 0, in words: why its faithfulness rows are undefined and what to change."""
    lo, hi = d["window"]
    where = ("Δv = 0 on every step of the window, so no choice of t* there helps: the baseline action changes "
             "nothing the indicator reads" if d.get("largest_abs_delta_v_step") is None else
             f"the step of the window with the largest |Δv| is {d['largest_abs_delta_v_step']} "
             f"(Δv = {d['largest_abs_delta_v']:.4g})")
    return (f"run {d['run']}: Δv = f(z) − f(z⁰) = 0 at t* = {d['t_star']} (t* = argmax f over steps {lo}…{hi}), so "
            f"there is no change to explain and this run's faithfulness rows say nothing (deletion drops 0, rankings "
            f"undefined: –); {where}. Run fewer steps (a model "
            f"that stops changing, or that set running = False, has a flat f late in the run), or use a baseline "
            f"action that changes what the indicator reads at t*")


def control_fallbacks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run whose control-variate row ran without its control (the indicator has no gradient: plain sampling
    on the same permutations): ``{run, reason}``."""
    out = []
    for i, rec in enumerate(records):
        cv = rec.get("sampled_shapley_cv")
        if isinstance(cv, dict) and cv.get("control_fallback"):
            out.append({"run": rec.get("run", i), "reason": str(cv["control_fallback"])})
    return out


def failure_text(f: dict[str, Any]) -> str:
    """One line for a stage that did not finish: ``"ablation zero-baseline skipped: IndicatorError: …"``."""
    if f.get("status") == "pending":
        return f"{f['stage']} did not run: the run was interrupted before it"
    return f"{f['stage']} skipped: {f.get('error') or 'error'}: {f.get('message') or ''}".rstrip(": ")


@dataclass
class StudyResult:
    """Every run's record (in run order) plus where they live and how many were resumed."""

    scenario: str
    records: list[dict[str, Any]]
    arrays: list[dict[str, np.ndarray]]
    out_dir: Path | None
    resumed: int = 0
    computed: int = 0
    sizes: Any = None  # StudySizes of the config
    panels: list[Any] = field(default_factory=list)
    #: finished runs found on disk that failed verification and were recomputed: {run, file, reason}
    failed_checks: list[dict[str, Any]] = field(default_factory=list)
    usage: Any = None  # the LLM usage (aumann.simulators.llm.Usage) of the runs computed now
    run_counts: dict[int, Any] = field(default_factory=dict)  # per run written now: its Usage.run_counts()
    timings: list[dict[str, Any]] = field(default_factory=list)  # per run: seconds per method (split_timing)
    #: wall seconds per stage of the runs computed on an executor's workers, summed over those runs (their
    #: progress reached the caller as one "done (worker)"); empty when every run was computed in the caller's process
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def timed_records(self) -> list[dict[str, Any]]:
        """The records with their seconds back in place (:func:`with_timing`), for tables and reports."""
        timings = self.timings or [{}] * len(self.records)
        return [with_timing(rec, t) for rec, t in zip(self.records, timings)]

    def stage_failures(self) -> list[dict[str, Any]]:
        """:func:`stage_failures` of the records."""
        return stage_failures(self.records)

    def control_fallbacks(self) -> list[dict[str, Any]]:
        """:func:`control_fallbacks` of the records."""
        return control_fallbacks(self.records)

    def pooled_fallbacks(self) -> list[dict[str, Any]]:
        """:func:`pooled_fallbacks` of the records."""
        return pooled_fallbacks(self.records)


__all__ = ["ANALYSIS_TIMING", "ATTRIBUTIONS", "DELETION_CURVES", "FAITHFULNESS", "HEATMAP", "MACRO_CURVE",
           "MANIFEST", "OFFLINE_POLICY", "PANELS", "REPORT_HTML", "REPORT_MD", "ROUNDED_VALUES_NOTE", "RUNS",
           "RUN_ARRAYS", "RUN_KEYS", "TIMINGS", "OtherConfigRun", "RunDir", "RunRecord", "StageRecord", "StudyResult",
           "control_fallbacks", "dead_rows", "failure_text", "model_finished", "model_finished_text",
           "offline_policy_record", "offline_policy_text", "other_config_text", "pooled_fallbacks", "read_timing",
           "rounded_largest", "rounded_values", "rounded_values_record", "rounded_values_text", "rounded_values_words",
           "seal", "split_timing", "stage_failures", "stored_integer_text", "transient_agents", "transient_agents_text",
           "transient_agents_words", "verify_run", "with_timing", "zero_delta_v", "zero_delta_v_text"]
