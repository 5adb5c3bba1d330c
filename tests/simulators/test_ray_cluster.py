"""aumann on a real two-node Ray cluster on loopback (tests/ray_cluster.py: ``ray start --head`` and
``ray start --address`` as separate processes; where the machine allows it, the worker node in its own
mount namespace, so it cannot see the driver's disk).

One cluster serves the whole module (Ray starts slowly). What is checked: ``aumann run`` attaches with
``--ray-address`` and ``RAY_ADDRESS``; a user scenario file and its sibling module travel to the worker;
every output file equals the serial run's (the manifest records the executor and Ray's version; wall
times live in timings/ and in the report's cost section); a worker node killed mid-run is survived;
Mesa grid forks arrive writable; a task's exception comes back typed with its remote traceback; and
attribution fans out with the single-process bits.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli_run import invoke_run as _invoke

pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="ray is not installed (optional extra: pip install 'aumann[ray]')"),
              pytest.mark.filterwarnings("ignore:Random number generator not specified")]

SCENARIO_FILE = '''"""A user scenario in a file of its own with a sibling module (tiny_world)."""

from pydantic import Field
from tiny_world import build, give_nothing

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder


class Config(ScenarioConfig):
    agents: int = Field(10, ge=2)
    steps: int = Field(5, ge=2)
    width: int = 4
    height: int = 4


scenario = Scenario(
    name="cluster-boltzmann",
    description="Boltzmann wealth on a Mesa grid, from a user file with a sibling module",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"wealth": "wealth"}),
    features=("wealth",),
    indicator=lambda cfg: indicators.get("gini"),
    original=lambda cfg: indicators.get("gini"),
    baseline_action=give_nothing,
    baseline_action_by="id",
    baseline_description="the agent gives nothing this step",
)
'''

SIBLING = '''from mesa.examples import BoltzmannWealth

from aumann.simulators import override_next_step


def build(cfg, rng, backend=None):
    from mesa.examples.basic.boltzmann_wealth_model import model

    params, seed = dict(n=cfg.agents, width=cfg.width, height=cfg.height), int(rng.integers(2**31))
    if hasattr(model, "BoltzmannScenario"):  # Mesa >= 3.5: parameters as a Scenario
        return BoltzmannWealth(model.BoltzmannScenario(**params, rng=seed))
    return BoltzmannWealth(**params, seed=seed)


def give_nothing(model, ids):
    for agent in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(agent, "give_money")
'''

CONFIG = """runs = {runs}
seed = 4
[study]
permutations = 8
random_orderings = 2
path_orders = 2
quadrature_steps = 8
"""


def _refresh_auth() -> None:
    from aumann.simulators.ray_executor import _refresh_auth as refresh

    refresh()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.ray_cluster import LoopbackCluster

    c = LoopbackCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    with pytest.MonkeyPatch.context() as mp:
        for k, v in c.env.items():
            mp.setenv(k, v)
        mp.delenv("RAY_ADDRESS", raising=False)
        _refresh_auth()  # a Ray imported earlier in this process caches the auth settings
        yield c
    _refresh_auth()
    import ray

    if ray.is_initialized():
        ray.shutdown()
    c.stop()


@pytest.fixture
def live(cluster):
    """The cluster with both nodes up (a test that killed the worker brings it back here)."""
    if cluster.worker is None or cluster.worker.poll() is not None:
        cluster.start_worker()
    return cluster


@pytest.fixture(scope="module")
def user_scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user-scenario")
    (folder / "model.py").write_text(SCENARIO_FILE, encoding="utf-8")
    (folder / "tiny_world.py").write_text(SIBLING, encoding="utf-8")
    return folder


def _run(scenario_dir: Path, out: Path, runs: int, *extra: str) -> int:
    cfg = out.parent / f"cfg-{runs}.toml"
    cfg.write_text(CONFIG.format(runs=runs), encoding="utf-8")
    return _invoke(f"{scenario_dir / 'model.py'}:scenario", "--config", str(cfg), "--out", str(out), "--no-plots",
                   "--static", *extra)


_SERIAL: dict[int, Path] = {}
#: runs of the user scenario in every test that compares a cluster run with the serial one: one count, so one
#: serial run serves them all (each node offers 1 CPU, so 2 runs are in flight at once and both nodes get one;
#: the third keeps the run going while the worker node is killed)
RUNS = 3


def _serial(scenario_dir: Path, root: Path, runs: int) -> Path:
    if runs not in _SERIAL:
        out = root / f"serial-{runs}"
        assert _run(scenario_dir, out, runs) == 0
        _SERIAL[runs] = out
    return _SERIAL[runs]


_VOLATILE = [re.compile(p) for p in (r"command: .*", r"created: [0-9T:+-]+", r"wall [0-9.]+ [a-zµ]*s",
                                     r"Wall time per stage\n\n(?:\|[^\n]*\n)+",  # report.md's stage table
                                     r"(?s)Wall time per stage</caption>.*?</table>",  # report.html's
                                     # whether stage times overlap (runs on two workers at once) is wall-clock too
                                     r"\n> Some stages ran at the same time [^\n]*\n",
                                     r'<div class="note info">Some stages ran at the same time .*?</div>')]


def stage_rows(out: Path) -> list[str]:
    """The stage names of report.md's "Wall time per stage" table, in order."""
    table = re.search(r"Wall time per stage\n\n((?:\|[^\n]*\n)+)", (out / "report.md").read_text()).group(1)
    return [row.split("|")[1].strip() for row in table.splitlines()[2:]]


