"""Per-model prices (USD per million tokens) for cost estimates, caps and dry runs.

The defaults ship with the package (``prices.toml`` beside this module, read with
:mod:`importlib.resources`); :func:`load_prices` layers a user TOML of the same layout over them.
:func:`price_for` matches a model name exactly, then without a provider prefix (``openai/``), then
the longest listed name that the model starts with (dated variants such as
``gpt-4o-mini-2024-07-18``). Unknown models have no price (``None``): their cost is reported as 0
with a note, never guessed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from aumann import bounded
from aumann.errors import ConfigError
from aumann.simulators.llm.records import price_entry


@dataclass(frozen=True)
class Price:
    """USD per million input (prompt) and output (completion) tokens."""

    input: float
    output: float

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


def _parse(data: Mapping[str, Any], source: str) -> dict[str, Price]:
    models = data.get("models", {})
    if not isinstance(models, Mapping):
        raise ConfigError(f"price table {source}: [models] must be a table of model names")
    out: dict[str, Price] = {}
    for name, entry in models.items():
        e = price_entry(str(name), dict(entry) if isinstance(entry, Mapping) else entry, source)
        out[str(name)] = Price(float(e.input), float(e.output))
    return out


def default_prices() -> dict[str, Price]:
    """The packaged price table."""
    text = resources.files("aumann.simulators.llm").joinpath("prices.toml").read_text(encoding="utf-8")
    return _parse(bounded.loads_toml(text, what="prices.toml (packaged)"), "prices.toml (packaged)")


def load_prices(path: str | os.PathLike[str] | None = None) -> dict[str, Price]:
    """The packaged table with the entries of the TOML file ``path`` (if given) layered over it.

    Raises:
        ConfigError: the file is missing, not TOML, or has malformed entries (named).
    """
    table = default_prices()
    if path is not None:
        p = Path(path)
        if not p.is_file():  # a folder or /dev/zero was "does not exist"
            raise ConfigError(f"price table {str(p)!r} " + ("is not a regular file (a TOML file is expected)"
                                                              if p.exists() else "does not exist"))
        try:
            data = bounded.read_toml(p, what="price table", max_bytes=4 * 2**20)
        except OSError as exc:
            raise ConfigError(f"price table {str(p)!r} is not a readable TOML file: {exc}") from None
        table.update(_parse(data, repr(str(p))))
    return table


def price_for(model: str, table: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model`` (exact, then without a ``provider/`` prefix, then longest prefix), or None."""
    table = default_prices() if table is None else table
    for name in (model, model.rsplit("/", 1)[-1]):
        if name in table:
            return table[name]
    base = model.rsplit("/", 1)[-1]
    best = max((k for k in table if base.startswith(k + "-")), key=len, default=None)
    return table[best] if best is not None else None


__all__ = ["Price", "default_prices", "load_prices", "price_for"]
