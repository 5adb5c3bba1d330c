"""The study as a list of named stages over one run's :class:`~aumann.studies.context.RunContext`.

Per run, in order:

* required — ``simulate`` (the scenario's run), ``attribute`` (f over every step, the target step t*, the
  per-agent baselines, Aumann–Shapley over every step, the deletion oracles), ``rows`` (every registered
  row's φ at t*, :mod:`aumann.studies.rows`) and ``deletion`` (every row's deletion metrics and agreement);
  a failure here stops the study (the error is noted with the stage's name); from
  :data:`~aumann.studies.context.LARGE_N` agents ``attribute`` ends by spilling the panel's values and φ over
  every step to disk-backed maps (:func:`_spill`: same bytes, out of every later stage's resident set);
* then the run is written (record + checksum: :meth:`aumann.studies.rundir.RunDir.write_run`);
* optional — ``smoothing gaps``, ``ablations`` and whatever is registered (MegaScale-Social's analysis,
  :mod:`aumann.studies.megascale`; a user's :func:`register_stage`); each failure is recorded in the run
  record (``rec["stages"][name]``: status, error type, message), the manifest and the report —
  ``"ablation zero-baseline skipped: IndicatorError: …"`` — and the study goes on. The run is written
  again after them. With ``strict`` (``aumann run --strict``, ``study.strict = true``,
  ``run_study(strict=True)``) any failure stops the study, as a :class:`~aumann.errors.StudyError`
  naming the stage.

The study's last stage, ``report``, runs once over every run (:func:`aumann.studies.report.write_outputs`):
the tables first (required), then each figure, ``report.html``, ``report.md`` and each section of the page as
optional parts — a failing one is recorded (``manifest.json`` → ``report_failures``, and report.md) and the
rest is written; ``strict`` stops at the first (:class:`aumann.studies.report.ReportParts`).

A stage is a :class:`Stage`: a name, a function of the context, and when it applies. Parts of a stage
that may fail on their own go through :func:`attempt` (the ablations: one entry per baseline).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aumann.errors import AumannError, ConfigError, StudyError, TerminatedBySignal
from aumann.scenarios.base import Scenario, ScenarioConfig, target_step
from aumann.simulators.boundary import exception_message
from aumann.studies.context import LARGE_N, RunContext, StudySizes
from aumann.studies.named import NamedList
from aumann.studies.rows import compute_rows, score_rows
from aumann.studies.rundir import rounded_values_record

When = Callable[[Scenario, ScenarioConfig], "bool | str"]


@dataclass(frozen=True)
class Stage:
    """One named step of the study over a run's context.

    Attributes:
        name: its name in the run record, the manifest, the report and error messages.
        run: ``run(ctx)``: does the work, writing into ``ctx.rec`` / ``ctx.arrays``.
        optional: a failure is recorded and the study goes on (required stages run first and stop it).
        when: ``when(scenario, config)``: ``True`` runs it; a string skips it and records that reason
            (e.g. ``"study.ablations = false"``); ``False`` leaves it out of this study altogether (a stage
            for another scenario). ``None``: always.
        needs: stages that must have finished ok first (else it is recorded as skipped, saying which).
        message: the progress message while it runs (``None``: none of its own).
        ticks: the further progress messages its ``run`` reports itself (``ctx.tick``), in order: counted
            in the run's progress total (:func:`stage_messages`).
        lane: optional stages in different lanes may run at the same time, each lane's in order on a
            thread of its own (:func:`run_stages`); ``None`` (the default, and what a user's stage gets
            unless it says otherwise): the stage runs alone, after every stage before it.
    """

    name: str
    run: Callable[[RunContext], None]
    optional: bool = True
    when: When | None = None
    needs: tuple[str, ...] = ()
    message: str | None = None
    ticks: tuple[str, ...] = ()
    lane: str | None = None

    def applies(self, scenario: Scenario, config: ScenarioConfig) -> bool | str:
        """``when(scenario, config)``: ``True``, ``False`` or the reason it is skipped; a ``when`` that raises or
        returns anything else is a :class:`~aumann.errors.StudyError` naming the stage."""
        if self.when is None:
            return True
        try:
            out = _no_exit(lambda: self.when(scenario, config))
        except Exception as exc:
            raise StudyError(f"stage {self.name!r}: when(scenario, config) raised {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:300]}") from exc
        if isinstance(out, (bool, np.bool_)):
            return bool(out)
        if isinstance(out, str):
            return out
        raise StudyError(f"stage {self.name!r}: when(scenario, config) returned {type(out).__name__} {out!r:.80}; "
                         "it must return True, False or the reason the stage is skipped (a str)")


# ---------------------------------------------------------------------------------------------- failure recording
def _record(ctx: RunContext, name: str, status: str, optional: bool, exc: BaseException | None = None,
            message: str = "") -> None:
    entry: dict[str, Any] = {"status": status, "optional": optional}
    if exc is not None:
        entry["error"] = type(exc).__name__
        entry["message"] = exception_message(exc, 500)
    elif message:
        entry["message"] = message
    ctx.stages[name] = entry


def _no_exit(fn: Callable[[], Any]) -> Any:
    """``fn()``, a stage's code: ``sys.exit()`` there is a failure of the stage (a :class:`StudyError`), not the
    end of the process (``aumann run`` exited 0 with no report and no message)."""
    try:
        return fn()
    except TerminatedBySignal:  # SIGTERM/SIGHUP from the CLI's handler: the run ends (exit 128 + the signal)
        raise
    except SystemExit as exc:
        raise StudyError(f"called sys.exit({exc.code!r}); a stage must return or raise, not exit the process") \
            from exc


def attempt(ctx: RunContext, name: str, fn: Callable[[], Any]) -> Any:
    """Run one optional part ``fn()`` of a stage under its own ``name``: its result, or ``None`` when it
    failed (recorded in ``rec["stages"]``; with ``ctx.options.strict`` the failure stops the study)."""
    try:
        out = _no_exit(fn)
    except Exception as exc:
        if getattr(exc, "failed_stage", None) is not None:  # a part of this stage already failed (strict)
            raise
        _record(ctx, name, "failed", True, exc)
        if ctx.options.strict:
            err = StudyError(f"stage {name!r} failed (run {ctx.options.run_index}): {type(exc).__name__}: {exc}")
            err.failed_stage = name
            raise err from exc
        return None
    _record(ctx, name, "ok", True)
    return out


def run_stage(ctx: RunContext, stage: Stage) -> None:
    """Run one stage on ``ctx`` and record what happened (see the module docstring). A required stage that
    already finished on this context (the study runs ``simulate`` first on its own) is not run, nor
    reported to the progress bar, again."""
    if not stage.optional and (ctx.stages.get(stage.name) or {}).get("status") == "ok":
        return
    applies = stage.applies(ctx.scenario, ctx.config)
    if applies is False:
        return
    if isinstance(applies, str):
        _record(ctx, stage.name, "skipped", stage.optional, message=applies)
        return
    missing = [n for n in stage.needs if (ctx.stages.get(n) or {}).get("status") != "ok"]
    if missing:
        _record(ctx, stage.name, "skipped", stage.optional, message=f"needs {missing}, which did not finish")
        return
    if stage.message:
        ctx.tick(stage.message)
    if not stage.optional:
        try:
            _no_exit(lambda: _checked(stage, ctx))
        except AumannError:
            raise  # already names what went wrong (a scenario's step, a bad config, a stage that exited)
        except Exception as exc:
            if stage.name in CORE:  # our own code: a bug, whose traceback is the report
                exc.add_note(f"(in the required stage {stage.name!r} of run {ctx.options.run_index})")
                raise
            # a user's required stage: one typed line at the CLI (its traceback: --debug, or the exception's cause)
            _record(ctx, stage.name, "failed", False, exc)
            raise StudyError(f"the required stage {stage.name!r} (run {ctx.options.run_index}) raised "
                             f"{type(exc).__name__}: {exception_message(exc)}") from exc
        _record(ctx, stage.name, "ok", False)
        return
    attempt(ctx, stage.name, lambda: _checked(stage, ctx))


def _checked(stage: Stage, ctx: RunContext) -> None:
    """``stage.run(ctx)``; for a user's stage, what it left in ``ctx.rec`` and ``ctx.arrays`` must be writable, or
    the stage fails (a :class:`StudyError` naming it) with the record and arrays as they were before it. An object
    put into the record passed the stage and then killed the study at the run's write (a bare TypeError: not JSON
    serializable); an object array was written into the run's .npz pickled, and every later read refused the run
    ("holds pickled Python objects ... run the same command again"), which wrote it the same way again."""
    if str(getattr(stage.run, "__module__", "") or "").startswith("aumann."):
        stage.run(ctx)
        return
    import copy

    rec, arrays = ctx.rec, ctx.arrays
    saved_rec, saved_arrays = copy.deepcopy(rec), dict(arrays)
    stage.run(ctx)
    why = _unwritable(ctx.rec, ctx.arrays)
    if why is not None:
        rec.clear()
        rec.update(saved_rec)
        arrays.clear()
        arrays.update(saved_arrays)
        ctx.rec, ctx.arrays = rec, arrays
        raise StudyError(f"stage {stage.name!r} {why}; what it wrote was not kept")


def _unwritable(rec: dict[str, Any], arrays: dict[str, Any]) -> str | None:
    """Why the run record or its arrays cannot be written as they are (``None``: they can)."""
    import json

    from aumann.io import plain

    for key, value in rec.items():
        try:
            json.dumps(plain(value))
        except (TypeError, ValueError) as exc:
            return (f"put a value into the run record (ctx.rec[{key!r}]) that JSON cannot hold "
                    f"({exception_message(exc, 200)}); the record holds numbers, strings, lists and dicts")
    for key, value in arrays.items():
        try:
            arr = np.asanyarray(value)
        except (TypeError, ValueError) as exc:
            return f"put ctx.arrays[{key!r}], which is no array ({exception_message(exc, 200)})"
        if arr.dtype.hasobject:
            return (f"put ctx.arrays[{key!r}] of dtype object (Python objects), which the run's .npz could only hold "
                    "pickled, and aumann never reads pickles; store numbers (or strings)")
    return None


#: the run directory's own tables and pages (``<name>.csv`` / ``.md``): a stage's table of one of these names was
#: written over the study's (``add_table(ctx, "faithfulness", ...)`` left faithfulness.csv one blank row); the
#: tables of registered rows (``Row.tables``) are refused when the tables are written
STUDY_TABLES = ("faithfulness", "faithfulness_extended", "path_ablation", "f_sensitivity", "baseline_ablation",
                "action_attribution", "resimulation_agreement", "judge_overlap", "report")


def _cell(value: Any, where: str) -> Any:
    from aumann.io import plain

    out = plain(value)  # numpy scalars → Python numbers, NaN/inf → None (an empty cell)
    if out is None or isinstance(out, bool | int | float | str):
        return out
    raise StudyError(f"{where} is {type(value).__name__} {value!r:.60}; a table cell is a number, a string, a bool "
                     "or None")


def add_table(ctx: RunContext, name: str, rows: list[dict[str, Any]]) -> None:
    """Give the run a table of its own: written as ``<name>.csv`` / ``.md`` (every run's rows, with a ``run``
    column) and shown under "Scenario analysis" in the report (``rec["analysis"]["tables"][name]``).

    Checked here, so that a bad table fails its stage alone: ``name`` must be one file name
    (:func:`~aumann.io.safe_component`) and not one of the study's own (:data:`STUDY_TABLES`); ``rows`` a list of
    mappings from column names (strings) to numbers, strings, bools or None."""
    from aumann.io import safe_component

    if not isinstance(name, str):
        raise StudyError(f"add_table: a table name is a string; got {type(name).__name__} {name!r:.60}")
    safe_component(name, "table name")
    if name.lower() in STUDY_TABLES or name.lower() in {f"{t}.csv" for t in STUDY_TABLES}:
        raise StudyError(f"add_table: {name!r} is the name of one of the study's own tables or pages ({name}.csv / "
                         f".md); give the table a name of its own")
    if isinstance(rows, dict | str | bytes) or not hasattr(rows, "__iter__"):
        raise StudyError(f"add_table {name!r}: rows must be a list of dicts (one per row); got {type(rows).__name__}")
    checked = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
            raise StudyError(f"add_table {name!r}: row {i} must be a dict from column names (strings) to values; got "
                             f"{type(row).__name__} {row!r:.60}")
        checked.append({k: _cell(v, f"add_table {name!r}: row {i}, column {k!r}") for k, v in row.items()})
    ctx.rec.setdefault("analysis", {}).setdefault("tables", {})[name] = checked


# ---------------------------------------------------------------------------------------------- the built-in stages
def simulate(ctx: RunContext) -> None:
    """Run the scenario (unless the context already holds a run): every step's checkpoint is kept only
    when the per-step baselines are built from them."""
    if ctx.run is not None:
        return
    keep = 0 if ctx.scenario.baseline_all_fn is None else None
    # agents present at no capture, a model stepped on after running = False, recorded integers float64 rounded:
    # kept in the record (attribute) and warned of once by run_study from the records (a run's own warning came
    # from its worker, or not at all)
    ctx.run = ctx.scenario.simulate(ctx.config, rng=np.random.default_rng(ctx.streams.simulation),
                                    backend=ctx.options.backend,
                                    keep_from=keep, strategy=ctx.config.study.fork_strategy, warn_transient=False,
                                    warn_finished=False, warn_rounded=False)


def attribute(ctx: RunContext) -> None:
    """f over every step, t*, the per-agent baselines z⁰ (the baseline action at each step), the players,
    Aumann–Shapley over every step, both deletion oracles at t*, and the record's first keys."""
    from aumann.attribution import AumannShapley
    from aumann.attribution import attribute as attribute_panel
    from aumann.attribution.evalcontext import EvalContext
    from aumann.attribution.metrics import log_k_grid
    from aumann.evaluation.deletion import DeletionOracle, MaskingOracle
    from aumann.simulators import indicator_values

    scenario, config, run = ctx.scenario, ctx.config, ctx.run
    st = config.study
    ctx.f, ctx.f_original = f, f_orig = scenario.indicators(config)
    panel = run.panel
    ids = panel.agent_ids
    ctx.f_values, ctx.f_original_values = fv, fov = indicator_values(f, panel), indicator_values(f_orig, panel)
    ctx.t_star = ts = target_step(fv)
    ctx.z0_all = scenario.baselines(run, config, agent_ids=ids)
    ctx.model_before = run.before(ts)
    ctx.players = players = scenario.present(ctx.model_before, ids)  # all N for fixed populations
    ctx.sizes = sizes = StudySizes.of(config, n=len(players))
    ctx.method = AumannShapley(steps=st.quadrature_steps, closed_form=False)
    res_all = attribute_panel(f, panel, method=ctx.method, baseline=ctx.z0_all,
                              executor=ctx.options.executor)  # step blocks: the same bits
    if len(ids) >= LARGE_N:  # the last full pass over the panel and φ: spilled, see _spill
        res_all = _spill(panel, res_all)
    ctx.attribution = res_all
    ctx.target = pt = panel.select_steps([ts])
    z0_all = ctx.z0_all
    ctx.z0 = np.ascontiguousarray(z0_all[ts] if z0_all.ndim == 3 else z0_all, dtype=np.float64)
    ctx.oracle = DeletionOracle(scenario, config, ctx.model_before, f, f_orig, agent_ids=ids,
                                threads=ctx.options.fork_threads, executor=ctx.options.executor)
    ctx.masking = MaskingOracle(f, f_orig, EvalContext.at_step(pt, 0), ctx.z0)  # features, context, mask together
    ctx.grid = log_k_grid(len(players)) if st.log_k_grid else None
    label = ctx.options.backend_label
    ctx.rec.update({"t_star": ts, "f_t_star": float(fv[ts]), "f_original_t_star": float(fov[ts]),
                    "efficiency_gap": float(res_all.efficiency_gap[ts]), "delta_v": float(res_all.delta_v[ts]),
                    "methods": {}, "cost": {}, "fork_strategy": run.strategy, "players": len(players),
                    "k_del": sizes.k_del, "top_k": sizes.top_k,
                    "policy": "offline policy" if ctx.options.offline_policy_decides() else f"LLM ({label})"})
    if ctx.grid is not None:
        ctx.rec["log_k_grid"] = ctx.grid
    if panel.alive is not None and not panel.alive.all():
        ctx.rec["dead_rows"] = dead_rows_record(ctx, res_all)
    done = panel.meta.get("model_finished")
    if isinstance(done, dict) and done["step"] < done["steps"] - 1:  # stepped on after running = False
        ctx.rec["model_finished"] = dict(done)
    unseen = panel.meta.get("transient_agents")
    if isinstance(unseen, dict) and unseen.get("total"):  # agents present at no capture: no row, no φ (counted)
        ctx.rec["transient_agents"] = dict(unseen)
    rounded = rounded_values_record(panel.meta.get("rounded_values"))
    if rounded is not None:  # recorded integers the panel's float64 (float32) changed: f and φ saw the rounded ones
        ctx.rec["rounded_values"] = rounded
    if float(res_all.delta_v[ts]) == 0.0:  # every row of the faithfulness table is undefined: say why
        ctx.rec["zero_delta_v"] = zero_delta_v_record(res_all.delta_v, ts)
    ctx.arrays.update({"f_values": fv, "f_original_values": fov, "phi_all": res_all.phi})


