"""An LLM-agent Mesa model: a recorded run replays bit-identically from the cache with no request,
and a fork served from the cache reproduces the factual continuation."""

from __future__ import annotations

import json

import httpx
import mesa
import numpy as np
import pytest
from pydantic import BaseModel, Field

from aumann.simulators import FeatureRecorder, fork, simulate
from aumann.simulators.llm import CacheMissError, OpenAIBackend, ResponseCache, request_seed
from tests.simulators.llm_fakes import Script, client_for, completion


class Effort(BaseModel):
    effort: float = Field(ge=0, le=1)


class Worker(mesa.Agent):
    def __init__(self, model):
        super().__init__(model)
        self.output = 0.0

    def step(self):
        msgs = [{"role": "user", "content": f"Step {self.model.steps}. Your output so far: {self.output:.3f}."}]
        d = self.model.backend.decide(msgs, Effort, seed=request_seed(self.model.seed, self.unique_id,
                                                                       self.model.steps))
        self.output += d.effort * (1.0 + self.model.rng.random())


class Firm(mesa.Model):
    def __init__(self, backend, n=4, seed=0):
        super().__init__(rng=seed)
        self.seed, self.backend = seed, backend
        Worker.create_agents(self, n)

    def step(self):
        self.agents.shuffle_do("step")


def noisy_server():
    """A server whose answers differ on every request (so a re-request would change the run)."""
    rng = np.random.default_rng(123)
    return Script(lambda r: httpx.Response(200, json=completion(json.dumps({"effort": float(rng.random())}))))


REC = FeatureRecorder({"output": "output"})


def test_replayed_run_is_bit_identical_and_sends_nothing(tmp_path):
    path = tmp_path / "run.sqlite"
    live = noisy_server()
    recorded = simulate(Firm(OpenAIBackend(model="m", client=client_for(live), cache=ResponseCache(path))),
                        steps=5, recorder=REC)
    assert live.calls == 20

    dead = Script(503)
    backend = OpenAIBackend(model="m", client=client_for(dead), cache=ResponseCache(path, mode="replay"))
    replayed = simulate(Firm(backend), steps=5, recorder=REC)
    assert replayed.equals(recorded) and dead.calls == 0 and backend.usage.cache_hits == 20

    with pytest.raises(CacheMissError):  # a longer run needs decisions that were never recorded
        simulate(Firm(backend), steps=6, recorder=REC)
    assert dead.calls == 0


def test_fork_from_the_cache_replays_the_factual_continuation(tmp_path):
    path = tmp_path / "fork.sqlite"
    live = noisy_server()
    model = Firm(OpenAIBackend(model="m", client=client_for(live), cache=ResponseCache(path)))
    simulate(model, steps=3, recorder=REC)
    factual_tail = fork(model, steps=3, recorder=REC)  # records steps 4..6 into the cache
    calls = live.calls
    again = fork(model, steps=3, recorder=REC)          # same branch: served from the cache
    assert again.panel.equals(factual_tail.panel) and live.calls == calls
    assert again.model.backend is model.backend  # deepcopy shares the backend and its cache


def test_a_closed_backend_leaves_the_whole_cache_in_its_one_file(tmp_path):
    """A finished run's replies sat in llm-cache.sqlite-wal: the file the docs name was an empty shell, and a copy of it
    replayed nothing. Closing the backend now merges the log into the file, which alone replays the run."""
    import shutil

    path = tmp_path / "run.sqlite"
    b = OpenAIBackend(model="m", client=client_for(noisy_server()), cache=ResponseCache(path))
    recorded = simulate(Firm(b), steps=3, recorder=REC)
    b.close()
    copy = tmp_path / "elsewhere" / "copy.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)  # the file alone, as a user shares it
    replay = OpenAIBackend(model="m", client=client_for(Script(503)), cache=ResponseCache(copy, mode="replay"))
    assert simulate(Firm(replay), steps=3, recorder=REC).equals(recorded)
    assert replay.usage.cache_hits == 12


