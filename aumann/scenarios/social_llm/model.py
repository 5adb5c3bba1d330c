"""SocialLLM model: post, view, react, author feedback (spec §5), exposure on a seeded BA graph.

One step t, in this order:

1. **Post.** Each agent decides to post (backend or offline rule policy); a post carries its
   current belief. If nobody posts, every p is multiplied by ``silent_boost`` (clipped to 1) until
   that agent's belief next changes, and the step ends.
2. **View sampling.** Agent i's candidate feed is the posts of its graph neighbours
   (``network="ba"``) or of everybody else (``network="mixed"``, the predecessor's fully mixed feed);
   with m candidates it views k ~ U{max(1, ⌈r_min m⌉), …, min(m, ⌈r_max m⌉)} of them, in random order.
3. **React.** For each viewed post the agent likes, dislikes or ignores it; a like moves b toward
   the post, a dislike away from it, by s · μ · |b_post − b|, at once.
4. **Author feedback.** A post with V views, L likes and D dislikes rescales its author's belief,
   b ← clip(b (1 + κ (L − D)/V), −1, 1): approval amplifies |b|.

Deviations from the predecessor (its quirks, spec §12.5), each deliberate:

* no self-viewing (an agent's own post is never in its feed);
* the counters an agent sees are those before its own view is counted;
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

    # ------------------------------------------------------------------ helpers
    def force_baseline(self, positions: Iterable[int]) -> None:
        """Make the agents at these positions take the baseline action in the next step."""
        self.forced = {int(p) for p in positions}

    def _stream(self, i: int) -> np.random.Generator:
        return np.random.default_rng((self.root, self.t, i))

    def _decide(self, kind: str, agent_rng: np.random.Generator, context: dict[str, Any]) -> Any:
        self.n_decisions += 1
        if self.backend is None:
            out = rule_policy(context, None, agent_rng)
            return PostDecision(**out) if kind == "post" else InteractDecision(**out)
        if kind == "post":
            msgs, schema = post_messages(context["post_preference"], context["belief"]), PostDecision
        else:
            msgs = interact_messages(context["interaction_preference"], context["belief"], context["post_belief"],
                                     context["views"], context["likes"], context["dislikes"])
            schema = InteractDecision
        out = self.backend.decide(msgs, schema, context=context, seed=int(agent_rng.integers(2**31)))
        return out if isinstance(out, schema) else schema.model_validate(out)

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
        # phase 1: post
        posts: dict[int, dict[str, float]] = {}
        for i, a in enumerate(agents):
            if i in self.forced:
                continue
            ctx = {"kind": "post", "post_preference": a.post_preference, "belief": a.belief}
            if self._decide("post", streams[i], ctx).post:
                posts[i] = {"belief": a.belief, "views": 0, "likes": 0, "dislikes": 0}
                a.posted = 1
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
        # phase 3: react
        for i, a in enumerate(agents):
            for j in feeds[i]:
                post = posts[j]
                ctx = {"kind": "interact", "interaction_preference": a.interaction_preference, "belief": a.belief,
                       "post_belief": post["belief"], "views": post["views"], "likes": post["likes"],
                       "dislikes": post["dislikes"], "like_radius": cfg.like_radius}
                post["views"] += 1
                a.views += 1
                dec = self._decide("interact", streams[i], ctx)
                acted = dec.interact and dec.action in ("like", "dislike")
                trace["views"].append((i, j, dec.action if acted else None))
                if acted:
                    post["likes" if dec.action == "like" else "dislikes"] += 1
                    if dec.action == "like":
                        a.likes += 1
                    else:
                        a.dislikes += 1
                    a.react(post["belief"], dec.action)
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


__all__ = ["SocialModel"]
