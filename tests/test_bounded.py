"""The one bounded JSON/TOML reader: size and depth limits before parsing, linear scans, typed errors."""

from __future__ import annotations

import os
import time

import pytest

from aumann import bounded, configs
from aumann.errors import ConfigError, PanelError


@pytest.mark.parametrize("text, depth", [
    ('{"a": [1, {"b": "[[[[["}]}', 3),
    ('"[[[" ', 0),
    ('[[["\\"[["]]]', 3),
    ("[]", 1),
    ("", 0),
])
def test_json_depth_ignores_strings(text: str, depth: int) -> None:
    assert bounded.nesting_depth(text) == depth


def test_toml_depth_ignores_strings_and_comments() -> None:
    text = 'a = [[1], "[[[[", \'[[[[\']\n# [[[[[[\nb = """\n[[[[[\n"""\nc = \'\'\'[[[[\'\'\''
    assert bounded.nesting_depth(text, toml=True) == 2
    assert bounded.loads_toml(text)["b"] == "[[[[[\n"


@pytest.mark.parametrize("hostile", [
    '"' + '\\"' * 200_000,           # escaped quotes, never closed
    '"' + '\\"' * 200_000 + "\\",    # ... ending in a lone backslash
    '"a' * 200_000,                   # 200k string starts
    '"""' + '""' * 100_000,           # TOML multi-line starts
    "'''" + "a'" * 100_000,
])
def test_scan_is_linear_on_hostile_quotes(hostile: str) -> None:
    t0 = time.process_time()
    for toml in (False, True):
        bounded.nesting_depth(hostile, toml=toml)
    # a quadratic scan of these takes minutes; a linear one milliseconds (generous bound for loaded boxes)
    assert time.process_time() - t0 < 5.0


def test_deep_json_and_toml_are_typed_errors() -> None:
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(ConfigError, match="5,000 levels deep"):
        bounded.loads_json(deep, what="reply")
    with pytest.raises(PanelError, match="nests 5,000 levels"):
        bounded.loads_json(deep, what="metadata", error=PanelError)
    with pytest.raises(ConfigError, match="levels deep"):
        bounded.loads_toml("v = " + deep, what="config")


def test_size_limit_and_nan_policy(tmp_path) -> None:
    with pytest.raises(ConfigError, match="over the 10-byte limit"):
        bounded.loads_json("[1, 2, 3, 4, 5]", max_bytes=10)
    assert bounded.loads_json('{"a": 1}') == {"a": 1}
    with pytest.raises(ConfigError, match="NaN is not a JSON number"):
        bounded.loads_json('{"a": NaN}', allow_nan=False)
    # 1e999 is Infinity spelt as a number: it slipped through allow_nan=False as float('inf')
    for text in ('{"a": 1e999}', '[-1e400]', '{"a": 1E+309}'):
        with pytest.raises(ConfigError, match="beyond the largest float"):
            bounded.loads_json(text, allow_nan=False)
    assert bounded.loads_json('[1e308, -2.5e-400, 10000000000000000000000]', allow_nan=False) == [1e308, -0.0, 10**22]
    p = tmp_path / "x.json"
    p.write_text("[" * 100 + "]" * 100)
    with pytest.raises(ConfigError, match=str(p.name)):
        bounded.read_json(p)
    with pytest.raises(ConfigError, match="over the 5-byte limit"):
        bounded.read_json(p, max_bytes=5)
    with pytest.raises(ConfigError, match="does not exist"):
        bounded.read_json(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="directory"):
        bounded.read_toml(tmp_path)
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        bounded.read_toml(tmp_path / "bin.toml")


def test_config_readers_are_bounded(tmp_path) -> None:
    p = tmp_path / "deep.toml"
    p.write_text("[study]\npermutations = " + "[" * 5000 + "1" + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="levels deep"):
        configs.load_toml(p)
    with pytest.raises(ConfigError, match="nests deeper"):
        configs.parse_assignment("study.permutations=" + "[" * 5000 + "]" * 5000)
    assert configs.parse_assignment("study.permutations=[[1]]") == {"study": {"permutations": [[1]]}}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("reader", ["read_json", "read_toml"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, reader):
    """open() on a FIFO without a writer waits for one for ever: a scenario fixture (--set fixture=PIPE), a
    MegaScale network file or a price table read through here hung before the run started."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ConfigError, match=r"'.*pipe' is not a regular file \(a pipe, socket or device\)"):
        getattr(bounded, reader)(tmp_path / "pipe")
    if reader == "read_json":
        (tmp_path / "ok.json").write_text('{"a": 1}')
        assert bounded.read_json(tmp_path / "ok.json") == {"a": 1}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.timeout(60)
def test_a_scenario_fixture_that_is_a_fifo_is_an_exit_2(tmp_path, capsys):
    from aumann.cli import main

    os.mkfifo(tmp_path / "fixture.json")
    rc = main(["run", "midscale-social", "--agents", "20", "--steps", "3", "--set",
               f"fixture={tmp_path / 'fixture.json'}", "--out", str(tmp_path / "run")])
    assert rc == 2 and "fixture.json' is not a regular file" in capsys.readouterr().err
