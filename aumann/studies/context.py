"""What one run of the study carries through its stages: :class:`RunContext` (and its sizes and seed streams).

The study (:mod:`aumann.studies.faithfulness`) builds one context per run and hands it to every stage
(:mod:`aumann.studies.stages`) and every row (:mod:`aumann.studies.rows`). The ``attribute`` stage fills
in the target step and what depends on it; rows and stages then add to ``rec`` (the run record),
``arrays`` (the run's ``.npz``) and ``outputs`` (each row's φ).
"""

from __future__ import annotations

import contextlib
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


#: from this many agents freed memory is handed back to the system between stages and rows
#: (:meth:`RunContext.release_freed`: hundreds of MB a 10⁶-agent stage leaves in the heap)
LARGE_N = 100_000

#: the named random streams of one run, spawned in this order from the run's study seed (append only: a name
#: added at the end never perturbs the streams before it, so results stay byte-identical)
STREAMS = ("reference", "ceiling", "random", "ablations", "random_masking", "random_grid", "scenario",
           "resimulation", "resimulation_ceiling", "judge")


class Streams:
    """One run's independent random streams by name: ``streams("reference")`` (the same Generator every call).

    The names of :data:`STREAMS` are spawned in that order from the run's study seed; any other name (a
    row or stage added later) gets a stream derived from the name itself, so adding one never moves
    another's."""

    def __init__(self, seq: np.random.SeedSequence, simulation: np.random.SeedSequence | None = None) -> None:
        self._seq = seq
        self.simulation = simulation  # the simulation's own seed (the simulate stage), apart from these
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


@dataclass(frozen=True)
class RunOptions:
    """How one run is carried out: progress, the judge, the decision backend and how forks run, whether
    failures are fatal (``strict``), which run it is."""

    tick: Callable[[str], None] = _quiet  # the progress callback (a message per stage)
    judge: Any = None  # the judge backend of the llm_judge row (None: no judge)
    backend: Any = None  # the decision backend the simulate stage uses (None: the offline policy)
    backend_label: str = "offline"
    fork_threads: int = 1
    executor: Any = None
    run_index: int = 0
    strict: bool = False  # a failing optional stage stops the study instead of being recorded
    #: whether the scenario's offline policy makes the decisions (``offline_policy_decides`` of the backend and its
    #: label, which knows a registered factory that returned ``None``); ``None``: the label says (``"offline"``)
    offline_policy: bool | None = None

    def offline_policy_decides(self) -> bool:
        """Whether the run's decisions come from the offline policy (``offline_policy``, else the label)."""
        return self.backend_label == "offline" if self.offline_policy is None else self.offline_policy


