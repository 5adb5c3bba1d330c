"""What :func:`~aumann.simulators.llm.registry.register_backend` and its factories may hand over.

* A factory that returns its backend's class instead of an instance (``return Echo`` for ``return Echo()``) passed the
  ``decide`` check (a class has the function), and the run failed at the first decision with ``TypeError: decide()
  missing 1 required positional argument``. It is now a :class:`BackendFactoryError` naming the class.
* A name that starts with '-' is read by ``aumann run --backend -x`` as a flag (``--backend=-x`` works), and a name
  that reads like a registered one but differs by case or character width (``OFFLINE``, fullwidth ``ｏｆｆｌｉｎｅ``)
  was taken as a new name without a word. Both are still registered (they worked before), with a warning that says so.
"""

from __future__ import annotations

import unicodedata
import warnings

import pytest

from aumann.errors import AumannWarning, BackendFactoryError
from aumann.simulators.llm import registry
from aumann.simulators.llm.registry import BackendOptions, make_backend, register_backend


class Echo:
    def decide(self, messages, schema):
        return {"action": "stay"}


class Shared:
    """A backend as a class whose decide needs no instance (a classmethod): worked before, and still does."""

    @classmethod
    def decide(cls, messages, schema):
        return {"action": "stay"}


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))


def test_a_factory_that_returns_the_class_is_refused_naming_it():
    register_backend("echo-class", lambda options: Echo)
    with pytest.raises(BackendFactoryError, match=r"backend 'echo-class': its factory returned the class "
                                                  r"\S*test_llm_registry_names\.Echo, not an instance of it"):
        make_backend("echo-class", BackendOptions())  # was: returned Echo itself; decide() failed at the first call
    register_backend("echo", lambda options: Echo())
    assert isinstance(make_backend("echo", BackendOptions()), Echo)
    register_backend("shared", lambda options: Shared)
    assert make_backend("shared", BackendOptions()) is Shared


def _said(name: str) -> list[str]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        register_backend(name, lambda options: None)
    assert name in registry.backend_names()  # registered as before
    return [str(w.message) for w in got if issubclass(w.category, AumannWarning)]


def test_a_name_starting_with_a_dash_is_warned_of_and_registered():
    (said,) = _said("-x")
    assert said == ("backend name '-x' starts with '-': aumann run reads `--backend -x` as a flag; it is given as "
                    "`--backend=-x` (a name that starts with a letter or digit needs neither)")
    assert make_backend("-x") is None


@pytest.mark.parametrize(("name", "like"), [("OFFLINE", "offline"), ("ｏｆｆｌｉｎｅ", "offline"), ("OpenAI", "openai"),
                                            ("ｅｃｈｏ", None)])
def test_lookalike_names_are_warned_of_and_registered(name, like):
    said = " ".join(_said(name))
    if like is not None:
        assert (f"backend name {name!r} reads like the registered {like!r}: they differ only by case or character "
                "width, and are two backends") in said
    assert ("fullwidth or other compatibility characters" in said) == (unicodedata.normalize("NFKC", name) != name)


@pytest.mark.parametrize("name", ["echo", "my-llm_2", "café"])
def test_plain_names_are_registered_without_a_word(name):
    assert _said(name) == []