def zero_delta_v_record(delta_v: Any, ts: int) -> dict[str, Any]:
    """Δv(t*) = 0: t* (argmax f over the second half, the documented rule, kept) and the step of that window with
    the largest |Δv| (``None`` when Δv is 0 on all of it), so the report can say what to change."""
    dv = np.asarray(delta_v, dtype=np.float64)
    start = math.ceil(dv.shape[0] / 2) if math.ceil(dv.shape[0] / 2) < dv.shape[0] else dv.shape[0] - 1
    window = np.abs(np.where(np.isfinite(dv[start:]), dv[start:], 0.0))
    best = start + int(np.argmax(window)) if window.size and window.max() > 0 else None
    return {"t_star": int(ts), "window": [int(start), int(dv.shape[0] - 1)], "largest_abs_delta_v_step": best,
            "largest_abs_delta_v": None if best is None else float(dv[best])}


def dead_rows_record(ctx: RunContext, res: Any) -> dict[str, Any]:
    """A run with births or deaths: which living set the masking side evaluates z⁰_t* over (the run's at t*, as
    z_t*: ``baseline_alive = "run"``, docs/baselines.md, "Agents that die during a step"), how many players died
    during step t*, f(z⁰_t*) over the run's living (the masking side's v(∅)), and f after re-simulating t* with
    every player at the baseline action (the re-simulation side's v(∅), one fork, where the re-run decides who
    lives; ``None`` where nobody lives then and the indicator, alive-aware, is undefined). The two v(∅) differ
    where the baseline action would change who dies."""
    from aumann.attribution.problem import BASELINE_ALIVE
    from aumann.errors import NoLivingAgentsError

    ts, players = ctx.t_star, ctx.players
    died = int((~np.asarray(ctx.run.panel.alive[ts], dtype=bool)[players]).sum())
    try:
        f_rest: float | None = float(ctx.oracle.values(players)[0])
    except NoLivingAgentsError:  # every agent dies at the baseline action: f over nobody is undefined (None: '–')
        f_rest = None
    return {"baseline_alive": BASELINE_ALIVE, "died_at_t_star": died,
            "f_baseline_t_star": float(res.f_baseline[ts]), "f_all_at_baseline_action": f_rest}


