"""The scenario interface: everything the pipeline needs to run, attribute and stress-test one MAS.

A :class:`Scenario` binds

* a pydantic config model (a subclass of :class:`ScenarioConfig`) over its packaged TOML defaults
  (``aumann/configs/<name>.toml``; user files and ``--set`` overrides layer over them),
* ``build_model(config, rng, backend) -> model``: a fresh model (a ``mesa.Model`` or any object
  with ``step()``), seeded from ``rng``; ``backend`` is a
  :class:`~aumann.simulators.llm.DecisionBackend` or ``None`` for the scenario's offline policy,
* ``make_recorder(config)``: a fresh :class:`~aumann.simulators.FeatureRecorder` /
  :class:`~aumann.simulators.ArrayRecorder` capturing the scenario's ``features``,
* ``context(config)``: optional per-step world state ``{name: fn(model)}`` (recorded into
  ``Panel.context``, read by indicators, held fixed along the path, never attributed),
* ``indicator(config)``: the C² surrogate macro indicator f that is attributed,
  ``original(config)``: the original (possibly non-smooth) indicator it replaces,
* ``baseline_action(model, agents)``: an intervention applied to a model at the start of a step
  that forces the given agents to take the scenario's baseline action during the next step; the
  agents are panel positions (the Panel's agent axis; ``baseline_action_by="position"``, the
  default, for fixed populations) or agent ids (``unique_id``; ``baseline_action_by="id"``, for
  populations with births and deaths, where a panel row outlives the agent),
* ``step(model)`` (optional): how the model advances one step (default: ``model.step()``, or its
  Mesa DEVS simulator's ``run_for(1)``); used by the run, its forks and replays,
* ``baseline_features(model, config) -> (N, D)`` (optional): the features every agent would have
  after the next step if it took the baseline action. The default forks ``model`` with *all*
  agents at the baseline action, steps once and records; this is exact when an agent's features
  under the baseline action do not depend on what other agents do (true for the built-in
  scenarios; override it otherwise). This (N, D) array is the per-agent attribution baseline z⁰,
  so attribution (path from z⁰ to z) and deletion (re-simulate with the baseline action) remove
  the same thing.
* ``aggregators(config)`` (optional): alternative indicators for the f-sensitivity ablation.
* ``step_map(model, config) -> StepMap`` (optional): the step about to be taken by ``model`` as a
  torch function G of participation intensities λ ∈ [0, 1]^N (λ_i = 1: agent i's recorded action,
  λ_i = 0: its baseline action) returning the features after the step, equal to the simulator at
  the corners of the cube. It enables action attribution through the simulator
  (:func:`aumann.evaluation.action_attribution`); see :class:`StepMap`.
* ``offline_backend()`` (optional): a DecisionBackend answering like the scenario's offline policy
  from the decision ``context`` (``aumann run --dry-run`` puts it in the loop to count requests).
* ``baseline_all_fn(run, config)`` (optional): the per-agent baselines of every step at once, an array
  broadcastable to (T, N, D) — (N, D) when the baseline does not depend on the step. Without it the
  study stacks ``baseline_features`` of a checkpoint before every step (and keeps them all).
* ``resimulate_fn(model, config, positions)`` (optional): what :meth:`Scenario.step_with_baseline`
  returns — the features (N, D) and context after the coming step with ``positions`` at the
  baseline action — computed faster than a full fork (e.g. re-simulating only the agents whose inputs
  change); it must equal the fork exactly.
* ``resimulate_rows_fn(model, config, positions)`` (optional, beside ``resimulate_fn``): the same step as
  ``(base, rows, values)`` — the factual step's features (N, D) float64 (the same array object on every call
  from one model), the positions of the rows the forced agents change (unique) and those rows' new
  values (len(rows), D) — so that ``base`` with ``rows`` replaced is ``resimulate_fn``'s features. The
  deletion oracle then evaluates indicators that declare a pooled form (f = ρ(mean ψ)) from the base's
  sums and the changed rows alone (:meth:`Scenario.step_rows`, :class:`~aumann.evaluation.deletion.DeletionOracle`,
  which checks the hook once against the re-simulated step on its first fork).
* a scenario's own analysis beside the standard study (e.g. a second indicator, scale checks) is a study
  stage, not a field here: :func:`aumann.studies.stages.register_stage` (docs/extending.md, "A stage");
  MegaScale-Social's lives in :mod:`aumann.studies.megascale`. (``Scenario.analysis`` was removed: setting
  it is a :class:`~aumann.errors.ConfigError` saying so.)
* ``groups(model, config)`` (optional): named agent labelings ``{name: N labels}`` (e.g. influence
  tiers) read from the model after the run and attached to the run panel (``Panel.groups``), so every
  attribution carries them and the report shows the group shares R_G and a group column.

Step convention: panel step t holds the features recorded *after* ``model.step()`` number t
(t = 0 … T−1). ``ScenarioRun.before(t)`` is the model *before* step t, so a counterfactual fork
re-simulating step t starts from it. Checkpoints are checked deep copies when the model copies
faithfully, else replays: the scenario rebuilds the model from its config and the run's seed and
replays it to step t (:mod:`aumann.simulators.branching`), lazily, when ``before(t)`` is asked for.
Forks of a checkpoint use the same choice (``aumann.simulators.fork(..., strategy="auto")``).
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from aumann import configs
from aumann.checks import as_int, as_real_array, as_torch
from aumann.errors import (
    AumannError,
    ConfigError,
    NoAgentsRecordedError,
    ScenarioCodeError,
    SimulationError,
    TerminatedBySignal,
)
from aumann.seeding import model_given_no_seed as _no_seed_given
from aumann.simulators.llm.settings import LLMSettings

ModelFactory = Callable[[Any, np.random.Generator, Any], Any]
IndicatorFactory = Callable[[Any], Any]
BaselineAction = Callable[[Any, Sequence[int]], None]

#: the largest agents / steps / runs a scenario config takes (each far beyond what fits in memory or time)
MAX_SIZES = {"agents": 10_000_000, "steps": 1_000_000, "runs": 100_000, "seed": 2**63 - 1}
#: the smallest value of each, the ScenarioConfig fields' own ``ge`` bounds, kept by the validator too (a subclass
#: that redefines a field drops its ``ge``)
_MIN_SIZES = {"agents": 2, "steps": 2, "runs": 1, "seed": 0}
#: the largest value of every other count of the study: each is a loop bound (orderings × K_del forks, path
#: orders × N evaluations, ...), so an absurd one (``random_orderings = 1e15``) is refused, not run for ever
MAX_COUNTS = {"k_del": 100_000, "top_k": 10_000_000, "random_orderings": 10_000, "path_orders": 10_000,
              "judge_candidates": 100_000, "ba_m": 1_000, "period": 1_000_000}


#: units the control-variate row needs (aumann.attribution.control_variate.MIN_UNITS; scenarios may not import
#: the estimator's module at config time)
CV_MIN_UNITS = 4


class StudyConfig(configs.ConfigModel):
    """Parameters of the faithfulness study and the ablations (the ``[study]`` table of a config).

    Attributes:
        permutations: sampled-Shapley permutations of the reference game (paper: 1000).
        ceiling_permutations: permutations of the second sampled-Shapley run for the noise ceiling
            (default: the reference row's own count, ``permutations`` or ``cv_permutations``).
        cv_permutations: permutations of the ``sampled_shapley_cv`` row (default: ``permutations``). Its
            control variate leaves a far smaller standard error per permutation (MegaScale-Social at 10⁶: the
            median variance per permutation ~7·10⁴-fold smaller), so large runs take fewer (MegaScale's
            ``[large]``); the row's median standard error, recorded beside plain sampling's, says what that cost.
        quadrature_steps: Gauss–Legendre points K of the Aumann–Shapley path integral.
        k_del: deletion depth K_del (default min(20, N/2)).
        top_k: k of the top-k Jaccard (default min(10, N/2)).
        random_orderings: orderings averaged for the Random deletion row.
        reference_game: ``"masking"`` (per-step masking game on the recorded features) or
            ``"resimulation"`` (non-members take the baseline action and step t* is replayed).
        reference_estimator: which sampled-Shapley row every other row's Kendall τ / top-k Jaccard and the
            noise ceiling (a second seed of that estimator) are measured against: ``"sampled_shapley_cv"``
            (default: the Aumann–Shapley control variate, ≈ 11× smaller standard error than plain sampling at
            the same m on MidScale-Social) or ``"sampled_shapley"`` (plain permutation sampling, the reference
            before issue 25). On ``reference_game = "resimulation"`` the reference is always plain sampling
            (see docs/baselines.md). Both rows stay in the table either way.
        path_orders: random orders averaged by the piecewise-linear path ablation.
        ablations: run the path, f-sensitivity and baseline ablations.
        action_attribution: run ``action_aumann_shapley`` (the re-simulation game through the
            scenario's step map) when the scenario has a ``step_map``.
        action_tol: its adaptive quadrature's efficiency budget, relative to Δv (``None``: one pass
            of ``quadrature_steps`` points).
        resimulation_reference: also run sampled Shapley on the re-simulation game
            (``sampled_shapley_resimulation``; ``permutations`` · (N − 1) + 2 forks per run, twice for
            its noise ceiling) and its agreement with ``action_aumann_shapley``. Off by default.
        judge: the ``llm_judge`` row: ``"auto"`` (the run's LLM backend when it has one, else the
            heuristic stand-in), ``"heuristic"``, ``"llm"`` (needs an LLM backend) or ``"off"``.
        judge_candidates: the judge sees all agents up to this N, a stated shortlist of this many above.
        antithetic: pair every sampled permutation with its reverse (``permutations`` counts both; the
            reverse reuses the forward pass's running sums, so a pair costs little more than one). A sampled row
            pairs only where every count it runs is even: its own and, for the reference, its noise ceiling's
            (so the ceiling is a second seed of the same estimator) and makes two pairs at least.
        log_k_grid: also delete along the log-spaced grid k = 1, 3, 10, 30, …, 10⁵ (k ≤ N/2) and report
            ``deletion_auc_logk``, the mean relative drop over the grid (an extra column).
        fork_strategy: how checkpoints and deletion forks are made: ``"auto"`` (a checked copy when
            the model copies faithfully, else a replay from the scenario's factory), ``"copy"`` or
            ``"replay"``.
        strict: any stage failure stops the study; by default a failing optional stage (smoothing gaps,
            ablations, a scenario's analysis) is recorded in the run record, manifest and report, and the
            study goes on (``aumann run --strict``). Not part of what a run computes: resume ignores it.
    """

    model_config = ConfigDict(extra="forbid")

    permutations: int = Field(1000, ge=2, le=10_000_000)
    ceiling_permutations: int | None = Field(None, ge=2, le=10_000_000)
    cv_permutations: int | None = Field(None, ge=2, le=10_000_000)
    quadrature_steps: int = Field(32, ge=1, le=4096)  # the Gauss–Legendre cap of AumannShapley
    k_del: int | None = Field(None, ge=1, le=MAX_COUNTS["k_del"])
    top_k: int | None = Field(None, ge=1, le=MAX_COUNTS["top_k"])
    random_orderings: int = Field(20, ge=1, le=MAX_COUNTS["random_orderings"])
    reference_game: str = Field("masking", pattern="^(masking|resimulation)$")
    reference_estimator: str = Field("sampled_shapley_cv", pattern="^(sampled_shapley_cv|sampled_shapley)$")
    path_orders: int = Field(20, ge=1, le=MAX_COUNTS["path_orders"])
    ablations: bool = True
    action_attribution: bool = True
    action_tol: float | None = Field(1e-6, gt=0, le=1)
    resimulation_reference: bool = False
    judge: str = Field("auto", pattern="^(auto|heuristic|llm|off)$")
    judge_candidates: int = Field(50, ge=1, le=MAX_COUNTS["judge_candidates"])
    antithetic: bool = False
    log_k_grid: bool = False
    fork_strategy: str = Field("auto", pattern="^(auto|copy|replay)$")
    strict: bool = False

    @model_validator(mode="after")
    def _cv_units(self) -> StudyConfig:
        """The ``sampled_shapley_cv`` row on the masking game needs 4 units (permutations, or antithetic pairs):
        refused here, naming the key, not by the row's MethodError after the runs were simulated and the rows
        before it computed (``--permutations 3`` stopped the study at stage 4)."""
        if self.reference_game != "masking":  # there the row is the step-map estimate (its own counts)
            return self
        m_key = "cv_permutations" if self.cv_permutations is not None else "permutations"
        m = self.cv_permutations if self.cv_permutations is not None else self.permutations
        counts = [(m_key, m)]
        if self.reference_estimator == "sampled_shapley_cv" and self.ceiling_permutations is not None:
            counts.append(("ceiling_permutations", self.ceiling_permutations))  # the reference's second seed
        for key, n in counts:
            per = 2 if self.antithetic and n % 2 == 0 else 1  # as the row pairs them
            if n // per < CV_MIN_UNITS:
                flag = " (--permutations)" if key == "permutations" else ""
                raise ValueError(
                    f"study.{key}{flag} = {n} gives the sampled_shapley_cv row {n // per} unit(s); its control "
                    f"variate needs {CV_MIN_UNITS} (permutations, or antithetic pairs): use ≥ {CV_MIN_UNITS * per}"
                    + ("" if key != "permutations" else ", or set study.cv_permutations for that row alone"))
        return self


class ExecutionConfig(configs.ConfigModel):
    """Where a study's work executes (the ``[execution]`` table of a config). It never changes a
    result, so it is not part of a run's config digest; ``aumann run``'s flags win over it
    (``--executor``, ``--workers``, ``--ray-address`` / ``RAY_ADDRESS``, ``--ray-runtime-env``,
    ``--ray-max-retries``).

    Attributes:
        executor: ``"local"`` (process pool) or ``"ray"``; default local, or Ray when an address is set.
        workers: tasks that run at once (local default 1 = serial; Ray default every CPU; 0 = every CPU).
        ray_address: the Ray cluster to attach to (``"host:6379"``, ``"auto"``, ``"ray://host:10001"``).
        ray_runtime_env: a Ray runtime environment laid over the one aumann builds (``pip``, ``env_vars``, ...).
        ray_max_retries: re-runs of a task whose worker or node died, on Ray (default 3).
    """

    model_config = ConfigDict(extra="forbid")

    executor: str | None = Field(None, pattern="^(local|ray)$")
    workers: int | None = Field(None, ge=0, le=1_000_000)
    ray_address: str | None = Field(None, min_length=1, max_length=2048)
    ray_runtime_env: dict[str, Any] | None = None
    ray_max_retries: int | None = Field(None, ge=0, le=100)

    @field_validator("ray_runtime_env", mode="after")
    @classmethod
    def _plain_json(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Ray sends the runtime environment as JSON: ``{a = inf}`` (TOML) killed Ray's worker with a traceback."""
        if v is not None:
            try:
                json.dumps(v, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"must hold JSON values only (no NaN, Infinity or dates): {exc}") from None
        return v



class ScenarioConfig(configs.ConfigModel):
    """Fields every scenario config has; scenarios subclass it with their own parameters.

    Attributes:
        agents: number of agents N.
        steps: number of steps T.
        runs: independent runs of the study (seeds spawned from ``seed``).
        seed: the root seed.
        step_timeout: seconds one step of the model may take (``None``: no limit; ``--step-timeout``); a
            step that runs longer stops the run with :class:`~aumann.errors.StepTimeoutError`
            (:mod:`aumann.simulators.boundary` says how it is enforced). Not part of a run's digest.
        study: the faithfulness-study parameters.
        llm: the LLM request settings (``[llm]``: temperature, top_p, max_tokens, seed, system_prompt,
            max_invalid_rate; see :class:`~aumann.simulators.llm.settings.LLMSettings`).
        execution: where the work executes (not part of what a run computes; see :class:`ExecutionConfig`).
    """

    model_config = ConfigDict(extra="forbid")

    #: the top-level keys whose value names a file, each with the words that name no file (``network = "ba"``): a
    #: relative path in a config file is read from that file's folder (:meth:`paths_from`)
    path_keys: ClassVar[dict[str, frozenset[str]]] = {}

    @classmethod
    def paths_from(cls, layer: dict[str, Any], folder: Path) -> dict[str, Any]:
        """``layer`` (one config file's keys) with each relative path of :attr:`path_keys` joined to ``folder``
        (absolute): ``fixture = "my_fixture.json"`` in ``cfgs/run.toml`` is ``cfgs/my_fixture.json`` wherever the
        command runs from, not ``./my_fixture.json``."""
        out = dict(layer)
        for key, words in cls.path_keys.items():
            value = out.get(key)
            if isinstance(value, str) and value.strip() and value not in words and not Path(value).is_absolute():
                out[key] = os.path.join(os.path.abspath(folder), value)  # abspath: no elsewhere/../cfgs
        return out

    agents: int = Field(..., ge=2)
    steps: int = Field(..., ge=2)
    runs: int = Field(1, ge=1)
    seed: int = Field(0, ge=0)
    step_timeout: float | None = Field(None, ge=0.001, le=1e6)
    study: StudyConfig = Field(default_factory=StudyConfig)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @field_validator("agents", "steps", "runs", "seed", mode="after")
    @classmethod
    def _within_reach(cls, v: int, info: ValidationInfo) -> int:
        """Sizes no run can reach (``--agents 1e12``) are refused here, not after hours of building a network;
        every scenario's config inherits the bounds (:data:`MAX_SIZES`), the lower ones too: a config class
        in a user's scenario file that sets its own default (``runs: int = 2``) replaces the field and its
        ``ge`` bound, and ``--set runs=0`` ran nothing and reported success."""
        name = info.field_name or ""
        low = _MIN_SIZES[name]
        if v < low:
            raise PydanticCustomError("greater_than_equal", "Input should be greater than or equal to {ge}",
                                      {"ge": low})
        cap = MAX_SIZES[name]
        if v > cap:
            raise ValueError(f"must be ≤ {cap:,} (the most aumann runs; a typo?)")
        return v


def _model_ids(model: Any) -> tuple[list[Any], dict[Any, int]]:
    """The unique_ids of ``model``'s agents and, by the label a panel keeps for each, their positions."""
    from aumann.labels import id_labels

    uids = [a.unique_id for a in getattr(model, "agents", ())]
    try:
        labels = id_labels(uids)
    except Exception:  # ids a panel cannot label (duplicates, None): matched as they are, as before
        labels = uids
    return uids, {lab: k for k, lab in enumerate(labels)}


@dataclass(frozen=True)
class _Deferred:
    """A checkpoint kept as a recipe: rebuild with ``factory`` and replay ``steps`` steps."""

    factory: Callable[[], Any]
    steps: int
    step: Callable[[Any], None] | None
    digest: list
    copy_error: str


@dataclass
class ScenarioRun:
    """One simulated run: the panel, the final model and checkpoints taken before each kept step.

    ``strategy`` says how checkpoints are kept: ``"copy"`` (checked deep copies) or ``"replay"``
    (rebuilt from the scenario's factory on demand); ``factory`` rebuilds the run's initial model.
    """

    panel: Any
    model: Any
    checkpoints: dict[int, Any] = field(default_factory=dict)
    strategy: str = "copy"
    factory: Callable[[], Any] | None = None

    def before(self, t: int) -> Any:
        """The model before step ``t`` (a checkpoint; fork from it, do not step it)."""
        if t not in self.checkpoints:
            raise SimulationError(f"no checkpoint before step {t}; kept: {sorted(self.checkpoints)}")
        ckpt = self.checkpoints[t]
        if isinstance(ckpt, _Deferred):
            from aumann.errors import ReplayDivergedError
            from aumann.simulators import replay, state_digest
            from aumann.simulators.branching import digest_difference

            model = replay(ckpt.factory, ckpt.steps, step=ckpt.step)
            diff = digest_difference(ckpt.digest, state_digest(model))
            if diff is not None:
                raise ReplayDivergedError(f"replaying the run to step {t} does not reproduce it: {diff}; the "
                                          f"scenario's build_model and step must be deterministic given the rng")
            from aumann.simulators.branching import lineage

            lin = lineage(model)
            if lin is not None:
                lin.copy_error = ckpt.copy_error  # its forks replay too, without trying to copy again
            self.checkpoints[t] = ckpt = model
        return ckpt


@dataclass(frozen=True)
class StepMap:
    """One step of a scenario as a differentiable map of the agents' participation intensities.

    G(λ) for λ ∈ [0, 1]^N: λ_i = 1 is agent i's recorded action at the step, λ_i = 0 its baseline
    action; G returns the features after the step. At a corner 1_S of the cube G must equal the
    simulator's step with the agents outside S at the baseline action (``exact=True``: at every
    corner; ``exact=False``: at least at λ = 1, the factual step, and λ = 0, everyone at the
    baseline action — ``holds`` says what G keeps at its recorded value, and the G-vs-fork gap at
    other corners is measured, not assumed). In between, λ_i enters where the simulator's own
    baseline switch for agent i does (its activity volumes and its state entering the step are
    scaled by λ_i, selected outputs are mixed λ_i · new + (1 − λ_i) · kept).

    Attributes:
        fn: ``fn(lam)`` with ``lam`` (B, N) → features (B, N, D) (torch, differentiable in ``lam``).
        n_agents: N (the panel's agent order).
        context: the step's world state {name: value} passed to the indicator (held fixed: it is the
            same in every fork of the step for the built-in scenarios).
        switches: optional ``switches(lam)`` (B, N) → (B, M): signed distances of the clip
            arguments of G to their thresholds; their zero crossings along the path are kinks, which
            the quadrature puts on panel boundaries (:mod:`aumann.attribution.participation`).
        exact: G equals the simulator at every corner of the cube.
        holds: what G holds at recorded values (empty when nothing is held).
    """

    fn: Callable[[Any], Any]
    n_agents: int
    context: Mapping[str, Any] = field(default_factory=dict)
    switches: Callable[[Any], Any] | None = None
    exact: bool = True
    holds: str = ""

    def __call__(self, lam: Any) -> Any:
        """Features (B, N, D) after the step at intensities ``lam`` (B, N) (or (N,) → (N, D))."""
        import torch

        lam = as_torch(lam, dtype=torch.float64)
        single = lam.ndim == 1
        out = self.fn(lam[None] if single else lam)
        return out[0] if single else out


@dataclass(frozen=True)
class Scenario:
    """A registered, runnable scenario (see the module docstring for each field's contract).

    Example:
        >>> from aumann import scenarios
        >>> sc = scenarios.get("social-llm")
        >>> cfg = sc.load_config(agents=6, steps=4)
        >>> run = sc.simulate(cfg, rng=0)
        >>> run.panel.shape
        (4, 6, 5)
    """

    name: str
    description: str
    config_model: type[ScenarioConfig]
    build_model: ModelFactory
    make_recorder: Callable[[Any], Any]
    features: tuple[str, ...]
    indicator: IndicatorFactory
    original: IndicatorFactory
    baseline_action: BaselineAction
    baseline_features_fn: Callable[[Any, Any], np.ndarray] | None = None
    context: Callable[[Any], Mapping[str, Callable[[Any], Any]]] | None = None
    aggregators: Callable[[Any], Mapping[str, Any]] | None = None
    step_map: Callable[[Any, Any], StepMap] | None = None
    offline_backend: Callable[[], Any] | None = None
    baseline_all_fn: Callable[[Any, Any], np.ndarray] | None = None
    resimulate_fn: Callable[[Any, Any, Sequence[int]], tuple[np.ndarray, dict[str, np.ndarray]]] | None = None
    resimulate_rows_fn: Callable[[Any, Any, Sequence[int]], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    analysis: None = None  # removed (a study stage now): setting it is a ConfigError saying so
    config_file: str | None = None
    baseline_description: str = ""
    tags: tuple[str, ...] = ()
    step: Callable[[Any], None] | None = None
    baseline_action_by: str = "position"
    groups: Callable[[Any, Any], Mapping[str, Any]] | None = None
    #: what an LLM decision without a usable reply (an abstention) does in this scenario, for the reports
    #: ("no post and no reaction that step"); empty: the reports say the scenario gave no description
    abstention_description: str = ""

    def __post_init__(self) -> None:
        if self.analysis is not None:
            raise ConfigError(f"scenario {self.name!r}: Scenario.analysis was removed; a scenario's own analysis is "
                              "now an optional study stage: register it with aumann.studies.stages.register_stage("
                              "Stage(name, fn)), where fn(ctx) reads the run's RunContext and writes ctx.rec / "
                              "ctx.arrays (docs/extending.md, 'A stage')")
        if self.baseline_action_by not in ("position", "id"):
            raise ConfigError(f"scenario {self.name!r}: baseline_action_by must be 'position' or 'id'; got "
                              f"{self.baseline_action_by!r}")
        for what in ("build_model", "make_recorder", "indicator", "original", "baseline_action"):
            if not callable(getattr(self, what)):
                raise ConfigError(f"scenario {self.name!r}: {what} must be callable; got {getattr(self, what)!r}")
        from aumann.io import safe_component

        safe_component(self.name, "scenario name")  # it names the default run directory runs/<name>-seed<S>
        if not (isinstance(self.config_model, type) and issubclass(self.config_model, ScenarioConfig)):
            raise ConfigError(f"scenario {self.name!r}: config_model must be a ScenarioConfig subclass")

    # ------------------------------------------------------------------ config
    def load_config(self, path: str | Path | None = None, *, assignments: Sequence[str] = (),
                    **overrides: Any) -> ScenarioConfig:
        """The scenario's config: packaged defaults, then the file ``path``, then ``overrides``, then
        ``assignments`` — each layer changes only the keys it sets (tables merge key by key).

        Args:
            path: a TOML file laid over the packaged defaults (``aumann/configs/<config_file>``). A relative
                path in a file's key that names a file (:attr:`ScenarioConfig.path_keys`: ``fixture``, an edge-list
                ``network``) is read from that file's folder (the packaged defaults': the package's), not from
                the current directory; an absolute one as it is; one given by ``--set`` from the current directory.
            assignments: ``KEY=VALUE`` strings (``--set``), dotted keys for tables
                (``study.permutations=200``); values are TOML literals or plain strings (an integer key takes
                decimal integers, and float notation that writes an exact integer, ``1e3``, as the integer flags
                do: :func:`aumann.configs.parse_assignment`).
            **overrides: top-level fields (``agents=6``) or ``study={...}``; ``None`` values are ignored.

        Raises:
            ConfigError: an unreadable or malformed file, an unknown key, or an invalid value (the
                message lists what the config model rejected).
        """
        data: dict[str, Any] = {}
        if self.config_file:
            packaged = configs.path(self.config_file)
            data = self.config_model.paths_from(configs.load_toml(packaged), packaged.parent)
        if path is not None:
            layer = configs.load_toml(path, what=f"config file for scenario {self.name!r}")
            data = configs.deep_merge(data, self.config_model.paths_from(layer, Path(path).parent))
        data = configs.deep_merge(data, {k: v for k, v in overrides.items() if v is not None})
        data = configs.apply_assignments(data, assignments)
        try:
            return self.config_model.model_validate(data)
        except (ConfigError, ValidationError) as exc:
            why = configs.validation_message(exc) if isinstance(exc, ValidationError) else \
                str(exc).split(": ", 1)[-1]
            # a ValidationError is not chained: its text shows each input unredacted (in --debug's traceback)
            raise ConfigError(f"invalid config for scenario {self.name!r}: {why}") from (
                None if isinstance(exc, ValidationError) else exc)
        except (AumannError, TerminatedBySignal):
            raise
        except SystemExit as exc:
            raise ConfigError(f"invalid config for scenario {self.name!r}: a validator of "
                              f"{self.config_model.__name__} called sys.exit({exc.code!r})") from exc
        except Exception as exc:  # a validator of the scenario's config model that raised something else
            raise ConfigError(f"invalid config for scenario {self.name!r}: a validator of "
                              f"{self.config_model.__name__} raised {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]}") from exc

    # ------------------------------------------------------------------ simulation
    def check_size(self, config: ScenarioConfig) -> None:
        """Refuse a run whose recorded panel alone, ``steps × agents × features`` values of 4 bytes (float32, the
        narrowest a recorder keeps: MegaScale-Social's; the others keep float64, twice that), is more than this
        machine's memory, before anything is built: each size is within its cap, but ``--agents 10000000 --steps
        1000000`` asks for a panel of at least 186 TiB, and the run spent minutes building 10⁷ agents and then
        stepped on for as long as it was let (it could only end in a MemoryError at the last step). A lower bound,
        so a run that fits is never refused: ``agents`` is the population at the start (agents may be born: a
        ``FeatureRecorder`` checks again as births grow its buffer), and the panel is not all a run holds.

        Raises:
            MemoryBudgetError: the panel cannot fit, with its size and the machine's memory.
        """
        from aumann.errors import MemoryBudgetError
        from aumann.io import memory_bytes

        n, t, d = int(config.agents), int(config.steps), max(1, len(self.features))
        need, have = n * t * d * 4, memory_bytes()
        if need > have:
            raise MemoryBudgetError(
                f"scenario {self.name!r}: {t:,} steps × {n:,} agents × {d} feature(s) record a panel of at least "
                f"{need / 2**30:,.1f} GiB (float32) before anything else, more than this machine's "
                f"{have / 2**30:,.1f} GiB of memory: use fewer steps or agents")

    def simulate(self, config: ScenarioConfig, rng: Any = None, backend: Any = None, *,
                 keep_from: int | None = None, progress: bool = False, strategy: str = "auto",
                 warn_transient: bool = True, warn_finished: bool = True, warn_rounded: bool = True) -> ScenarioRun:
        """Run the scenario for ``config.steps`` steps and record the panel.

        Args:
            config: the scenario config.
            rng: seed / Generator for the model (same rng → identical panel).
            backend: a DecisionBackend, or ``None`` for the offline policy.
            keep_from: keep checkpoints before every step t ≥ keep_from (default ⌈T/2⌉, the
                steps a target t* can fall on); 0 keeps all.
            progress: show a progress bar.
            strategy: how checkpoints are kept: ``"auto"`` (checked copies when the model copies
                faithfully, else replays), ``"copy"`` (raise :class:`~aumann.errors.CheckpointError`
                when it does not) or ``"replay"``.
            warn_transient: warn (:class:`~aumann.errors.TransientAgentsWarning`) of agents present at no capture;
                they are counted in ``run.panel.meta["transient_agents"]`` either way (the study passes ``False``
                and warns once, from its run records).
            warn_finished: warn (:class:`~aumann.errors.ModelFinishedWarning`) when the model set ``running = False``
                and was stepped on; it is kept in ``run.panel.meta["model_finished"]`` either way (the study passes
                ``False`` and warns once, from its run records).
            warn_rounded: warn (:class:`~aumann.errors.PrecisionLossWarning`) of recorded integers past ±2**53 that
                float64 rounded; they are counted in ``run.panel.meta["rounded_values"]`` either way (the study
                passes ``False`` and warns once, from its run records).
        """
        from aumann.errors import CheckpointError
        from aumann.seeding import as_generator
        from aumann.simulators import checkpoint, simulate, state_digest
        from aumann.simulators.runner import warn_replay

        if not isinstance(config, self.config_model):
            raise ConfigError(f"scenario {self.name!r} needs a {self.config_model.__name__} (from load_config); got "
                              f"{type(config).__name__}")
        if strategy not in ("auto", "copy", "replay"):
            raise ConfigError(f"strategy must be 'auto', 'copy' or 'replay'; got {strategy!r}")
        self.check_size(config)
        T = config.steps
        keep = math.ceil(T / 2) if keep_from is None else as_int(keep_from, "keep_from", minimum=0,
                                                                   error=ConfigError)
        gen = as_generator(rng)
        initial = copy.deepcopy(gen)
        model, factory = self._build_checked(config, gen, backend, initial)
        step = self.user_step(config)
        ckpts: dict[int, Any] = {}
        mode: dict[str, str] = {"strategy": "replay", "why": "fork_strategy='replay'"} if strategy == "replay" else {}

        def _take(m: Any, t: int) -> None:
            if mode.get("strategy") != "replay":
                try:
                    ckpts[t] = checkpoint(m, strategy="copy", factory=factory, step=step)
                    mode["strategy"] = "copy"
                    return
                except CheckpointError as exc:
                    if strategy == "copy":
                        raise
                    mode["strategy"], mode["why"] = "replay", str(exc)  # decided once: the model copies alike
                    warn_replay(m, str(exc))
            ckpts[t] = _Deferred(factory, t, step, state_digest(m), mode["why"])

        if keep <= 0:
            _take(model, 0)

        def _keep(m: Any, t: int) -> None:
            if t + 1 >= keep and t + 1 < T:
                _take(m, t + 1)

        ctx = self.call("context(config)", self.context, config) if self.context is not None else None
        panel = simulate(model, T, self.call("make_recorder(config)", self.make_recorder, config), observers=[_keep],
                         context=ctx, progress=progress, step=step, warn_transient=warn_transient,
                         warn_rounded=warn_rounded, warn_finished=warn_finished)
        if self.groups is not None:
            groups = self.call("groups()", self.groups, model, config)
            if not isinstance(groups, Mapping):
                raise ScenarioCodeError(f"scenario {self.name!r}: groups() must return a mapping name → labels; got "
                                        f"{type(groups).__name__}")
            panel = panel.with_groups(**{str(k): v for k, v in groups.items()})
        return ScenarioRun(panel=panel, model=model, checkpoints=ckpts, strategy=mode.get("strategy", "copy"),
                           factory=factory)

    def _build_checked(self, config: ScenarioConfig, gen: np.random.Generator, backend: Any,
                       initial: np.random.Generator) -> tuple[Any, Callable[[], Any]]:
        """The run's model and its factory. A build that draws from a process-wide generator (numpy's global one,
        the ``random`` module's) is built a second time by the factory and must give the same state: unseeded
        draws make the run depend on whatever the process drew before, so the same seed would not give the same
        run, and a fork by copy never rebuilds the model to notice (``np.random.rand`` in a mesa-examples model)."""
        from aumann.simulators.branching import _global_draws, digest_difference, global_draw_sources, state_digest

        before = _global_draws()
        model = self._build(config, gen, backend)
        factory = self.factory(config, initial, backend)
        source = global_draw_sources(before, _global_draws())
        # a build whose state the seed does not fix: (what it does, what to do about it); checked by a second build
        if source is not None:
            why = (f"draws from {source} (a generator of the whole process)",
                   "seed that generator from rng inside build_model (np.random.seed(int(rng.integers(2**31))) or "
                   "random.seed(...)), or pass the model a seed drawn from rng")
        elif _no_seed_given(model) and getattr(model, "rng", None) is not gen:  # not the run's own generator
            why = (f"returns a {type(model).__name__} given no seed (Mesa then seeds model.rng and model.random from "
                   "the operating system's entropy)",
                   "pass the model a seed drawn from rng (rng=int(rng.integers(2**31)); Mesa 3.5 deprecates seed=), "
                   "adding an rng parameter that reaches mesa.Model.__init__ where the model takes none")
        else:
            why = None
        if why is not None:
            diff = digest_difference(state_digest(model), state_digest(factory()))
            if diff is not None:
                raise ScenarioCodeError(
                    f"scenario {self.name!r}: build_model() {why[0]} and two builds from the same seed differ "
                    f"({diff}), so the run would not be reproducible from its seed; {why[1]}")
        return model, factory

    def factory(self, config: ScenarioConfig, rng: np.random.Generator, backend: Any = None) -> Callable[[], Any]:
        """A callable rebuilding the scenario's model in its initial state: ``build_model`` with a fresh
        copy of ``rng`` (in the state it had before the run's model was built) and ``backend``."""
        snapshot = copy.deepcopy(rng)

        def build() -> Any:
            return self._build(config, copy.deepcopy(snapshot), backend)

        return build

    # ------------------------------------------------------------------ the boundary to the scenario's own code
    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)``, this scenario's own code, through :func:`aumann.simulators.boundary.call`: an
        exception (or ``sys.exit``) becomes a :class:`~aumann.errors.ScenarioCodeError` naming the scenario."""
        from aumann.simulators.boundary import call

        return call(self.name, what, fn, *args, **kwargs)

    def user_step(self, config: ScenarioConfig | None = None) -> Any:
        """The step function runs, forks and replays use: the scenario's ``step`` (or the default step)
        through the boundary, bounded by ``config.step_timeout``."""
        from aumann.simulators.boundary import UserStep

        return UserStep(self.name, self.step, getattr(config, "step_timeout", None))

    def _build(self, config: ScenarioConfig, rng: np.random.Generator, backend: Any) -> Any:
        model = self.call("build_model()", self.build_model, config, rng, backend,
                          timeout=getattr(config, "step_timeout", None))
        if model is None:
            raise ScenarioCodeError(f"scenario {self.name!r}: build_model() returned None; it must return a model")
        return model

    def _targets(self, positions: Sequence[int], agent_ids: Sequence[Hashable] | None, model: Any = None) -> list[Any]:
        """The agents at panel ``positions``: the positions, or (``baseline_action_by="id"``) the unique_ids of
        the agents of ``model`` that the panel labels so (a tuple id is labelled by its text in a panel; the
        baseline action gets the id itself)."""
        pos = [int(p) for p in positions]
        if self.baseline_action_by == "position":
            return pos
        if agent_ids is None:
            raise SimulationError(f"scenario {self.name!r} acts on agent ids (baseline_action_by='id'): pass the "
                                  f"panel's agent_ids")
        ids = np.asarray(agent_ids)
        labels = [ids[p].item() if hasattr(ids[p], "item") else ids[p] for p in pos]
        if model is None:
            return labels
        uids, by_label = _model_ids(model)
        return [uids[by_label[lab]] if lab in by_label else lab for lab in labels]

    def step_with_baseline(self, model: Any, config: ScenarioConfig, positions: Sequence[int], *,
                           agent_ids: Sequence[Hashable] | None = None, with_alive: bool = False) -> Any:
        """Fork ``model`` (a model before some step), force the agents at panel ``positions`` to the
        baseline action, re-simulate that one step and return its features (n, D) and context
        {name: array} (the fork's own agents, so n is the number of agents it records).

        ``agent_ids`` (the run panel's agent axis) translates positions to ids for scenarios with
        ``baseline_action_by="id"``. A scenario's ``resimulate_fn`` (an exact faster way) is used
        when it has one. ``with_alive=True`` returns a third item: the fork's living mask (n,) as
        recorded (``None`` when every recorded row is alive, or for a ``resimulate_fn``), to be handed
        to alive-aware indicators as the engine does for recorded panels. Where every agent left during the step
        the fork records none: features (0, D), nobody alive (an alive-aware indicator is then undefined,
        :class:`~aumann.errors.NoLivingAgentsError`), the context it captured.
        """
        if self.resimulate_fn is not None:
            z, ctx = self.call("resimulate_fn()", self.resimulate_fn, model, config, [int(p) for p in positions])
            return (z, ctx, None) if with_alive else (z, ctx)
        try:
            res = self._fork_one(model, config, self._targets(positions, agent_ids, model))
        except NoAgentsRecordedError as exc:  # every agent left during the re-simulated step: f of nobody, (0, D)
            ctx = {k: np.asarray(v)[0] for k, v in exc.context.items()}
            z = np.zeros((0, len(self.features)))
            return (z, ctx, np.zeros(0, dtype=bool)) if with_alive else (z, ctx)
        z, ctx = res.panel.values[0], {k: np.asarray(v)[0] for k, v in res.panel.context.items()}
        if not with_alive:
            return z, ctx
        alive = res.panel.alive
        return z, ctx, (None if alive is None or bool(alive[0].all()) else np.asarray(alive[0], dtype=bool))

    def step_state(self, model: Any, config: ScenarioConfig, positions: Sequence[int], *,
                   agent_ids: Sequence[Hashable] | None = None) -> Any:
        """:meth:`step_with_baseline` as one :class:`~aumann.attribution.indicators.EvalContext`: the
        re-simulated step's features (n, D), its context and its living mask, evaluated together."""
        from aumann.attribution.indicators import EvalContext

        z, ctx, alive = self.step_with_baseline(model, config, positions, agent_ids=agent_ids, with_alive=True)
        return EvalContext(z, ctx, alive)

    def step_rows(self, model: Any, config: ScenarioConfig,
                  positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The re-simulated step as what changes (``resimulate_rows_fn``): ``(base, rows, values)``, checked, or
        ``None`` when the scenario has no such function."""
        if self.resimulate_rows_fn is None:
            return None
        out = self.call("resimulate_rows_fn()", self.resimulate_rows_fn, model, config, [int(p) for p in positions])
        try:
            base, rows, values = out
        except (TypeError, ValueError):
            raise ScenarioCodeError(f"resimulate_rows_fn of scenario {self.name!r} must return (base, rows, values); "
                                    f"got {type(out).__name__}") from None
        base, rows, values = np.asarray(base), np.asarray(rows), np.asarray(values)
        if rows.ndim == 1 and rows.size == 0:
            rows = rows.astype(np.int64)  # nothing changed, given as [] (a float64 array)
        ok = (base.ndim == 2 and base.dtype == np.float64 and rows.ndim == 1 and rows.dtype.kind in "iu"
              and values.shape == (rows.size, base.shape[1]) and values.dtype == np.float64)
        if not ok or (rows.size and (rows.min() < 0 or rows.max() >= base.shape[0])):
            raise ScenarioCodeError(f"resimulate_rows_fn of scenario {self.name!r} must return a float64 (N, D) base, "
                                    f"integer rows in [0, N) and float64 (rows, D) values; got shapes {base.shape}, "
                                    f"{rows.shape}, {values.shape} ({base.dtype}, {rows.dtype}, {values.dtype})")
        if rows.size > 1 and np.unique(rows).size != rows.size:  # a repeated row: its change counted twice
            dup = np.unique(rows, return_counts=True)
            raise ScenarioCodeError(f"resimulate_rows_fn of scenario {self.name!r} must return each changed row once; "
                                    f"row {int(dup[0][dup[1] > 1][0])} is given {int(dup[1].max())} times")
        return base, rows, values

    def _fork_one(self, model: Any, config: ScenarioConfig, targets: list[Any]) -> Any:
        from aumann.simulators import fork

        ctx = self.call("context(config)", self.context, config) if self.context is not None else None
        act = (lambda m: self.call("baseline_action()", self.baseline_action, m, targets)) if targets else None
        return fork(model, intervention=act, steps=1,
                    recorder=self.call("make_recorder(config)", self.make_recorder, config), context=ctx,
                    step=self.user_step(config))

    def present(self, model: Any, agent_ids: Sequence[Hashable]) -> np.ndarray:
        """Positions (in ``agent_ids``) of the agents present in ``model``: the agents a baseline
        action can act on at the step ``model`` is about to take (all of them for fixed populations)."""
        if self.baseline_action_by == "position":
            return np.arange(len(agent_ids))
        here = _model_ids(model)[1]  # by the panel's label of each id (a tuple id is its text there)
        return np.array([p for p, i in enumerate(np.asarray(agent_ids).tolist()) if i in here], dtype=np.int64)

    def baseline_features(self, model: Any, config: ScenarioConfig, *,
                          agent_ids: Sequence[Hashable] | None = None) -> np.ndarray:
        """Per-agent attribution baseline z⁰ (N, D) for the step that ``model`` is about to take.

        For ``baseline_action_by="id"`` pass the run panel's ``agent_ids``: every agent present in
        ``model`` takes the baseline action, and the recorded rows of those agents are aligned to ``agent_ids``
        by id (agents absent from the fork's recording get 0, as absent rows do in a recorded panel, also where
        every agent left during the baseline step and the fork recorded none; so do the agents born during the
        step, whose ids the fork's own newborns, other agents, may carry).
        """
        n = config.agents if agent_ids is None else len(agent_ids)
        if self.baseline_features_fn is not None:
            out = as_real_array(self.call("baseline_features_fn()", self.baseline_features_fn, model, config),
                                f"scenario {self.name!r}: baseline_features_fn()", error=SimulationError,
                                dtype=np.float64)
        elif self.baseline_action_by == "position":
            out, _ = self.step_with_baseline(model, config, range(n))
        else:
            present = self.present(model, agent_ids)
            targets = self._targets(present, agent_ids, model)
            out = np.zeros((n, len(self.features)))
            try:
                rec = self._fork_one(model, config, targets).panel
            except NoAgentsRecordedError:  # every agent left during the baseline step: each gets 0, as one does
                rec = None
            # only the agents that took the baseline action: a newborn of the fork has an id from Mesa's counter,
            # which the run's newborn of this step (another parent's, another kind) has too
            labels = np.asarray(agent_ids).tolist()
            where = {labels[p]: p for p in present.tolist()}
            for row, i in enumerate([] if rec is None else rec.agent_ids.tolist()):
                if i in where:
                    out[where[i]] = rec.values[0, row]
        if out.shape != (n, len(self.features)):
            raise SimulationError(f"scenario {self.name!r}: baseline features have shape {out.shape}; expected "
                                  f"({n}, {len(self.features)})")
        return out

    def baselines(self, run: ScenarioRun, config: ScenarioConfig, *,
                  agent_ids: Sequence[Hashable] | None = None) -> np.ndarray:
        """Per-agent baselines of every step of ``run``: (T, N, D), or (N, D) when step-independent.

        ``baseline_all_fn`` when the scenario has one; else the baseline features of the checkpoint
        before each step (steps without a checkpoint get the zero baseline; ``agent_ids`` as in
        :meth:`baseline_features`)."""
        T, N, D = run.panel.shape
        if self.baseline_all_fn is not None:
            out = as_real_array(self.call("baseline_all_fn()", self.baseline_all_fn, run, config),
                                f"scenario {self.name!r}: baseline_all_fn()", error=SimulationError)
            if out.shape not in ((N, D), (T, N, D)):
                raise SimulationError(f"scenario {self.name!r}: baselines have shape {out.shape}; expected "
                                      f"({N}, {D}) or ({T}, {N}, {D})")
            return out
        return np.stack([self.baseline_features(run.before(t), config, agent_ids=agent_ids) if t in run.checkpoints
                         else np.zeros((N, D)) for t in range(T)])

    # ------------------------------------------------------------------ indicators
    def indicators(self, config: ScenarioConfig) -> tuple[Any, Any]:
        """(C² surrogate, original) indicators for ``config`` (plain callables are wrapped as
        :class:`~aumann.attribution.Indicator`, named after the function)."""
        from aumann.attribution.indicators import as_indicator

        # the scenario's own code: a factory that raises names the scenario (not a bare traceback from a core stage)
        f = self.call("indicator(config)", self.indicator, config)
        f_orig = self.call("original(config)", self.original, config)
        return as_indicator(f), as_indicator(f_orig)

    def alternative_indicators(self, config: ScenarioConfig) -> dict[str, Any]:
        """The f-sensitivity ablation's indicators, ``aggregators(config)`` through the boundary: name →
        :class:`~aumann.attribution.Indicator` (``{}`` without ``aggregators``). A factory that raises, or returns
        anything but a mapping of names to indicators, is a :class:`~aumann.errors.ScenarioCodeError` naming the
        scenario (it was a bare ``KeyError`` or ``'list' object has no attribute 'items'``)."""
        from aumann.attribution.indicators import as_indicator

        if self.aggregators is None:
            return {}
        aggs = self.call("aggregators(config)", self.aggregators, config)
        if not isinstance(aggs, Mapping):
            raise ScenarioCodeError(f"scenario {self.name!r}: aggregators(config) returned a {type(aggs).__name__}; "
                                    "it must return a mapping name → indicator")
        out: dict[str, Any] = {}
        for name, agg in aggs.items():
            try:
                out[str(name)] = as_indicator(agg)
            except AumannError as exc:
                raise ScenarioCodeError(f"scenario {self.name!r}: aggregators(config)[{str(name)!r}]: {exc}") from None
        return out

    def offline_stand_in(self) -> Any:
        """The scenario's offline policy as a decision backend, ``offline_backend()`` through the boundary (what
        ``aumann run --dry-run`` puts in the loop). A factory that raises, or returns no backend (``None``: a
        forgotten ``return``), is a :class:`~aumann.errors.ScenarioCodeError`: a ``None`` stand-in read as "not a
        dry run" and the dry run sent every request to the server."""
        if self.offline_backend is None:
            raise ConfigError(f"scenario {self.name!r} has no offline policy (offline_backend) to stand in for the "
                              "LLM")
        backend = self.call("offline_backend()", self.offline_backend)
        if not callable(getattr(backend, "decide", None)):
            raise ScenarioCodeError(f"scenario {self.name!r}: offline_backend() returned "
                                    f"{'None' if backend is None else 'a ' + type(backend).__name__}; it must return a "
                                    "decision backend (an object with decide(messages, schema, *, context, seed))")
        return backend

    def surrogate(self, config: ScenarioConfig) -> Any:
        """The C² indicator bound to its original (:class:`aumann.attribution.smoothing.Surrogate`)."""
        from aumann.attribution.smoothing import Surrogate

        f, f_orig = self.indicators(config)
        return Surrogate(f_orig, f, name=getattr(f, "name", self.name))

    def gap_report(self, config: ScenarioConfig, panel: Any, *, ranks: bool = False, k: int | None = None,
                   **attribute_kwargs: Any) -> Any:
        """Smoothing-gap report of the scenario's surrogate on a recorded panel
        (:func:`aumann.attribution.smoothing.gap_report`; ``ranks=True`` also compares attributions)."""
        from aumann.attribution.smoothing import gap_report

        return gap_report(self.surrogate(config), panel, ranks=ranks, k=k, attribute_kwargs=attribute_kwargs or None)


def target_step(f_values: np.ndarray) -> int:
    """t* = argmax_{t ≥ ⌈T/2⌉} f(z_t) (0-based panel position; the first maximum on ties)."""
    f_values = np.asarray(f_values, dtype=np.float64)
    start = math.ceil(f_values.shape[0] / 2)
    if start >= f_values.shape[0]:
        start = f_values.shape[0] - 1
    return start + int(np.argmax(f_values[start:]))


__all__ = ["ExecutionConfig", "Scenario", "ScenarioConfig", "ScenarioRun", "StepMap", "StudyConfig", "target_step"]
