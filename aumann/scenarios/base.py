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
* ``baseline_action(model, positions)``: an intervention applied to a model at the start of a step
  that forces the agents at panel positions ``positions`` (the Panel's agent axis) to take the
  scenario's baseline action during the next ``model.step()``,
* ``baseline_features(model, config) -> (N, D)`` (optional): the features every agent would have
  after the next step if it took the baseline action. The default forks ``model`` with *all*
  agents at the baseline action, steps once and records; this is exact when an agent's features
  under the baseline action do not depend on what other agents do (true for the built-in
  scenarios; override it otherwise). This (N, D) array is the per-agent attribution baseline z⁰,
  so attribution (path from z⁰ to z) and deletion (re-simulate with the baseline action) remove
  the same thing.
* ``aggregators(config)`` (optional): alternative indicators for the f-sensitivity ablation.

Step convention: panel step t holds the features recorded *after* ``model.step()`` number t
(t = 0 … T−1). ``ScenarioRun.checkpoints[t]`` is a deep copy of the model *before* step t, so a
counterfactual fork re-simulating step t starts from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from aumann import configs
from aumann.checks import as_int
from aumann.errors import ConfigError, SimulationError

ModelFactory = Callable[[Any, np.random.Generator, Any], Any]
IndicatorFactory = Callable[[Any], Any]
BaselineAction = Callable[[Any, Sequence[int]], None]

class StudyConfig(configs.ConfigModel):
    """Parameters of the faithfulness study and the ablations (the ``[study]`` table of a config).

    Attributes:
        permutations: sampled-Shapley permutations of the reference game (paper: 1000).
        ceiling_permutations: permutations of the second sampled-Shapley run for the noise ceiling
            (default: ``permutations``).
        quadrature_steps: Gauss–Legendre points K of the Aumann–Shapley path integral.
        k_del: deletion depth K_del (default min(20, N/2)).
        top_k: k of the top-k Jaccard (default min(10, N/2)).
        random_orderings: orderings averaged for the Random deletion row.
        reference_game: ``"masking"`` (per-step masking game on the recorded features) or
            ``"resimulation"`` (non-members take the baseline action and step t* is replayed).
        path_orders: random orders averaged by the piecewise-linear path ablation.
        ablations: run the path, f-sensitivity and baseline ablations.
    """

    model_config = ConfigDict(extra="forbid")

    permutations: int = Field(1000, ge=2)
    ceiling_permutations: int | None = Field(None, ge=2)
    quadrature_steps: int = Field(32, ge=1)
    k_del: int | None = Field(None, ge=1)
    top_k: int | None = Field(None, ge=1)
    random_orderings: int = Field(20, ge=1)
    reference_game: str = Field("masking", pattern="^(masking|resimulation)$")
    path_orders: int = Field(20, ge=1)
    ablations: bool = True


class ScenarioConfig(configs.ConfigModel):
    """Fields every scenario config has; scenarios subclass it with their own parameters.

    Attributes:
        agents: number of agents N.
        steps: number of steps T.
        runs: independent runs of the study (seeds spawned from ``seed``).
        seed: the root seed.
        study: the faithfulness-study parameters.
    """

    model_config = ConfigDict(extra="forbid")

    agents: int = Field(..., ge=2)
    steps: int = Field(..., ge=2)
    runs: int = Field(1, ge=1)
    seed: int = Field(0, ge=0)
    study: StudyConfig = Field(default_factory=StudyConfig)


@dataclass
class ScenarioRun:
    """One simulated run: the panel, the final model and checkpoints taken before each kept step."""

    panel: Any
    model: Any
    checkpoints: dict[int, Any] = field(default_factory=dict)

    def before(self, t: int) -> Any:
        """The model before step ``t`` (a checkpoint; fork from it, do not step it)."""
        if t not in self.checkpoints:
            raise SimulationError(f"no checkpoint before step {t}; kept: {sorted(self.checkpoints)}")
        return self.checkpoints[t]


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
    config_file: str | None = None
    baseline_description: str = ""
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
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
            path: a TOML file laid over the packaged defaults (``aumann/configs/<config_file>``).
            assignments: ``KEY=VALUE`` strings (``--set``), dotted keys for tables
                (``study.permutations=200``); values are TOML literals or plain strings.
            **overrides: top-level fields (``agents=6``) or ``study={...}``; ``None`` values are ignored.

        Raises:
            ConfigError: an unreadable or malformed file, an unknown key, or an invalid value (the
                message lists what the config model rejected).
        """
        data: dict[str, Any] = configs.load_toml(configs.path(self.config_file)) if self.config_file else {}
        if path is not None:
            data = configs.deep_merge(data, configs.load_toml(path, what=f"config file for scenario {self.name!r}"))
        data = configs.deep_merge(data, {k: v for k, v in overrides.items() if v is not None})
        data = configs.apply_assignments(data, assignments)
        try:
            return self.config_model.model_validate(data)
        except (ConfigError, ValidationError) as exc:
            why = configs.validation_message(exc) if isinstance(exc, ValidationError) else \
                str(exc).split(": ", 1)[-1]
            raise ConfigError(f"invalid config for scenario {self.name!r}: {why}") from exc

    # ------------------------------------------------------------------ simulation
    def simulate(self, config: ScenarioConfig, rng: Any = None, backend: Any = None, *,
                 keep_from: int | None = None, progress: bool = False) -> ScenarioRun:
        """Run the scenario for ``config.steps`` steps and record the panel.

        Args:
            config: the scenario config.
            rng: seed / Generator for the model (same rng → identical panel).
            backend: a DecisionBackend, or ``None`` for the offline policy.
            keep_from: keep checkpoints before every step t ≥ keep_from (default ⌈T/2⌉, the
                steps a target t* can fall on); 0 keeps all.
            progress: show a progress bar.
        """
        from aumann.seeding import as_generator
        from aumann.simulators import checkpoint, simulate

        if not isinstance(config, self.config_model):
            raise ConfigError(f"scenario {self.name!r} needs a {self.config_model.__name__} (from load_config); got "
                              f"{type(config).__name__}")
        T = config.steps
        keep = math.ceil(T / 2) if keep_from is None else as_int(keep_from, "keep_from", minimum=0,
                                                                   error=ConfigError)
        model = self.build_model(config, as_generator(rng), backend)
        ckpts: dict[int, Any] = {}
        if keep <= 0:
            ckpts[0] = checkpoint(model)

        def _keep(m: Any, t: int) -> None:
            if t + 1 >= keep and t + 1 < T:
                ckpts[t + 1] = checkpoint(m)

        ctx = self.context(config) if self.context is not None else None
        panel = simulate(model, T, self.make_recorder(config), observers=[_keep], context=ctx, progress=progress)
        return ScenarioRun(panel=panel, model=model, checkpoints=ckpts)

    def step_with_baseline(self, model: Any, config: ScenarioConfig, positions: Sequence[int]) -> tuple[
            np.ndarray, dict[str, np.ndarray]]:
        """Fork ``model`` (a model before some step), force ``positions`` to the baseline action,
        re-simulate that one step and return its features (N, D) and context {name: array}."""
        from aumann.simulators import fork

        pos = [int(p) for p in positions]
        ctx = self.context(config) if self.context is not None else None
        res = fork(model, intervention=(lambda m: self.baseline_action(m, pos)) if pos else None, steps=1,
                   recorder=self.make_recorder(config), context=ctx)
        return res.panel.values[0], {k: np.asarray(v)[0] for k, v in res.panel.context.items()}

    def baseline_features(self, model: Any, config: ScenarioConfig) -> np.ndarray:
        """Per-agent attribution baseline z⁰ (N, D) for the step that ``model`` is about to take."""
        if self.baseline_features_fn is not None:
            out = np.asarray(self.baseline_features_fn(model, config), dtype=np.float64)
        else:
            n = config.agents
            out, _ = self.step_with_baseline(model, config, range(n))
        if out.shape != (config.agents, len(self.features)):
            raise SimulationError(f"scenario {self.name!r}: baseline features have shape {out.shape}; expected "
                                  f"({config.agents}, {len(self.features)})")
        return out

    # ------------------------------------------------------------------ indicators
    def indicators(self, config: ScenarioConfig) -> tuple[Any, Any]:
        """(C² surrogate, original) indicators for ``config``."""
        return self.indicator(config), self.original(config)

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


__all__ = ["Scenario", "ScenarioConfig", "ScenarioRun", "StudyConfig", "target_step"]
