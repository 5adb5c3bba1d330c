"""Executors: one wire format for the process pool and Ray (shared objects, writable arrays, typed remote
errors, user scenario files), the meaning of --workers, and where --ray-address comes from."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from aumann.errors import CheckpointError, ConfigError, ExecutorError, RemoteTaskError
from aumann.simulators import LocalExecutor, RayExecutor
from aumann.simulators.executors import describe_executor, make_executor
from aumann.simulators.remote import dumps, loads, user_code

HAS_RAY = importlib.util.find_spec("ray") is not None


def _bump(shared, i):
    arr = shared["arr"]  # shipped once per map, kept by each worker for its later tasks (read-only by contract)
    arr[i] = 1.0  # ... and writable: Mesa writes into its models' arrays
    total = float(arr.sum()) + i
    arr[i] = 0.0
    return total


def _fail(x):
    if x == 1:
        raise CheckpointError("no copy of model 1")
    return x


def test_a_pool_ships_the_shared_object_once_and_arrays_arrive_writable():
    with LocalExecutor(2, mp_context="fork") as pool:
        arr = np.zeros(1000)
        out = pool.map(_bump, [0, 1, 2], shared={"arr": arr})
        assert out == [1.0, 2.0, 3.0] and not arr.any()  # each worker's own copy; the driver's untouched
        assert pool.map(lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]  # lambdas travel (cloudpickle)
        assert LocalExecutor(0).map(_bump, [0], shared={"arr": np.zeros(3)}) == [1.0]


def test_a_failed_task_is_its_own_type_with_the_remote_traceback():
    with LocalExecutor(2, mp_context="fork") as pool:
        res = pool.map(_fail, [0, 1, 2], return_exceptions=True)
        assert res[0] == 0 and res[2] == 2
        assert isinstance(res[1], CheckpointError) and "no copy of model 1" in str(res[1])
        assert isinstance(res[1].__cause__, RemoteTaskError) and "_fail" in res[1].remote_traceback
        with pytest.raises(CheckpointError):
            pool.map(_fail, [1, 0])


def test_workers_mean_tasks_at_once_on_every_executor():
    assert make_executor("local", None) is None and make_executor("local", 1) is None
    assert make_executor("local", 2).max_workers == 2
    assert make_executor("local", 0).workers == (os.cpu_count() or 1)  # 0: every CPU
    with pytest.raises(ExecutorError, match="--workers"):
        make_executor("local", -1)
    with pytest.raises(ExecutorError, match="ray-address"):
        make_executor("local", 2, address="10.0.0.1:6379")
    assert describe_executor(None) == {"executor": "serial", "workers": 1}
    if HAS_RAY:
        ex = make_executor("ray", 3, address="10.0.0.9:6379")
        assert isinstance(ex, RayExecutor) and ex.workers == 3 and ex.attached and ex.max_workers == 3


def test_mesa_models_survive_the_trip_to_a_worker():
    from aumann.simulators.branching import digest_difference, state_digest
    from tests.simulators.mesa_examples import EXAMPLES

    for name in sorted(EXAMPLES):  # grids with property layers, DEVS events, views, deep neighbourhoods
        model = EXAMPLES[name](2)
        model.step()
        twin = loads(dumps(model))
        assert digest_difference(state_digest(model), state_digest(twin)) is None, name
        for m in (model, twin):
            m.step()
            m.step()
        assert digest_difference(state_digest(model), state_digest(twin)) is None, name


def _args(**kw):
    ns = argparse.Namespace(executor=None, workers=None, ray_address=None, ray_runtime_env=None)
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_where_the_address_comes_from(monkeypatch, tmp_path):
    from aumann.cli.executor_options import settings
    from aumann.scenarios.base import ExecutionConfig

    cfg = argparse.Namespace(execution=ExecutionConfig(ray_address="cfg:1", workers=3))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert settings(_args()) == {"executor": "local", "workers": None, "address": None, "address_from": None,
                                 "runtime_env": None, "max_retries": None}
    s = settings(_args(), cfg)  # a config address implies ray
    assert (s["executor"], s["address"], s["workers"]) == ("ray", "cfg:1", 3)
    assert s["address_from"] == "execution.ray_address"
    monkeypatch.setenv("RAY_ADDRESS", "env:2")
    assert settings(_args())["executor"] == "local"  # RAY_ADDRESS alone is ambient
    assert settings(_args(executor="ray"))["address"] == "env:2"
    assert settings(_args(), cfg)["address"] == "env:2"  # flag > environment > config
    assert settings(_args(ray_address="flag:3", workers=0), cfg)["address"] == "flag:3"
    with pytest.raises(ConfigError, match="executor is 'local'"):
        settings(_args(executor="local", ray_address="flag:3"))
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps({"env_vars": {"A": "1"}}))
    assert settings(_args(executor="ray", ray_runtime_env=str(env_file)))["runtime_env"] == {"env_vars": {"A": "1"}}
    assert settings(_args(executor="ray", ray_runtime_env='{"pip": ["x"]}'))["runtime_env"] == {"pip": ["x"]}
    with pytest.raises(ConfigError, match="JSON object"):
        settings(_args(executor="ray", ray_runtime_env="[1]"))
    with pytest.raises(ConfigError, match="neither"):
        settings(_args(executor="ray", ray_runtime_env="missing.json"))
    # Ray sends the environment as JSON: NaN / Infinity killed its worker (ActorDiedError traceback)
    for bad in ('{"env_vars": {"A": NaN}}', '{"a": 1e999}'):
        with pytest.raises(ConfigError, match="--ray-runtime-env"):
            settings(_args(executor="ray", ray_runtime_env=bad))
    env_file.write_text('{"a": Infinity}')
    with pytest.raises(ConfigError, match="--ray-runtime-env file"):
        settings(_args(executor="ray", ray_runtime_env=str(env_file)))


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_ray_max_retries_comes_from_the_flag_or_the_config_and_reaches_the_executor(monkeypatch):
    """The retries-exhausted error names --ray-max-retries: the flag (and execution.ray_max_retries) exists and
    sets RayExecutor.max_retries; the local executor refuses it, as it refuses --ray-runtime-env."""
    from aumann.cli import build_parser
    from aumann.cli.executor_options import executor_from, settings
    from aumann.scenarios.base import ExecutionConfig

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = argparse.Namespace(execution=ExecutionConfig(executor="ray", ray_max_retries=7))
    assert executor_from(_args(), cfg, connect=False).max_retries == 7
    assert executor_from(_args(ray_max_retries=0), cfg, connect=False).max_retries == 0  # flag > config
    assert executor_from(_args(executor="ray"), connect=False).max_retries == 3  # Ray executor's default
    with pytest.raises(ConfigError, match="--ray-max-retries"):
        settings(_args(ray_max_retries=2))
    with pytest.raises(ExecutorError, match="max_retries must be an int >= 0"):
        RayExecutor(max_retries=-1)
    parsed = build_parser().parse_args(["run", "econagent", "--ray-max-retries", "5"])
    assert parsed.ray_max_retries == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "econagent", "--ray-max-retries", "-1"])
    with pytest.raises(ValueError, match="ray_max_retries"):
        ExecutionConfig(ray_max_retries=-1)


def _dies(x):
    if x == 1:
        os.kill(os.getpid(), 9)  # the worker dies, as the kernel's OOM killer or a lost node ends it
    return x


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_task_whose_worker_dies_every_time_says_what_to_do(tmp_path, monkeypatch):
    """The error said what happened ('its 0 retries ran out') and pointed at python-core-worker-*.log files in a
    private instance's temp dir that is removed when the process exits. Now it names the setting that gives more
    re-runs and a copy of the logs that stays (without the instance's token)."""
    monkeypatch.setenv("RAY_ADDRESS", "")
    with RayExecutor(workers=1, max_retries=0, temp_dir=tmp_path) as ex:
        with pytest.raises(ExecutorError) as info:
            ex.map(_dies, [0, 1])
        token = os.environ.get("RAY_AUTH_TOKEN", "")
    msg = str(info.value)
    assert "task 2 of 2" in msg and "0 retries ran out" in msg and "\n" not in msg
    assert "--ray-max-retries N (execution.ray_max_retries; RayExecutor(max_retries=N)), now 0" in msg
    kept = Path(msg.split("read the worker's log first (")[1].split(" (")[0])
    assert kept.name.startswith("aumann-ray-logs-") and kept.parent == tmp_path and kept.is_dir()
    logs = [p for p in kept.rglob("*") if p.is_file()]
    assert any(p.name.startswith("python-core-worker-") for p in logs)
    assert len(token) >= 32 and not any(token.encode() in p.read_bytes() for p in logs)


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_runtime_env_ray_would_ignore_or_reject_later_is_refused_up_front(tmp_path, monkeypatch):
    """A typo'd key ran with the key silently dropped; a wrong type failed as 'cannot attach ... is ray start
    running there'; a missing working_dir failed only on the cluster."""
    from aumann.cli.executor_options import settings
    from aumann.scenarios.base import ExecutionConfig

    monkeypatch.delenv("RAY_RUNTIME_ENV_PLUGINS", raising=False)
    for bad, match in (('{"env_var": {"A": "1"}}', "unknown key.*'env_var'.*env_vars"),
                       ('{"env_vars": {"A": 1}}', r"env_vars.*Dict\[str, str\]"),
                       (json.dumps({"working_dir": str(tmp_path / "nope")}), "working_dir .* does not exist")):
        with pytest.raises(ConfigError, match=match):
            settings(_args(executor="ray", ray_runtime_env=bad))
    cfg = argparse.Namespace(execution=ExecutionConfig(executor="ray", ray_runtime_env={"foo": 1}))
    with pytest.raises(ConfigError, match=r"unknown key.*'foo'"):
        settings(_args(), cfg)
    ok = {"env_vars": {"A": "1"}, "working_dir": str(tmp_path)}
    assert settings(_args(executor="ray", ray_runtime_env=json.dumps(ok)))["runtime_env"] == ok



@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_working_dir_that_is_a_plain_file_is_refused_up_front(tmp_path, monkeypatch):
    """ray.init refused it only once attached, reported as 'cannot attach to the Ray cluster at ...: ... (is `ray
    start --head` running there ... RAY_AUTH_TOKEN its token?)', a hint about the connection."""
    from aumann.cli.executor_options import settings

    monkeypatch.delenv("RAY_RUNTIME_ENV_PLUGINS", raising=False)
    script = tmp_path / "crowd.py"
    script.write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"working_dir .*crowd.py' is a file; it must be a folder or an archive "
                                          r"\(\.zip"):
        settings(_args(executor="ray", ray_runtime_env=json.dumps({"working_dir": str(script)})))
    archive = tmp_path / "code.zip"
    archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: an archive Ray accepts
    for ok in ({"working_dir": str(archive)}, {"py_modules": [str(script)]}):  # a .py module is a py_modules entry
        assert settings(_args(executor="ray", ray_runtime_env=json.dumps(ok)))["runtime_env"] == ok