def _spill(panel: Any, res: Any) -> Any:
    """From :data:`~aumann.studies.context.LARGE_N` agents: the panel's values and φ over every step move to
    disk-backed read-only maps (:func:`aumann.io.spill`; the same bytes), and the attribution with the spilled φ
    is returned. Later stages read one step of them (t*, or a step at a time) or only write them, and the pages
    they read are handed back between stages (:meth:`RunContext.release_freed`): at 10⁶ agents 0.9 GB (720 MB of
    panel, 240 MB of φ) leave the resident set of every stage after ``attribute``, 9 GB at 10⁷."""
    import dataclasses
    import warnings

    from aumann.errors import AumannWarning
    from aumann.io import spill

    try:
        values, phi = spill(panel.values), spill(res.phi)
    except OSError as exc:  # no room in $TMPDIR: the run goes on with both in memory, as below LARGE_N
        warnings.warn(f"the panel and φ of this {panel.shape[1]:,}-agent run could not be spilled to the temporary "
                      f"directory ({exc}); they stay in memory (set TMPDIR to a disk with "
                      f"{(panel.values.nbytes + res.phi.nbytes) / 2**30:.1f} GiB free)", AumannWarning, stacklevel=2)
        return res
    panel.values = values
    # the method's own Σ_i φ per step travels along (recomputed from φ it could differ in the last bit)
    return dataclasses.replace(res, phi=phi, phi_sums=res._phi_sums)


