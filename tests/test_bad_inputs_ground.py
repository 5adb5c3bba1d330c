"""The ground floor's shared rules (issue 10): one path-name rule, one set of argument checks, config models that
refuse NaN/inf and booleans-for-numbers with a typed one-line error, atomic writes that name an unusable path,
JSON that never holds NaN, CSV cells that are plain numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import Field

from aumann import checks, configs, io, manifest, seeding
from aumann.data.synthetic import heavy_tailed_panel
from aumann.errors import ConfigError, MethodError, OutputError, UnsafeNameError

UNSAFE = ["", ".", "..", "../x", "../../../../etc/passwd", "/abs", "a/b", "a\\b", "C:x", "x\x00y", "tab\tx",
          "new\nline", " lead", "trail ", "dot.", "con", "NUL.txt", "com1", "x" * 201, "é" * 101, "a*b", "a?b",
          'a"b', "a<b", "a>b", "a|b", "\x7f"]


@pytest.mark.parametrize("name", UNSAFE, ids=repr)
def test_safe_component_refuses_every_escape_and_unportable_name(name):
    with pytest.raises(UnsafeNameError) as info:
        io.safe_component(name, "topic")
    assert "topic" in str(info.value)


@pytest.mark.parametrize("name", ["mythos", "trump-tariffs", "BIAS_visibility__100.json", "FULL.json", "run-000",
                                  "Ünïcödé", "a.b.c", "x" * 200])
def test_safe_component_keeps_ordinary_names(name):
    assert io.safe_component(name) == name


@pytest.mark.parametrize("name", [None, 3, b"bytes", Path("x")], ids=repr)
def test_safe_component_needs_a_string(name):
    with pytest.raises(UnsafeNameError, match="string"):
        io.safe_component(name, "scenario name")


def test_child_path_checks_every_component(tmp_path):
    assert io.child_path(tmp_path, "cells", "mythos") == tmp_path / "cells" / "mythos"
    with pytest.raises(UnsafeNameError, match=r"\.\./x"):
        io.child_path(tmp_path, "cells", "../x")


def test_ensure_output_dir_checks_before_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="existing file"):
        io.ensure_output_dir(tmp_path / "file", "--out")
    with pytest.raises(OutputError, match="existing file"):
        io.ensure_output_dir(tmp_path / "file" / "sub", "--out")
    assert io.ensure_output_dir(tmp_path / "new" / "deep").is_dir()
    assert isinstance(OutputError("x"), OSError) and isinstance(OutputError("x"), ConfigError)


def test_writes_into_an_existing_file_path_name_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="existing file"):
        io.write_json(tmp_path / "file" / "a.json", {"a": 1})
    with pytest.raises(OutputError, match="existing directory"):
        io.write_text(tmp_path, "x")
    with pytest.raises(OutputError, match="existing file"):
        manifest.write_manifest(tmp_path / "file", "x")


def test_json_never_holds_nan_and_refuses_objects(tmp_path):
    io.write_json(tmp_path / "a.json", {"x": float("nan"), "y": [np.float64(np.inf), np.float32(1.5)]})
    assert json.loads((tmp_path / "a.json").read_text(), parse_constant=pytest.fail) == {"x": None,
                                                                                       "y": [None, 1.5]}
    with pytest.raises(ConfigError, match="JSON"):
        io.write_json(tmp_path / "b.json", {"x": object()})


def test_csv_cells_are_plain_numbers(tmp_path):
    import pandas as pd

    rows = [{"a": np.float64(0.1), "b": np.int64(3), "c": float("nan"), "d": None, "e": np.float32(np.inf),
             "f": True, "g": "txt", "h": pd.NA}]
    io.write_csv(tmp_path / "t.csv", rows)
    assert (tmp_path / "t.csv").read_text() == "a,b,c,d,e,f,g,h\n0.1,3,,,,True,txt,\n"
    io.write_csv(tmp_path / "u.csv", pd.DataFrame({"x": [np.float64(1 / 3), np.nan], "y": ["a", "b"]}))
    text = (tmp_path / "u.csv").read_text()
    assert text == "x,y\n0.3333333333333333,a\n,b\n" and float(text.split("\n")[1].split(",")[0]) == 1 / 3


def test_record_checksum_survives_a_json_round_trip():
    rec = {"b": [1, 2.5, None], "a": {"x": 1e-300, "y": "é"}, "n": float("nan")}
    back = json.loads(io.dumps_json(rec))
    assert io.record_checksum(rec) == io.record_checksum(back)
    back["a"]["x"] = 2e-300
    assert io.record_checksum(rec) != io.record_checksum(back)


# ---------------------------------------------------------------------------------------------- checks
@pytest.mark.parametrize("value", [2.5, float("nan"), float("inf"), True, np.bool_(True), "3", None, [1], 1 + 2j],
                         ids=repr)
def test_as_int_refuses_non_integers(value):
    with pytest.raises(MethodError, match="steps"):
        checks.as_int(value, "steps")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True, "1.0", None, 1j], ids=repr)
def test_as_float_refuses_non_finite_and_non_numbers(value):
    with pytest.raises(MethodError, match="power"):
        checks.as_float(value, "power")


@pytest.mark.parametrize("value", ["abc", -1, 1.5, True, [-1], object(), np.float64(3.0)],
                         ids=lambda v: "object()" if type(v) is object else repr(v))  # one id in every xdist worker
def test_as_seed_refuses_what_numpy_would_reject_deep_inside(value):
    with pytest.raises(ConfigError, match="rng"):
        seeding.as_generator(value)


def test_as_seed_accepts_seeds_generators_and_sequences():
    g = np.random.default_rng(1)
    assert seeding.as_generator(g) is g
    assert seeding.as_generator(np.int64(3)).integers(10) == np.random.default_rng(3).integers(10)
    assert len(seeding.spawn(np.random.SeedSequence(4), 2)) == 2
    with pytest.raises(ConfigError, match="n"):
        seeding.spawn(0, -1)


@pytest.mark.parametrize("value", ["banana", "4", "0GB", "-1GB", "10B", "4 parsecs", 4, None], ids=repr)
def test_as_memory_size_needs_a_sized_unit(value):
    with pytest.raises(ConfigError, match="memory"):
        checks.as_memory_size(value, "memory_limit")


def test_as_real_array_names_the_input():
    with pytest.raises(ConfigError, match=r"weights.*ragged"):
        checks.as_real_array([[1, 2], [3]], "weights", error=ConfigError)
    with pytest.raises(ConfigError, match=r"weights.*bfloat16"):
        checks.as_real_array(torch.zeros(2, dtype=torch.bfloat16), "weights", error=ConfigError)
    with pytest.raises(ConfigError, match=r"weights.*complex"):
        checks.as_real_array(np.ones(2, complex), "weights", error=ConfigError)


# ---------------------------------------------------------------------------------------------- config models
class _Model(configs.ConfigModel):
    count: int = Field(1, ge=1)
    rate: float = 0.5
    sizes: list[int] = Field(default_factory=lambda: [1])
    flag: bool = False


@pytest.mark.parametrize("kw, key", [({"rate": float("inf")}, "rate"), ({"rate": float("nan")}, "rate"),
                                     ({"count": True}, "count"), ({"rate": False}, "rate"),
                                     ({"sizes": [1, True]}, "sizes"), ({"count": 2.5}, "count"),
                                     ({"count": 0}, "count"), ({"typo": 1}, "typo"), ({"sizes": [[1]]}, "sizes")])
def test_config_models_refuse_nan_inf_bools_and_typos_in_one_line(kw, key):
    with pytest.raises(ConfigError) as info:
        _Model(**kw)
    msg = str(info.value)
    assert key in msg and "\n" not in msg
    with pytest.raises(ConfigError):
        _Model.model_validate(kw)
    assert _Model(flag=True).flag is True


@pytest.mark.parametrize("source", [b"abc", 3, None], ids=repr)
def test_load_toml_needs_a_path(source):
    with pytest.raises(ConfigError, match="path"):
        configs.load_toml(source)


@pytest.mark.parametrize("name", ["../__init__.py", "/etc/passwd", "topics/../../x"])
def test_packaged_config_names_cannot_leave_the_package(name):
    with pytest.raises(ConfigError, match="no packaged config"):
        configs.path(name)


@pytest.mark.parametrize("kw, needle", [({"n_agents": 0}, "n_agents"), ({"n_agents": 2.5}, "n_agents"),
                                        ({"n_steps": 0}, "n_steps"), ({"rng": -1}, "rng")])
def test_demo_panel_arguments_are_checked(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        heavy_tailed_panel(**{"n_agents": 100, "n_steps": 2, **kw})


def test_manifest_never_fails_on_odd_config_values(tmp_path):
    path = manifest.write_manifest(tmp_path, "x", config={"a": object(), "b": float("nan"), 3: [np.float64(1)]})
    data = json.loads(path.read_text(), parse_constant=pytest.fail)
    assert data["config"]["b"] is None and data["config"]["3"] == [1.0]
    assert not math.isnan(data["config"]["3"][0])


def test_as_memory_size_accepts_both_bounds_it_names_and_nothing_beyond():
    """The message names the bounds the check applies, and DuckDB takes every size the check lets through."""
    import duckdb

    con = duckdb.connect()
    for ok in ("16MiB", "1024TiB", "17MB", "4GB", "1.5GiB"):
        assert checks.as_memory_size(ok, "memory_limit") == ok
        con.execute(f"SET memory_limit = '{ok}'")
    for bad in ("16MB", "1025TiB", "1PiB", "1PB"):
        with pytest.raises(ConfigError, match=r"from 16MiB to 1024TiB"):
            checks.as_memory_size(bad, "memory_limit")


@pytest.mark.parametrize("mask", [np.array([["False", "True"]]), [["False", "True"]], np.array([[b"0", b"1"]]),
                                  [[1, "0"]]], ids=["str_array", "str_list", "bytes_array", "mixed_list"])
def test_a_text_alive_mask_is_refused_by_the_masks_rule(mask):
    # the README's example: a string mask got the generic "alive mask must hold numbers", which does not say
    # that floats are refused too nor why; the Panel now says what EvalContext says: bool or integers 0/1
    from aumann.errors import PanelError
    from aumann.panel import Panel

    with pytest.raises(PanelError, match=r"alive mask must be bool \(or integers 0/1\); got dtype \S*[SU]\d.*"
                                         r"'False' are not booleans"):
        Panel(np.ones((2, 3)), alive=mask)