def test_the_execution_table_never_changes_what_a_run_computes():
    from aumann import scenarios
    from aumann.studies.faithfulness import config_digest

    sc = scenarios.get("midscale-social")
    plain = sc.load_config()
    on_ray = sc.load_config(assignments=["execution.executor=ray", "execution.ray_address=10.0.0.5:6379",
                                         "execution.workers=8"])
    assert on_ray.execution.workers == 8 and config_digest(sc, plain, "offline") == config_digest(sc, on_ray, "offline")
    with pytest.raises(ConfigError, match="executor"):
        sc.load_config(assignments=["execution.executor=dask"])
    for bad in ("execution.ray_runtime_env={a=inf}", "execution.ray_runtime_env={a=nan}",
                "execution.ray_runtime_env={a=2024-01-01}"):
        with pytest.raises(ConfigError, match=r"execution\.ray_runtime_env"):
            sc.load_config(assignments=[bad])


def test_user_code_names_scenario_files_and_their_folder(tmp_path):
    from aumann import scenarios

    (tmp_path / "helper_mod_for_uc.py").write_text("VALUE = 3\n")
    (tmp_path / "sc_file.py").write_text(
        "from helper_mod_for_uc import VALUE\nfrom aumann.scenarios import Scenario\n")
    with pytest.raises(ConfigError, match="no attribute"):  # imported (the module stays loaded), no such attribute
        scenarios.load(f"{tmp_path / 'sc_file.py'}:nothing")
    code = user_code()
    assert str(tmp_path) in code.folders
    assert any(rel == "sc_file.py" and Path(path) == (tmp_path / "sc_file.py").resolve()
               for _, path, rel in code.files)
    assert user_code(["numpy", "aumann.attribution"]).packages == ()  # installed: never shipped