def smoothing_gaps(ctx: RunContext) -> None:
    """The attributed C² surrogate against the original indicator: values over every step, and the
    rankings of their attributions at t*."""
    from aumann.attribution.metrics import relative_gap

    fv, fov, ts = ctx.f_values, ctx.f_original_values, ctx.t_star
    gap = ctx.scenario.gap_report(ctx.config, ctx.target, ranks=True, method=ctx.method, baseline=ctx.z0).as_dict()
    max_rel, rel_skipped = relative_gap(fv, fov)  # not where the original is ~0 (no relative gap there)
    ctx.rec["smoothing_gap"] = {"max_abs": float(np.max(np.abs(fv - fov))), "max_rel": max_rel,
                                **({"rel_skipped_steps": rel_skipped} if rel_skipped else {}),
                                "t_star_abs": float(abs(fv[ts] - fov[ts])),
                                "t_star_kendall_tau": gap.get("mean_kendall_tau", math.nan),
                                "t_star_top_k_jaccard": gap.get("mean_top_k_jaccard", math.nan),
                                "note": gap.get("rank_note")}


def ablations(ctx: RunContext) -> None:
    """The path, f-sensitivity and baseline ablations at t* (:mod:`aumann.evaluation.ablations`); each part
    (and each baseline of the baseline ablation) may fail on its own and is recorded as such."""
    from aumann.evaluation.ablations import baseline_ablation, f_sensitivity, path_ablation

    scenario, config, st = ctx.scenario, ctx.config, ctx.config.study
    f = scenario.indicators(config)[0]
    phi = ctx.outputs["aumann_shapley"].phi
    top_k = ctx.sizes.top_k
    out: dict[str, Any] = {}
    path = attempt(ctx, "ablation path", lambda: path_ablation(f, ctx.target, ctx.z0, phi, st.path_orders,
                                                                ctx.rng("ablations"), top_k))
    if path is not None:
        out["path"] = path
    fs = attempt(ctx, "ablation f-sensitivity", lambda: f_sensitivity(scenario, config, ctx.target, ctx.z0, top_k))
    if fs is not None:
        out["f_sensitivity"] = fs
    out["baseline"] = baseline_ablation(f, ctx.panel, ctx.t_star, ctx.z0, st.quadrature_steps,
                                        attempt=lambda name, fn: attempt(ctx, f"ablation {name}", fn))
    ctx.rec["ablations"] = out


