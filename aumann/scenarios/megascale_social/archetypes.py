"""Archetype-batched decisions: integer keys per agent, one structured request per occupied key.

Every step each agent gets an integer **key** = (persona, stance bucket, feed-volume bucket, feed-lean
bucket), encoded as ``((p · S + s) · V + v) · L + l``. With the defaults (16 personas × 5 stance ×
4 volume × 3 lean buckets) there are at most 960 keys; agents that saw nothing share the middle lean
bucket. Grouping 10⁶ agents is one ``np.bincount``. The :class:`ArchetypeDecider` renders one chat
request per *occupied* key (:mod:`.prompts`), submits the step's requests as **one batch** through the
decision backend (:func:`submit` — the single place that talks to the backend, so the swap to another
batch API is a one-line change), and returns a policy table (key → post, reshare, stance shift) that
the model broadcasts to the key's members and individualises by each member's own state.

``mode="agent"`` (the archetype-fidelity check) sends one request per agent instead, rendering the
agent's exact numbers; the ``constant`` table (the LLM ablation) answers every key with one fixed row.

Two cache levels: the decider's in-process **memo** (request identity → answer; the identity is the
key and the trending prototype, which fix the messages) answers requests it has seen in this process
— earlier steps, other forks — without touching the backend (counted in the backend's ``usage`` as
decisions served from a cache); the rest go to the backend as one batch per step, where an LLM
backend's SQLite :class:`~aumann.simulators.llm.ResponseCache` serves what earlier processes recorded.
Answers are the same either way, so the memo changes cost, never results.

The decider is shared by every fork of a model (``deepcopy`` returns it). Its ledger counts decisions
per step, split into the factual run and forks (a model copy that steps is a fork), and how many went
to the backend.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.errors import ConfigError, SimulationError
from aumann.scenarios.megascale_social.fixture import Fixture
from aumann.scenarios.megascale_social.prompts import (
    PROMPT_VERSION,
    Decision,
    agent_user_message,
    archetype_user_message,
    stance_phrase,
    system_message,
)


@dataclass(frozen=True)
class ArchetypeSpec:
    """The bucket grid of the archetype key.

    Args:
        n_personas: P personas (from the fixture).
        stance_edges: inner edges of the stance (belief) buckets on [−1, 1] (S = len + 1 buckets).
        volume_edges: lower bounds of the feed-volume buckets after "none" (posts seen; V = len + 1).
        lean_edges: inner edges of the feed-lean buckets on [−1, 1] (L = len + 1); agents that saw
            nothing are put in the middle lean bucket.
    """

    n_personas: int
    stance_edges: tuple[float, ...] = (-0.6, -0.2, 0.2, 0.6)
    volume_edges: tuple[int, ...] = (1, 3, 10)
    lean_edges: tuple[float, ...] = (-0.2, 0.2)

    def __post_init__(self) -> None:
        for name in ("stance_edges", "lean_edges"):
            e = np.asarray(getattr(self, name), dtype=np.float64)
            if e.ndim != 1 or np.any(np.diff(e) <= 0) or (e.size and (e[0] <= -1 or e[-1] >= 1)):
                raise ConfigError(f"archetype {name} must increase strictly inside (−1, 1); got {getattr(self, name)}")
        v = np.asarray(self.volume_edges)
        if v.ndim != 1 or v.size == 0 or v[0] < 1 or np.any(np.diff(v) <= 0):
            raise ConfigError(f"archetype volume_edges must be increasing integers ≥ 1; got {self.volume_edges}")
        if self.n_personas < 1:
            raise ConfigError("an archetype spec needs at least one persona")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(P, S, V, L)."""
        return (self.n_personas, len(self.stance_edges) + 1, len(self.volume_edges) + 1, len(self.lean_edges) + 1)

    @property
    def n_keys(self) -> int:
        P, S, V, L = self.shape
        return P * S * V * L

    # ------------------------------------------------------------------ codec
    def encode(self, persona: np.ndarray, belief: np.ndarray, count: np.ndarray, lean: np.ndarray, *,
               stance: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """int32 keys (N,) from persona ids, beliefs, posts seen and feed leans (``stance=True``: also the
        stance bucket of each agent). A bucket is the number of edges ≤ the value."""
        _, S, V, L = self.shape

        def bucket(x: np.ndarray, edges: Sequence[float], dtype: Any) -> np.ndarray:
            out = np.zeros(x.shape, dtype=np.int8)
            for e in edges:
                out += x >= np.asarray(e, dtype=dtype)
            return out

        s = bucket(belief, self.stance_edges, belief.dtype)
        v = bucket(count, self.volume_edges, count.dtype)
        lb = bucket(lean, self.lean_edges, lean.dtype)
        lb[v == 0] = (L - 1) // 2
        key = persona.astype(np.int32) * S
        key += s
        key *= V
        key += v
        key *= L
        key += lb
        return (key, s) if stance else key

    def decode(self, keys: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(persona, stance bucket, volume bucket, lean bucket) of each key."""
        _, S, V, L = self.shape
        k = np.asarray(keys, dtype=np.int64)
        if k.size and (k.min() < 0 or k.max() >= self.n_keys):
            raise SimulationError(f"archetype keys must lie in [0, {self.n_keys}); got {int(k.min())} … {int(k.max())}")
        return k // (S * V * L), (k // (V * L)) % S, (k // L) % V, k % L

    # ------------------------------------------------------------------ bucket representatives and labels
    def stance_representative(self) -> np.ndarray:
        e = np.concatenate([[-1.0], self.stance_edges, [1.0]])
        return (e[:-1] + e[1:]) / 2

    def volume_representative(self) -> np.ndarray:
        e = list(self.volume_edges)
        reps = [0.0] + [(lo + hi - 1) / 2 for lo, hi in itertools.pairwise(e)] + [1.6 * e[-1]]
        return np.asarray(reps)

    def lean_representative(self) -> np.ndarray:
        e = np.concatenate([[-1.0], self.lean_edges, [1.0]])
        return (e[:-1] + e[1:]) / 2

    def stance_label(self, s: int) -> str:
        return stance_phrase(float(self.stance_representative()[s]))

    def volume_label(self, v: int) -> str:
        e = list(self.volume_edges)
        if v == 0:
            return "no posts"
        if v == len(e):
            return f"{e[-1]} or more posts"
        lo, hi = e[v - 1], e[v] - 1
        return f"{lo} post" if lo == hi == 1 else (f"{lo} posts" if lo == hi else f"{lo} to {hi} posts")

    def lean_label(self, lb: int, v: int) -> str | None:
        if v == 0:
            return None
        L = len(self.lean_edges) + 1
        if lb == 0:
            return "mostly saying the claim is false"
        if lb == L - 1:
            return "mostly saying the claim is true"
        return "with mixed views"


def submit(backend: Any, requests: list[dict[str, Any]]) -> list[Any]:
    """Decide one batch of requests (dicts of ``decide`` keyword arguments), results in order.

    The one place MegaScale-Social talks to a decision backend: backends with a batch API
    (``decide_many``: concurrent requests, one cache pass) get the whole step at once.
    """
    from aumann.simulators.llm import decide_all

    return decide_all(backend, requests, return_exceptions=True)


_LEDGER_LOCK = threading.Lock()
_ANSWERS_LOCK = threading.RLock()


@dataclass
class DecisionLedger:
    """Decisions per step, factual run vs forks (shared by every fork of a model), and how many of them
    went to the backend (the rest came from the decider's in-process memo of earlier answers)."""

    factual: dict[int, int] = field(default_factory=dict)
    fork: int = 0
    fork_batches: int = 0
    sent: int = 0
    fork_sent: int = 0
    invalid: int = 0  # of the decisions above, abstentions (fresh or remembered): factual run, forks
    fork_invalid: int = 0

    def add(self, step: int, n: int, is_fork: bool, sent: int = 0, invalid: int = 0) -> None:
        with _LEDGER_LOCK:  # forks on threads add at once: ``+=`` on an attribute is not atomic
            self._add(step, n, is_fork, sent, invalid)

    def _add(self, step: int, n: int, is_fork: bool, sent: int, invalid: int) -> None:
        if is_fork:
            self.fork += n
            self.fork_batches += 1
            self.fork_sent += sent
            self.fork_invalid += invalid
        else:
            self.factual[step] = self.factual.get(step, 0) + n
            self.sent += sent
            self.invalid += invalid

    @property
    def decisions(self) -> int:
        return int(sum(self.factual.values()))

    def per_step(self) -> list[int]:
        return [self.factual[t] for t in sorted(self.factual)]

    def as_dict(self) -> dict[str, Any]:
        per = self.per_step()
        return {"decisions": self.decisions, "fork_decisions": int(self.fork), "decisions_per_step": per,
                "max_decisions_per_step": max(per) if per else 0, "fork_batches": int(self.fork_batches),
                "backend_requests": int(self.sent), "fork_backend_requests": int(self.fork_sent),
                "invalid_decisions": int(self.invalid), "fork_invalid_decisions": int(self.fork_invalid)}


class ArchetypeDecider:
    """Keys → requests → one backend batch per step → a policy table.

    Args:
        fixture: persona cards and message prototypes.
        spec: the archetype bucket grid.
        backend: a DecisionBackend (offline policy or an LLM behind a response cache).
        mode: ``"archetype"`` (one request per occupied key) or ``"agent"`` (one per agent).
        constant: a fixed (post, reshare, stance_shift) row answering every key without any request
            (the LLM ablation).
        request_seed: the seed sent with every request (fixed, so keys exclude the run seed and step).
    """

    def __init__(self, fixture: Fixture, spec: ArchetypeSpec, backend: Any, *, mode: str = "archetype",
                 constant: Sequence[float] | None = None, request_seed: int = 0) -> None:
        if mode not in ("archetype", "agent"):
            raise ConfigError(f"decision mode must be 'archetype' or 'agent'; got {mode!r}")
        if spec.n_personas != len(fixture.personas):
            raise ConfigError(f"the archetype spec has {spec.n_personas} personas, the fixture {len(fixture.personas)}")
        self.fixture = fixture
        self.spec = spec
        self.backend = backend
        self.abstained = 0  # keys whose request got no usable answer (recorded as no action)
        self.mode = mode
        self.constant = None if constant is None else np.asarray(constant, dtype=np.float64)
        self.request_seed = int(request_seed)
        self.ledger = DecisionLedger()
        self.owner: Any = None  # weakref to the factual model (see MegaScaleSocial._is_fork)
        self._forcing = threading.local()  # per thread: forks on threads each say "fork" for their own decisions
        self.factual_steps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._memo: dict[tuple, tuple[float, float, float]] = {}
        self._abstained_ids: set[tuple] = set()  # memo entries that are abstentions, not answers
        self._systems = [system_message(fixture.topic, p.card) for p in fixture.personas]
        self._traits = [p.traits.model_dump() for p in fixture.personas]
        self._protos = [(p.stance, p.intensity, p.text) for p in fixture.prototypes]
        s_rep, v_rep, l_rep = spec.stance_representative(), spec.volume_representative(), spec.lean_representative()
        self._reps = (s_rep, v_rep, l_rep)

    @property
    def forcing_fork(self) -> bool:
        """Whether this thread is computing a deletion fork's rows (its decisions then count as fork decisions).
        Kept per thread: a flag shared by concurrent forks would be reset by the first to finish while another
        still decides, and its decisions would be counted as the factual run's."""
        return bool(getattr(self._forcing, "on", False))

    @forcing_fork.setter
    def forcing_fork(self, on: bool) -> None:
        self._forcing.on = bool(on)

    def __deepcopy__(self, memo: dict) -> ArchetypeDecider:
        return self  # shared by forks: one backend, one ledger

    def __getstate__(self) -> dict:  # picklable for worker processes: weak references stay behind
        state = dict(self.__dict__)
        state.update(owner=None, factual_steps=None)
        state.pop("_forcing", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.factual_steps = weakref.WeakKeyDictionary()
        self._forcing = threading.local()

    # ------------------------------------------------------------------ requests
    def archetype_request(self, key: int, trending: int) -> dict[str, Any]:
        """The chat request of archetype ``key`` when prototype ``trending`` is trending."""
        p, s, v, lb = (int(x[0]) for x in self.spec.decode([key]))
        s_rep, v_rep, l_rep = self._reps
        stance, intensity, text = self._protos[trending]
        user = archetype_user_message(self.spec.stance_label(s), self.spec.volume_label(v),
                                      self.spec.lean_label(lb, v), text)
        ctx = {"prompt": PROMPT_VERSION, "persona": p, "traits": self._traits[p], "belief": float(s_rep[s]),
               "volume": float(v_rep[v]), "lean": float(l_rep[lb]) if v > 0 else 0.0,
               "trending_stance": stance, "trending_intensity": intensity}
        return {"messages": [{"role": "system", "content": self._systems[p]}, {"role": "user", "content": user}],
                "schema": Decision, "context": ctx, "seed": self.request_seed}

    def agent_request(self, persona: int, belief: float, count: int, lean: float, trending: int) -> dict[str, Any]:
        """The individual request of one agent (fidelity check)."""
        stance, intensity, text = self._protos[trending]
        b, le = round(float(belief), 2), round(float(lean), 2)
        ctx = {"prompt": PROMPT_VERSION, "persona": int(persona), "traits": self._traits[persona], "belief": b,
               "volume": float(count), "lean": le if count > 0 else 0.0, "trending_stance": stance,
               "trending_intensity": intensity}
        msgs = [{"role": "system", "content": self._systems[persona]},
                {"role": "user", "content": agent_user_message(b, int(count), le, text)}]
        return {"messages": msgs, "schema": Decision, "context": ctx, "seed": self.request_seed}

    # ------------------------------------------------------------------ decisions
    def _answers(self, ids: list[tuple], make: Any, step: int, is_fork: bool) -> np.ndarray:
        """Answers for request identities ``ids``: memo hits first, the rest as one backend batch. One caller at a
        time: concurrent forks missing the same key would each send it and count it (their keys are the factual
        step's, memo hits, so they rarely wait)."""
        with _ANSWERS_LOCK:
            return self._answers_locked(ids, make, step, is_fork)

    def _answers_locked(self, ids: list[tuple], make: Any, step: int, is_fork: bool) -> np.ndarray:
        out = np.empty((len(ids), 3), dtype=np.float64)
        miss = [j for j, i in enumerate(ids) if i not in self._memo]
        if miss:
            from aumann.simulators.llm.backend import is_abstention

            answers = submit(self.backend, [make(ids[j]) for j in miss])
            for j, a in zip(miss, answers, strict=True):
                if isinstance(a, BaseException) and is_abstention(a):
                    self.abstained += 1  # no usable answer: this key abstains (no post, no reshare, no shift)
                    self._memo[ids[j]] = (0.0, 0.0, 0.0)
                    self._abstained_ids.add(ids[j])
                    continue
                if isinstance(a, BaseException):
                    raise a
                d = a if isinstance(a, Decision) else Decision.model_validate(
                    a.model_dump() if hasattr(a, "model_dump") else a)
                self._memo[ids[j]] = (d.post, d.reshare, d.stance_shift)
        for j, i in enumerate(ids):
            out[j] = self._memo[i]
        hits = len(ids) - len(miss)
        missed = set(miss)
        bad = sum(1 for j, i in enumerate(ids) if j not in missed and i in self._abstained_ids)
        fresh_bad = sum(1 for j in miss if ids[j] in self._abstained_ids)
        self.ledger.add(step, len(ids), is_fork, sent=len(miss), invalid=bad + fresh_bad)
        usage = getattr(self.backend, "usage", None)
        if hits and usage is not None and hasattr(usage, "add"):  # memo hits are decisions served from a cache
            # a remembered abstention stays an abstention (as the backend counts its remembered invalid
            # replies): counted as a valid decision it would dilute the run's invalid rate below the threshold
            usage.add(decisions=hits - bad, cache_hits=hits - bad, invalid_decisions=bad)
        return out

    def decide_keys(self, occupied: np.ndarray, trending: int, step: int, is_fork: bool) -> np.ndarray:
        """(len(occupied), 3) answers for the occupied keys (one batch; none for a constant table)."""
        if self.constant is not None:
            return np.broadcast_to(self.constant, (len(occupied), 3)).copy()
        ids = [("key", int(k), int(trending)) for k in occupied]
        return self._answers(ids, lambda i: self.archetype_request(i[1], i[2]), step, is_fork)

    def decide_agents(self, persona: np.ndarray, belief: np.ndarray, count: np.ndarray, lean: np.ndarray,
                      trending: int, step: int, is_fork: bool) -> np.ndarray:
        """(n, 3) answers, one request per agent (fidelity check)."""
        ids = [("agent", int(p), round(float(b), 2), int(c), round(float(le), 2) if c > 0 else 0.0, int(trending))
               for p, b, c, le in zip(persona, belief, count, lean)]
        return self._answers(ids, lambda i: self.agent_request(i[1], i[2], i[3], i[4], i[5]), step, is_fork)


__all__ = ["ArchetypeDecider", "ArchetypeSpec", "DecisionLedger", "submit"]
