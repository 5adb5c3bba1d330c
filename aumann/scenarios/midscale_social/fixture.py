"""The MidScale-Social fixture: personas, stances and message prototypes.

The paper seeds MidScale-Social with "a small set of LLM-generated personas, stances and message
prototypes". No LLM was available when the committed fixture (``fixture.json``) was made, so it was
produced by the **offline generator** below, :func:`generate_fixture` (seed 0), and says so in its
``"generator"`` field. A fixture recorded from a real LLM can replace it as long as it has the same
fields; the propagation itself is deterministic given the fixture, the graph and the seed.

Fields:

* persona: ``post_logit`` (base posting propensity, logit), ``reshare_rate`` ∈ (0, 1),
  ``susceptibility`` ∈ (0, 1) (how far exposure moves the belief), ``credibility`` > 0 (scales the
  influence weight), ``description``;
* stance: ``center`` ∈ [−1, 1], ``spread`` > 0, ``label``;
* prototype: ``intensity`` ∈ [0, 1] (how much the message amplifies the author's stance),
  ``text`` (illustrative only; never parsed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

FIXTURE_PATH = Path(__file__).with_name("fixture.json")

_PERSONA_NAMES = ["lurker", "casual", "enthusiast", "activist", "pundit", "local-news", "skeptic", "influencer"]
_STANCES = [("strongly against", -0.75), ("against", -0.35), ("undecided", 0.0), ("in favour", 0.35),
            ("strongly in favour", 0.75)]
_TEMPLATES = ["Everyone should know: {s}.", "I can't believe people still deny that {s}.", "Quick thought: {s}?",
              "Thread: why {s} matters more than you think.", "Honestly, {s}. Change my mind."]


def generate_fixture(seed: int = 0) -> dict[str, Any]:
    """Deterministic offline stand-in for LLM-generated personas, stances and prototypes."""
    rng = np.random.default_rng(seed)
    personas = []
    for k, name in enumerate(_PERSONA_NAMES):
        personas.append({
            "name": name,
            "description": f"offline-generated persona #{k}: {name}",
            "post_logit": round(float(rng.uniform(-2.0, 0.5)), 3),
            "reshare_rate": round(float(rng.uniform(0.1, 0.7)), 3),
            "susceptibility": round(float(rng.uniform(0.2, 0.8)), 3),
            "credibility": round(float(rng.uniform(0.5, 2.0)), 3),
        })
    stances = [{"label": lab, "center": c, "spread": round(float(rng.uniform(0.1, 0.25)), 3)} for lab, c in _STANCES]
    prototypes = []
    for k in range(10):
        stance = _STANCES[k % len(_STANCES)][0]
        prototypes.append({"id": k, "intensity": round(float(rng.uniform(0.0, 1.0)), 3),
                           "text": _TEMPLATES[k % len(_TEMPLATES)].format(s=f"the proposal is {stance}")})
    return {"generator": f"aumann.scenarios.midscale_social.fixture.generate_fixture(seed={seed}) (offline; "
                         "not recorded from an LLM)",
            "personas": personas, "stances": stances, "prototypes": prototypes}


def load_fixture(path: str | Path | None = None) -> dict[str, Any]:
    """The fixture as a dict (the committed ``fixture.json`` by default)."""
    from aumann.errors import ConfigError

    src = Path(path) if path is not None else FIXTURE_PATH
    from aumann.bounded import read_json

    data = read_json(src, what="the MidScale-Social fixture", error=ConfigError, max_bytes=64 * 2**20)
    if not isinstance(data, dict):
        raise ConfigError(f"fixture {str(src)!r} must hold a JSON object; got {type(data).__name__}")
    for key in ("personas", "stances", "prototypes"):
        if not data.get(key):
            raise ConfigError(f"fixture {str(src)!r} has no {key!r}; it needs personas, stances and prototypes")
    return data


if __name__ == "__main__":  # regenerate the committed fixture
    FIXTURE_PATH.write_text(json.dumps(generate_fixture(0), indent=1) + "\n", encoding="utf-8")