@pytest.mark.slow
def test_a_scenario_file_runs_on_the_process_pool_like_the_serial_run(tmp_path):
    """``aumann run model.py:scenario --workers 2``: the spawned workers import the file's module."""
    from tests.simulators.test_ray_cluster import (
        CONFIG,
        SCENARIO_FILE,
        SIBLING,
        _invoke,
        assert_same_outputs,
        stage_rows,
    )

    folder = tmp_path / "scen"
    folder.mkdir()
    (folder / "model.py").write_text(SCENARIO_FILE)
    (folder / "tiny_world.py").write_text(SIBLING)
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(runs=2))
    spec = f"{folder / 'model.py'}:scenario"
    common = ["--config", str(cfg), "--no-plots", "--static"]
    assert _invoke(spec, *common, "--out", str(tmp_path / "serial")) == 0
    assert _invoke(spec, *common, "--out", str(tmp_path / "pool"), "--workers", "2") == 0
    assert_same_outputs(tmp_path / "serial", tmp_path / "pool")
    ex = json.loads((tmp_path / "pool" / "manifest.json").read_text())["execution"]
    assert ex == {"executor": "local", "workers": 2}
    # the stages ran in the workers: their wall times came back (the report had "tables and plots" alone)
    assert stage_rows(tmp_path / "pool") == stage_rows(tmp_path / "serial")
    assert "simulate" in stage_rows(tmp_path / "pool") and len(stage_rows(tmp_path / "pool")) > 3