# ---------------------------------------------------------------------------------------------- registry
_STAGES: NamedList[Stage] = NamedList([
    Stage("simulate", simulate, optional=False, message="simulate"),
    Stage("attribute", attribute, optional=False, message="attribute (all steps)"),
    Stage("rows", compute_rows, optional=False),
    Stage("deletion", score_rows, optional=False),
    Stage("smoothing gaps", smoothing_gaps, message="smoothing gaps", lane="study"),
    Stage("ablations", ablations, when=lambda sc, cfg: True if cfg.study.ablations else "study.ablations = false",
          message="ablations", lane="study"),
])


def register_stage(stage: Stage, *, before: str | None = None) -> Stage:
    """Add a stage (after every stage, or before the stage ``before``); registering a name again replaces it.

    Required stages (``optional=False``) run before the run is first written, so they go before every
    optional one."""
    if not isinstance(stage, Stage) or not isinstance(stage.name, str) or not stage.name or not callable(stage.run):
        raise ConfigError(f"register_stage needs a Stage(name, run, ...) with a non-empty str name; got {stage!r}")
    if stage.lane is not None and not isinstance(stage.lane, str):
        raise ConfigError(f"stage {stage.name!r}: lane must be a str (or None: the stage runs alone); "
                          f"got {type(stage.lane).__name__} {stage.lane!r:.80}")
    for field_name in ("needs", "ticks"):
        value = getattr(stage, field_name)
        if isinstance(value, str) or not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
            hint = f" (a str is read letter by letter: write {field_name}=({value!r},))" \
                if isinstance(value, str) else ""
            raise ConfigError(f"stage {stage.name!r}: {field_name} must be a tuple of str; got "
                              f"{type(value).__name__} {value!r:.80}{hint}")
    if _STAGES.replace(stage):
        return stage
    at = _STAGES.position(before)
    first_optional = next((i for i, s in enumerate(_STAGES) if s.optional), len(_STAGES))
    at = min(at, first_optional) if not stage.optional else max(at, first_optional)
    _STAGES.insert(at, stage)
    return stage


