"""What a user copies from the docs and from ``aumann <command> --help`` runs, or at least parses.

* The ```python blocks of the pages no other test runs (docs/bluesky-ingest.md, docs/scenarios.md,
  docs/traces.md, the EconAgent README) run as written, from the folder the page assumes; and every page
  with a ```python block is run by some test (``PYTHON_BLOCKS_TESTED_ELSEWHERE`` names the others').
* Every ``aumann ...`` command written in the docs — in fenced shell blocks, inline in prose, in the
  ``Examples::`` of the commands' help — names a command (and subcommand) the parser knows and flags that
  command has; those of shell blocks and help examples also parse with the real parser (values and
  required arguments included), without running.
* Every ``python benchmarks/X.py --flag`` names a script that exists and a flag it defines.

Pages needing what CI lacks (network, GPU, API key, a cluster) keep those lines in shell blocks, which
are parsed only. A command written with a placeholder (``COMMAND``, ``…``) is checked for its flags only.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aumann.cli import build_parser
from tests.paths import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "aumann").rglob("README.md")])

#: pages whose ```python blocks other tests run (those tests check what the blocks print or compute)
PYTHON_BLOCKS_TESTED_ELSEWHERE = {
    "README.md": "tests/docs/test_readme.py",
    "docs/baselines.md": "tests/docs/test_baselines_doc.py",
    "docs/extending.md": "tests/docs/test_extending.py",
    "docs/simulators.md": "tests/simulators/test_docs.py",
}


def _rel(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.M | re.S)


def _exec(page: Path, ns: dict | None = None) -> dict:
    ns = {"__name__": "docs_example"} if ns is None else ns
    for k, block in enumerate(_python_blocks(page)):
        exec(compile(block, f"{_rel(page)}[python block {k}]", "exec"), ns)  # our own docs
    return ns


# ---------------------------------------------------------------------------------------- python blocks
def test_every_page_with_python_blocks_is_run_by_a_test():
    here = {"docs/bluesky-ingest.md", "docs/scenarios.md", "docs/traces.md", "aumann/scenarios/econagent/README.md"}
    with_blocks = {_rel(p) for p in PAGES if _python_blocks(p)}
    assert with_blocks == here | set(PYTHON_BLOCKS_TESTED_ELSEWHERE), "a page's python blocks are run by no test"
    for test in PYTHON_BLOCKS_TESTED_ELSEWHERE.values():
        assert (REPO / test).is_file(), test


def test_bluesky_ingest_python_block(tmp_path, monkeypatch, capsys):
    """The block reads ``capture/2026-04-10.jsonl`` and ``profiles.csv`` from the working directory: the
    ingestion tests' hand-counted capture of that day, and a snapshot of its users."""
    from tests.data.bluesky.jetstream_builder import A, B, C, build

    cap, _ = build()
    cap.write(tmp_path / "capture")
    (tmp_path / "profiles.csv").write_text(f"did,followers_count\n{A},1000\n{B},50\n{C},7\n")
    monkeypatch.chdir(tmp_path)
    ns = _exec(REPO / "docs" / "bluesky-ingest.md")
    malformed, users = capsys.readouterr().out.split()
    assert int(malformed) == ns["report"].to_dict()["malformed_lines"] > 0 and int(users) == ns["counts"].n_users
    assert ns["panel"].values.shape == (1, ns["counts"].n_users, 3)