def _without_run_description(text: str) -> str:
    """report.md / report.html minus the run's description (command line, creation time, wall times),
    which the manifest also holds; everything else in them must match byte for byte."""
    for pat in _VOLATILE:
        text = pat.sub("<run description>", text)
    return text


def assert_same_outputs(a: Path, b: Path) -> list[str]:
    """Every file of run directory ``a`` exists in ``b`` with the same bytes, except manifest.json
    (it records the executor) and timings/ (wall-clock seconds); the reports are compared without
    their run description. Returns the files compared."""
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    other = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert files == other
    compared = []
    for rel in files:
        if rel == "manifest.json" or rel.startswith("timings/"):
            continue
        x, y = (a / rel).read_bytes(), (b / rel).read_bytes()
        if rel in ("report.md", "report.html"):
            x, y = (_without_run_description(t.decode()).encode() for t in (x, y))
        assert x == y, f"{rel} differs from the serial run"
        compared.append(rel)
    return compared


def _on_worker(cluster, fn, *args):
    """Run ``fn(*args)`` as a Ray task pinned to the worker node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    _refresh_auth()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    try:
        node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == "127.0.0.2")
        task = ray.remote(fn).options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        return ray.get(task.remote(*args), timeout=300)
    finally:
        ray.shutdown()


def _sees(paths):
    import os

    return {p: os.path.exists(p) for p in paths}


def test_the_worker_node_has_no_access_to_the_drivers_disk(live, user_scenario, tmp_path):
    marker = tmp_path / "run-dir-marker.txt"
    marker.write_text("x")
    seen = _on_worker(live, _sees, [str(marker), str(user_scenario / "model.py")])
    if not live.private:
        pytest.skip("no mount namespace here (unshare needs root or unprivileged user namespaces): the worker "
                    "shares the driver's disk, the documented approximation")
    assert seen == {str(marker): False, str(user_scenario / "model.py"): False}


def test_a_user_scenario_file_runs_on_the_cluster_like_the_serial_run(live, user_scenario, tmp_path):
    import ray

    serial = _serial(user_scenario, tmp_path.parent, RUNS)
    out = tmp_path / "cluster"
    assert _run(user_scenario, out, RUNS, "--ray-address", live.address) == 0
    compared = assert_same_outputs(serial, out)
    assert "faithfulness.csv" in compared and any(c.startswith("runs/") for c in compared)
    assert any(c.startswith("attributions/") for c in compared) and any(c.startswith("panels/") for c in compared)
    ex = json.loads((out / "manifest.json").read_text())["execution"]
    assert ex["executor"] == "ray" and ex["ray_version"] == ray.__version__ and ex["cluster"] == "attached"
    assert ex["nodes"] == 2 and ex["nodes_used"] == 2  # runs landed on both nodes
    assert json.loads((serial / "manifest.json").read_text())["execution"]["executor"] == "serial"
    # the stages ran on the workers: their wall times came back, so the report's stage table has the serial run's
    # rows (it had "tables and plots" alone)
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (serial, out)]
    assert list(manifests[1]["stage_seconds"]) == list(manifests[0]["stage_seconds"])
    assert stage_rows(out) == stage_rows(serial) and "simulate" in stage_rows(out) and len(stage_rows(out)) > 3
    assert all(v > 0 for v in manifests[1]["stage_seconds"].values())


def test_ray_address_from_the_environment_and_executor_ray(live, user_scenario, tmp_path, monkeypatch):
    serial = _serial(user_scenario, tmp_path.parent, RUNS)
    monkeypatch.setenv("RAY_ADDRESS", live.address)
    out = tmp_path / "env"
    assert _run(user_scenario, out, RUNS, "--executor", "ray", "--workers", "2") == 0
    assert_same_outputs(serial, out)
    assert json.loads((out / "manifest.json").read_text())["execution"]["workers"] == 2


@pytest.fixture(scope="class")
def job(cluster):
    """One RayExecutor attached to the cluster for the tests of a class: one Ray job, whose worker processes
    on both nodes start (and import aumann) once instead of once per test. Closed after the class, so the
    later tests' ``aumann run`` attaches with a job of its own."""
    from aumann.simulators import RayExecutor

    if cluster.worker is None or cluster.worker.poll() is not None:
        cluster.start_worker()
    with RayExecutor(address=cluster.address) as ex:
        yield ex


