"""Prompts, the structured answer schema and the offline policy of MegaScale-Social.

One request = one archetype (or, in the fidelity check, one agent) at one step:

* **system** message: the platform rules, the topic and the persona card (identical for every key of
  a persona, so a vLLM prefix cache reuses it), plus the answer format;
* **user** message: the archetype's situation rendered as text — its view (stance bucket), how much it
  saw yesterday (volume bucket) and what that feed leaned towards (lean bucket) — and the message
  prototype trending on the platform. No step number and no run seed: equal situations are equal
  requests, so steps, seeds and counterfactual forks hit the response cache.

The answer (:class:`Decision`, a JSON object validated by pydantic; the OpenAI backend asks for it as
structured output) is ``post`` = P(write a post today), ``reshare`` = P(reshare a post seen),
``stance_shift`` ∈ [−1, 1] (toward endorsing (+) or debunking (−) the rumour).

:func:`offline_policy` answers the same requests without an LLM, deterministically, from the
numbers in the request's ``context`` and the persona's traits — the default "offline policy". Every
output of a run made with it says "offline policy".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

PROMPT_VERSION = "megascale-social/1"


class Decision(BaseModel):
    """The structured answer of one archetype (or agent) for one step."""

    post: float = Field(..., ge=0.0, le=1.0, description="probability of writing a post about the topic today")
    reshare: float = Field(..., ge=0.0, le=1.0, description="probability of resharing a post seen today")
    stance_shift: float = Field(..., ge=-1.0, le=1.0,
                                description="change of view: +1 strongly toward endorsing the claim, −1 strongly "
                                            "toward debunking it, 0 unchanged")


FORMAT = ('Answer with one JSON object and nothing else: {"post": <probability 0-1 that you write a post about the '
          'topic today>, "reshare": <probability 0-1 that you reshare one of the posts you see today>, '
          '"stance_shift": <number from -1 (you move strongly toward calling the claim false) to 1 (strongly toward '
          'believing and spreading it); 0 = your view does not change>}.')


def system_message(topic: str, card: str) -> str:
    return ("You are role-playing one user of a social-media platform in a research simulation of how a rumour "
            f"spreads. The topic everyone is discussing: {topic}.\nYour persona: {card}\nStay in character. "
            + FORMAT)


def stance_phrase(x: float) -> str:
    """The words for a view x ∈ [−1, 1] (the same in the per-agent and the archetype prompts)."""
    if x <= -0.6:
        return "you are convinced the claim is false and you actively debunk it"
    if x <= -0.2:
        return "you doubt the claim"
    if x < 0.2:
        return "you are undecided about the claim"
    if x < 0.6:
        return "you lean toward believing the claim"
    return "you are convinced the claim is true and want others to know"


def archetype_user_message(stance_label: str, volume_label: str, lean_label: str | None, trending_text: str) -> str:
    feed = f"Yesterday you saw {volume_label} about it from accounts you follow"
    feed += f", {lean_label}." if lean_label else "."
    return (f"Your current view: {stance_label}. {feed} Trending on the platform right now: \"{trending_text}\" "
            "What do you do today?")


def agent_user_message(belief: float, count: int, lean: float, trending_text: str) -> str:
    """The individual version (fidelity check): the agent's exact numbers instead of buckets."""
    feed = (f"Yesterday you saw {count} post(s) about it from accounts you follow; their average position was "
            f"{lean:+.2f} on a scale from -1 (the claim is false) to +1 (the claim is true)."
            if count > 0 else "Yesterday you saw no posts about it from accounts you follow.")
    return (f"Your current view is {belief:+.2f} on that scale ({stance_phrase(belief)}). {feed} Trending on the "
            f"platform right now: \"{trending_text}\" What do you do today?")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def offline_policy(context: Mapping[str, Any], schema: type[BaseModel], rng: Any) -> dict[str, float]:
    """The deterministic stand-in for the LLM: (persona traits, view, feed volume and lean, trending) → Decision.

    With b the view, v = log(1 + posts seen), L the feed's lean (0 when nothing was seen), (s_t, i_t)
    the trending prototype's stance and intensity:

    * post  = σ(activity + 1.5|b| + 0.35 v + 0.8 i_t · [sign(s_t) = sign(b)])
    * reshare = σ(resharing + 0.35 v + 1.2 (1 − |L − b|)) · [something was seen]
    * stance_shift = clip(susceptibility · sat(v) · ((1 − 2 contrarian) tanh(2(L − b)))
                          + 0.5 drift · b + 0.25 credulity + 0.3 i_t s_t (1 − |b|), −1, 1),  sat(v) = 1 − e^{−v}

    ``rng`` is unused (the policy is deterministic; the backend still hands one over).
    """
    tr = context["traits"]
    b = float(context["belief"])
    count = float(context["volume"])
    lean = float(context["lean"]) if count > 0 else 0.0
    s_t, i_t = float(context["trending_stance"]), float(context["trending_intensity"])
    v = math.log1p(max(count, 0.0))
    same_side = 1.0 if s_t * b > 0 else 0.0
    post = _sigmoid(tr["activity"] + 1.5 * abs(b) + 0.35 * v + 0.8 * i_t * same_side)
    reshare = _sigmoid(tr["resharing"] + 0.35 * v + 1.2 * (1.0 - abs(lean - b))) if count > 0 else 0.0
    social = (1.0 - 2.0 * tr["contrarian"]) * math.tanh(2.0 * (lean - b)) if count > 0 else 0.0
    shift = (tr["susceptibility"] * (1.0 - math.exp(-v)) * social + 0.5 * tr["drift"] * b
             + 0.25 * tr["credulity"] + 0.3 * i_t * s_t * (1.0 - abs(b)))
    return {"post": round(post, 6), "reshare": round(reshare, 6), "stance_shift": round(max(-1.0, min(1.0, shift)), 6)}


__all__ = ["FORMAT", "PROMPT_VERSION", "Decision", "agent_user_message", "archetype_user_message", "offline_policy",
           "stance_phrase", "system_message"]