def test_traces_python_block(monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the page's paths are the repository's
    ns = _exec(REPO / "docs" / "traces.md")
    assert "record(s) read" in capsys.readouterr().out
    att, panel = ns["att"], ns["r"].panel
    assert att.phi.shape == panel.values.shape[:2] and att.max_efficiency_gap < 1e-9
    assert len(att.by_agent(labels=True).nlargest(5)) == 5


def test_econagent_readme_python_block():
    ns = _exec(REPO / "aumann" / "scenarios" / "econagent" / "README.md")
    assert ns["run"].panel.shape == (36, 10, 7)  # what the block's comment says


def test_scenarios_python_blocks_define_what_they_say(tmp_path):
    """The sketch of your own scenario registers it (in a fresh interpreter: the registry is global), and
    the step-map example is a StepMap of the exposure it describes."""
    code = "\n\n".join(_python_blocks(REPO / "docs" / "scenarios.md")) + """
import types
sc = scenarios.get("my-scenario")
assert sc.name == "my-scenario" and sc.load_config().agents == 50 and sc.load_config().growth == 0.1
A = np.array([[0., 1.], [1., 0.]]); p = np.array([2., 3.])
m = my_step_map(types.SimpleNamespace(A=A, p=p), types.SimpleNamespace(agents=2))
z = m.fn(torch.tensor([[1., 0.5]], dtype=torch.float64))
assert m.n_agents == 2 and torch.allclose(z[0, :, 1], torch.tensor([1.5, 1.0], dtype=torch.float64))
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_readme_errors_print_what_their_comments_say(capsys):
    """The README's bad-input block: each ``print(exc)  # message ...`` prints that message (the text before
    the ellipsis)."""
    block = next(b for b in _python_blocks(REPO / "README.md") if "print(exc)" in b)
    expected = [c.strip().removesuffix("...").strip() for c in re.findall(r"print\(exc\)\s+#(.*)$", block, re.M)]
    exec(compile(block, "README.md[bad input]", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(expected) >= 2
    for line, want in zip(printed, expected, strict=True):
        assert line.startswith(want), (line, want)


# ------------------------------------------------------------------------------------- aumann commands
def _help_texts() -> dict[str, str]:
    """Each command's (and subcommand's) --help text, by its words."""
    out: dict[str, str] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        out[" ".join(words)] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*words, name))

    walk(build_parser(), ("aumann",))
    return out


def _commands() -> list[tuple[str, str, bool]]:
    """(where, command, full): every ``aumann ...`` command of the docs and the help texts; ``full`` for those
    written to be typed (shell blocks, help examples), which must parse as they stand."""
    found: list[tuple[str, str, bool]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
            if lang in ("python", "toml", "json"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = re.sub(r"^\s*\$\s+", "", line).strip()
                if line.startswith("aumann "):
                    found.append((_rel(page), line, True))
        prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
        for span in re.findall(r"`(aumann [^`]+)`", prose):
            found.append((_rel(page), " ".join(span.split()), False))
    for words, text in _help_texts().items():
        for line in text.splitlines():
            if line.strip().startswith("aumann ") and line.startswith("    "):
                found.append((f"{words} --help", line.strip(), True))
    return found


def _words(command: str) -> list[str]:
    command = re.sub(r"\s#.*$", "", command)  # a comment
    command = re.sub(r"\[(--[^\]]*)\]", r"\1", command)  # [--top 50]: an optional part, written out
    return shlex.split(command)[1:]


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser the words name, and the command words that named it."""
    named: list[str] = []
    for word in words:
        if word.startswith("-"):
            continue
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
        named.append(word)
    return parser, named


COMMANDS = _commands()
PLACEHOLDERS = ("COMMAND", "…", "...")


def test_the_docs_and_help_write_commands():
    pages = {where for where, _, _ in COMMANDS}
    assert {"README.md", "docs/reports.md", "docs/cluster.md", "docs/bluesky-ingest.md", "aumann run --help",
            "aumann report --help", "aumann llm --help"} <= pages
    assert sum(full for _, _, full in COMMANDS) >= 60


@pytest.mark.parametrize(("where", "command", "full"), COMMANDS, ids=[f"{w}: {c}"[:90] for w, c, _ in COMMANDS])
def test_command_names_a_command_and_its_flags(where, command, full):
    parser = build_parser()
    words = _words(command)
    sub, named = _subparser(parser, words)
    if not named and "--debug" not in words:
        pytest.fail(f"{where}: {command!r} names no aumann command")
    known = {s for a in sub._actions for s in a.option_strings} | {"--debug", "--version"}
    flags = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    assert flags <= known, f"{where}: {command!r}: {sorted(flags - known)} not flags of aumann {' '.join(named)}"
    if full and not any(p in command for p in PLACEHOLDERS):
        try:
            parser.parse_args(words)
        except SystemExit as exc:
            pytest.fail(f"{where}: {command!r} does not parse (exit {exc.code})")
    actions = {s: a for a in sub._actions for s in a.option_strings}
    for flag, value in zip(words, [*words[1:], None], strict=True):  # a value written after its flag is one it takes
        action = actions.get(flag)
        if action is None or action.nargs is not None or value is None or value.startswith("-") \
                or re.fullmatch(r"[A-Z][A-Z0-9_|.]*", value) or any(p in value for p in PLACEHOLDERS):
            continue  # a flag without a value, or a placeholder for one (N, FILE, URL)
        try:
            parsed = action.type(value) if callable(action.type) else value
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            pytest.fail(f"{where}: {command!r}: {flag} {value}: {exc}")
        assert action.choices is None or parsed in action.choices, f"{where}: {command!r}: {flag} {value}"