CORE = ("simulate", "attribute", "rows", "deletion")
"""The study's own required stages (they cannot be removed)."""


def unregister_stage(name: str) -> None:
    """Remove a registered stage (not one of :data:`CORE`)."""
    if name in CORE:
        raise ConfigError(f"the study's required stage {name!r} cannot be removed")
    _STAGES.drop(name)


def stages() -> tuple[Stage, ...]:
    """Every registered stage, in order (required first)."""
    return tuple(_STAGES)


def stage_messages(scenario: Scenario, config: ScenarioConfig) -> tuple[str, ...]:
    """The progress messages one run emits, in order (for progress bars)."""
    from aumann.studies.rows import rows

    out: list[str] = []
    for stage in _STAGES:
        if stage.applies(scenario, config) is not True:
            continue
        if stage.name == "rows":
            out += [r.message for r in rows() if r.message and r.enabled(scenario, config)]
        elif stage.name == "deletion":
            out.append("deletion forks")
        elif stage.message:
            out.append(stage.message)
        out += stage.ticks
    return (*out, "done")


def run_stages(ctx: RunContext, *, optional: bool, before_alone: Callable[[], Any] | None = None) -> None:
    """Run the required stages (``optional=False``) or the optional ones, in order.

    Optional stages that name a :attr:`Stage.lane` run by lanes (:func:`_segments`): consecutive stages in two
    or more lanes run at the same time where two cores are usable, each lane's stages in order on a copy of the
    context's record (:func:`_run_lanes`); the copies are merged back lane by lane in the registry's order, so
    the record, its key order and every number are what running them one after another gives, on any number
    of cores. A stage without a lane runs alone. ``before_alone()`` is called once, before the first stage that
    runs on ``ctx`` itself rather than on a lane's copy (the study's first write of the run, going on meanwhile,
    must be on disk by then)."""
    todo = [stage for stage in _STAGES if stage.optional == optional]
    for segment in (_segments(todo) if optional else [[[s]] for s in todo]):
        if len(segment) == 1:
            if before_alone is not None:
                before_alone()
                before_alone = None
            for stage in segment[0]:
                run_stage(ctx, stage)
                ctx.release_freed()  # a large run's freed temporaries go back to the system before the next stage
        else:
            _run_lanes(ctx, segment)


