"""What one run of the study carries through its stages: :class:`RunContext` (and its sizes and seed streams).

The study (:mod:`aumann.studies.faithfulness`) builds one context per run and hands it to every stage
(:mod:`aumann.studies.stages`) and every row (:mod:`aumann.studies.rows`). The ``attribute`` stage fills
in the target step and what depends on it; rows and stages then add to ``rec`` (the run record),
``arrays`` (the run's ``.npz``) and ``outputs`` (each row's φ).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.scenarios.base import Scenario, ScenarioConfig


@dataclass(frozen=True)
class StudySizes:
    """K_del = min(20, N/2), top-k = min(10, N/2), Drop@k with k = min(5, K_del) (config may override)."""

    k_del: int
    top_k: int
    k_drop: int

    @classmethod
    def of(cls, config: ScenarioConfig, n: int | None = None) -> StudySizes:
        """Sizes for ``n`` players (default ``config.agents``; the agents present before t* when the
        population has births and deaths)."""
        n = config.agents if n is None else int(n)
        k_del = config.study.k_del or max(1, min(20, n // 2))
        top_k = config.study.top_k or max(1, min(10, n // 2))
        return cls(k_del=min(k_del, n), top_k=min(top_k, n), k_drop=min(5, k_del))


#: the named random streams of one run, spawned in this order from the run's study seed (append only: a name
#: added at the end never perturbs the streams before it, so results stay byte-identical)
STREAMS = ("reference", "ceiling", "random", "ablations", "random_masking", "random_grid", "scenario",
           "resimulation", "resimulation_ceiling", "judge")


class Streams:
    """One run's independent random streams by name: ``streams("reference")`` (the same Generator every call).

    The names of :data:`STREAMS` are spawned in that order from the run's study seed; any other name (a
    row or stage added later) gets a stream derived from the name itself, so adding one never moves
    another's."""

    def __init__(self, seq: np.random.SeedSequence) -> None:
        self._seq = seq
        self._gens = {name: np.random.default_rng(s) for name, s in zip(STREAMS, seq.spawn(len(STREAMS)))}

    def __call__(self, name: str) -> np.random.Generator:
        gen = self._gens.get(name)
        if gen is None:
            key = (*self._seq.spawn_key, 2**32 + zlib.crc32(name.encode("utf-8")))
            gen = self._gens[name] = np.random.default_rng(
                np.random.SeedSequence(self._seq.entropy, spawn_key=key, pool_size=self._seq.pool_size))
        return gen


def _quiet(_msg: str) -> None:
    return None


@dataclass
class RunContext:
    """One run of the study on its way through the stages.

    Given: the scenario, its config, the run's random ``streams`` (``ctx.rng(name)``), the progress
    callback ``tick``, the judge backend (``None``: no judge), how forks run (``fork_threads``,
    ``executor``) and the decision backend's label. The ``simulate`` stage sets ``run``; the
    ``attribute`` stage sets everything under "at the target step". Rows and stages then fill ``rec``
    (the run record, :class:`aumann.studies.rundir.RunRecord`), ``arrays`` (``runs/run-NNN.npz``),
    ``outputs`` (each row's :class:`~aumann.studies.rows.RowOutput`, by row name), ``orders`` (each
    row's deletion ranking), ``saved`` (attributions written to ``attributions/``, by label) and
    ``stages`` (what happened to each stage).
    """

    scenario: Scenario
    config: ScenarioConfig
    streams: Streams
    tick: Callable[[str], None] = _quiet
    judge: Any = None
    fork_threads: int = 1
    executor: Any = None
    backend_label: str = "offline"
    backend: Any = None  # the decision backend the simulate stage uses (None: the offline policy)
    sim_seed: Any = None  # the simulation's seed (a SeedSequence)
    run_index: int = 0
    strict: bool = False  # a failing optional stage stops the study instead of being recorded
    run: Any = None  # the ScenarioRun (simulate stage)
    # ---------------------------------------------------------------- at the target step (attribute stage)
    f: Any = None  # the attributed C² surrogate and the original indicator
    f_original: Any = None
    f_values: np.ndarray | None = None  # f(z_t) and f_original(z_t) over every step
    f_original_values: np.ndarray | None = None
    t_star: int = 0
    z0_all: np.ndarray | None = None  # per-agent baselines of every step (or one (N, D) for all)
    z0: np.ndarray | None = None  # (N, D) at t*
    target: Any = None  # the panel at t* alone (T = 1)
    model_before: Any = None  # the model before step t* (forks start from it)
    players: np.ndarray | None = None  # panel positions that can take the baseline action at t*
    sizes: StudySizes | None = None
    oracle: Any = None  # DeletionOracle (re-simulation of t*)
    masking: Any = None  # MaskingOracle (features set to the baseline, nothing re-simulated)
    grid: list[int] | None = None  # the log-k deletion grid (study.log_k_grid), else None
    method: Any = None  # the AumannShapley object of the attribution over every step
    attribution: Any = None  # its Attribution (every step)
    # ---------------------------------------------------------------- results
    rec: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    orders: dict[str, np.ndarray] = field(default_factory=dict)
    saved: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, Any] = field(default_factory=dict)  # name → StageRecord (``rec["stages"]``)
    extras: dict[str, Any] = field(default_factory=dict)  # state a group of stages shares (e.g. MegaScale's)

    # ---------------------------------------------------------------- helpers for rows and stages
    def rng(self, name: str) -> np.random.Generator:
        """The run's random stream ``name`` (:class:`Streams`)."""
        return self.streams(name)

    @property
    def panel(self) -> Any:
        return self.run.panel

    @property
    def n(self) -> int:
        """Agents N on the panel's agent axis."""
        return int(self.run.panel.shape[1])

    @property
    def everyone(self) -> bool:
        """Whether every agent is a player (fixed populations)."""
        return self.players is not None and len(self.players) == self.n

    @property
    def f_full(self) -> tuple[float, float]:
        """(f, f_original) at t* (what deletion curves are relative to)."""
        return float(self.f_values[self.t_star]), float(self.f_original_values[self.t_star])

    @property
    def phi(self) -> dict[str, np.ndarray]:
        """Each computed row's φ at t* (N,), in table order (rows without values, e.g. the judge, left out)."""
        return {name: out.phi for name, out in self.outputs.items() if out.phi is not None}

    @property
    def deletion_pool(self) -> Any:
        """What random orderings permute: N (every agent a player) or the players' positions."""
        return self.n if self.everyone else self.players

    def on_players(self, values: np.ndarray) -> np.ndarray:
        """Values of the players (a game's player axis) placed on the panel's agent axis (0 elsewhere)."""
        out = np.zeros(self.n)
        out[self.players] = values
        return out

    def ranked(self, values: np.ndarray, by: str) -> np.ndarray:
        """The players by descending ``values`` (``by="abs"``: |values|), ties by position."""
        from aumann.attribution.metrics import rank_agents

        order = rank_agents(values, by)
        if self.everyone:
            return order
        is_player = np.zeros(self.n, dtype=bool)
        is_player[self.players] = True
        return order[is_player[order]]

    def agree(self, a: np.ndarray, b: np.ndarray, how: Callable[..., float], *extra: Any) -> float:
        """``how(a, b, *extra)`` over the players (e.g. Kendall τ, top-k Jaccard)."""
        return float(how(a, b, *extra) if self.everyone else how(a[self.players], b[self.players], *extra))


__all__ = ["STREAMS", "RunContext", "Streams", "StudySizes"]