@pytest.mark.ray
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_private_local_ray_instance_lives_in_its_own_temp_dir(tmp_path, monkeypatch):
    import ray

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("RAY_ADDRESS", "")
    (tmp_path / "home").mkdir()
    before = set(os.listdir("/tmp/ray")) if os.path.isdir("/tmp/ray") else set()
    ex = RayExecutor(workers=1)
    try:
        assert ex.map(_bump, [0, 1], shared={"arr": np.zeros(4)}) == [1.0, 2.0]
        temp = ex._temp_dir
        # its own temp dir (under TMPDIR, or /tmp when that path is too long for Ray's sockets), never /tmp/ray
        assert temp is not None and Path(temp).name.startswith("aumann-ray-") and any(Path(temp).iterdir())
        info = ex.describe()
        assert info["executor"] == "ray" and info["ray_version"] == ray.__version__ and info["nodes"] == 1
        res = ex.map(_fail, [1], return_exceptions=True)[0]
        assert isinstance(res, CheckpointError) and "ray node" in res.__cause__.where
    finally:
        ex.close()
    assert not ray.is_initialized()
    # emptied but for this process's own Ray logs (removed by a watcher once this process exits)
    left = [p for p in Path(temp).rglob("*") if p.is_file()] if Path(temp).exists() else []
    assert all("/logs/" in str(p) for p in left)
    assert not (tmp_path / "home" / ".ray").exists()  # the session token never went to ~/.ray
    after = set(os.listdir("/tmp/ray")) if os.path.isdir("/tmp/ray") else set()
    assert after == before  # nothing new in /tmp/ray
    assert "RAY_AUTH_TOKEN" not in os.environ or os.environ.get("RAY_AUTH_TOKEN") != ""


