"""User scenarios by spec (``package.module:attribute``, ``path/file.py:attribute``) and by entry point
(group ``aumann.scenarios``), as ``aumann run`` and ``aumann run --list`` see them."""

from __future__ import annotations

import sys
import textwrap

import pytest

from aumann import scenarios
from aumann.errors import ConfigError, ScenarioLoadError, UnknownScenarioError
from tests.cli_run import invoke_run as _invoke

SCENARIO_SOURCE = textwrap.dedent('''
    from aumann.scenarios import get
    from dataclasses import replace

    scenario = replace(get("social-llm"), name="{name}", description="{name}: a user scenario")

    def make():
        return scenario

    not_a_scenario = 42

    def broken():
        raise RuntimeError("no model today")
''')


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A package ``mymodels`` in a temporary working directory that is not on sys.path."""
    pkg = tmp_path / "mymodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "econ.py").write_text(SCENARIO_SOURCE.format(name="my-econ"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for mod in [m for m in sys.modules if m.startswith("mymodels")]:
        monkeypatch.delitem(sys.modules, mod)
    return tmp_path


def test_module_spec_resolves_from_the_working_directory(user_package):
    sc = scenarios.get("mymodels.econ:scenario")
    assert sc.name == "my-econ"
    assert scenarios.load("mymodels.econ:make") is sc  # a factory returning a Scenario


def test_file_spec(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(SCENARIO_SOURCE.format(name="my-file-model"))
    assert scenarios.get(f"{path}:scenario").name == "my-file-model"
    assert scenarios.get(f"{path}:make").name == "my-file-model"


@pytest.mark.parametrize(("spec", "message"), [
    ("mymodels.nowhere:scenario", r"cannot import module 'mymodels.nowhere'"),
    ("mymodels.econ:missing", r"has no attribute 'missing'; Scenario objects there: \['scenario'\]"),
    ("mymodels.econ:not_a_scenario", r"names a int; it must name a Scenario"),
    ("mymodels.econ:broken", r"the factory raised RuntimeError: no model today"),
    ("no/such/file.py:scenario", r"no such file"),
    ("mymodels.econ:", r"must look like package.module:attribute"),
])
def test_bad_specs_are_typed_and_name_the_spec(user_package, spec, message):
    with pytest.raises(ScenarioLoadError, match=message) as err:
        scenarios.get(spec)
    assert repr(spec) in str(err.value)
    assert isinstance(err.value, ConfigError)  # the CLI prints one line and exits 2


def test_unknown_name_lists_what_there_is():
    with pytest.raises(UnknownScenarioError, match=r"registered scenarios: .*social-llm.*module:attribute"):
        scenarios.get("nope")


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A distribution exposing two entry points in the group aumann.scenarios (one broken)."""
    (tmp_path / "plugin_models.py").write_text(SCENARIO_SOURCE.format(name="plugged"))
    info = tmp_path / "plugin_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-models\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[aumann.scenarios]\nplugged = plugin_models:scenario\nbroken-plugin = plugin_models:broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_points_join_names_get_and_the_list(installed, capsys):
    assert {"plugged", "broken-plugin", "social-llm"} <= set(scenarios.names())
    assert scenarios.get("plugged").name == "plugged"
    with pytest.raises(ScenarioLoadError, match="no model today"):
        scenarios.get("broken-plugin")
    assert _invoke("--list") == 0
    listed = dict(line.split("\t", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert listed["plugged"] == "plugged: a user scenario"
    assert listed["broken-plugin"].startswith("[cannot load:")
    assert "EconAgent" in listed["econagent"]


def test_run_needs_a_scenario_or_list():
    with pytest.raises(ConfigError, match="needs a scenario"):
        _invoke()


def test_run_a_module_spec_end_to_end(user_package, capsys):
    out = user_package / "out"
    assert _invoke("mymodels.econ:scenario", "--runs", "1", "--agents", "6", "--steps", "4", "--set",
                   "study.permutations=10", "--no-ablations", "--no-plots", "--out", str(out)) == 0
    assert (out / "faithfulness.csv").is_file() and (out / "report.md").is_file()
    assert "my-econ: 1 run(s) computed" in capsys.readouterr().err.replace("\n", " ")


CONFIG_SOURCE = textwrap.dedent('''
    from dataclasses import replace

    from aumann.scenarios import ScenarioConfig, get

    class Config(ScenarioConfig):  # its own defaults replace the fields and with them their ge bounds
        agents: int = 6
        steps: int = 4
        runs: int = 2
        seed: int = 3

    scenario = replace(get("social-llm"), name="own-defaults", config_model=Config, config_file=None)
''')


@pytest.mark.parametrize(("key", "value", "low"), [("runs", 0, 1), ("runs", -3, 1), ("agents", 1, 2),
                                                   ("steps", 0, 2), ("seed", -1, 0)])
def test_a_scenario_file_whose_config_sets_its_own_defaults_keeps_the_bounds(tmp_path, key, value, low):
    """``aumann run file.py:scenario --set runs=0`` ran nothing and reported success where the built-ins refuse
    runs=0: a config class that gives runs a default of its own drops the base field's ``ge=1``."""
    path = tmp_path / "own.py"
    path.write_text(CONFIG_SOURCE)
    with pytest.raises(ConfigError, match=rf"invalid config for scenario 'own-defaults': {key}: Input should be "
                                          rf"greater than or equal to {low}"):
        _invoke(f"{path}:scenario", "--set", f"{key}={value}", "--out", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    assert scenarios.get(f"{path}:scenario").load_config(runs=1).runs == 1


@pytest.mark.parametrize("ep_name", ["midscale-social", "Midscale_Social"])
def test_an_entry_point_named_like_a_built_in_is_not_hidden_silently(tmp_path, monkeypatch, capsys, ep_name):
    """An installed plugin whose entry point is named ``midscale-social`` (or ``Midscale_Social``, the same name
    normalised) was silently never run: the name ran the built-in, and ``--list`` did not show the plugin. The
    name still runs the built-in (a plugin cannot replace it unnoticed), with a ScenarioShadowWarning naming the
    entry point and its spec; ``--list`` lists it by that spec, with the note."""
    import warnings

    from aumann.errors import ScenarioShadowWarning

    (tmp_path / "shadow_models.py").write_text(SCENARIO_SOURCE.format(name="shadow"))
    info = tmp_path / "shadow_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow-models\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[aumann.scenarios]\n{ep_name} = shadow_models:scenario\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(ScenarioShadowWarning, match=rf"entry point '{ep_name}' = 'shadow_models:scenario'.*hidden by "
                                                    r"the built-in scenario 'midscale-social'.*aumann run "
                                                    r"shadow_models:scenario"):
        assert scenarios.get("midscale-social").name == "midscale-social"
    assert scenarios.get("shadow_models:scenario").name == "shadow"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # listing warns nothing: the note is in the list
        assert _invoke("--list") == 0
    listed = dict(line.split("\t", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert "hidden by the built-in scenario 'midscale-social'" in listed["shadow_models:scenario"]
    assert "mid" in listed["midscale-social"].lower()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an entry point of its own name is no shadow
        assert "plugged" not in scenarios.names() and scenarios.get("social-llm").name == "social-llm"


OFFLINE_SOURCE = textwrap.dedent('''
    from dataclasses import replace

    from aumann.scenarios import get

    def forgot_to_return():
        get("social-llm").offline_backend()

    def broken():
        raise RuntimeError("policy weights missing")

    none = replace(get("social-llm"), name="no-stand-in", offline_backend=forgot_to_return)
    raises = replace(get("social-llm"), name="broken-stand-in", offline_backend=broken)
''')


@pytest.mark.parametrize(("attr", "says"), [
    ("none", r"scenario 'no-stand-in': offline_backend\(\) returned None; it must return a decision backend"),
    ("raises", r"scenario 'broken-stand-in': offline_backend\(\) raised RuntimeError: policy weights missing"),
])
def test_a_dry_run_whose_offline_policy_is_missing_sends_nothing(tmp_path, monkeypatch, attr, says):
    """``aumann run --backend openai --dry-run`` with a scenario whose offline_backend() returned None (a forgotten
    return) read the None stand-in as "not a dry run" and sent every request to the server (27 for social-llm at
    4 agents × 2 steps); one that raised came out as a bare traceback. Both are a ScenarioCodeError naming the
    scenario, before any request."""
    from aumann.errors import ScenarioCodeError
    from tests.llm_loopback import LoopbackLLM

    path = tmp_path / "stand_in.py"
    path.write_text(OFFLINE_SOURCE)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LoopbackLLM() as srv:
        with pytest.raises(ScenarioCodeError, match=says):
            _invoke(f"{path}:{attr}", "--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--dry-run",
                    "--runs", "1", "--agents", "4", "--steps", "2", "--no-ablations", "--no-plots",
                    "--out", str(tmp_path / "out"))
        assert srv.stats()["requests"] == 0


def test_two_installed_entry_points_of_one_name_say_which_runs(tmp_path, monkeypatch, capsys):
    """Two installed packages naming a scenario alike (``my-model`` and ``My_Model``, one name normalised): one of
    them was silently never run nor listed. The name runs the one it ran before, with a ScenarioShadowWarning
    naming the other and its spec; ``--list`` lists the other by that spec."""
    from aumann.errors import ScenarioShadowWarning

    for pkg, ep_name, scenario in (("twin_a", "my-model", "twin-a"), ("twin_b", "My_Model", "twin-b")):
        (tmp_path / f"{pkg}.py").write_text(SCENARIO_SOURCE.format(name=scenario))
        info = tmp_path / f"{pkg}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[aumann.scenarios]\n{ep_name} = {pkg}:scenario\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    says = r"entry point '(my-model|My_Model)' = 'twin_[ab]:scenario'.* is hidden by .*which the name 'my-model' runs"
    with pytest.warns(ScenarioShadowWarning, match=says + "; run it by its spec"):
        runs = scenarios.get("my-model").name
    hidden = {"twin-a": "twin_b", "twin-b": "twin_a"}[runs]
    assert _invoke("--list") == 0
    listed = dict(line.split("\t", 1) for line in capsys.readouterr().out.strip().splitlines())
    assert listed["my-model"] == f"{runs}: a user scenario"
    assert "which the name 'my-model' runs" in listed[f"{hidden}:scenario"]
    assert scenarios.get(f"{hidden}:scenario").name == {"twin_a": "twin-a", "twin_b": "twin-b"}[hidden]