def _segments(todo: list[Stage]) -> list[list[list[Stage]]]:
    """``todo`` cut into segments that run one after another, each a list of lanes (lists of stages in
    registry order). A stage without a lane is a segment of its own; so is the start of a new segment where a
    stage ``needs`` a stage of another lane of the segment so far (it must see that stage's record)."""
    out: list[list[list[Stage]]] = []
    lanes: dict[str, list[Stage]] = {}

    def close() -> None:
        if lanes:
            out.append(list(lanes.values()))
            lanes.clear()

    for stage in todo:
        if stage.lane is None:
            close()
            out.append([[stage]])
            continue
        elsewhere = {s.name for lane, group in lanes.items() if lane != stage.lane for s in group}
        if elsewhere.intersection(stage.needs):
            close()
        lanes.setdefault(stage.lane, []).append(stage)
    close()
    return out


_CTX_DICTS = ("rec", "arrays", "outputs", "orders", "saved", "stages", "extras")

#: memory available on the host below which lanes run one after another: at 10⁷ agents MegaScale's two lanes at
#: once peaked 2.5 GB above the run's serial peak (17.5 against 15.0 GB); 600 bytes per agent leaves room for it
LANE_BYTES_PER_AGENT = 600


def _room_for_lanes(n: int) -> bool:
    from aumann.attribution.memory import available_host

    avail = available_host()
    return avail is None or avail >= LANE_BYTES_PER_AGENT * n


_GONE = object()


