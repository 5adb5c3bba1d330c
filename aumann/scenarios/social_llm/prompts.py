"""SocialLLM prompts and the JSON decisions an LLM (or the offline policy) returns.

The prompts carry the same information as the predecessor's (spec §7): the post prompt shows the
post preference and the belief with its verbal stance label; the interaction prompt shows the
interaction preference, the agent's belief and label, the post's belief and label, and the post's
counters. One deliberate difference: the counters shown are those *before* this view is counted
(the predecessor showed them after, contradicting its own comment).

Replies are JSON validated by pydantic: :class:`PostDecision` ``{"post": bool}`` and
:class:`InteractDecision` ``{"interact": bool, "action": "like" | "dislike" | null}``. ``post`` and
``interact`` are required -- no default can be satisfied by a non-answer (``{}``, or the JSON schema
copied back); ``interact`` true without an action counts as no interaction, and an unknown action
string is refused as lossy (it would otherwise be coerced to ``null``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

SYSTEM = ("You are a helpful assistant that makes posting and interaction decisions for a social-media user. "
          "Reply with a single JSON object only.")


class PostDecision(BaseModel):
    """Whether to post this step."""

    model_config = ConfigDict(extra="ignore")

    post: bool


class InteractDecision(BaseModel):
    """How to react to one viewed post."""

    model_config = ConfigDict(extra="ignore")

    interact: bool
    action: Literal["like", "dislike"] | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _normalise(cls, v: Any) -> str | None:
        if isinstance(v, str) and v.strip().lower() in ("like", "dislike"):
            return v.strip().lower()
        return None

    @model_validator(mode="after")
    def _consistent(self) -> InteractDecision:
        if not self.interact or self.action is None:
            self.interact = False
            self.action = None
        return self


def stance_label(b: float) -> str:
    """The predecessor's verbal stance label for a belief b ∈ [−1, 1]."""
    if b < -0.7:
        return "strongly left-leaning"
    if b < -0.3:
        return "left-leaning"
    if b < 0.3:
        return "neutral (centrist)"
    if b < 0.7:
        return "right-leaning"
    return "strongly right-leaning"


def post_messages(post_preference: float, belief: float) -> list[dict[str, str]]:
    """Chat messages asking whether to post."""
    user = (f"Your post preference is {post_preference:.2f} (0 = never post, 1 = always post).\n"
            f"Your current belief is {belief:.2f} ({stance_label(belief)}) on a scale from -1 (left) to 1 (right).\n"
            "Decide whether to publish a post expressing your belief this round.\n"
            'Answer with JSON: {"post": true} or {"post": false}.')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def interact_messages(interaction_preference: float, belief: float, post_belief: float, views: int, likes: int,
                      dislikes: int) -> list[dict[str, str]]:
    """Chat messages asking how to react to one post."""
    user = (f"Your interaction preference is {interaction_preference:.2f} (0 = never interact, 1 = always).\n"
            f"Your current belief is {belief:.2f} ({stance_label(belief)}).\n"
            f"You see a post expressing the belief {post_belief:.2f} ({stance_label(post_belief)}). "
            f"Before you, it had {views} views, {likes} likes and {dislikes} dislikes.\n"
            "Like it if you agree, dislike it if you disagree, or do not interact.\n"
            'Answer with JSON: {"interact": true, "action": "like"}, {"interact": true, "action": "dislike"} '
            'or {"interact": false, "action": null}.')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


__all__ = ["InteractDecision", "PostDecision", "interact_messages", "post_messages", "stance_label"]
