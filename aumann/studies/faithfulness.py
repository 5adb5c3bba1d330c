"""The deletion-faithfulness study over any registered scenario (paper, Appendix P).

Per run r (seeds spawned from the config's root seed), the stages of :mod:`aumann.studies.stages`:

1. ``simulate`` T steps; ``attribute``: f(z_t) for every step, the target t* = argmax_{t ≥ ⌈T/2⌉} f(z_t),
   the per-agent baseline z⁰ = the features every agent would have under the baseline action at t*
   (:meth:`Scenario.baseline_features`, so attribution and deletion remove the same thing), and
   Aumann–Shapley over every step;
2. ``rows``: every registered row of the table (:mod:`aumann.studies.rows`) computes φ at t* —
   ``aumann_shapley``, ``sampled_shapley`` (the reference: the per-step masking game with
   ``permutations`` permutations, or the re-simulation game; a second seed gives the noise ceiling),
   ``leave_one_out``, ``action_aumann_shapley`` (scenarios with a step map), ``sampled_shapley_resimulation``
   (``study.resimulation_reference``), ``llm_judge`` and ``random``;
3. ``deletion`` (:mod:`aumann.evaluation.deletion`) by each row's ranking (descending φ; descending |φ|
   beside it) under both oracles, re-simulation (``deletion_auc``, ``drop_at_5``) and masking
   (``deletion_auc_masking``, ``drop_at_5_masking``), and agreement with the reference (Kendall τ, top-k
   Jaccard with k = min(10, N/2));
4. the run is written, then the optional stages run — ``smoothing gaps``, ``ablations``
   (:mod:`aumann.evaluation.ablations`), MegaScale-Social's analysis (:mod:`aumann.studies.megascale`), a
   user's registered stages; a failing one is recorded (``rec["stages"]``) and the study goes on (``strict``:
   it stops) — and the run is written again.

The run record's JSON structure is documented in ``docs/scenarios.md`` ("Run records"); the run
directory's layout, the typed record and resume checks are :mod:`aumann.studies.rundir`'s.

Each run is written atomically to ``runs/run-NNN.json`` (+ ``.npz`` arrays) as soon as its required stages
finish, the record with a SHA-256 checksum of its content and of its arrays; :func:`run_study` skips runs
already on disk with the same config (resume) after verifying them, and recomputes — and lists in
``StudyResult.failed_checks`` — any whose files are truncated, incomplete or edited.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import AumannWarning, ConfigError, StudyError
from aumann.io import output_lock, plain
from aumann.progress import StageTimer
from aumann.scenarios.base import Scenario, ScenarioConfig
from aumann.simulators.llm.registry import offline_policy_decides
from aumann.simulators.llm.settings import REQUEST_KEYS
from aumann.studies import megascale as _megascale  # noqa: F401  (registers MegaScale-Social's stages)
from aumann.studies.context import LARGE_N, RunContext, RunOptions, Streams, StudySizes
from aumann.studies.finished_warning import warn_model_finished
from aumann.studies.rounded_warning import warn_rounded_values
from aumann.studies.rows import BUILTIN, get_row
from aumann.studies.rows.feature_game import check_cv_counts
from aumann.studies.rundir import (
    RUN_ARRAYS,
    RUN_KEYS,
    OtherConfigRun,
    RunDir,
    StudyResult,
    offline_policy_record,
    read_timing,
    seal,
    split_timing,
    verify_run,
    with_timing,
)
from aumann.studies.stages import pending, run_stage, run_stages, stage_messages, stages
from aumann.studies.tables import FAITHFULNESS_COLUMNS
from aumann.studies.transient_warning import warn_transient_agents

METHODS = BUILTIN
"""The built-in rows, in table order (a run has the ones its scenario and config enable; rows registered
with :func:`aumann.studies.rows.register_row` come before ``random``)."""
ATTRIBUTED = ("aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out")
"""The feature-game (masking) methods every run has."""


def config_digest(scenario: Scenario, config: ScenarioConfig, backend_label: str, *,
                  offline: bool | None = None) -> str:
    """A short hash identifying what a run computes (config + scenario + backend) for resume checks.

    It decides which run records on disk ``run_study`` reads back instead of computing (and which it removes as
    another config's), so it holds exactly what can change a run's outputs. When the offline policy decides
    (``offline``: :func:`~aumann.simulators.llm.registry.offline_policy_decides` of the run's backend and label;
    ``None``: ``backend_label == "offline"``) the LLM request settings (``llm.temperature``, ``top_p``,
    ``max_tokens``, ``seed``, ``system_prompt``: :data:`~aumann.simulators.llm.settings.REQUEST_KEYS`) are hashed at
    their defaults: no request is built, so ``--temperature 0.7`` on an offline run resumes the runs computed
    without it (and a default offline run's digest is the one it always had), also under a registered backend whose
    factory returns ``None``. With an LLM backend they count, ``--cache-mode replay`` included: each is part of the
    response cache's key."""
    # neither strict, nor the step timeout, nor where the work executes changes what a run computes
    what = config.model_dump(mode="json", exclude={"runs": True, "step_timeout": True, "execution": True,
                                                    "study": {"strict": True}})
    llm = what.get("llm")
    if (backend_label == "offline" if offline is None else offline) and isinstance(llm, dict):
        defaults = type(config.llm).model_fields
        llm.update({k: defaults[k].default for k in REQUEST_KEYS
                    if k in llm and k in defaults and not defaults[k].is_required()})
    study = what.get("study")
    if isinstance(study, dict) and study.get("cv_permutations") is None:  # unset = what runs computed before
        study.pop("cv_permutations", None)  # the key existed: their run directories still resume
    payload = json.dumps({"scenario": scenario.name, "backend": backend_label, "config": what}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def has_action_row(scenario: Scenario, config: ScenarioConfig) -> bool:
    """Whether runs of ``scenario`` under ``config`` get the ``action_aumann_shapley`` row."""
    return get_row("action_aumann_shapley").enabled(scenario, config)


def judge_backend(config: ScenarioConfig, backend: Any) -> Any:
    """The judge of the ``llm_judge`` row (``None`` when ``study.judge = "off"``).

    ``"auto"``: the run's LLM backend when it has one (not an offline policy), else the heuristic
    stand-in; ``"llm"`` requires an LLM backend (:class:`ConfigError` otherwise).
    """
    from aumann.evaluation.judge import heuristic_backend, with_judge_fallback
    from aumann.simulators.llm import OfflineBackend

    mode = config.study.judge
    is_llm = backend is not None and not isinstance(backend, OfflineBackend)
    if mode == "off":
        return None
    if mode == "llm" and not is_llm:
        raise ConfigError("study.judge = 'llm' needs an LLM backend (--backend openai ...); use 'heuristic' or "
                          "'auto' for the offline stand-in")
    if mode == "llm" or (mode == "auto" and is_llm):
        return with_judge_fallback(backend)  # a dry run's fallback answers the judge with the stand-in
    return heuristic_backend()


def study_stages(scenario: Scenario, config: ScenarioConfig) -> tuple[str, ...]:
    """The progress messages one run of the study emits, in order (for progress bars)."""
    return stage_messages(scenario, config)


def _quiet(_msg: str) -> None:
    return None


def _analyse(ctx: RunContext, written: Callable[[RunContext], Any] | None = None) -> None:
    """The stages of one run: the required ones, ``written(ctx)`` (the first write), the optional ones.

    ``written`` may return a ``wait()`` callable instead of writing at once: the write then goes on while the
    optional stages that run in lanes (on copies of the record) run, and ``wait()`` is called before any
    stage that runs on the context itself (it may read the run directory) and at the end."""
    run_stages(ctx, optional=False)
    pending(ctx)
    wait = written(ctx) if written is not None else None
    try:
        run_stages(ctx, optional=True, before_alone=wait)
    except BaseException:
        if callable(wait):
            with contextlib.suppress(Exception):  # the stage's failure is the one to report
                wait()
        raise
    if callable(wait):
        wait()


def analyse_run(scenario: Scenario, config: ScenarioConfig, run: Any, seq: np.random.SeedSequence,
                *, tick: Callable[[str], None] | None = None, attribution_prefix: Path | None = None,
                judge: Any = None, fork_threads: int = 1, executor: Any = None, backend_label: str = "offline",
                strict: bool = False, offline_policy: bool | None = None,
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The study's stages on one simulated run: (JSON-able record, arrays for plots and the run directory).

    Counterfactual forks (deletion curves, the re-simulation game) are computed ahead in batches:
    on ``fork_threads`` threads (so that their LLM requests share the backend's in-flight pool) or
    through ``executor``; the results do not depend on either.

    With ``attribution_prefix`` the :class:`~aumann.attribution.Attribution` objects of the rows are
    saved as ``<prefix>-<label>.npz`` (``aumann_shapley``: every step, per-agent baselines;
    ``sampled_shapley``, ``sampled_shapley_ceiling``, ``leave_one_out`` and, when computed,
    ``action_aumann_shapley`` and ``sampled_shapley_resimulation``: step t*); ``Attribution.load``
    reads them. ``judge``: the judge backend of the ``llm_judge`` row (:func:`judge_backend`; ``None``: no
    such row). ``strict``: a failing optional stage stops the study instead of being recorded.

    ``offline_policy``: whether the scenario's offline policy made the run's decisions --
    :func:`~aumann.simulators.llm.registry.offline_policy_decides` of the backend the run was simulated with and
    ``backend_label``, which knows a registered backend whose factory returned ``None`` (its label is the name given,
    ``"nothing"``, and the record said ``"LLM (nothing)"``: pass ``offline_policy=True``, and the record says
    ``"offline policy"``, as ``aumann run``'s does). ``None``: the label says (``"offline"``), as before.
    """
    options = RunOptions(tick=tick or _quiet, judge=judge, backend_label=backend_label, fork_threads=fork_threads,
                         executor=executor, strict=strict, offline_policy=offline_policy)
    ctx = RunContext(scenario, config, Streams(seq), options, run=run)

    def save(ctx: RunContext) -> None:  # <out>/attributions/run-NNN-<label>.npz: confined to <out>
        for label, res in ctx.saved.items():
            res.save(attribution_prefix.with_name(f"{attribution_prefix.name}-{label}.npz"),
                     within=attribution_prefix.parent.parent)

    _analyse(ctx, save if attribution_prefix is not None else None)
    return {**ctx.rec, "stages": dict(ctx.stages)}, ctx.arrays


def run_study(scenario: Scenario, config: ScenarioConfig, *, out_dir: str | Path | None = None, backend: Any = None,
              backend_label: str = "offline", progress: Any = None, executor: Any = None,
              write: bool = True, strict: bool | None = None,
              other_config: list[OtherConfigRun] | None = None) -> StudyResult:
    """Run (or resume) the faithfulness study for ``config.runs`` runs.

    Args:
        scenario: a registered scenario.
        config: its config (``runs``, ``seed`` and ``study`` are read here).
        out_dir: run directory; every finished run is written atomically to ``runs/`` and skipped
            when found again with the same config digest. The runs of another config found there (an earlier
            invocation's with another size, seed or setting: :meth:`~aumann.studies.rundir.RunDir.other_config_runs`)
            are removed, every file of theirs checked first (a file changed since is an
            :class:`~aumann.errors.OutputError`, and nothing is removed), so the folder never holds two configs.
            ``None`` keeps everything in memory. The study holds
            its lock (:func:`~aumann.io.output_lock`) while it runs: another live writer there stops it at once
            with an :class:`~aumann.errors.OutputBusyError`.
        backend: a DecisionBackend or ``None`` (offline policy).
        backend_label: recorded in the digest (a run computed with another backend is not reused).
        progress: optional callable ``progress(run_index, message)`` (the CLI drives a Rich bar).
        executor: ``LocalExecutor`` / ``RayExecutor`` (``.map(fn, specs)``): with two or more runs to
            compute, the runs go to it in parallel and come back unwritten (the driver alone writes
            the run directory); with one, its forks (deletion, re-simulation game) and its
            all-steps attribution do (an LLM backend's forks run on threads sharing its request pool,
            or on Ray, whose one LLM service holds the cache, limits and caps for the cluster).
            Results are bit-identical to the serial study. A parallel run's LLM usage is merged back
            into ``backend.usage``; without an LLM service each worker gets 1/W of the backend's
            concurrency and rate limits (W workers) and an equal share of what is left of its caps.
        write: ``False`` reads finished runs from ``out_dir`` but writes nothing (dry runs).
        other_config: the runs of another config in ``out_dir``, as
            :meth:`~aumann.studies.rundir.RunDir.other_config_runs` found them for this config's digest (``aumann
            run`` looks before the study starts, to say so): removed without hashing their files again (each is
            confirmed unchanged since by its size and times). ``None``: looked for here.
        strict: any stage failure stops the study (a :class:`~aumann.errors.StudyError` naming the stage);
            by default (``None``: ``config.study.strict``, false) a failing optional stage is recorded in
            the run record, the manifest and the report, and the study goes on. A run found interrupted before
            its optional stages finished (one still ``pending``) is recomputed, and under ``strict`` also one
            whose optional stage failed; the LLM run counts of each
            run written (decisions, abstentions, ...) are in ``result.run_counts`` (``exc.llm_written`` when
            the study stops), so the usage ledger replaces a recomputed run's earlier counts instead of
            counting its decisions twice.
    """
    from aumann.simulators.llm.usage import Usage, unfinished, usage_of, written

    if not isinstance(config, scenario.config_model):
        raise ConfigError(f"run_study needs the {scenario.config_model.__name__} of scenario {scenario.name!r} (from "
                          f"scenario.load_config()); got {type(config).__name__}")
    offline = offline_policy_decides(backend, backend_label)
    digest = config_digest(scenario, config, backend_label, offline=offline)
    judge_backend(config, backend)  # a bad study.judge fails before any run
    check_cv_counts(scenario, config)  # so does a count the control-variate row cannot run
    seqs = np.random.SeedSequence(config.seed).spawn(config.runs)
    strict = bool(config.study.strict if strict is None else strict)
    out = Path(out_dir) if out_dir is not None else None
    rundir = RunDir(out) if out is not None else None
    if rundir is not None and write:  # every folder a finished run is written to, before the first simulation
        rundir.prepare()
    # one writer per folder while runs are read and written (re-entrant: `aumann run` holds it already); a dry run
    # (write=False) writes nothing and takes no lock
    held = output_lock(out, command="aumann.studies.run_study (a Python call)") if rundir is not None and write \
        else contextlib.nullcontext()
    with held:
        if rundir is not None and write:
            # the runs an earlier invocation computed under another config (another size, seed or setting) go before
            # any run of this one is written: left there, runs of two configs shared runs/, panels/ and
            # attributions/ (run-002 of N = 1000 beside run-000 of N = 50), and a run r of this config took the
            # other's attributions of labels it does not write as its own; each file is checked to be the one that
            # run wrote first (a file of yours there is refused and kept, before anything is removed)
            # (once: files a caller checked are not hashed again, a MegaScale folder's runs being GBs)
            if other_config is not None and any(o.digest == digest for o in other_config):
                raise StudyError("run_study: other_config holds a run of this very config (digest "
                                 f"{digest}); pass what RunDir(out_dir).other_config_runs(digest) returns")
            rundir.remove_other_config_runs(rundir.other_config_runs(digest) if other_config is None else other_config)
        records: list[Any] = [None] * config.runs
        arrays: list[Any] = [None] * config.runs
        panels: list[Any] = [None] * config.runs
        timings: list[dict[str, Any]] = [{} for _ in range(config.runs)]
        failed: list[dict[str, Any]] = []
        resumed = computed = 0
        worker_stages: dict[str, float] = {}  # wall seconds per stage of the runs computed on an executor's workers
        spent = Usage()
        counted: dict[int, Usage] = {}  # the run counts of each run written now (the ledger keeps them per run)
        todo = []
        for r, seq in enumerate(seqs):
            if rundir is not None and rundir.record(r).exists():  # an .npz alone: interrupted mid-write, recomputed
                status, why, old, old_arrays = rundir.verify_run(r, digest)
                ended = [st.get("status") for st in (old.get("stages") or {}).values()] if status == "done" else []
                if "pending" in ended or (strict and any(e not in ("ok", "skipped") for e in ended)):
                    # an interrupted run (stages still pending) is redone, so a resumed directory holds what an
                    # uninterrupted run writes; strict wants every stage, so a run with a failed one is redone too
                    status = "todo"
                if status == "done":
                    # a run written before a registered backend whose factory returned None was known to be the
                    # offline policy says "LLM (nothing)": read back as what it is (the file is left as it is)
                    records[r] = offline_policy_record(old, backend_label) if offline and old is not None else old
                    arrays[r] = old_arrays
                    timings[r] = rundir.read_timing(r)
                    resumed += 1
                    if progress is not None:
                        progress(r, "resumed")
                    continue
                if status == "corrupt":
                    failed.append({"run": r, "file": str(rundir.record(r).relative_to(rundir.root)), "reason": why})
            todo.append((r, seq))
        if rundir is not None and write and todo and config.agents >= LARGE_N:  # before hours of work, not after
            room = rundir.room_warning(config.agents, config.steps, len(todo))
            if room is not None:
                import warnings

                warnings.warn(f"the disk may be too small for this study: {room}", AumannWarning, stacklevel=2)
        # (an executor is anything with a map(fn, items): max_workers is optional)
        parallel = executor is not None and len(todo) > 1 and getattr(executor, "max_workers", 2) not in (0, 1)
        if parallel:
            account = usage_of(backend)
            # an executor with an LLM service (Ray) serves one cache and one set of limits to all workers;
            # otherwise each worker gets an equal share of the limits and of what is left of the caps
            share = executor.serve_llm(backend) if callable(getattr(executor, "serve_llm", None)) else \
                _share_budget(backend, len(todo), min(len(todo), int(getattr(executor, "max_workers", None) or 2)))
            specs = [(scenario, config, r, seq, share, digest, backend_label, strict) for r, seq in todo]
            lost = Usage()  # the run counts of runs that failed (not written)

            def _done(i: int, res: Any) -> None:
                nonlocal computed
                r = todo[i][0]
                delta = res.usage if not isinstance(res, BaseException) else getattr(res, "llm_usage", None)
                if delta is not None:
                    spent.merge(delta)
                    if account is not None:
                        account.merge(delta)
                if isinstance(res, BaseException):
                    if delta is not None:  # never written: recomputed on resume, its decisions counted then
                        lost.merge(delta.run_counts())
                    return
                # workers send results, never files: the driver writes each run as it arrives (a run finished
                # before a failure elsewhere is kept for resume)
                records[r] = write_computed(rundir if write else None, res)
                if res.usage is not None:
                    counted[r] = res.usage.run_counts()
                arrays[r], panels[r], timings[r] = res.arrays, res.panel, res.timing
                for name, secs in res.stage_seconds.items():  # the stages ran on the worker: their times came back
                    worker_stages[name] = worker_stages.get(name, 0.0) + float(secs)
                computed += 1
                if progress is not None:
                    progress(r, "done (worker)")

            try:
                results = executor.map(compute_run_task, specs, on_result=_done, return_exceptions=True)
            except BaseException as exc:
                unfinished(exc, lost)
                written(exc, counted)
                _say_resume(exc, out if write else None, computed, len(todo))
                raise
            errors = [res for res in results if isinstance(res, BaseException)]
            if errors:
                unfinished(errors[0], lost)
                written(errors[0], counted)  # the runs written before it: the ledger keeps their counts per run
                _say_resume(errors[0], out if write else None, computed, len(todo))
                raise errors[0]
        else:
            for r, seq in todo:
                tick = (lambda msg, r=r: progress(r, msg)) if progress is not None else None
                try:
                    rec, arr, panel, delta, timing = compute_run(scenario, config, r, seq, out if write else None,
                                                                 backend, digest, backend_label=backend_label,
                                                                 tick=tick, executor=executor, strict=strict)
                except BaseException as exc:
                    written(exc, counted)  # the runs written before it: the ledger keeps their counts per run
                    raise
                spent.merge(delta)
                counted[r] = delta.run_counts()
                records[r], arrays[r], panels[r], timings[r] = rec, arr, panel, timing
                computed += 1
                if tick:
                    tick("done")
        # agents present at no capture: said once here, for computed and resumed runs (a run's own recording,
        # perhaps in a worker, says nothing)
        # (they point at manifest.json and the report only when this study writes them)
        files = out is not None and write
        warn_transient_agents(scenario.name, records, config.steps, written=files)
        warn_model_finished(scenario.name, records, written=files)  # a model stepped on after running = False: the same
        warn_rounded_values(scenario.name, records, written=files)  # integers past ±2**53 that float64 rounded: same
        return StudyResult(scenario=scenario.name, records=records, arrays=arrays, out_dir=out, resumed=resumed,
                           computed=computed, sizes=StudySizes.of(config), panels=panels, usage=spent,
                           failed_checks=failed, timings=timings, run_counts=counted, stage_seconds=worker_stages)


def _say_resume(exc: BaseException, out: Path | None, written: int, todo: int) -> None:
    """An executor's own failure (a worker or node that died, a cluster gone) ends with what the run directory
    kept and how to compute only the rest: the same command resumes (a failure of the user's code is left as it
    is: it fails again)."""
    from aumann.errors import ExecutorError, RemoteTaskError

    if out is None or not isinstance(exc, ExecutorError) or isinstance(exc, RemoteTaskError) or not exc.args \
            or "resume" in str(exc.args[0]):  # (the cluster-gone error says it already)
        return
    exc.args = (f"{exc.args[0]}; {written} of the {todo} run(s) computed now are written in {out}: the same command "
                f"resumes there and computes only the {todo - written} unfinished one(s)", *exc.args[1:])


def _fork_threads(backend: Any, scenario: Scenario | None = None, executor: Any = None) -> int:
    """Threads for concurrent forks: the LLM backend's concurrency (requests of forks share its
    in-flight pool). For the offline policy: the cores this process may use (at most 4) when the scenario
    re-simulates a step vectorised (``resimulate_fn``: numpy and torch work that releases the GIL) and no
    executor takes the forks; else 1 (forks stepping agents in Python would only take turns at the GIL).
    Each fork depends on nothing but its deleted set, so the values are the same on any number of threads."""
    if backend is None or not hasattr(backend, "concurrency") or getattr(backend, "name", "") == "offline":
        if executor is None and scenario is not None and scenario.resimulate_fn is not None:
            from aumann.attribution.threads import usable_cores

            return max(1, min(4, usable_cores()))
        return 1
    return max(1, min(64, int(backend.concurrency)))


def compute_run(scenario: Scenario, config: ScenarioConfig, r: int, seq: np.random.SeedSequence, out: Path | None,
                backend: Any, digest: str, *, tick: Callable[[str], None] | None = None, executor: Any = None,
                backend_label: str = "offline", strict: bool = False,
                ) -> tuple[dict[str, Any], dict[str, np.ndarray], Any, Any, dict[str, float]]:
    """Simulate and analyse run ``r`` (and write it when ``out`` is given): (record, arrays, panel,
    the LLM usage it cost, seconds per method). Decisions inside forks are counted as ``fork_*``
    usage. The run is written as soon as its required stages finish and again after the optional
    ones. The record holds no wall-clock time (:func:`split_timing`): the seconds are returned apart
    and written to ``timings/run-NNN.json``."""
    from aumann.simulators.llm.usage import unfinished, usage_of, written

    rundir = RunDir(out) if out is not None else None
    done_writes: list[dict[str, Any]] = []

    def write(done: ComputedRun, first: bool) -> None:
        done_writes[:] = [write_computed(rundir, done, first=first)]

    shared = usage_of(backend)
    mark = shared.copy() if shared is not None else None
    try:
        done = _compute(scenario, config, r, seq, backend, digest, write, tick=tick, executor=executor,
                        backend_label=backend_label, strict=strict)
    except BaseException as exc:
        if mark is not None and not done_writes:  # recomputed on resume: its decisions are counted then
            unfinished(exc, shared - mark)
        elif mark is not None:  # written, then stopped (strict: an optional stage failed): counted as written
            written(exc, {r: shared - mark})
        raise
    return done_writes[0], done.arrays, done.panel, done.usage, done.timing


@dataclass
class ComputedRun:
    """A run computed but not written: what a worker sends back through the executor (the object
    store on Ray) -- the driver alone writes the run directory (:func:`write_computed`)."""

    r: int
    digest: str
    record: dict[str, Any]  # as written, before its arrays' SHA-256 and its checksum
    arrays: dict[str, np.ndarray]
    panel: Any
    usage: Any
    timing: dict[str, float]
    attributions: dict[str, Any]
    #: wall seconds per stage (the progress messages, as the driver's timer records them for a run computed
    #: there), measured where the run was computed: a worker's stages come back with its result
    stage_seconds: dict[str, float] = field(default_factory=dict)


def write_computed(rundir: RunDir | None, done: ComputedRun, *, first: bool = True) -> dict[str, Any]:
    """Write a computed run (``first``: the panel and the attributions too) and return its record as
    written; ``rundir`` ``None``: the record as it would be written (a dry run writes nothing).
    Saved attributions carry no wall-clock seconds (they are in ``timings/``)."""
    if rundir is None:
        return seal(done.record)
    if first:  # confined to the run directory
        rundir.save_panel(done.r, done.panel)
        for label, res in done.attributions.items():
            rundir.save_attribution(done.r, label, res)
    return rundir.write_run(done.r, done.record, done.arrays, timing=done.timing, digest=done.digest)


def _without_seconds(saved: dict[str, Any], timing: dict[str, float]) -> dict[str, Any]:
    """The attributions to save, their provenance's wall-clock seconds moved into ``timing``."""
    import dataclasses

    out = {}
    for label, res in saved.items():
        prov = dict(res.provenance)
        secs = prov.pop("seconds", None)
        if secs is not None:
            timing[f"attributions/{label}"] = float(secs)
        out[label] = dataclasses.replace(res, provenance=prov)
    return out


def _compute(scenario: Scenario, config: ScenarioConfig, r: int, seq: np.random.SeedSequence, backend: Any,
             digest: str, sink: Callable[[ComputedRun, bool], None] | None, *,
             tick: Callable[[str], None] | None = None, executor: Any = None, backend_label: str = "offline",
             strict: bool = False) -> ComputedRun:
    """Run ``r``'s stages; ``sink(done, first)`` is called after the required stages and again after
    the optional ones (the driver writes there; a worker passes ``None`` and sends the result back)."""
    import contextlib

    from aumann.simulators.llm.usage import Usage, usage_of

    shared = usage_of(backend)
    before = shared.copy() if shared is not None else None
    sim_seq, study_seq = seq.spawn(2)
    threads = _fork_threads(backend, scenario, executor)
    # forks of an LLM run go to an executor that serves the LLM to its workers (Ray), else to threads
    serves = threads > 1 and callable(getattr(executor, "serve_llm", None))
    if serves:
        executor.serve_llm(backend)
    options = RunOptions(tick=tick or _quiet, judge=judge_backend(config, backend), backend=backend,
                         backend_label=backend_label, fork_threads=threads,
                         executor=executor if threads == 1 or serves else None, run_index=r, strict=strict,
                         offline_policy=offline_policy_decides(backend, backend_label))
    ctx = RunContext(scenario, config, Streams(study_seq, simulation=sim_seq), options)
    run_stage(ctx, stages()[0])  # simulate (its forks are not fork usage)
    account = shared if shared is not None else usage_of(ctx.run.model)
    ident = {"run": r, "digest": digest, "scenario": scenario.name, "seed_spawn_key": list(seq.spawn_key)}
    timing: dict[str, float] = {}
    state: dict[str, Any] = {}

    def snapshot(ctx: RunContext) -> ComputedRun:
        import copy

        rec = copy.deepcopy({**ctx.rec, **ident, "stages": dict(ctx.stages),
                             "invalid_decisions": int(getattr(ctx.run.model, "llm_errors", 0) or 0)})  # abstentions
        timing.update(plain(split_timing(rec)))  # wall-clock seconds live beside the record, not in it
        if "saved" not in state:
            state["saved"] = _without_seconds(ctx.saved, timing)
        # copies of the record and of the arrays' dict: what later stages add is in the next snapshot
        return ComputedRun(r, digest, rec, dict(ctx.arrays), ctx.run.panel, None, dict(timing), state["saved"])

    def write(ctx: RunContext) -> Callable[[], None] | None:
        first = "done" not in state
        if "writing" in state:  # the first write is on disk before the next one starts
            state.pop("writing")()
        state["done"] = snapshot(ctx)
        if sink is None:
            return None
        if not first or ctx.n < LARGE_N:
            sink(state["done"], first)
            return None
        # a large run's first write (its panel and attributions: ~1 GB at 10⁶ agents) goes on beside the
        # optional stages' lanes, which work on copies of the record; its failure is raised by wait()
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aumann-write")
        job = pool.submit(sink, state["done"], True)
        pool.shutdown(wait=False)
        state["writing"] = job.result
        return job.result

    with account.fork_scope() if account is not None else contextlib.nullcontext(), ctx.long_lived():
        try:  # (LLM backends: fork threads; a large run: the simulation's objects out of the collections)
            _analyse(ctx, write)
        finally:  # again, with what the optional stages added (or the failure that stopped them: strict)
            if "done" in state:
                write(ctx)
    if account is None:
        delta = Usage()
    elif before is not None:
        delta = account - before
    else:
        delta = account.copy()
    state["done"].usage = delta
    return state["done"]


def compute_run_unwritten(scenario: Scenario, config: ScenarioConfig, r: int, seq: np.random.SeedSequence,
                          backend: Any, digest: str, *, tick: Callable[[str], None] | None = None,
                          executor: Any = None, backend_label: str = "offline", strict: bool = False) -> ComputedRun:
    """Simulate and analyse run ``r`` without touching the disk (see :func:`compute_run`)."""
    return _compute(scenario, config, r, seq, backend, digest, None, tick=tick, executor=executor,
                    backend_label=backend_label, strict=strict)


def compute_run_task(spec: tuple) -> ComputedRun:
    """Executor task for one run (top-level): computes it and sends it back unwritten -- a worker needs
    no access to the run directory. The scenario travels as an object (a scenario file's module is
    installed in the worker by the executor; a registered name is looked up). A failure carries the
    usage spent so far as ``exc.llm_usage``."""
    from aumann import scenarios
    from aumann.simulators.llm.usage import usage_of

    scenario, config, r, seq, backend, digest, backend_label, strict = spec
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    from aumann.simulators.llm.backend import LLMBackend

    shared = usage_of(backend)
    before = shared.copy() if shared is not None else None
    ok = False
    timer = StageTimer()  # the stages' wall times, as the driver's progress callback times a run computed there
    try:
        done = compute_run_unwritten(scenario, config, r, seq, backend, digest, backend_label=backend_label,
                                     strict=strict, tick=timer.start)
        timer.stop()
        done.stage_seconds = dict(timer.seconds)
        ok = True
        return done
    except BaseException as exc:
        if shared is not None:
            exc.llm_usage = shared - before
        raise
    finally:
        if isinstance(backend, LLMBackend):
            backend.close(keep_failed=ok)  # a run that failed keeps no unconfirmed failed decisions
        elif hasattr(backend, "close"):
            backend.close()


def _share_budget(backend: Any, parts: int, workers: int) -> Any:
    """A copy of an LLM ``backend`` for runs in parallel: its caps allow 1/``parts`` of what is left,
    and its concurrency and rate limits are 1/``workers`` of the backend's, so the totals hold."""
    if backend is None or not hasattr(backend, "concurrency") or getattr(backend, "name", "") == "offline":
        return backend
    if hasattr(backend, "share"):  # an LLMBackend: its layers are copied with the shares
        return backend.share(parts, workers)
    import copy

    from aumann.simulators.llm.ratelimit import RateLimiter

    b = copy.copy(backend)
    b.concurrency = max(1, backend.concurrency // workers)
    lim = backend.limiter
    b.limiter = RateLimiter(lim.rpm / workers if lim.rpm else None, lim.tpm / workers if lim.tpm else None)
    u = backend.usage
    if b.max_calls is not None:
        b.max_calls = u.total_calls + max(0, b.max_calls - u.total_calls) // parts
    if b.max_tokens is not None:
        b.max_tokens = u.total_tokens + max(0, b.max_tokens - u.total_tokens) // parts
    if b.max_cost is not None:
        b.max_cost = u.cost_usd + max(0.0, b.max_cost - u.cost_usd) / parts
    return b


__all__ = [
    "ATTRIBUTED",
    "FAITHFULNESS_COLUMNS",
    "METHODS",
    "RUN_ARRAYS",
    "RUN_KEYS",
    "ComputedRun",
    "StudyResult",
    "StudySizes",
    "analyse_run",
    "compute_run",
    "compute_run_task",
    "compute_run_unwritten",
    "config_digest",
    "has_action_row",
    "judge_backend",
    "read_timing",
    "run_study",
    "split_timing",
    "study_stages",
    "verify_run",
    "with_timing",
    "write_computed",
]