def _tree(d: dict[str, Any], copies: dict[int, tuple[dict[str, Any], dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A copy of ``d`` whose nested plain dicts are copies too (other values are shared). With ``copies``, each
    copy made is noted there (``id(copy)`` → (copy, the dict it copies)) for :func:`_merge`."""
    out = {key: _tree(value, copies) if type(value) is dict else value for key, value in d.items()}
    if copies is not None:
        copies[id(out)] = (out, d)
    return out


def _merge(mine: dict[str, Any], theirs: dict[str, Any], start: dict[str, Any],
           copies: dict[int, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Apply what one lane did to its copy ``theirs`` of ``start`` to ``mine``, nested dicts key by key: keys it
    removed are removed, keys it added or changed are set (new keys after the existing ones). A nested dict
    the lane changed in place is merged the same way, not replaced (another lane's keys in it stay), and so is a
    dict that this lane and an earlier one both added under one key (``add_table`` in two lanes: both tables, as
    ``setdefault`` in a serial run gives)."""
    for key in [k for k in start if k not in theirs]:
        mine.pop(key, None)
    for key, value in theirs.items():
        old = start.get(key, _GONE)
        if old is value:
            continue
        target = mine.get(key, _GONE)
        made = copies.get(id(value))
        if made is not None and made[0] is value and made[1] is old:  # the lane's copy of the dict it started from
            if type(target) is dict:
                _merge(target, value, old, copies)
                continue
        elif old is _GONE and type(value) is dict and type(target) is dict:  # an earlier lane added it too
            _merge(target, value, {}, copies)
            continue
        mine[key] = value


def _run_lanes(ctx: RunContext, lanes: list[list[Stage]]) -> None:
    """Run ``lanes`` at the same time, each on a shallow copy of ``ctx`` whose record dicts — nested dicts
    included — are its own, then merge each copy's keys back into ``ctx`` in lane order, nested dicts key by
    key (:func:`_merge`: new keys after the existing ones, lane by lane; changed values replaced in place; two
    lanes' ``add_table`` both kept): the same record, in the same key order, as running the lanes one after
    another. The first lane runs on the calling thread, the others on threads of their own where two cores are
    usable (:func:`~aumann.attribution.threads.usable_cores`; otherwise one after another, through the same
    copies; so do they where the host has less memory available than :data:`LANE_BYTES_PER_AGENT` per agent:
    two stages at once hold both working sets). Under ``strict`` a failing lane stops at its failure, the others
    finish, and the first failure in lane order is raised after the merge. An interrupt (Ctrl-C) stops the
    calling thread's lane at once and the others after their current stage (their threads are daemons: they do
    not hold the process open); an interrupt raised on a lane's own thread stops the other lanes after their
    current stage and is raised on the calling thread (it ended that lane silently, the study going on)."""
    import copy
    import threading

    import torch

    from aumann.attribution.threads import usable_cores
    from aumann.progress import end_thread

    before = {name: _tree(getattr(ctx, name)) for name in _CTX_DICTS}  # what each lane starts from
    children, made = [], []
    for _ in lanes:
        child, copies = copy.copy(ctx), {}
        for name in _CTX_DICTS:
            setattr(child, name, _tree(before[name], copies))
        children.append(child)
        made.append(copies)
    threads = torch.get_num_threads()
    errors: list[BaseException | None] = [None] * len(lanes)
    stop = threading.Event()

    def run_lane(i: int, own_thread: bool) -> None:
        if own_thread:
            torch.set_num_threads(threads)  # a new thread's own setting starts from the default: keep the caller's
        try:
            for stage in lanes[i]:
                if stop.is_set():
                    return
                run_stage(children[i], stage)
                ctx.release_freed()
        except Exception as exc:  # strict: this lane stops here; the record so far is still merged
            errors[i] = exc
        except BaseException as exc:  # an interrupt on a lane's own thread: raised on the calling thread
            if not own_thread:
                raise
            errors[i] = exc
            stop.set()
        finally:
            end_thread()  # the lane's last stage ends here, not when the slowest lane ends

    end_thread()  # the calling thread's stage before the lanes ends here
    helpers = []
    if usable_cores() >= 2 and _room_for_lanes(ctx.n):
        helpers = [threading.Thread(target=run_lane, args=(i, True), name=f"aumann-stage-lane-{i}", daemon=True)
                   for i in range(1, len(lanes))]
    try:
        for t in helpers:
            t.start()
        run_lane(0, False)
        for t in helpers:
            while t.is_alive():
                t.join(0.5)  # in short waits: Ctrl-C reaches this thread
        interrupt = next((e for e in errors if not isinstance(e, (Exception, type(None)))), None)
        if interrupt is not None:  # as if it had come on this thread: the study stops, nothing is merged
            raise interrupt
        if not helpers:
            for i in range(1, len(lanes)):
                run_lane(i, False)
    except BaseException:
        stop.set()  # the other lanes stop after their current stage
        raise
    for child, copies in zip(children, made):  # what each lane set, added or removed, in lane order
        for name in _CTX_DICTS:
            _merge(getattr(ctx, name), getattr(child, name), before[name], copies)
    for exc in errors:
        if exc is not None:
            raise exc


def pending(ctx: RunContext) -> None:
    """Mark the optional stages still to run as pending, or skipped with the reason (the first write of a run)."""
    for stage in _STAGES:
        if not stage.optional or stage.name in ctx.stages:
            continue
        applies = stage.applies(ctx.scenario, ctx.config)
        if applies is True:
            ctx.stages[stage.name] = {"status": "pending", "optional": True}
        elif isinstance(applies, str):
            _record(ctx, stage.name, "skipped", True, message=applies)


__all__ = ["CORE", "Stage", "ablations", "add_table", "attempt", "attribute", "pending", "register_stage", "run_stage",
           "run_stages", "simulate", "smoothing_gaps", "stage_messages", "stages", "unregister_stage"]