def _serve(reply: bytes | None):
    """A loopback TCP server: every connection is accepted and gets ``reply`` (``None``: nothing, ever)."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    held = []

    def loop():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.recv(1024)
                conn.sendall(reply)

    threading.Thread(target=loop, daemon=True).start()
    return srv, held


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_head_that_died_between_two_calls_is_not_waited_on(monkeypatch):
    """The head killed after the last task of a map (every run of ``aumann run`` finished and written): the
    manifest's ray.nodes() -- and the next attribute(executor=...)'s ray.cluster_resources() -- waited on the dead
    GCS until Ray ended the process after 60 s (exit 1, a fatal C++ log, no manifest, tables or report). Now the
    manifest leaves the cluster's size out, and a call that needs the head is one ExecutorError line in bounded
    time; neither asks Ray."""
    import socket
    import time

    import ray

    from aumann.simulators import ray_executor

    asked: list[str] = []

    def gcs(name, value):
        def call(*args, **kwargs):
            asked.append(name)
            return value
        return call

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # attached already (ray.init was called)
    monkeypatch.setattr(ray, "nodes", gcs("nodes", [{"Alive": True}, {"Alive": True}]))
    monkeypatch.setattr(ray, "cluster_resources", gcs("cluster_resources", {"CPU": 3.0}))
    monkeypatch.setattr(ray_executor, "HEAD_GONE_SECONDS", 0.5)
    srv, held = _serve(None)  # the head's GCS port, answering
    addr = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        alive = RayExecutor(address=addr)
        alive._started = True
        assert alive.describe()["nodes"] == 2 and alive.max_workers == 3 and "nodes" in asked
    finally:
        srv.shutdown(socket.SHUT_RDWR)  # wakes the accept() of _serve's thread: the port stops listening
        srv.close()
        for c in held:
            c.close()
    asked.clear()  # the head is gone now: its port refuses connections
    gone, later = RayExecutor(address=addr), RayExecutor(address=addr)
    gone._started = later._started = True
    t0 = time.monotonic()
    with pytest.raises(ExecutorError, match=r"the Ray cluster at '127.0.0.1:\d+' is gone") as info:
        _ = gone.max_workers
    with pytest.raises(ExecutorError, match="is gone"):
        gone.map(abs, [-1, -2])
    described = later.describe()
    assert time.monotonic() - t0 < 10 and "\n" not in str(info.value) and "rerun" in str(info.value)
    assert described["executor"] == "ray" and "nodes" not in described and "cpus" not in described
    assert asked == []  # Ray was never asked: it waits 60 s on a dead GCS, then ends the process


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_an_address_that_is_not_a_ray_gcs_fails_in_one_line_in_bounded_time(monkeypatch):
    """A port that accepts and never answers (or an HTTP server) made Ray wait minutes (measured: > 5 min)."""
    import time

    from aumann.simulators import ray_executor

    monkeypatch.setattr(ray_executor, "PROBE_SECONDS", 1.0, raising=False)
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    servers = {what: _serve(reply) for what, reply in
               (("silent", None), ("http", b"HTTP/1.0 400 Bad Request\r\n\r\n"), ("grpc", b"\0\0\0\4\0\0\0\0\0"))}
    try:
        for what, match in (("silent", "does not answer as Ray's GCS .no reply in 1 s"),
                            ("http", "not Ray's GCS .*HTTP/1.0 400")):
            addr = f"127.0.0.1:{servers[what][0].getsockname()[1]}"
            t0 = time.monotonic()
            with pytest.raises(ExecutorError, match=match) as info:
                RayExecutor(address=addr).cluster_cpus()
            assert time.monotonic() - t0 < 10 and "\n" not in str(info.value) and addr in str(info.value)
        ray_executor._reachable(f"127.0.0.1:{servers['grpc'][0].getsockname()[1]}")  # an HTTP/2 server passes
    finally:
        for srv, held in servers.values():
            srv.close()
            for c in held:
                c.close()


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
@pytest.mark.timeout(120)
def test_auto_is_probed_at_the_address_ray_would_attach_to(monkeypatch):
    """``auto`` was never probed: with the last ``ray start``'s cluster file (or RAY_ADDRESS) naming a head that is
    gone, Ray waited 13 min 41 s (measured) before failing. It is resolved the way Ray resolves it and probed."""
    import socket
    import time

    from aumann.simulators import ray_executor

    monkeypatch.setattr(ray_executor, "PROBE_SECONDS", 1.0, raising=False)
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    with socket.create_server(("127.0.0.1", 0)) as s:
        gone = s.getsockname()[1]  # a port where nothing listens once closed
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{gone}")
    t0 = time.monotonic()
    with pytest.raises(ExecutorError, match=rf"'auto' \(127.0.0.1:{gone}, .*nothing answers there") as info:
        RayExecutor(address="auto").cluster_cpus()
    assert time.monotonic() - t0 < 10 and "\n" not in str(info.value)
    srv, held = _serve(b"\0\0\0\4\0\0\0\0\0")  # an HTTP/2 server: what the head's GCS answers
    try:
        port = srv.getsockname()[1]
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        assert ray_executor._reachable("auto") == ("127.0.0.1", port)  # also the head the run keeps checking
    finally:
        srv.close()
        for c in held:
            c.close()
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setattr("ray._private.services.find_gcs_addresses", lambda: [])
    monkeypatch.setattr("ray._private.services.find_bootstrap_address", lambda temp_dir: None)
    assert ray_executor._reachable("auto") is None  # no cluster to find: ray.init says so at once, as before


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_an_address_with_a_port_out_of_range_is_refused_not_wrapped_to_another_port():
    """``127.0.0.1:99999`` was probed at port 34463 (99999 − 65536: the socket layer wraps the number), and the
    message advised `ray start --head --port=99999`, which Ray refuses."""
    import socket

    from aumann.simulators import ray_executor

    with socket.create_server(("127.0.0.1", 0)) as srv:  # what 99999 would have reached, were it free
        assert socket.getaddrinfo("127.0.0.1", srv.getsockname()[1] + 65536)[0][4][1] == srv.getsockname()[1]
        for port in (srv.getsockname()[1] + 65536, 0):
            with pytest.raises(ExecutorError, match=r"a Ray address is host:port .*a port is a number from 1 to 65535"):
                ray_executor._reachable(f"127.0.0.1:{port}", timeout=1.0)


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
@pytest.mark.parametrize("address", ["http://127.0.0.1:8265", "https://head.example:443", "grpc://h:6379"])
def test_an_address_with_a_scheme_other_than_ray_is_refused_in_one_whole_line(address):
    """Ray's own refusal of ``http://`` was cut at its first line: '... To fix this, either:' and nothing after."""
    from aumann.simulators import ray_executor

    with pytest.raises(ExecutorError, match=r"is not where a driver attaches .*GCS host:port") as info:
        ray_executor._reachable(address, timeout=1.0)
    assert "either:" not in str(info.value) and address in str(info.value)


