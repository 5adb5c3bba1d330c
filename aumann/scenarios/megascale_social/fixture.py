"""The MegaScale-Social fixture: persona cards and message prototypes (``fixture.json``, committed).

**How the committed fixture was made.** No LLM (no GPU, no API key) was available when it was
written, so ``fixture.json`` comes from the **offline generator** :func:`generate_fixture` (seed 0):
16 hand-written persona cards (name, one-paragraph description = the system-prompt card an LLM sees)
with population shares following a Zipf law (exponent 0.8), plus numeric *traits* drawn from a seeded
generator in ranges chosen per persona; and 8 hand-written message prototypes (4 stances × calm /
inflammatory) about one unverified rumour. The traits are read **only by the offline policy** (the
stand-in for the LLM); a real LLM reads the card text and the prototypes. The file's ``generator``
field says all this. ``python -m aumann.scenarios.megascale_social.fixture`` regenerates it bit for
bit. A fixture written by an LLM can replace it (``fixture = "path.json"`` in the config) as long as
it validates against :class:`Fixture` (the same fields); a different fixture changes every prompt
and therefore every cache key.

Topic: an unverified rumour that the city's tap water is contaminated. An agent's ``belief`` in
[−1, 1] runs from "it is false and I debunk it" (−1) to "it is true and I spread it" (+1); the risky
stance is endorsement (belief above the indicator's threshold θ).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError

FIXTURE_PATH = Path(__file__).with_name("fixture.json")
TOPIC = ("an unverified rumour that the city's tap water is contaminated after a chemical spill "
         "(officials say tests are clean)")


class Traits(BaseModel):
    """What the offline policy reads (an LLM reads the card text instead)."""

    activity: float = Field(..., ge=-6, le=3, description="base log-odds of posting on a given day")
    resharing: float = Field(..., ge=-6, le=3, description="base log-odds of resharing a post seen")
    susceptibility: float = Field(..., ge=0, le=1, description="how far agreeing or opposing posts move the view")
    contrarian: float = Field(..., ge=0, le=1, description="share of the reaction that pushes against the feed")
    drift: float = Field(..., ge=-1, le=1, description="tendency to harden (+) or soften (−) the own view")
    credulity: float = Field(..., ge=-1, le=1, description="pull toward endorsing (+) or doubting (−) the rumour")
    belief_mean: float = Field(..., ge=-1, le=1, description="mean initial view")
    belief_sd: float = Field(..., gt=0, le=1, description="spread of the initial view")


class Persona(BaseModel):
    name: str
    card: str = Field(..., min_length=1, description="the persona card shown to the LLM (system message)")
    share: float = Field(..., gt=0, description="population share (normalised over personas)")
    traits: Traits


class Prototype(BaseModel):
    id: int = Field(..., ge=0)
    stance: float = Field(..., ge=-1, le=1)
    intensity: float = Field(..., ge=0, le=1)
    text: str = Field(..., min_length=1)


class Fixture(BaseModel):
    generator: str
    topic: str
    personas: list[Persona] = Field(..., min_length=1, max_length=64)
    prototypes: list[Prototype] = Field(..., min_length=1)


# name, card, (activity, resharing, susceptibility, contrarian, drift, credulity, belief_mean, belief_sd) ranges
_PERSONAS: list[tuple[str, str]] = [
    ("lurker", "You mostly scroll and rarely post. You read a lot but keep your opinions to yourself unless "
               "something really worries you."),
    ("worried parent", "You have two young children and worry about anything that could affect their health. "
                       "You share warnings with other parents quickly, just in case."),
    ("local journalist", "You report on city affairs for a local outlet. You want sources before you repeat a "
                         "claim, and you correct rumours publicly."),
    ("retired engineer", "You worked in water treatment for thirty years. You trust measurements, explain "
                         "technical details patiently and distrust panic."),
    ("wellness influencer", "You have a large following for natural-health content. You distrust official "
                            "statements and like content that confirms your audience's fears."),
    ("student", "You are a university student, online all day, quick to react, share memes and follow what "
                "your friends post."),
    ("city official", "You work for the city administration. You post official updates and try to calm "
                      "people down with facts."),
    ("conspiracy enthusiast", "You believe authorities routinely hide dangers from the public. Official denials "
                              "make you more suspicious, not less."),
    ("nurse", "You work night shifts at the hospital. You care about public health, are careful with medical "
              "claims, and warn people when you think it matters."),
    ("small business owner", "You run a café downtown. A water scare would hurt your business, so you watch "
                             "the discussion closely and push back on exaggeration."),
    ("activist", "You campaign for environmental justice. You suspect industry negligence and amplify reports "
                 "that hold companies accountable."),
    ("sceptic", "You question everything, including the rumour itself. You ask for evidence and enjoy "
                "debunking viral claims."),
    ("elderly resident", "You are retired and new to social media. You trust what friends and family share "
                         "and worry about your health."),
    ("tech worker", "You work in software, post about data and like to check claims against open data sets "
                    "before taking a side."),
    ("meme account", "You run a humour account. You post whatever is trending, often exaggerated, for "
                     "engagement rather than conviction."),
    ("community organiser", "You coordinate a neighbourhood group. You relay information to many people and "
                            "try to keep them both safe and calm."),
]
_RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    # activity, resharing, susceptibility, contrarian, drift, credulity, belief_mean, belief_sd
    "lurker": ((-4.0, -3.2), (-3.0, -2.2), (0.2, 0.4), (0.0, 0.1), (-0.1, 0.1), (-0.1, 0.1), (-0.1, 0.1),
               (0.3, 0.4)),
    "worried parent": ((-2.0, -1.4), (-0.8, -0.2), (0.5, 0.7), (0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.1, 0.3),
                       (0.3, 0.4)),
    "local journalist": ((-1.2, -0.6), (-1.5, -1.0), (0.2, 0.3), (0.0, 0.1), (-0.3, -0.1), (-0.4, -0.2),
                         (-0.3, -0.1), (0.2, 0.3)),
    "retired engineer": ((-2.2, -1.6), (-2.5, -1.8), (0.1, 0.2), (0.0, 0.1), (-0.3, -0.1), (-0.6, -0.4),
                         (-0.6, -0.4), (0.2, 0.3)),
    "wellness influencer": ((-0.6, 0.0), (-1.0, -0.5), (0.3, 0.5), (0.2, 0.3), (0.2, 0.4), (0.5, 0.7),
                            (0.3, 0.5), (0.2, 0.3)),
    "student": ((-1.4, -0.8), (-0.6, 0.0), (0.6, 0.8), (0.0, 0.1), (0.0, 0.2), (0.0, 0.2), (-0.1, 0.1),
                (0.3, 0.45)),
    "city official": ((-1.6, -1.0), (-2.5, -2.0), (0.0, 0.1), (0.0, 0.1), (-0.5, -0.3), (-0.9, -0.7),
                      (-0.8, -0.6), (0.1, 0.2)),
    "conspiracy enthusiast": ((-1.0, -0.4), (-0.5, 0.0), (0.2, 0.4), (0.6, 0.8), (0.3, 0.5), (0.7, 0.9),
                              (0.5, 0.7), (0.2, 0.3)),
    "nurse": ((-2.4, -1.8), (-1.8, -1.2), (0.3, 0.4), (0.0, 0.1), (-0.1, 0.1), (-0.2, 0.0), (-0.2, 0.0),
              (0.3, 0.4)),
    "small business owner": ((-2.0, -1.5), (-2.0, -1.5), (0.2, 0.3), (0.1, 0.2), (-0.3, -0.1), (-0.5, -0.3),
                             (-0.4, -0.2), (0.2, 0.3)),
    "activist": ((-1.2, -0.6), (-0.8, -0.3), (0.3, 0.5), (0.1, 0.2), (0.2, 0.4), (0.3, 0.5), (0.2, 0.4),
                 (0.25, 0.35)),
    "sceptic": ((-1.8, -1.2), (-2.0, -1.4), (0.1, 0.2), (0.4, 0.6), (0.0, 0.2), (-0.6, -0.4), (-0.5, -0.3),
                (0.2, 0.3)),
    "elderly resident": ((-3.0, -2.4), (-1.0, -0.5), (0.6, 0.8), (0.0, 0.1), (0.0, 0.2), (0.2, 0.4), (0.0, 0.2),
                         (0.3, 0.4)),
    "tech worker": ((-2.2, -1.6), (-2.2, -1.6), (0.2, 0.3), (0.1, 0.2), (-0.2, 0.0), (-0.4, -0.2), (-0.3, -0.1),
                    (0.2, 0.3)),
    "meme account": ((-0.4, 0.2), (-0.2, 0.4), (0.5, 0.7), (0.0, 0.1), (0.1, 0.3), (0.1, 0.3), (0.0, 0.2),
                     (0.4, 0.5)),
    "community organiser": ((-1.4, -0.8), (-1.0, -0.5), (0.3, 0.5), (0.0, 0.1), (-0.1, 0.1), (0.0, 0.2),
                            (0.0, 0.2), (0.25, 0.35)),
}
_PROTOTYPES: list[tuple[float, float, str]] = [
    (-0.8, 0.2, "Official lab results for all districts are online: the tap water is clean. Please stop "
                "sharing the contamination story."),
    (-0.8, 0.9, "STOP spreading this garbage. The 'poisoned water' story is a hoax and whoever started it "
                "should be ashamed."),
    (-0.3, 0.2, "Has anyone seen an actual source for the water rumour? Everything I find points back to one "
                "anonymous post."),
    (-0.3, 0.8, "Every week a new panic. The water thing is probably nonsense, people just love drama."),
    (0.3, 0.2, "Not saying it's true, but I'm boiling our water for a few days until the city explains that "
               "smell."),
    (0.3, 0.8, "Why is nobody talking about the water?? My neighbours are getting sick. Something is off."),
    (0.8, 0.2, "A friend who works near the plant says the spill was worse than reported. Avoid tap water "
               "for now and tell your family."),
    (0.8, 0.9, "THEY ARE POISONING US. The spill is in the tap water and the city is covering it up. "
               "SHARE BEFORE THEY DELETE THIS."),
]
_ZIPF = 0.8
_QUIETER = 1.2  # shift of the activity and resharing log-odds below the ranges above


def generate_fixture(seed: int = 0) -> dict[str, Any]:
    """The offline fixture as a dict (deterministic in ``seed``; see the module docstring)."""
    rng = np.random.default_rng(seed)
    names = [n for n, _ in _PERSONAS]
    weights = 1.0 / np.arange(1, len(names) + 1) ** _ZIPF
    weights /= weights.sum()
    keys = ("activity", "resharing", "susceptibility", "contrarian", "drift", "credulity", "belief_mean",
            "belief_sd")
    personas = []
    for (name, card), share in zip(_PERSONAS, weights):
        traits = {k: round(float(rng.uniform(lo, hi)), 3) for k, (lo, hi) in zip(keys, _RANGES[name])}
        traits["activity"] = round(traits["activity"] - _QUIETER, 3)  # about 1 post in 10 agent-days overall
        traits["resharing"] = round(traits["resharing"] - _QUIETER, 3)
        personas.append({"name": name, "card": card, "share": round(float(share), 6), "traits": traits})
    prototypes = [{"id": i, "stance": s, "intensity": it, "text": text} for i, (s, it, text) in enumerate(_PROTOTYPES)]
    return {"generator": (f"aumann.scenarios.megascale_social.fixture.generate_fixture(seed={seed}): hand-written "
                          "cards and prototypes, seeded numeric traits for the offline policy; offline, NOT "
                          "written by an LLM"),
            "topic": TOPIC, "personas": personas, "prototypes": prototypes}


def load_fixture(path: str | Path | None = None) -> Fixture:
    """The validated fixture (the committed ``fixture.json`` by default).

    Raises:
        ConfigError: the file cannot be read or does not validate (the message names the file and field).
    """
    from aumann.errors import ConfigError

    src = Path(path) if path is not None else FIXTURE_PATH
    from aumann.bounded import read_json

    data = read_json(src, what="the MegaScale-Social fixture", error=ConfigError, max_bytes=64 * 2**20)
    try:
        fx = Fixture.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise ConfigError(f"fixture {str(src)!r} is invalid at {where}: {err['msg']}") from None
    ids = sorted(p.id for p in fx.prototypes)
    if ids != list(range(len(fx.prototypes))):
        raise ConfigError(f"fixture {str(src)!r}: prototype ids must be 0 … {len(ids) - 1}, each once")
    return fx


if __name__ == "__main__":  # regenerate the committed fixture
    FIXTURE_PATH.write_text(json.dumps(generate_fixture(0), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