def test_close_writes_replies_put_before_the_file_was_ever_opened(tmp_path):
    """put() only buffers; close() flushed only when a connection was open, so replies put into a cache that had not
    read anything yet stayed in memory until interpreter exit: the file did not exist and a reopened cache missed."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    cache.put("k", '{"yes": true}', backend="openai", model="m", request={"messages": []}, prompt_tokens=2)
    cache.close()
    again = ResponseCache(path, mode="replay")
    assert again.get("k").text == '{"yes": true}' and again.get("k").prompt_tokens == 2
    again.close()



def test_two_processes_asking_one_request_at_once_both_use_the_answer_the_cache_keeps(tmp_path):
    """Two runs (processes) sharing one cache file, a server that answers differently each time (temperature > 0):
    both missed, both asked, the first to write won ('INSERT OR IGNORE') -- and the other run went on with its own
    answer, which the cache does not hold: a replay of that run was not that run (40 of 40 decisions differed in the
    attack). Now the run that lost uses the stored answer, as its replay will."""
    class Pick(BaseModel):
        x: int

    path = tmp_path / "shared.sqlite"
    req = [{"messages": [{"role": "user", "content": "Pick a number."}], "schema": Pick, "seed": 7}]
    first = OpenAIBackend(model="m", client=client_for(lambda r: httpx.Response(200, json=completion('{"x": 1}'))),
                          cache=ResponseCache(path))

    def second_server(request: httpx.Request) -> httpx.Response:
        first.decide_many(req)  # the other process asks the same request meanwhile, and stores its answer first
        first.close()
        return httpx.Response(200, json=completion('{"x": 2}'))

    second = OpenAIBackend(model="m", client=client_for(second_server), cache=ResponseCache(path))
    used = second.decide_many(req)[0].x
    assert used == 1 and second.decide_many(req)[0].x == 1  # the stored answer, also from memory (a fork)
    assert second.usage.calls == 1 and second.usage.decisions == 2  # it was sent (and charged) all the same
    second.close()
    replay = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", cache=ResponseCache(path, mode="replay"))
    assert replay.decide_many(req)[0].x == used


def test_two_workers_of_the_cluster_service_asking_one_request_at_once_use_the_stored_answer(tmp_path):
    """The same race between two workers of a Ray run: the service kept the first worker's answer and the second
    used its own."""
    from aumann.simulators.llm_service import LLMService, serve_backend, service_args

    class Pick(BaseModel):
        x: int

    path = tmp_path / "run.sqlite"
    req = [{"messages": [{"role": "user", "content": "Pick a number."}], "schema": Pick, "seed": 7}]

    def backend(handler):
        return OpenAIBackend(model="m", cache=ResponseCache(path), client=client_for(handler))

    svc = LLMService(**service_args(backend(lambda r: None)))
    one = serve_backend(backend(lambda r: httpx.Response(200, json=completion('{"x": 1}'))), svc)

    def two_server(request: httpx.Request) -> httpx.Response:
        one.decide_many(req)
        return httpx.Response(200, json=completion('{"x": 2}'))

    two = serve_backend(backend(two_server), svc)
    assert two.decide_many(req)[0].x == 1
    svc.close()
    assert ResponseCache(path, mode="replay").get(two.cache_key(req[0]["messages"], Pick, seed=7)).text == '{"x": 1}'


def _record_in_a_child(path, end: str) -> int:
    """Record 60 replies into the cache at ``path`` in a child process, 20 to a commit, never closing it; the child
    then ends by ``end`` (a statement); its return code."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import os, signal, sys\n"
        "from aumann.simulators.llm import ResponseCache\n"
        "c = ResponseCache(sys.argv[1])\n"
        "for i in range(3):\n"
        "    for j in range(20):\n"
        "        c.put(f'k{i}-{j}', '{\"effort\": 0.5}', backend='openai', model='m', request={'i': i, 'j': j})\n"
        "    c.flush()\n"
        f"{end}\n"
    )
    root = str(Path(__file__).resolve().parents[2])  # (the checkout, for the child's `import aumann`)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script, str(path)], env=env, capture_output=True, timeout=120)
    return proc.returncode


#: the cache still held when the process ends (as in `aumann run`, where the backend keeps it): a daemon thread's
_HELD = "import threading, time; threading.Thread(target=lambda c=c: time.sleep(3600), daemon=True).start(); "


@pytest.mark.parametrize("end", [_HELD + "sys.exit(0)", _HELD + "raise KeyboardInterrupt"])
def test_a_process_that_exits_leaves_the_cache_file_alone_without_side_files(tmp_path, end):
    """`aumann run` checkpoints the cache when it closes its backend but kept the connection open until the process
    ended, so llm-cache.sqlite-wal (empty) and -shm (32 KiB) stayed beside every run's cache, after a normal exit
    and after Ctrl-C. The cache is closed at interpreter exit now: the file is left alone, holding every reply."""
    import signal

    path = tmp_path / "llm-cache.sqlite"
    # (an uncaught KeyboardInterrupt ends Python by SIGINT, as Ctrl-C does)
    assert _record_in_a_child(path, end) == (0 if end.endswith("sys.exit(0)") else -signal.SIGINT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llm-cache.sqlite"]
    replay = ResponseCache(path, mode="replay")
    assert len(replay) == 60
    replay.close()


def test_a_killed_process_leaves_its_committed_replies_in_the_cache_file_itself(tmp_path):
    """A run killed with SIGKILL (the OOM killer, a job's time limit) never closed its cache: every reply it had
    committed sat in llm-cache.sqlite-wal, and the file alone -- copied without it, as the docs say it is shared --
    had no responses table (270 replies of a killed `aumann run social-llm` gone). Each commit now merges the log
    into the file, so the file alone holds every committed reply even after a kill."""
    import shutil
    import signal

    path = tmp_path / "llm-cache.sqlite"
    assert _record_in_a_child(path, "os.kill(os.getpid(), signal.SIGKILL)") == -signal.SIGKILL
    assert (tmp_path / "llm-cache.sqlite-wal").is_file()  # (what a killed process leaves: SQLite's log)
    copy = tmp_path / "elsewhere" / "llm-cache.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)  # the file alone: its -wal and -shm stay behind
    replay = ResponseCache(copy, mode="replay")
    assert len(replay) == 60
    assert replay.get("k2-19").text == '{"effort": 0.5}'
    replay.close()
