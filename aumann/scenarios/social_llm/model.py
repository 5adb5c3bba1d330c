"""SocialLLM model: post, view, react, author feedback (spec §5), exposure on a seeded BA graph.

One step t, in this order:

1. **Post.** Each agent decides to post (backend or offline rule policy); a post carries its
   current belief. If nobody posts, every p is multiplied by ``silent_boost`` (clipped to 1) until
   that agent's belief next changes, and the step ends.
2. **View sampling.** Agent i's candidate feed is the posts of its graph neighbours
   (``network="ba"``) or of everybody else (``network="mixed"``, the predecessor's fully mixed feed);
   with m candidates it views k ~ U{max(1, ⌈r_min m⌉), …, min(m, ⌈r_max m⌉)} of them, in random order.
3. **React.** For each viewed post the agent likes, dislikes or ignores it; a like moves b toward
   the post, a dislike away from it, by s · μ · |b_post − b|. How reactions see each other is the
   config's ``interaction``:

   * ``"sequential"`` (default, the predecessor's semantics): agents react in agent order, each
     post of a feed in turn; every reaction sees the post's counters and the agent's belief left by
     all reactions before it, and moves the belief at once. The decisions are sent as a sequence of
     batches ("waves"): a reaction waits only for the reactions it depends on -- the agent's previous
     reaction and the previous viewer's reaction to the same post -- so every wave's reactions go
     out together, and the result is identical to reacting one by one.
   * ``"synchronous"``: every reaction of the step sees the counters and beliefs as of the start
     of the phase (counters 0, the belief after posting); all reactions go out as one batch; then,
     in agent order and feed order, counters are updated and belief moves are applied (each move
     computed from the belief left by the agent's previous move).

   The two modes give different runs and use distinct cache keys (the request ``scope``).
4. **Author feedback.** A post with V views, L likes and D dislikes rescales its author's belief,
   b ← clip(b (1 + κ (L − D)/V), −1, 1): approval amplifies |b|.

Deviations from the predecessor (its quirks, spec §12.5), each deliberate:

* no self-viewing (an agent's own post is never in its feed);
* the counters an agent sees are those before its own view is counted;
* a decision without a usable answer -- a reply still invalid after the backend's varied retry
  (malformed, oversized, lossy, a schema echo) or requests that all failed -- is an *abstention*:
  no post / no interaction, counted in ``model.llm_errors`` (and the backend's
  ``usage.invalid_decisions``, with the replies kept in its cache);
* every random draw comes from a per-(agent, step) stream ``default_rng((root, t, i))`` derived
  from the model's seed (the predecessor's LLM fallback used the unseeded global RNG). Per-agent
  streams are also *common random numbers*: a counterfactual fork that changes agent j's actions
  leaves the draws of every other agent unchanged, so deletion measures the intervention, not noise.

Baseline action (``force_baseline``): at the forced step the agent is neutral and silent — its
belief is set to 0, it does not post, view or react, and it gets no author feedback, so after the
step its features are all zero (belief 0, posted 0, views 0, likes 0, dislikes 0).

``model.last_trace`` keeps the last step's decisions — ``{"posts": [author, ...], "views": [(viewer,
author, "like" | "dislike" | None), ...]}`` in the order they happened — which the step map
(:mod:`.stepmap`) holds at their recorded values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import mesa
import networkx as nx
import numpy as np

from aumann.scenarios.social_llm.agents import SocialAgent, rule_policy
from aumann.scenarios.social_llm.prompts import InteractDecision, PostDecision, interact_messages, post_messages
from aumann.simulators.llm import decide_all
from aumann.simulators.llm.usage import Usage, usage_of


def _invalid_replies() -> tuple[type[Exception], ...]:
    from aumann.errors import BackendUnavailableError, ResponseTooLargeError
    from aumann.simulators.llm import MalformedResponseError, PolicyError

    return (MalformedResponseError, PolicyError, ResponseTooLargeError, BackendUnavailableError)


INVALID_REPLY = _invalid_replies()
"""Decisions that count as abstentions -- no post / no interaction, counted in ``llm_errors``; other
backend errors (authentication, budget, cache miss, a server that is down) propagate: they are not
model answers (see :func:`aumann.simulators.llm.is_abstention`)."""

#: what an abstention decides: nothing
ABSTAIN = {"post": {"post": False}, "interact": {"interact": False, "action": None}}


def reaction_waves(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Group sequential reactions (agent i, post j), in order, into waves of independent ones.

    Reaction k depends on the same agent's previous reaction (its belief) and on the previous
    reaction to the same post (its counters); its wave is one past the later of the two. Within a
    wave no two reactions share an agent or a post, so deciding a wave at once and applying it in
    order equals the one-by-one sequence. Returns the waves as lists of positions into ``pairs``.
    """
    last_agent: dict[int, int] = {}
    last_post: dict[int, int] = {}
    waves: list[list[int]] = []
    for k, (i, j) in enumerate(pairs):
        w = 1 + max(last_agent.get(i, -1), last_post.get(j, -1))
        last_agent[i] = last_post[j] = w
        if w == len(waves):
            waves.append([])
        waves[w].append(k)
    return waves


