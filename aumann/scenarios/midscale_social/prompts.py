"""Prompts and schemas for generating the MidScale-Social fixture with an LLM.

With ``--backend openai`` the model asks the LLM, once per run and through the backend's cache,
for the personas, stances and message prototypes (the schema below, the same fields as the committed
offline fixture, see :mod:`aumann.scenarios.midscale_social.fixture`). The propagation afterwards is
deterministic; the LLM is never asked per agent or per step.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Persona(BaseModel):
    name: str
    description: str = ""
    post_logit: float = Field(..., ge=-4.0, le=2.0)
    reshare_rate: float = Field(..., gt=0.0, lt=1.0)
    susceptibility: float = Field(..., gt=0.0, lt=1.0)
    credibility: float = Field(..., gt=0.0, le=5.0)


class Stance(BaseModel):
    label: str
    center: float = Field(..., ge=-1.0, le=1.0)
    spread: float = Field(..., gt=0.0, le=0.5)


class Prototype(BaseModel):
    id: int
    intensity: float = Field(..., ge=0.0, le=1.0)
    text: str = ""


class FixtureSpec(BaseModel):
    """What the LLM returns: the fixture's three lists."""

    personas: list[Persona] = Field(..., min_length=1)
    stances: list[Stance] = Field(..., min_length=1)
    prototypes: list[Prototype] = Field(..., min_length=1)


def fixture_messages(n_personas: int = 8, n_stances: int = 5, n_prototypes: int = 10) -> list[dict[str, str]]:
    """Chat messages asking for a fixture as one JSON object."""
    user = (
        "Design a synthetic social-media population debating one policy proposal.\n"
        f"Return JSON with keys personas ({n_personas} items: name, description, post_logit in [-4, 2] = "
        "log-odds of posting on a given day, reshare_rate in (0, 1), susceptibility in (0, 1) = how easily "
        "persuaded, credibility in (0, 5] = how much others trust them), "
        f"stances ({n_stances} items: label, center in [-1, 1] = position from against to in favour, spread in "
        f"(0, 0.5]) and prototypes ({n_prototypes} items: id, intensity in [0, 1] = how inflammatory, text = an "
        "example message). JSON only."
    )
    return [{"role": "system", "content": "You generate simulation fixtures. Reply with one JSON object only."},
            {"role": "user", "content": user}]


__all__ = ["FixtureSpec", "Persona", "Prototype", "Stance", "fixture_messages"]
