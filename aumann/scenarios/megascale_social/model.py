"""The MegaScale-Social model: a ``mesa.Model`` holding arrays, not 10⁶ Python agents.

* :class:`World` — immutable: the follower network (CSR), persona ids, influence
  w_i = log(1 + followers_i) and the initial views. Shared by every fork (``deepcopy`` returns it).
* :class:`Population` — the small dynamic state: view ``belief`` (float32), ``posted`` and
  ``reshared`` today (bool), ``seen`` (posts seen today, int32) and the feed's ``lean`` (float32),
  plus the trending prototype. About 14 bytes per agent: 14 MB at 10⁶, which is what a fork copies.
* :class:`MegaScaleSocial` — ``Model(rng=)``, ``step()``, ``steps``, a Mesa ``DataCollector`` with
  model-level reporters (the macro series); ``model.agents`` stays **empty** — agents are rows, and
  ``model.agent(i)`` returns a read-only :class:`AgentView` for inspection.

One step t (σ the logistic function; every random draw is a counter-based uniform keyed by
(seed, t, purpose, agent), :mod:`.counter`):

1. **keys**: persona × stance bucket(belief) × volume bucket(seen yesterday) × lean bucket(yesterday's
   feed lean); one request per occupied key, one batch through the decision backend
   (:class:`~.archetypes.ArchetypeDecider`) → table (post p_k, reshare q_k, stance shift δ_k);
2. **post**: P_i = σ(logit p_{k(i)} + β_w (w_i − w̄) + β_b (|b_i| − |b̂_{k(i)}|)) (b̂ the bucket's
   representative view; the belief residual is 0 in per-agent mode), posted_i = [u_i < P_i];
3. **feed**: what i sees today is today's posts and yesterday's reshares of the accounts it follows,
   x_j = posted_j + reshared_j(t − 1): seen_i = Σ_j F_ij x_j, and its lean
   L_i = (Σ_j F_ij x_j b_j + λ b_trend) / (seen_i + λ) (b_trend: yesterday's trending view);
4. **reshare**: reshared_i = [u'_i < q_{k(i)} · (1 − e^{−seen_i / e₀})];
5. **view**: b_i ← clip(b_i + η δ_{k(i)} (1 − |b_i|) + μ (L_i − b_i)(1 − e^{−seen_i / e₀}), −1, 1);
6. **trending** for tomorrow: the x-weighted mean view of today's feed items and the prototype
   nearest to it (inflammatory when most of them are extreme, |b| > 0.6).

Baseline action (``force_baseline``): the agent is neutral and disengaged for the step: it posts and
reshares nothing, reads nothing (seen 0, lean 0), and its view is 0; its influence is kept.

Features recorded after each step (float32): ``belief``, ``exposure`` = log(1 + seen), ``posted``,
``reshared``, ``influence``, ``risk`` = σ(κ(belief − θ)) (the smooth risky-stance score the
propagation-risk indicator pools; κ, θ from the config).
"""

from __future__ import annotations

import copy
import threading
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import mesa
import numpy as np

from aumann.attribution.csr import matvec_pair
from aumann.errors import ConfigError, SimulationError
from aumann.scenarios.megascale_social import counter
from aumann.scenarios.megascale_social.archetypes import ArchetypeDecider, ArchetypeSpec
from aumann.scenarios.megascale_social.features import FEATURES
from aumann.scenarios.megascale_social.fixture import Fixture, load_fixture
from aumann.scenarios.megascale_social.network import Network, barabasi_albert, read_edge_list

_FACTUAL_LOCK = threading.RLock()  # the factual step of a checkpoint, and its matrix, are computed once
_DRAWS = 1  # counter stream of the step's two Bernoulli draws (post, reshare)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