class SocialModel(mesa.Model):
    """The SocialLLM world.

    Args:
        config: a :class:`~aumann.scenarios.social_llm.scenario.SocialLLMConfig`.
        rng: numpy Generator (seeds beliefs, the graph and the per-agent streams).
        backend: a DecisionBackend (``decide(messages, schema, context=..., seed=...)``) or ``None``
            for the offline rule policy.
    """

    def __init__(self, config: Any, rng: np.random.Generator, backend: Any = None) -> None:
        super().__init__(rng=int(rng.integers(2**31)))
        self.config = config
        self.backend = backend
        self.root = int(rng.integers(2**62))
        self.t = 0
        n = config.agents
        beliefs = rng.uniform(config.init_low, config.init_high, size=n)
        self.people: list[SocialAgent] = [SocialAgent(self, b) for b in beliefs]
        if config.network == "ba":
            g = nx.barabasi_albert_graph(n, min(config.ba_m, n - 1), seed=int(rng.integers(2**31)))
            self.neighbours: list[list[int]] | None = [sorted(g.neighbors(i)) for i in range(n)]
        else:
            self.neighbours = None
        self.forced: set[int] = set()
        self.n_decisions = 0
        self.last_trace: dict[str, list] = {"posts": [], "views": []}
        self.llm_errors = 0
        self.usage: Usage = usage_of(backend) or Usage()  # offline: this model's own account (shared by forks)
        self.scope = f"social-llm/interaction={config.interaction}"

    # ------------------------------------------------------------------ helpers
    def force_baseline(self, positions: Iterable[int]) -> None:
        """Make the agents at these positions take the baseline action in the next step."""
        self.forced = {int(p) for p in positions}

    def _stream(self, i: int) -> np.random.Generator:
        return np.random.default_rng((self.root, self.t, i))

    def _decide_batch(self, kind: str, items: list[tuple[int, dict[str, Any]]],
                      streams: list[np.random.Generator]) -> list[Any]:
        """Decide a batch of independent (agent position, context) items; decisions in item order.

        Every item draws from its agent's stream in item order (the offline policy's draws, or the
        request seed sent to the backend), so batching never changes an agent's random numbers.
        """
        schema = PostDecision if kind == "post" else InteractDecision
        self.n_decisions += len(items)
        if self.backend is None:
            self.usage.add(decisions=len(items))
            return [schema(**rule_policy(ctx, None, streams[i])) for i, ctx in items]
        requests = []
        for i, ctx in items:
            if kind == "post":
                msgs = post_messages(ctx["post_preference"], ctx["belief"])
            else:
                msgs = interact_messages(ctx["interaction_preference"], ctx["belief"], ctx["post_belief"],
                                         ctx["views"], ctx["likes"], ctx["dislikes"])
            requests.append({"messages": msgs, "schema": schema, "context": ctx,
                             "seed": int(streams[i].integers(2**31)), "scope": self.scope})
        from aumann.simulators.llm.backend import is_abstention

        out = []
        for dec in decide_all(self.backend, requests, return_exceptions=True):
            if isinstance(dec, BaseException) and is_abstention(dec):
                self.llm_errors += 1
                dec = schema(**ABSTAIN[kind])
            elif isinstance(dec, BaseException):
                raise dec
            out.append(dec if isinstance(dec, schema) else schema.model_validate(dec))
        return out

    def _interact_context(self, a: SocialAgent, post: dict[str, float]) -> dict[str, Any]:
        return {"kind": "interact", "interaction_preference": a.interaction_preference, "belief": a.belief,
                "post_belief": post["belief"], "views": post["views"], "likes": post["likes"],
                "dislikes": post["dislikes"], "like_radius": self.config.like_radius}

    @staticmethod
    def _apply_reaction(a: SocialAgent, post: dict[str, float], dec: Any) -> None:
        if dec.interact and dec.action in ("like", "dislike"):
            post["likes" if dec.action == "like" else "dislikes"] += 1
            if dec.action == "like":
                a.likes += 1
            else:
                a.dislikes += 1
            a.react(post["belief"], dec.action)

    # ------------------------------------------------------------------ one step
    def step(self) -> None:
        cfg = self.config
        agents = self.people
        n = len(agents)
        streams = [self._stream(i) for i in range(n)]
        for i, a in enumerate(agents):
            a.reset_counters()
            if i in self.forced:
                a.set_belief(0.0)
        # phase 1: post (independent decisions: one batch)
        posters = [i for i in range(n) if i not in self.forced]
        items = [(i, {"kind": "post", "post_preference": agents[i].post_preference, "belief": agents[i].belief})
                 for i in posters]
        posts: dict[int, dict[str, float]] = {}
        for i, dec in zip(posters, self._decide_batch("post", items, streams)):
            if dec.post:
                posts[i] = {"belief": agents[i].belief, "views": 0, "likes": 0, "dislikes": 0}
                agents[i].posted = 1
        trace: dict[str, list] = {"posts": sorted(posts), "views": []}
        self.last_trace = trace
        if not posts:
            for a in agents:
                a.post_boost = min(1.0, a.post_preference * cfg.silent_boost)
            self._end_step()
            return
        # phase 2: view sampling (for everyone, before anyone reacts)
        feeds: list[list[int]] = []
        for i in range(n):
            if i in self.forced:
                feeds.append([])
                continue
            cands = self.neighbours[i] if self.neighbours is not None else range(n)
            cands = [j for j in cands if j in posts and j != i]
            m = len(cands)
            if m == 0:
                feeds.append([])
                continue
            lo = max(1, math.ceil(cfg.min_view_ratio * m))
            hi = min(m, math.ceil(cfg.max_view_ratio * m))
            k = int(streams[i].integers(lo, hi + 1))
            feeds.append([int(x) for x in streams[i].permutation(np.asarray(cands))[:k]])
        # phase 3: react (sequential: waves of independent reactions; synchronous: one batch)
        pairs = [(i, j) for i in range(n) for j in feeds[i]]
        reactions: list[Any] = [None] * len(pairs)
        if cfg.interaction == "synchronous":
            items = [(i, self._interact_context(agents[i], posts[j])) for i, j in pairs]
            for k, ((i, j), dec) in enumerate(zip(pairs, self._decide_batch("interact", items, streams))):
                posts[j]["views"] += 1
                agents[i].views += 1
                self._apply_reaction(agents[i], posts[j], dec)
                reactions[k] = dec
        else:
            for wave in reaction_waves(pairs):
                items = []
                for k in wave:
                    i, j = pairs[k]
                    items.append((i, self._interact_context(agents[i], posts[j])))  # counters before this view
                    posts[j]["views"] += 1
                    agents[i].views += 1
                for k, dec in zip(wave, self._decide_batch("interact", items, streams)):
                    i, j = pairs[k]
                    self._apply_reaction(agents[i], posts[j], dec)
                    reactions[k] = dec
        trace["views"] = [(i, j, dec.action if dec is not None and dec.interact and dec.action in ("like", "dislike")
                           else None) for (i, j), dec in zip(pairs, reactions)]  # in sequential order
        # phase 4: author feedback
        for j, post in posts.items():
            if post["views"] > 0:
                a = agents[j]
                a.set_belief(a.belief * (1.0 + cfg.kappa * (post["likes"] - post["dislikes"]) / post["views"]))
        self._end_step()

    def _end_step(self) -> None:
        self.forced = set()
        self.t += 1

    @property
    def beliefs(self) -> np.ndarray:
        return np.array([a.belief for a in self.people])


__all__ = ["INVALID_REPLY", "SocialModel", "reaction_waves"]