class TestOneJob:
    """Tasks sent through one executor: Mesa forks, a failing task, attribution blocks."""

    def test_fork_many_on_mesa_grids_through_the_cluster_equals_serial(self, live, job):
        from aumann.simulators import fork_many, simulate
        from tests.simulators.mesa_examples import EXAMPLES
        from tests.simulators.test_mesa_forks import _recorder

        for name in ("sugarscape", "epstein"):  # property layers (numpy, written by the model), a deep grid
            model = EXAMPLES[name](2)
            rec = _recorder(model)
            simulate(model, steps=2, recorder=rec)
            arms = {"a": None, "b": None, "c": None}
            serial = fork_many(model, arms, steps=3, recorder=rec)
            remote = fork_many(model, arms, steps=3, recorder=rec, executor=job)
            assert all(serial[k].panel.equals(remote[k].panel) for k in arms), name

    def test_a_failing_task_comes_back_typed_with_its_remote_traceback(self, live, job):
        from aumann.errors import CheckpointError, RemoteTaskError

        out = job.map(_fails_on, [0, 1, 2], return_exceptions=True)
        assert out[0] == 0
        assert isinstance(out[1], CheckpointError) and "model 1 cannot be copied" in str(out[1])
        cause = out[1].__cause__
        assert isinstance(cause, RemoteTaskError) and "ray node" in cause.where
        assert "_fails_on" in out[1].remote_traceback and "Traceback" in out[1].remote_traceback
        assert isinstance(out[2], ValueError) and isinstance(out[2].__cause__, RemoteTaskError)
        with pytest.raises(CheckpointError, match="cannot be copied"):
            job.map(_fails_on, [1])

    def test_attribution_fans_out_over_the_cluster_with_the_single_process_bits(self, live, job):
        from aumann.attribution import AumannShapley, Panel, SampledShapley, attribute

        panel = Panel(np.abs(np.random.default_rng(3).normal(size=(6, 200, 2))))
        before = job.task_hosts.copy()  # the hosts of the tasks that earlier tests sent through this executor
        for method in (SampledShapley(40), SampledShapley(200, block_size=25), AumannShapley(closed_form=False)):
            a = attribute("gini", panel.select_steps([0]) if method.name == "sampled_shapley" and
                          getattr(method, "block_size", None) else panel, method, rng=9)
            b = attribute("gini", panel.select_steps([0]) if method.name == "sampled_shapley" and
                          getattr(method, "block_size", None) else panel, method, rng=9, executor=job)
            assert a.phi.tobytes() == b.phi.tobytes() and (a.stderr is None or a.stderr.tobytes() == b.stderr.tobytes())
        assert len(job.task_hosts - before) == 2  # this test's blocks ran on both nodes


def _fails_on(x):
    from aumann.errors import CheckpointError

    if x == 1:
        raise CheckpointError(f"model {x} cannot be copied")
    if x == 2:
        raise ValueError("plain user error")
    return x


#: 4 agents x 3 steps: the two runs still send 58 requests at the loopback's answers (51 in the runs, 7 in forks),
#: so --max-calls 15 stops mid-run and the one-run study has forks to send, at about a quarter of 8 x 4's run time
LLM_TINY = """
agents = 4
steps = 3
runs = {runs}
seed = 3
[study]
permutations = 4
random_orderings = 2
path_orders = 2
quadrature_steps = 8
"""