@dataclass(frozen=True, eq=False)
class World:
    """The static part of the society, shared by every fork (immutable by convention)."""

    network: Network
    persona: np.ndarray  # int16 (N,)
    influence: np.ndarray  # float32 (N,) log(1 + followers)
    belief0: np.ndarray  # float32 (N,) initial views
    fixture: Fixture
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.network.n

    def __deepcopy__(self, memo: dict) -> World:
        return self

    @classmethod
    def build(cls, network: Network, fixture: Fixture, rng: np.random.Generator) -> World:
        """Assign personas (by the fixture's shares) and initial views to the agents of ``network``."""
        n = network.n
        shares = np.array([p.share for p in fixture.personas], dtype=np.float64)
        persona = rng.choice(len(shares), size=n, p=shares / shares.sum()).astype(np.int16)
        mean = np.array([p.traits.belief_mean for p in fixture.personas])[persona]
        sd = np.array([p.traits.belief_sd for p in fixture.personas])[persona]
        belief0 = np.clip(mean + sd * rng.standard_normal(n), -1.0, 1.0).astype(np.float32)
        influence = np.log1p(network.follower_count()).astype(np.float32)
        return cls(network=network, persona=persona, influence=influence, belief0=belief0, fixture=fixture)

    @classmethod
    def from_networkx(cls, graph: Any, fixture: Fixture | None = None, rng: Any = None) -> World:
        """A world on a networkx graph (directed u → v: u follows v; undirected: mutual follows)."""
        return cls.build(Network.from_networkx(graph), fixture or load_fixture(), np.random.default_rng(rng))

    @classmethod
    def from_edges(cls, follower: Any, followee: Any, n: int | None = None, *, fixture: Fixture | None = None,
                   rng: Any = None, mutual: bool = False) -> World:
        """A world on a real follower edge list (``follower[k]`` follows ``followee[k]``)."""
        net = Network.from_edges(np.asarray(follower), np.asarray(followee), n, mutual=mutual)
        return cls.build(net, fixture or load_fixture(), np.random.default_rng(rng))


@dataclass
class Population:
    """The dynamic state (what a fork copies)."""

    belief: np.ndarray
    posted: np.ndarray
    reshared: np.ndarray
    seen: np.ndarray
    lean: np.ndarray
    trend_belief: float = 0.0
    trending: int = 0

    @classmethod
    def initial(cls, world: World, trending: int) -> Population:
        n = world.n
        return cls(belief=world.belief0.copy(), posted=np.zeros(n, bool), reshared=np.zeros(n, bool),
                   seen=np.zeros(n, np.int32), lean=np.zeros(n, np.float32), trending=trending)


@dataclass(frozen=True)
class AgentView:
    """A read-only snapshot of one agent (``model.agent(i)``); never registered in ``model.agents``."""

    unique_id: int
    persona: str
    belief: float
    posted: bool
    reshared: bool
    seen: int
    lean: float
    influence: float
    followers: int
    following: int


def nearest_prototype(fixture: Fixture, stance: float, extreme_share: float) -> int:
    """The prototype whose stance is nearest ``stance``; inflammatory when most feed items are extreme."""
    want = 1.0 if extreme_share > 0.5 else 0.0
    best, best_d = 0, np.inf
    for p in fixture.prototypes:
        d = abs(p.stance - stance) + 0.5 * abs(p.intensity - want)
        if d < best_d - 1e-12:
            best, best_d = p.id, d
    return best


def world_for(config: Any, rng: np.random.Generator, fixture: Fixture | None = None) -> World:
    """The world a config describes (network from ``config.network``), drawn from ``rng``."""
    fx = fixture or load_fixture(config.fixture)
    if config.network == "ba":
        net = barabasi_albert(config.agents, config.ba_m, rng)
    else:
        net = read_edge_list(config.network, mutual=config.edge_list_mutual)
        if net.n != config.agents:
            raise ConfigError(f"the follower edge list {config.network!r} has {net.n} agents but agents = "
                              f"{config.agents}; set agents = {net.n}")
    return World.build(net, fx, rng)


