"""The top-level parser: a command line naming a command builds that command's parser alone, and the
result is the parser the full build gives for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aumann.cli as cli


def _commands(parser) -> dict:
    return parser._subparsers._group_actions[0].choices


def test_the_command_table_names_what_the_modules_register():
    full = _commands(cli.build_parser())
    assert set(full) == set(cli._COMMANDS)
    for name in cli._COMMANDS:
        assert set(_commands(cli.build_parser(only=name))) == {name}


@pytest.mark.parametrize("command", sorted(cli._COMMANDS))
def test_a_command_alone_has_the_same_help_as_in_the_full_parser(command):
    alone = _commands(cli.build_parser(only=command))[command]
    full = _commands(cli.build_parser())[command]
    assert alone.format_help() == full.format_help()


@pytest.mark.parametrize(("argv", "named"), [
    (["run", "x"], "run"), (["--debug", "bluesky", "build-panel"], "bluesky"), (["--version"], ""),
    (["--version", "--help"], None),
    ([], None), (["nosuch", "run"], None), (["--", "run"], None), (["-h"], None), (["-h", "run"], None),
    (["--debug", "--help", "bluesky"], None), (["run", "-h"], "run"),
])
def test_the_command_named_is_the_first_word_that_is_not_an_option(argv, named):
    assert cli._command_named(argv) == named


def test_version_alone_needs_no_command(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("aumann ")
    assert _commands(cli.build_parser(only="")) == {}


def test_the_top_level_help_lists_every_command_even_before_a_command_word(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["-h", "run"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in cli._COMMANDS:
        assert name in out


def test_an_unknown_command_still_lists_every_command(capsys):
    assert cli.main(["nosuch"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err
    for name in cli._COMMANDS:
        assert name in err


def test_build_panel_does_not_load_the_llm_layer_and_python_m_aumann_works():
    code = ("import sys; from aumann.cli import main\n"
            "try:\n    main(['bluesky', 'build-panel', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('llm' if 'aumann.simulators.llm' in sys.modules else 'none')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("none")
    version = subprocess.run([sys.executable, "-m", "aumann", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("aumann ")


@pytest.mark.parametrize("argv", [["run", "--list"], ["llm", "backends"], ["demo", "--agents", "20", "--steps", "2"]],
                         ids=["run-list", "llm-backends", "demo"])
def test_output_to_a_closed_pipe_ends_quietly(argv):
    """`aumann run --list | head -0` (or quitting `less` early) printed a BrokenPipeError traceback and exited 1;
    `aumann demo | head -0` still exited 1 after that fix: Rich's console (its table) ends a broken pipe with its
    own SystemExit(1) instead of a BrokenPipeError."""
    import os

    read, write = os.pipe()
    os.close(read)  # the reader is gone before aumann writes a line
    try:
        done = subprocess.run([sys.executable, "-m", "aumann", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (cli.SIGPIPE_EXIT, "")


def test_a_broken_pipe_that_is_not_our_output_is_not_hidden(monkeypatch):
    import aumann.cli.demo as demo

    def run(args):
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a socket to a server: stdout and stderr are fine

    monkeypatch.setattr(demo, "run", run)
    with pytest.raises(BrokenPipeError):
        cli.main(["demo"])


def _warning_command(monkeypatch, *warns):
    """``aumann demo`` replaced by a command that only emits ``warns`` (category, message) pairs."""
    import warnings

    import aumann.cli.demo as demo

    def run(args):
        for category, message in warns:
            warnings.warn(message, category, stacklevel=1)
        return 0

    monkeypatch.setattr(demo, "run", run)


def test_our_warnings_are_one_line_on_stderr_and_others_keep_pythons_display(monkeypatch, capsys):
    import warnings

    from aumann.errors import AumannWarning, ForkFallbackWarning

    _warning_command(monkeypatch, (AumannWarning, "the disk may be too small\nfor this \x1b[2Jstudy"),
                     (ForkFallbackWarning, "replayed from its factory"), (UserWarning, "someone else's"))
    with warnings.catch_warnings(record=True) as shown:  # what Python's display would have shown
        warnings.simplefilter("always")
        before = warnings.showwarning
        assert cli.main(["demo"]) == 0
        assert warnings.showwarning is before
    err = capsys.readouterr().err
    assert err == ("aumann: warning: the disk may be too small | for this \\x1b[2Jstudy\n"
                   "aumann: warning: replayed from its factory\n")
    assert [(w.category, str(w.message)) for w in shown] == [(UserWarning, "someone else's")]


def test_debug_shows_our_warnings_with_their_file_and_line(monkeypatch, capsys):
    import warnings

    from aumann.errors import AumannWarning

    _warning_command(monkeypatch, (AumannWarning, "look here"))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert cli.main(["--debug", "demo"]) == 0
    assert capsys.readouterr().err == ""
    assert [(w.category, str(w.message), w.filename) for w in shown] == [(AumannWarning, "look here", __file__)]