def test_llm_runs_on_the_cluster_share_one_cache_one_cap_and_every_endpoint(live, tmp_path):
    """social-llm against two loopback OpenAI-compatible servers: runs and their forks on both nodes,
    one response cache in the run directory written by the driver's node only, and --max-calls for
    the whole cluster."""
    from aumann.simulators.llm import BudgetExceededError, ResponseCache
    from tests.llm_loopback import LoopbackLLM

    cfg = tmp_path / "llm.toml"
    cfg.write_text(LLM_TINY.format(runs=2), encoding="utf-8")
    with LoopbackLLM() as a, LoopbackLLM() as b:
        def run(out, *extra):
            return _invoke("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static",
                           "--backend", "openai", "--model", "m", "--base-url", a.base_url, "--base-url", b.base_url,
                           "--concurrency", "4", *extra)

        assert run(tmp_path / "serial") == 0
        asked = a.stats()["requests"] + b.stats()["requests"]
        assert run(tmp_path / "cluster", "--ray-address", live.address) == 0
        sent = a.stats()["requests"] + b.stats()["requests"] - asked
        files = ["faithfulness.csv", *(f"runs/run-{r:03d}.json" for r in range(2))]
        for f in files:
            assert (tmp_path / "serial" / f).read_bytes() == (tmp_path / "cluster" / f).read_bytes(), f
        man = json.loads((tmp_path / "cluster" / "manifest.json").read_text())
        u = man["llm_usage"]
        assert u["calls"] + u["fork_calls"] == sent > 0  # the workers' usage merged back, exactly
        assert man["execution"]["nodes_used"] == 2
        assert len(ResponseCache(tmp_path / "cluster" / "llm-cache.sqlite")) > 0  # written through the service
        assert a.stats()["requests"] > 0 and b.stats()["requests"] > 0  # both endpoints served the workers
        # one run: its forks (deletion, the re-simulation game) go to the cluster, the model's checkpoint
        # carrying the served backend instead of the driver's
        cfg1 = tmp_path / "llm1.toml"
        cfg1.write_text(LLM_TINY.format(runs=1), encoding="utf-8")
        for name, extra in (("serial1", ()), ("cluster1", ("--ray-address", live.address))):
            assert _invoke("social-llm", "--config", str(cfg1), "--out", str(tmp_path / name), "--no-plots",
                           "--static", "--backend", "openai", "--model", "m", "--base-url", a.base_url,
                           "--base-url", b.base_url, *extra) == 0
        for f in ("faithfulness.csv", "runs/run-000.json"):
            assert (tmp_path / "serial1" / f).read_bytes() == (tmp_path / "cluster1" / f).read_bytes(), f
        one = json.loads((tmp_path / "cluster1" / "manifest.json").read_text())
        assert one["execution"]["nodes_used"] >= 1 and one["llm_usage"]["fork_decisions"] > 0
        before = a.stats()["requests"] + b.stats()["requests"]
        with pytest.raises(BudgetExceededError, match="max_calls=15"):
            run(tmp_path / "capped", "--ray-address", live.address, "--max-calls", "15", "--workers", "2")
        assert a.stats()["requests"] + b.stats()["requests"] - before == 15  # one cap for the whole cluster


def test_a_bad_address_is_one_line_and_fails_fast(tmp_path, user_scenario, capsys):
    from aumann.cli import main

    t0 = time.monotonic()
    rc = main(["run", f"{user_scenario / 'model.py'}:scenario", "--out", str(tmp_path / "x"), "--ray-address",
               "127.0.0.1:1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "ExecutorError" in err and "127.0.0.1:1" in err
    assert time.monotonic() - t0 < 60


def test_a_wrong_auth_token_is_one_line_that_names_it(live, user_scenario, tmp_path):
    """Ray's core warned once a second for ~20 s on stderr, then aumann said 'is ray start --head running there'.
    (In a fresh process, as a user meets it: a process that attached before logs Ray's core into a file.)"""
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAY_AUTH_TOKEN": "0" * 64, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "aumann", "run", f"{user_scenario / 'model.py'}:scenario", "--out",
                           str(tmp_path / "x"), "--ray-address", live.address], env=env, capture_output=True,
                          text=True, timeout=300)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err[-2000:]
    assert "refused the authentication token" in err and "RAY_AUTH_TOKEN" in err and "0" * 64 not in err