def test_run_help_gives_each_built_in_scenario_its_own_default():
    """``aumann run --help`` said ``--permutations`` defaults to 1000; megascale-social's config says 500. The help
    now gives the built-ins' number and names the exceptions; each built-in's config is checked against it, as is
    ``--reference-game``'s default."""
    from aumann import scenarios

    helps = {s: " ".join((a.help or "").split()) for a in _subparser(build_parser(), ["run"])[0]._actions
             for s in a.option_strings}
    perms = helps["--permutations"]
    found = re.search(r"(\d+) in the built-in scenarios", perms)
    assert found, f"--permutations: the help gives no default for the built-in scenarios: {perms!r}"
    usual = int(found.group(1))
    named = {name: int(n) for n, name in re.findall(r"(\d+) in ([a-z][\w-]+)", perms) if name != "the"}
    game = re.search(r"default: (\w+)", helps["--reference-game"]).group(1)
    builtins = ("econagent", "megascale-social", "midscale-social", "social-llm")
    assert set(named) <= set(builtins), named
    for name in builtins:
        study = scenarios.get(name).load_config().study
        assert study.permutations == named.get(name, usual), (name, study.permutations, perms)
        assert study.reference_game == game, (name, study.reference_game)


def test_the_llm_usage_keys_the_docs_list_are_the_manifests():
    """docs/scenarios.md says ``llm_usage`` holds "exactly" its list of keys; the list lacked invalid_decisions and
    bad_usage, which every manifest has."""
    from aumann.simulators.llm.usage import MANIFEST_KEYS

    text = " ".join((REPO / "docs" / "scenarios.md").read_text(encoding="utf-8").split())
    listed = re.search(r"`llm_usage` holds, .*?, exactly `([^`]+)`", text)
    assert listed, "docs/scenarios.md no longer lists the llm_usage keys"
    assert [k.strip() for k in listed.group(1).split(",")] == list(MANIFEST_KEYS)


def test_benchmark_commands_name_scripts_and_flags_they_have():
    seen = 0
    for page in PAGES:
        for script, args in re.findall(r"python (benchmarks/[\w.]+\.py)([^`\n)#]*)", page.read_text(encoding="utf-8")):
            source = (REPO / script).read_text(encoding="utf-8")
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", args):
                assert f'"{flag}"' in source, f"{_rel(page)}: python {script}{args}: {flag} is not one of its flags"
            seen += 1
    assert seen >= 5


def test_extras_the_docs_name_exist():
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                 ["optional-dependencies"])
    named = set()
    for page in PAGES:
        for group in re.findall(r"(?:aumann|\")\.?\[([a-z,-]+)\]", page.read_text(encoding="utf-8")):
            named |= set(group.split(","))
    assert named and named <= extras, sorted(named - extras)


def test_ingest_report_sample_is_what_the_golden_capture_gives(tmp_path):
    """docs/bluesky-ingest.md's ``ingest_report.json`` sample: the numbers of the real 10-event capture."""
    import json

    from tests.paths import JETSTREAM_SAMPLE, SHARED_MISSING

    if not JETSTREAM_SAMPLE.is_file():
        pytest.skip(SHARED_MISSING)
    from aumann.data.bluesky.ingest import ingest

    text = (REPO / "docs" / "bluesky-ingest.md").read_text(encoding="utf-8")
    doc = json.loads(re.search(r"^```json\n(.*?)^```", text, flags=re.M | re.S).group(1))
    _, report = ingest([JETSTREAM_SAMPLE])
    got = report.to_dict()

    def same(want, have, where):
        if isinstance(want, dict):
            for key, value in want.items():
                if key != "..." and value not in ({}, "..."):
                    assert key in have, f"{where}/{key}"
                    same(value, have[key], f"{where}/{key}")
        else:
            assert want == have, (where, want, have)

    same(doc, got, "ingest_report.json")
