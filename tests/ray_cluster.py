"""A real two-node Ray cluster on loopback, for tests and benchmarks (``ray start`` processes, no mocks).

* the **head** is ``ray start --head --block`` on 127.0.0.1 with its own temp dir (never /tmp/ray),
  a HOME of its own (never ~/.ray) and every port picked free (other Ray clusters on the same machine
  are left alone);
* the **worker** is ``ray start --address HEAD --block`` on 127.0.0.2. Where the machine allows it
  (root, or an unprivileged user namespace) it runs in its own mount and PID namespace
  (``unshare``): a fresh tmpfs over the test's temp root, the head's temp dir and /dev/shm, and its
  working directory and temp dir inside that tmpfs, so it cannot see the driver's run directory,
  scenario files or object store -- a node without the driver's disk. Elsewhere it is approximated
  (``private`` is False): the same processes with a temp dir and working directory of their own,
  which proves less (the run directory stays visible to it) and is reported by the tests.
* every process is tracked by id: :meth:`stop` ends the worker's namespace (its init is killed, the
  kernel ends everything inside) and the head's process tree, by pid, then removes the temp dirs.

Token authentication is on: the token lives in the environment of the cluster's processes and of
the driver (:attr:`env`), never in a file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc; no psutil needed)."""
    kids = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _unshare_prefix() -> list[str] | None:
    """The ``unshare`` command that gives a process its own mount and PID namespace here, or None."""
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return None
    base = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    probe = 'd=$(mktemp -d) && mount -t tmpfs tmpfs "$d" && umount "$d"; rc=$?; rmdir "$d" 2>/dev/null; exit $rc'
    for prefix in ([*base] if os.geteuid() == 0 else [], [base[0], "--user", "--map-root-user", *base[1:]]):
        if not prefix:
            continue
        try:
            if subprocess.run([*prefix, "sh", "-c", probe], capture_output=True, timeout=30).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return None