@dataclass
class RunContext:
    """One run of the study on its way through the stages.

    Built from the scenario, its config, the run's random ``streams`` (``ctx.rng(name)``), its
    :class:`RunOptions` and, when it was simulated already, the run. The ``simulate`` stage sets ``run``;
    the ``attribute`` stage sets everything under "at the target step". Rows and stages then fill ``rec``
    (the run record, :class:`aumann.studies.rundir.RunRecord`), ``arrays`` (``runs/run-NNN.npz``),
    ``outputs`` (each row's :class:`~aumann.studies.rows.RowOutput`, by row name), ``orders`` (each
    row's deletion ranking), ``saved`` (attributions written to ``attributions/``, by label) and
    ``stages`` (what happened to each stage).
    """

    scenario: Scenario
    config: ScenarioConfig
    streams: Streams
    options: RunOptions = field(default_factory=RunOptions)
    run: Any = None  # the ScenarioRun (simulate stage)
    # ---------------------------------------------------------------- at the target step (attribute stage)
    f: Any = field(default=None, init=False)  # the attributed C² surrogate and the original indicator
    f_original: Any = field(default=None, init=False)
    f_values: np.ndarray | None = field(default=None, init=False)  # f(z_t) and f_original(z_t) over every step
    f_original_values: np.ndarray | None = field(default=None, init=False)
    t_star: int = field(default=0, init=False)
    z0_all: np.ndarray | None = field(default=None, init=False)  # per-agent baselines: (T, N, D) or (N, D)
    z0: np.ndarray | None = field(default=None, init=False)  # (N, D) at t*
    target: Any = field(default=None, init=False)  # the panel at t* alone (T = 1)
    model_before: Any = field(default=None, init=False)  # the model before step t* (forks start from it)
    players: np.ndarray | None = field(default=None, init=False)  # positions that can take the baseline action
    sizes: StudySizes | None = field(default=None, init=False)
    oracle: Any = field(default=None, init=False)  # DeletionOracle (re-simulation of t*)
    masking: Any = field(default=None, init=False)  # MaskingOracle (features set to the baseline, nothing re-simulated)
    grid: list[int] | None = field(default=None, init=False)  # the log-k deletion grid (study.log_k_grid), else None
    method: Any = field(default=None, init=False)  # the AumannShapley object of the attribution over every step
    attribution: Any = field(default=None, init=False)  # its Attribution (every step)
    # ---------------------------------------------------------------- results
    rec: dict[str, Any] = field(default_factory=dict, init=False)
    arrays: dict[str, np.ndarray] = field(default_factory=dict, init=False)
    outputs: dict[str, Any] = field(default_factory=dict, init=False)
    orders: dict[str, np.ndarray] = field(default_factory=dict, init=False)
    saved: dict[str, Any] = field(default_factory=dict, init=False)
    stages: dict[str, Any] = field(default_factory=dict, init=False)  # name → StageRecord (``rec["stages"]``)
    extras: dict[str, Any] = field(default_factory=dict, init=False)  # state a group of stages shares

    def tick(self, message: str) -> None:
        """Report progress (the options' callback)."""
        self.options.tick(message)

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

    def release_freed(self) -> None:
        """From :data:`LARGE_N` agents: hand the memory freed so far back to the system (a collection and
        ``malloc_trim``, tens of ms), so that one stage's or row's temporaries do not stay under the next one's
        peak. Called between stages and between rows."""
        if self.n >= LARGE_N:
            from aumann.attribution.memory import release_freed

            release_freed()

    def long_lived(self) -> contextlib.AbstractContextManager[None]:
        """From :data:`LARGE_N` agents, after the simulation: its objects (agents, network, …) are set aside
        from the collections :meth:`release_freed` runs until the scope ends
        (:func:`~aumann.attribution.memory.long_lived_set_aside`); below, nothing."""
        if self.run is not None and self.n >= LARGE_N:
            from aumann.attribution.memory import long_lived_set_aside

            return long_lived_set_aside()
        return contextlib.nullcontext()

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

    def ranked(self, values: np.ndarray, by: str, top: int | None = None) -> np.ndarray:
        """The players by descending ``values`` (``by="abs"``: |values|), ties by position; with ``top``, the
        first ``top`` of them only (no sort of all N: deletions read :attr:`deletion_depth` at most)."""
        from aumann.attribution.metrics import rank_agents

        if self.everyone:
            return rank_agents(values, by, top=top)
        if top is not None:  # the players in position order, ranked among themselves: the same ties
            players = np.sort(np.asarray(self.players, dtype=np.int64))
            return players[rank_agents(np.asarray(values)[players], by, top=top)]
        order = rank_agents(values, by)
        is_player = np.zeros(self.n, dtype=bool)
        is_player[self.players] = True
        return order[is_player[order]]

    @property
    def deletion_depth(self) -> int:
        """The longest prefix of a ranking any deletion curve deletes: K_del, Drop@k's k and the log-k grid."""
        sizes = self.sizes
        return max(sizes.k_del, sizes.k_drop, max(self.grid) if self.grid else 0)

    def agree(self, a: np.ndarray, b: np.ndarray, how: Callable[..., float], *extra: Any) -> float:
        """``how(a, b, *extra)`` over the players (e.g. Kendall τ, top-k Jaccard)."""
        return float(how(a, b, *extra) if self.everyone else how(a[self.players], b[self.players], *extra))


__all__ = ["LARGE_N", "STREAMS", "RunContext", "Streams", "StudySizes"]