def test_killing_the_worker_node_mid_run_is_survived(live, user_scenario, tmp_path):
    """The last test of the module: it kills the worker node while it runs a task."""
    serial = _serial(user_scenario, tmp_path.parent, RUNS)
    out = tmp_path / "killed"
    result: dict = {}

    def go() -> None:
        try:
            result["rc"] = _run(user_scenario, out, RUNS, "--ray-address", live.address, "--workers", "2")
        except BaseException as exc:  # handed to the test's thread
            result["exc"] = exc

    th = threading.Thread(target=go)
    th.start()
    killed = False
    deadline = time.monotonic() + 600
    while th.is_alive() and time.monotonic() < deadline:
        if live.worker_busy():
            live.kill_worker()
            killed = True
            break
        time.sleep(0.05)
    th.join(timeout=900)
    assert not th.is_alive(), "the run did not finish after the worker node was killed"
    assert "exc" not in result, result.get("exc")
    assert killed, "no task ran on the worker node before the run ended (nothing was killed)"
    assert result["rc"] == 0
    assert_same_outputs(serial, out)


def test_killing_the_head_mid_run_is_one_line_in_bounded_time(live, user_scenario, tmp_path):
    """The very last test of the module: it kills the head. The driver used to wait on the dead head (in
    ray.wait, then in ray.nodes() for the manifest) until Ray ended its process after 60 s (exit 1, a fatal
    C++ log); now the run stops with one ExecutorError line and exit 2, the finished runs kept."""
    import os
    import subprocess
    import sys

    from tests.ray_cluster import _kill, descendants

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(runs=4), encoding="utf-8")
    out = tmp_path / "headless"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "aumann", "run", f"{user_scenario / 'model.py'}:scenario", "--config", str(cfg),
           "--out", str(out), "--no-plots", "--static", "--ray-address", live.address, "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and not live.worker_busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before a task ran on the worker node"
        _kill([live.head.pid, *descendants(live.head.pid)], 9)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in err.splitlines() if ln.startswith("aumann")]
    assert proc.returncode == 2 and time.monotonic() - t0 < 58, err[-3000:]  # before Ray's own 60 s exit
    assert len(lines) == 1 and "ExecutorError" in lines[0] and "is gone" in lines[0], err[-3000:]
    assert not (out / "manifest.json").exists()  # never shown as complete


def test_a_head_started_again_at_the_same_address_is_attached_to_afresh(cluster, monkeypatch):
    """The last test of the module (the one before killed the head). A head once marked lost stayed lost until
    close(): every later call said 'is gone' though the user had started the head again at the same address. Now
    the next call probes again and attaches afresh; a head restarted between two calls without anyone noticing
    is attached to afresh too -- its first request to the new GCS used to end this process (Ray's fatal
    WrongClusterID check)."""
    import ray

    from aumann.errors import AumannWarning, ExecutorError
    from aumann.simulators import RayExecutor, ray_executor

    monkeypatch.setattr(ray_executor, "HEAD_GONE_SECONDS", 1.0)
    if ray.is_initialized():
        ray.shutdown()
    cluster.restart_head()
    ex = RayExecutor(address=cluster.address, workers=1)
    try:
        assert ex.map(abs, [-1, -2]) == [1, 2]
        first = ray.get_runtime_context().get_node_id()  # the head's node: each start of the head is a new one
        cluster.kill_head()
        with pytest.raises(ExecutorError, match="is gone"):
            ex.map(abs, [-3])  # marked lost once it refused for HEAD_GONE_SECONDS
        t0 = time.monotonic()
        with pytest.raises(ExecutorError, match="is gone"):
            ex.map(abs, [-3])  # probed again: still gone, said at once
        assert time.monotonic() - t0 < 10
        cluster.restart_head()
        with pytest.warns(AumannWarning, match="attached to it afresh"):
            assert ex.map(abs, [-4]) == [4]  # it said 'is gone' forever
        second = ray.get_runtime_context().get_node_id()
        assert first and second and second != first
        cluster.restart_head()  # restarted between two calls: nothing refused while this process looked
        with pytest.warns(AumannWarning, match="attached to it afresh"):
            assert ex.map(abs, [-5]) == [5]
        assert ray.get_runtime_context().get_node_id() not in (first, second)
    finally:
        ex.close()
