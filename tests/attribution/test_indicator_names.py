"""Indicator names that read as a spec or a path are refused at register().

``indicators.get(name)`` (and ``--indicator``) looks a name up in the registry first and reads text with ':' as a
``package.module:attribute`` / ``path/file.py:attribute`` spec only when no indicator is registered under it. So
``register(g, name="my_file.py:f")`` used to succeed, and from then on ``get("my_file.py:f")`` returned g: the
file's f never ran (f = 42 everywhere, g = -1: get gave -1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aumann.attribution import indicators
from aumann.errors import IndicatorError


def _minus_one(z: torch.Tensor) -> torch.Tensor:
    return z.sum(dim=(-1, -2)) * 0 - 1.0


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(indicators, "_REGISTRY", dict(indicators._REGISTRY))
    return indicators


@pytest.mark.parametrize(("name", "chars"), [
    ("../x", "'/'"), ("a.py:f", "':'"), ("pkg.module:fn", "':'"), ("dir\\f.py:g", "':' and '\\\\\\\\'"),
], ids=["parent-path", "file-spec", "module-spec", "windows-path"])
def test_a_name_the_spec_loader_would_read_is_refused_naming_its_characters(registry, name, chars):
    before = registry.names()
    with pytest.raises(IndicatorError, match=rf"indicator name .* cannot be registered: it contains {chars}; "
                                             r"indicators.get\(\) and --indicator read text with ':' as a "):
        registry.register(_minus_one, name=name)
    assert registry.names() == before


def test_an_indicator_named_like_a_spec_by_its_own_name_is_refused(registry):
    class Odd(indicators.Lin):
        name = "pkg.module:odd"

    with pytest.raises(IndicatorError, match=r"'pkg\.module:odd' cannot be registered: it contains ':'"):
        registry.register(Odd)


def test_the_spec_keeps_loading_the_file(registry, tmp_path: Path):
    (tmp_path / "mine.py").write_text("def f(z):\n    return z.sum(dim=(-1, -2)) * 0 + 42.0\n")
    spec = f"{tmp_path / 'mine.py'}:f"
    with pytest.raises(IndicatorError):
        registry.register(_minus_one, name=spec)
    assert float(registry.get(spec)(torch.ones(3, 2))) == 42.0


def test_dotted_and_dashed_names_still_register(registry):
    registry.register(_minus_one, name="my-lab.wealth_gap")
    assert float(registry.get("my-lab.wealth_gap")(torch.ones(3, 2))) == -1.0