class RuntimeEnvSetupError(Exception):
    """Ray's exception of that name (matched by name, as the executor does)."""


@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_a_runtime_env_that_cannot_be_set_up_says_why_not_ask_about_the_cluster(monkeypatch):
    """ray.init's 'Failed to set up runtime environment.' carries the reason on its next line (a working_dir over the
    upload limit); we kept the first line only and added a hint about `ray start` and RAY_AUTH_TOKEN. A task whose
    environment failed showed only that first line too (a pip error: its worker's traceback, whose last line says
    it)."""
    import ray

    from aumann.simulators import ray_executor

    monkeypatch.setattr(ray_executor, "_reachable", lambda address, timeout=None: ("127.0.0.1", 6380))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def init(**kw):
        raise RuntimeEnvSetupError("Failed to set up runtime environment.\nFailed to upload working_dir /w to the Ray "
                                   "cluster: Package size (600.00MiB) exceeds the maximum size of 512.00MiB.")

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ExecutorError, match=r"runtime environment could not be set up: Failed to upload working_dir "
                                            r"/w .*Package size \(600.00MiB\) exceeds") as info:
        RayExecutor(address="127.0.0.1:6380")._ensure()
    assert "RAY_AUTH_TOKEN" not in str(info.value) and "\n" not in str(info.value)
    pip = RuntimeEnvSetupError("[Node 10.0.0.5] Traceback (most recent call last):\n  File \"pip.py\", line 1\n"
                               "ModuleNotFoundError: No module named 'virtualenv'\nDuring handling ...\n"
                               "RuntimeError: Please install virtualenv to enable pip runtime env.")
    err = ray_executor._system_failure(pip, 0, 1, 3)
    assert str(err).endswith("(RuntimeEnvSetupError: RuntimeError: Please install virtualenv to enable pip runtime "
                             "env.)")