class LoopbackCluster:
    """A head and a worker node started with ``ray start`` on loopback (see the module docstring).

    Args:
        root: a directory for logs (the test's temp dir); hidden from a private worker.
        head_cpus, worker_cpus: CPUs each node offers.
        object_store: bytes of object store per node.
    """

    def __init__(self, root: Path, *, head_cpus: int = 1, worker_cpus: int = 1,
                 object_store: int = 300 * 2**20) -> None:
        self.root = Path(root)
        self.head_cpus, self.worker_cpus, self.object_store = head_cpus, worker_cpus, object_store
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head_tmp = tempfile.mkdtemp(prefix="aumann-rh-")
        self.worker_tmp = tempfile.mkdtemp(prefix="aumann-rw-")
        self.home = tempfile.mkdtemp(prefix="aumann-rhome-")
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self._prefix = _unshare_prefix()
        self.private = self._prefix is not None
        self.head: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self._logs: list = []
        self._old_head_tmps: list[str] = []  # the temp dirs of heads before restart_head

    # ------------------------------------------------------------------ processes
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        env.update(self.env, HOME=self.home, PYTHONUNBUFFERED="1")
        return env

    def _ports(self) -> list[str]:
        return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
                "--min-worker-port=0", "--max-worker-port=0", "--disable-usage-stats",
                f"--object-store-memory={self.object_store}"]

    def _log(self, name: str):
        fh = open(self.root / f"ray-{name}.log", "ab")  # closed in stop()
        self._logs.append(fh)
        return fh

    def _head_args(self) -> list[str]:
        return [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                f"--num-cpus={self.head_cpus}", f"--temp-dir={self.head_tmp}", "--include-dashboard=false",
                *self._ports()]

    def kill_head(self) -> None:
        """Kill the head node's process tree at once (SIGKILL, by pid), as a crash of the head machine would."""
        if self.head is not None:
            _kill([self.head.pid, *descendants(self.head.pid)], signal.SIGKILL)
            self.head.wait(timeout=30)
            self.head = None

    def restart_head(self) -> None:
        """Kill the head (if it runs) and start a new one at the same address -- a new cluster there, as
        ``ray stop; ray start --head --port=...`` on the head machine gives -- and wait until it listens and
        has its node. The worker node goes first (it would end with the old head; while its raylet lives,
        ``ray start`` takes the old cluster for a running one), and the new head gets a temp dir of its own."""
        self.kill_worker()
        self.kill_head()
        self._old_head_tmps.append(self.head_tmp)
        self.head_tmp = tempfile.mkdtemp(prefix="aumann-rh-")
        self.head = subprocess.Popen(self._head_args(), env=self._env(), stdout=self._log("head"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_port(self.port)
        self._wait_nodes(1, watch=("head",))

    def start(self) -> LoopbackCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        head = self._head_args()
        log = self._log("head")
        for attempt in range(2):
            self.head = subprocess.Popen(head, env=self._env(), stdout=log, stderr=log, start_new_session=True)
            # the worker joins as soon as the head's GCS listens; start_worker then waits until both nodes are alive
            try:
                self._wait_port(self.port)
                break
            except RuntimeError:
                # ``ray start`` gives its raylet a fixed 30 s to register with the GCS and exits when a loaded machine
                # takes longer ('The current node timed out during startup', seen once in a 2-core CI run): once more
                if attempt or not self._head_timed_out():
                    raise
                try:  # what that head left (its GCS, in its session) goes; the next one gets a fresh port
                    os.killpg(self.head.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.port = free_port()
                self.address = f"127.0.0.1:{self.port}"
                head = [a if not a.startswith("--port=") else f"--port={self.port}" for a in head]
        self.start_worker()
        return self

    def _head_timed_out(self) -> bool:
        """Whether the head's log ends with Ray's own start-up time-out (a loaded machine, not a broken set-up)."""
        try:
            return "timed out during startup" in (self.root / "ray-head.log").read_text(errors="replace")
        except OSError:
            return False

    def _wait_port(self, port: int, timeout: float = 180.0) -> None:
        """Wait until the head listens on 127.0.0.1:``port`` (a head that exited is reported at once)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.head is not None and self.head.poll() is not None:
                raise RuntimeError(f"the head node exited ({self.head.returncode}); see {self.root}/ray-head.log")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"the Ray head did not listen on port {port} in {timeout:.0f} s; see {self.root}")

    def start_worker(self) -> None:
        """Start (or restart) the worker node and wait until the cluster has both nodes."""
        cwd = os.path.join(self.worker_tmp, "cwd")
        args = [RAY, "start", f"--address={self.address}", "--block", "--node-ip-address=127.0.0.2",
                f"--num-cpus={self.worker_cpus}", f"--temp-dir={os.path.join(self.worker_tmp, 'ray')}",
                *self._ports()]
        log = self._log("worker")
        if self._prefix is not None:
            hide = [str(self.root.parent if self.root.parent != Path("/") else self.root), self.head_tmp,
                    self.worker_tmp]
            mounts = " && ".join(f"mount -t tmpfs tmpfs {_q(d)}" for d in hide)
            script = (f"{mounts} && mount -t tmpfs tmpfs /dev/shm && mkdir -p {_q(cwd)} && cd {_q(cwd)} && "
                      + " ".join(_q(a) for a in args))
            cmd = [*self._prefix, "sh", "-c", script]
        else:
            os.makedirs(cwd, exist_ok=True)
            cmd = args
        self.worker = subprocess.Popen(cmd, env=self._env(), stdout=log, stderr=log, start_new_session=True,
                                       cwd=cwd if self._prefix is None else None)
        self._wait_nodes(2)

    def _wait_nodes(self, n: int, timeout: float = 180.0, watch: tuple[str, ...] = ("head", "worker")) -> None:
        """Wait until ``n`` nodes are alive. A watcher process connects once and asks the GCS every 0.2 s
        for up to 40 s (an interpreter that imports Ray takes seconds to start: one per question made each
        wait last several of them); a watcher that fails or lasts over 45 s is replaced after a second."""
        t0 = time.monotonic()
        code = ("import ray,sys,time; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
                "end, n = time.monotonic() + 40, int(sys.argv[2])\n"
                "alive = lambda: sum(1 for x in ray.nodes() if x['Alive'])\n"
                "while alive() < n and time.monotonic() < end:\n"
                "    time.sleep(0.2)\n"
                "print(alive())")
        watcher: subprocess.Popen | None = None
        started = 0.0
        try:
            while time.monotonic() - t0 < timeout:
                for p, name in ((self.head, "head"), (self.worker, "worker")):
                    if name in watch and p is not None and p.poll() is not None:
                        raise RuntimeError(f"the {name} node exited ({p.returncode}); see {self.root}/ray-{name}.log")
                if watcher is None:
                    watcher = subprocess.Popen([sys.executable, "-c", code, self.address, str(n)], env=self._env(),
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    started = time.monotonic()
                if watcher.poll() is None:
                    if time.monotonic() - started > 45:
                        watcher.kill()
                        watcher.wait()
                        watcher = None
                    time.sleep(0.1)
                    continue
                lines = watcher.communicate()[0].strip().splitlines()
                ok = watcher.returncode == 0 and lines and lines[-1].isdigit() and int(lines[-1]) >= n
                watcher = None
                if ok:
                    return
                time.sleep(1.0)
        finally:
            if watcher is not None and watcher.poll() is None:
                watcher.kill()
                watcher.wait()
        raise TimeoutError(f"the Ray cluster did not reach {n} node(s) in {timeout:.0f} s; see {self.root}")

    def worker_busy(self) -> bool:
        """Whether the worker node is running an aumann task right now (a ``ray::run_task`` process)."""
        if self.worker is None or self.worker.poll() is not None:
            return False
        return any(cmdline(p).startswith("ray::run_task") for p in descendants(self.worker.pid))

    def kill_worker(self) -> None:
        """Kill the worker node at once (SIGKILL to its namespace, or to its process tree), as a node
        failure would; :meth:`start_worker` brings it back."""
        if self.worker is None:
            return
        pids = descendants(self.worker.pid)
        _kill([self.worker.pid, *pids], signal.SIGKILL)
        self.worker.wait(timeout=30)
        self.worker = None

    def stop(self) -> None:
        """End every process this cluster started (by pid) and remove its temp dirs."""
        self.kill_worker()
        if self.head is not None:
            pids = [self.head.pid, *descendants(self.head.pid)]
            _kill(pids, signal.SIGTERM)
            try:
                # ``ray start --block`` does not exit on SIGTERM (measured: still up after 20 s, with its GCS and
                # agents): a longer wait only delays the SIGKILL below
                self.head.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            _kill([p for p in [self.head.pid, *pids] if _alive(p)], signal.SIGKILL)
            try:
                self.head.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
                pass
            self.head = None
        for fh in self._logs:
            fh.close()
        for d in (self.worker_tmp, self.home):
            shutil.rmtree(d, ignore_errors=True)
        # the driver (this process) logs into the head's session dir, and Ray's logger may reopen those
        # files while the interpreter exits: the head's temp dir goes once this process has exited
        from aumann.simulators.ray_executor import _remove_tree, remove_after_exit

        for d in [*self._old_head_tmps, self.head_tmp]:
            _remove_tree(d)
            remove_after_exit(d)

    def __enter__(self) -> LoopbackCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _q(text: str) -> str:
    import shlex

    return shlex.quote(str(text))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _kill(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:
            pass