class MegaScaleSocial(mesa.Model):
    """The MegaScale-Social society (see the module docstring).

    Args:
        config: a :class:`~aumann.scenarios.megascale_social.config.MegaScaleConfig` (default: its defaults
            with ``agents`` agents).
        rng: seed or numpy Generator (Mesa's ``Model(rng=)``); one root seed → network, initial views,
            counter-based step draws.
        backend: the decision backend (``None``: the offline policy behind an ``OfflineBackend``).
        world: a prebuilt :class:`World` (e.g. ``World.from_networkx``); default: built from the config.
        mode: ``"archetype"`` (one request per occupied key) or ``"agent"`` (one per agent).
        constant: a fixed (post, reshare, stance_shift) answer for every agent (the LLM ablation).
        decider: share an existing :class:`ArchetypeDecider` (and its ledger).
        agents: N when no config is given.
        step_key: the counter-based generator's key (default: drawn from ``rng``); equal worlds and step
            keys give equal draws, so two runs then differ only by their decisions (ablation, fidelity).

    Example:
        >>> m = MegaScaleSocial(agents=2000, rng=0)
        >>> for _ in range(3):
        ...     m.step()
        >>> m.steps, len(m.agents), m.agent(0).unique_id
        (3, 0, 0)
    """

    def __init__(self, config: Any = None, *, rng: Any = None, backend: Any = None, world: World | None = None,
                 mode: str = "archetype", constant: Any = None, decider: ArchetypeDecider | None = None,
                 agents: int | None = None, step_key: int | None = None) -> None:
        super().__init__(rng=rng)
        if config is None:
            from aumann.scenarios.megascale_social.config import MegaScaleConfig

            config = MegaScaleConfig(agents=agents or (world.n if world is not None else 1000))
        self.config = config
        root = int(self.rng.integers(2**63))
        net_seq, _, step_seq = np.random.SeedSequence(root).spawn(3)
        self.world = world if world is not None else world_for(config, np.random.default_rng(net_seq))
        if self.world.n != config.agents:
            raise ConfigError(f"the world has {self.world.n} agents but config.agents = {config.agents}")
        fx = self.world.fixture
        self.spec = ArchetypeSpec(len(fx.personas), tuple(config.stance_edges), tuple(config.volume_edges),
                                  tuple(config.lean_edges))
        if decider is None:
            if backend is None:
                from aumann.scenarios.megascale_social.policy import offline_backend

                backend = offline_backend()
            decider = ArchetypeDecider(fx, self.spec, backend, mode=mode, constant=constant)
        self.decider = decider
        self.backend = decider.backend
        self.step_key = int(step_seq.generate_state(2, np.uint64)[0]) if step_key is None else int(step_key)
        self.pop = Population.initial(self.world, nearest_prototype(fx, 0.0, 0.0))
        self._forced: np.ndarray | None = None
        if self.decider.owner is None:  # the first model of a decider is the factual run; its copies are forks
            self.decider.owner = weakref.ref(self)
        self.answer_sum = np.zeros(3)  # Σ over live agents and steps of (post, reshare, shift): the mean answer
        self.answer_count = 0
        self.last: dict[str, float] = {}
        self._w_mean = float(self.world.influence.mean(dtype=np.float64))
        self._b_rep = np.abs(self.spec.stance_representative()).astype(np.float32)
        self.datacollector = mesa.DataCollector(model_reporters={
            "endorse_share": lambda m: m.last.get("endorse_share", float("nan")),
            "mean_belief": lambda m: m.last.get("mean_belief", float("nan")),
            "post_rate": lambda m: m.last.get("post_rate", float("nan")),
            "reshare_rate": lambda m: m.last.get("reshare_rate", float("nan")),
            "archetypes": lambda m: m.last.get("archetypes", float("nan")),
            "requests": lambda m: m.last.get("requests", float("nan")),
            "trending": lambda m: m.last.get("trending", float("nan")),
        })

    @property
    def llm_errors(self) -> int:
        """Archetype keys whose request got no usable answer (abstentions: no post, no reshare, no shift)."""
        return int(self.decider.abstained)

    # ------------------------------------------------------------------ forks
    @property
    def _is_fork(self) -> bool:
        """A model that is not its decider's first (factual) model — a copy, a checkpoint, a fork — is a
        fork: its decisions are counted apart (``fork_decisions``). Kept out of the model's attributes,
        so a copy is in exactly the original's state."""
        owner = self.decider.owner
        return owner is None or owner() is not self or self.decider.forcing_fork

    @property
    def n(self) -> int:
        return self.world.n

    def force_baseline(self, positions: Any) -> None:
        """Make the agents at these positions take the baseline action in the next step."""
        idx = np.asarray(list(positions) if not isinstance(positions, np.ndarray) else positions, dtype=np.int64)
        forced = np.zeros(self.n, dtype=bool)
        if idx.size:
            if idx.min() < 0 or idx.max() >= self.n:
                raise SimulationError(f"baseline positions must lie in [0, {self.n}); got {int(idx.min())} … "
                                      f"{int(idx.max())}")
            forced[idx] = True
        self._forced = forced

    def agent(self, i: int) -> AgentView:
        """A read-only view of agent ``i`` (not a Mesa agent; ``model.agents`` stays empty)."""
        i = int(i)
        if not 0 <= i < self.n:
            raise SimulationError(f"agent {i} is not in [0, {self.n})")
        w, p = self.world, self.pop
        return AgentView(unique_id=i, persona=w.fixture.personas[int(w.persona[i])].name, belief=float(p.belief[i]),
                         posted=bool(p.posted[i]), reshared=bool(p.reshared[i]), seen=int(p.seen[i]),
                         lean=float(p.lean[i]), influence=float(w.influence[i]),
                         followers=int(w.network.follower_count()[i]), following=int(w.network.following_count()[i]))

    # ------------------------------------------------------------------ the step
    def keys(self) -> np.ndarray:
        """Every agent's archetype key for the coming step (int32, (N,))."""
        p = self.pop
        return self.spec.encode(self.world.persona, p.belief, p.seen, p.lean)

    def _answers(self, t: int, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
        """Per agent: (logit P(post) before individualisation, reshare p, stance shift) as an (N, 3) float32
        array, the belief residual term of the individualisation, and the number of decisions made."""
        p, w = self.pop, self.world
        if self.decider.mode == "agent":
            idx = np.arange(self.n) if live is None else np.flatnonzero(live)
            ans = np.zeros((self.n, 3))
            ans[idx] = self.decider.decide_agents(w.persona[idx], p.belief[idx], p.seen[idx], p.lean[idx], p.trending,
                                                  t, self._is_fork)
            ans[:, 0] = _logit(ans[:, 0])
            return ans.astype(np.float32), np.zeros(self.n, np.float32), int(idx.size)
        keys, sb = self.spec.encode(w.persona, p.belief, p.seen, p.lean, stance=True)
        counts = np.bincount(keys if live is None else keys[live], minlength=self.spec.n_keys)
        occ = np.flatnonzero(counts)
        table = self._table(occ, t)
        resid = np.zeros(self.n, np.float32)
        if self.decider.constant is None:  # the belief residual within the stance bucket
            resid = np.abs(p.belief) - self._b_rep[sb]
            resid *= np.float32(self.config.belief_slope)
        n_dec = 0 if self.decider.constant is not None else int(occ.size)
        return table[keys], resid, n_dec

    def _table(self, keys: np.ndarray, t: int) -> np.ndarray:
        """(n_keys, 3) float32 policy table (logit P(post), P(reshare), shift) with the rows of ``keys`` filled."""
        table = np.zeros((self.spec.n_keys, 3), dtype=np.float64)
        table[keys] = self.decider.decide_keys(keys, self.pop.trending, t, self._is_fork)
        table[:, 0] = _logit(table[:, 0])
        return table.astype(np.float32)

    def _feed(self, b: np.ndarray, cnt: np.ndarray, ssum: np.ndarray, resh_k: np.ndarray, shift_k: np.ndarray,
              u_resh: np.ndarray) -> tuple[np.ndarray, ...]:
        """Phase B of a step for any subset of agents (elementwise; the same numbers for a subset as
        for everyone): seen, lean, reshared, new view."""
        cfg = self.config
        seen = np.rint(cnt).astype(np.int32)
        lam = np.float32(cfg.trending_weight)
        lean = ssum.copy()
        lean += lam * np.float32(self.pop.trend_belief)
        lean /= cnt + lam
        sat = -np.expm1(cnt * np.float32(-1.0 / cfg.exposure_scale))
        reshared = u_resh < resh_k * sat
        nb = shift_k * (1 - np.abs(b))
        nb *= np.float32(cfg.stance_rate)
        nb += b
        pull = lean - b
        pull *= sat
        pull *= np.float32(cfg.social_pull)
        nb += pull
        np.clip(nb, -1.0, 1.0, out=nb)
        return seen, lean, reshared, nb

    def step(self) -> None:
        cfg, w, p = self.config, self.world, self.pop
        t = self.steps - 1
        n = self.n
        forced = self._forced
        live = None if forced is None or not forced.any() else ~forced
        ans, resid, requests = self._answers(t, live)
        post_logit, resh_k, shift_k = ans[:, 0], ans[:, 1], ans[:, 2]
        rows = ans if live is None else ans[live]
        self.answer_sum += rows.sum(axis=0, dtype=np.float64) * np.array([0.0, 1.0, 1.0])
        self.answer_sum[0] += float(_sigmoid(rows[:, 0]).sum(dtype=np.float64))
        self.answer_count += rows.shape[0]
        b = p.belief
        u_post, u_resh = counter.uniform_pair(self.step_key, t, _DRAWS, n)
        # 2. post: broadcast + individualise (influence offset, belief residual), Bernoulli draw
        logit = post_logit + self._influence_offset()
        logit += resid
        posted = u_post < _sigmoid(logit)
        if live is not None:
            posted &= live
        # 3. feed: today's posts and yesterday's reshares of the accounts i follows
        x = posted | p.reshared
        if live is not None:
            x &= live
        xf = x.astype(np.float32)
        F = w.network.follows()
        cnt, ssum = matvec_pair(F, xf, xf * b)  # scipy's F @ xf and F @ (xf b), bit for bit: one pass over F
        # 4. reshare, 5. view
        seen, lean, reshared, nb = self._feed(b, cnt, ssum, resh_k, shift_k, u_resh)
        if live is not None:
            for arr in (reshared, nb, lean):
                arr[forced] = 0
            seen[forced] = 0
        # 6. trending for tomorrow
        nx = int(np.count_nonzero(x))
        tb = float(np.dot(xf, b.astype(np.float64))) / nx if nx else p.trend_belief
        extreme = float(np.count_nonzero(x & (np.abs(b) > 0.6))) / nx if nx else 0.0
        self.pop = replace(p, belief=nb, posted=posted, reshared=reshared, seen=seen, lean=lean, trend_belief=tb,
                           trending=nearest_prototype(w.fixture, tb, extreme))
        self._forced = None
        self.last = {"endorse_share": float(np.count_nonzero(nb > np.float32(cfg.risk_threshold))) / n,
                     "mean_belief": float(nb.mean(dtype=np.float64)), "post_rate": float(np.count_nonzero(posted)) / n,
                     "reshare_rate": float(np.count_nonzero(reshared)) / n, "archetypes": float(requests),
                     "requests": float(requests), "trending": float(self.pop.trending)}
        self.datacollector.collect(self)

    # ------------------------------------------------------------------ counterfactual step (deletion)
    def counterfactual_features(self, positions: Any) -> dict[str, np.ndarray]:
        """The features after the coming step if the agents at ``positions`` took the baseline action —
        exactly what a fork that forces them and steps records, without re-simulating the agents whose
        inputs do not change.

        Within one step a forced agent changes only its own outcome and what its followers see (its
        post and reshare vanish from their feed); everyone's decisions and counter-based draws are
        otherwise those of the factual step, and tomorrow's trending item is not read until tomorrow.
        So the factual step is computed once (and kept on this model, which must not be stepped),
        and each counterfactual recomputes only the forced agents and their followers — the same
        float32 operations on the same operands, hence the same bits (tested against a full fork).
        The followers' decisions go through the decider (cache hits) and count as fork decisions."""
        fac, changes = self._counterfactual_rows(positions)
        feats = {k: v.copy() for k, v in fac["features"].items()}
        for rows, cols in changes:
            for k, v in cols.items():
                if k != "influence":
                    feats[k][rows] = v
        return feats

    def counterfactual_matrix(self, positions: Any) -> np.ndarray:
        """:meth:`counterfactual_features` as one (N, D) float64 matrix in :data:`FEATURES` order: the same values
        as ``np.stack([float32 column for each feature], axis=1).astype(np.float64)``, made by copying the factual
        step's matrix (built once) and rewriting the rows the forced agents change, not by stacking N rows again.
        Column-major, so an indicator reads each feature as one contiguous column (a deletion fork of f_prop at
        10⁶ agents: 89 instead of 146 ms; the values, and so the indicators' bits, are the same)."""
        fac, changes = self._counterfactual_rows(positions)
        z = self._factual_matrix(fac).copy(order="F")
        for rows, cols in changes:
            for j, k in enumerate(FEATURES):
                if k != "influence":
                    z[rows, j] = np.asarray(cols[k], dtype=np.float32)  # as the stack casts it, then exactly to float64
        return z

    def counterfactual_rows(self, positions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`counterfactual_matrix` as what changes: (the factual step's matrix — one array, built once —, the
        rows the forced agents change, their values (rows, D) float64), so that the matrix with those rows
        replaced is :meth:`counterfactual_matrix`'s, value for value. A deletion fork of a pooled indicator then
        reads a few thousand rows instead of copying and reading N (the scenario's ``resimulate_rows_fn``)."""
        fac, changes = self._counterfactual_rows(positions)
        base = self._factual_matrix(fac)
        if not changes:
            return base, np.zeros(0, dtype=np.int64), np.zeros((0, base.shape[1]))
        rows = np.concatenate([r for r, _ in changes]).astype(np.int64)  # followers, then the forced: disjoint
        values = base[rows]
        at = 0
        for r, cols in changes:
            for j, k in enumerate(FEATURES):
                if k != "influence":
                    values[at:at + r.size, j] = np.asarray(cols[k], dtype=np.float32)
            at += r.size
        return base, rows, values

    @staticmethod
    def _factual_matrix(fac: dict[str, Any]) -> np.ndarray:
        with _FACTUAL_LOCK:
            if "matrix" not in fac:
                fac["matrix"] = np.asfortranarray(
                    np.stack([np.asarray(fac["features"][k], dtype=np.float32) for k in FEATURES], axis=1),
                    dtype=np.float64)
        return fac["matrix"]

    def _counterfactual_rows(self, positions: Any) -> tuple[dict[str, Any], list[tuple[np.ndarray, dict]]]:
        """The factual step (see :meth:`_factual_step`) and what the forced agents change in it: (rows, their
        feature columns) for their affected followers, then for the forced agents themselves."""
        if self.decider.mode != "archetype" or self.decider.constant is not None:
            raise SimulationError("incremental counterfactual steps need archetype decisions; fork the model instead")
        fac = self._factual_step()
        idx = np.unique(np.asarray(list(positions) if not isinstance(positions, np.ndarray) else positions,
                                   dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= self.n):
            raise SimulationError(f"baseline positions must lie in [0, {self.n}); got {int(idx[0])} … {int(idx[-1])}")
        if not idx.size:
            return fac, []
        changes = []
        w, p = self.world, self.pop
        followers = w.network.followers_of(idx)
        forced = np.zeros(self.n, dtype=bool)
        forced[idx] = True
        U = followers[~forced[followers]]
        if U.size:
            x = fac["x"].copy()
            x[idx] = False
            xf = x.astype(np.float32)
            FU = w.network.follows()[U]
            cnt, ssum = matvec_pair(FU, xf, xf * p.belief)
            keys = fac["keys"][U]
            table = self._fork_table(np.unique(keys))
            ans = table[keys]
            seen, _, reshared, nb = self._feed(p.belief[U], cnt, ssum, ans[:, 1], ans[:, 2], fac["u_resh"][U])
            changes.append((U, self._feature_columns(nb, seen, fac["posted"][U], reshared)))
        off = np.zeros(idx.size, dtype=bool)
        changes.append((idx, self._feature_columns(np.zeros(idx.size, np.float32), np.zeros(idx.size, np.int32),
                                                   off, off)))
        return fac, changes

    def _fork_table(self, keys: np.ndarray) -> np.ndarray:
        was = self.decider.forcing_fork
        self.decider.forcing_fork = True
        try:
            return self._table(keys, self.steps)
        finally:
            self.decider.forcing_fork = was

    def _factual_step(self) -> dict[str, Any]:
        """The coming step's factual outcome, computed on a copy and kept (for counterfactual_features)."""
        cache = self.decider.factual_steps  # keyed weakly by this model: never part of its state
        with _FACTUAL_LOCK:  # concurrent forks (an LLM backend's fork threads) compute it once
            if self not in cache:
                self._compute_factual_step(cache)
        return cache[self]

    def _compute_factual_step(self, cache: Any) -> None:
        branch = copy.deepcopy(self)  # a fork: its decisions count as fork decisions
        branch.step()
        _, u_resh = counter.uniform_pair(self.step_key, self.steps, _DRAWS, self.n)
        keys = self.spec.encode(self.world.persona, self.pop.belief, self.pop.seen, self.pop.lean)
        q = branch.pop
        cache[self] = {"x": q.posted | self.pop.reshared, "posted": q.posted, "u_resh": u_resh, "keys": keys,
                       "features": {k: np.array(v, copy=True) for k, v in branch.features().items()}}

    def _influence_offset(self) -> np.ndarray:
        """β_w (w_i − w̄), float32 (static: cached on the shared world)."""
        key = ("influence_offset", float(self.config.influence_slope))
        if key not in self.world.cache:
            off = (self.world.influence - np.float32(self._w_mean)) * np.float32(self.config.influence_slope)
            self.world.cache[key] = off.astype(np.float32)
        return self.world.cache[key]

    # ------------------------------------------------------------------ recording
    def _feature_columns(self, belief: np.ndarray, seen: np.ndarray, posted: np.ndarray,
                         reshared: np.ndarray) -> dict[str, np.ndarray]:
        cfg = self.config
        risk = _sigmoid(np.float32(cfg.risk_sharpness) * (belief - np.float32(cfg.risk_threshold)))
        return {"belief": belief, "exposure": np.log1p(seen.astype(np.float32)), "posted": posted,
                "reshared": reshared, "influence": self.world.influence, "risk": risk}

    def features(self) -> dict[str, np.ndarray]:
        """The feature columns after the last step (the recorder's array path)."""
        p = self.pop
        return self._feature_columns(p.belief, p.seen, p.posted, p.reshared)


__all__ = ["FEATURES", "AgentView", "MegaScaleSocial", "Population", "World", "nearest_prototype", "world_for"]
