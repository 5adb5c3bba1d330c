"""Arguments of a method that the mode it runs in does not use are named in a warning (and in the provenance where
the closed form ran), never dropped without a word; they are not refused, so code that passed them keeps running."""

import warnings

import numpy as np
import pytest

from aumann.attribution import AumannShapley, Panel, attribute
from aumann.errors import UnusedArgumentWarning


@pytest.fixture
def panel(rng):
    return Panel(np.abs(rng.normal(size=(2, 12, 2))))


@pytest.mark.parametrize("given", [dict(steps=30), dict(steps=500), dict(rule="midpoint"), dict(power=4),
                                   dict(tol=1e-3), dict(tol=1e-3, max_steps=64), dict(memory_budget=2**20),
                                   dict(pooled_fast_path=False), dict(device="cpu")])
def test_path_arguments_with_closed_form_true_are_warned_of(given):
    """`AumannShapley(steps=500, closed_form=True)` computed the closed form and dropped steps (every path argument)
    without a word; now an UnusedArgumentWarning names it. `steps=30`, the default's value, given is given too."""
    name = next(iter(given))
    with pytest.warns(UnusedArgumentWarning, match=f"{name}=.*closed_form=True never computes"):
        AumannShapley(**given, closed_form=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedArgumentWarning)
        AumannShapley(**given, closed_form=False)  # the path integral reads them


def test_max_steps_without_tol_is_warned_of():
    """max_steps caps adaptive mode (tol) alone: `AumannShapley(steps=8, max_steps=16)` ran K = 8 and never read it."""
    with pytest.warns(UnusedArgumentWarning, match=r"max_steps=16 given but unused.*without tol"):
        AumannShapley(steps=8, max_steps=16)
    assert AumannShapley(steps=8, tol=1e-9, max_steps=16).max_steps == 16


def test_auto_picking_the_closed_form_names_the_path_arguments_given(panel):
    """`AumannShapley(steps=500, power=4, tol=1e-3)` on heat at the zero baseline used its closed form (closed_form
    =None) and dropped the three without a word; now an UnusedArgumentWarning names them and how to integrate, and
    the provenance records them under "unused". The numbers are those of the closed form, as before."""
    with pytest.warns(UnusedArgumentWarning, match=r"steps=500, power=4, tol=0\.001 given but unused.*'heat'.*"
                                                   r"closed_form=False"):
        res = attribute("heat", panel, method=AumannShapley(steps=500, power=4, tol=1e-3))
    assert res.provenance["closed_form"] is True
    assert res.provenance["unused"] == {"steps": 500, "power": 4.0, "tol": 0.001}
    np.testing.assert_array_equal(res.phi, attribute("heat", panel, method=AumannShapley()).phi)


def test_defaults_and_arguments_the_path_integral_uses_warn_of_nothing(panel):
    """Left at their defaults, or given where the path integral runs (closed_form=False, a baseline with no closed
    form, an indicator without one), the arguments are used: no warning, no "unused" in the provenance."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedArgumentWarning)
        runs = [attribute("heat", panel, method=AumannShapley()),
                attribute("heat", panel, method=AumannShapley(steps=8, closed_form=False)),
                attribute("heat", panel, method=AumannShapley(steps=8), baseline="mean")]
    assert [r.provenance.get("unused") for r in runs] == [None, None, None]
    assert [r.provenance["steps"] for r in runs] == [None, 8, 8]