_PARKED = "class Car:\n    pass\n\n\ndef parked(x):\n    return ('parked', x, Car.__module__)\n"
_MOVING = "def moving(x):\n    return ('moving', x)\n"


def _two_files_named_scenario(root: Path) -> tuple:
    """``parked`` from ``root/a/scenario.py`` and ``moving`` from ``root/b/scenario.py``, both loaded in this process
    (as ``aumann run a/scenario.py:scenario`` and then ``b/scenario.py:scenario`` in one process load them)."""
    from aumann.checks import load_spec

    for sub, text in (("a", _PARKED), ("b", _MOVING)):
        (root / sub).mkdir()
        (root / sub / "scenario.py").write_text(text)
    return load_spec(f"{root / 'a' / 'scenario.py'}:parked")[1], load_spec(f"{root / 'b' / 'scenario.py'}:moving")[1]


def _call(item):
    fn, x = item
    return fn(x)


@pytest.mark.ray
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (optional extra: pip install 'aumann[ray]')")
def test_two_scenario_files_of_the_same_name_do_not_hide_each_other_on_ray(tmp_path, monkeypatch):
    # both files shipped as 'scenario.py' and the worker loaded whichever its sys.path found first under both module
    # names: "AttributeError: Can't get attribute 'parked'" (or 'moving')
    monkeypatch.setenv("RAY_ADDRESS", "")
    parked, moving = _two_files_named_scenario(tmp_path)
    with RayExecutor(workers=1, temp_dir=tmp_path) as ex:
        out = ex.map(_call, [(parked, 1), (moving, 2)])
    assert out == [("parked", 1, parked.__module__), ("moving", 2)]


def test_a_map_ships_only_the_scenario_files_its_payload_refers_to(tmp_path):
    # every scenario file loaded in the process went to every worker: one whose file was gone since (a test's
    # tmp_path, an edited checkout) failed every later map with "cannot find the scenario file 'scenario.py'"
    from aumann.simulators.remote import collecting

    parked, moving = _two_files_named_scenario(tmp_path)
    with collecting() as needed:
        dumps((_call, (moving, 2)))
    assert [name for name, _, _ in user_code(only=needed).files] == [moving.__module__]
    assert {name for name, _, _ in user_code().files} >= {parked.__module__, moving.__module__}  # (all, as before)
    (tmp_path / "a" / "scenario.py").unlink()
    with LocalExecutor(max_workers=2) as pool:
        assert pool.map(_call, [(moving, 1), (moving, 2)]) == [("moving", 1), ("moving", 2)]
