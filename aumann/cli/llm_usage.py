"""LLM usage at the CLI edge of ``aumann run``: the live progress column, the ledger, dry runs.

* :class:`UsageColumn` shows calls sent and requests so far, cache hits, tokens and cost so far in the
  progress bar (read live from the backend's :class:`~aumann.simulators.llm.Usage`).
* :func:`record_usage` keeps ``<out>/llm-usage.json``: what earlier invocations in the run
  directory spent is loaded first (a resumed run adds to it, the caps count it), and the account is
  saved however the invocation ends -- finished, stopped by ``--max-calls``/``--max-cost``
  (then ``manifest.json`` is written too, with the reason), or interrupted. A stopped invocation
  saves all its spend but not the decisions of the run it left unfinished (the resume counts them
  when it computes that run again), so ``llm_reliability`` is the same however often a run stopped.
  The ledger also keeps the run counts of each run written (``run_counts``): a run written again
  (``--strict`` recomputes a run whose optional stages did not all finish) replaces its earlier counts
  instead of counting its decisions twice.
* :func:`dry_run` plays the study with the offline policy in the loop and prints the estimate.
* :class:`ProgressLines` prints a plain progress line every ``interval`` seconds when stderr is not a
  terminal (a log file, CI, ``2> run.log``), where the live bar shows nothing.

The ledger is written on every way out: a finished run, a spend cap, an error, Ctrl-C, and SIGTERM /
SIGHUP (turned into a clean exit with code 128 + signal while the block runs).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rich.progress import ProgressColumn
from rich.text import Text

from aumann.cli.terminal import terminal_text
from aumann.errors import TerminatedBySignal


class UsageColumn(ProgressColumn):
    """A progress-bar column: ``LLM 123 call(s) sent for 130 request(s) so far, 40 cached, 12.3k tok, $0.0021``."""

    def __init__(self, backend: Any) -> None:
        super().__init__()
        self.backend = backend

    def render(self, task: Any) -> Text:
        from aumann.simulators.llm.usage import describe

        return Text(describe(self.backend.usage, price_known=getattr(self.backend, "price_known", True)),
                    style="cyan")


class _Account:
    def __init__(self, out: Path, backend: Any) -> None:
        from aumann.cli.llm_options import run_dir_file
        from aumann.simulators.llm.usage import LEDGER_NAME, load_ledger

        self.path = run_dir_file(out, LEDGER_NAME, "LLM usage ledger")  # never read through a link out of <out>
        self.backend = backend
        self.prior = load_ledger(self.path)
        self.invocations = 1
        self.runs: dict[int, Any] = {}  # run index → the run counts the ledger holds for it
        self.saved_runs: dict[int, Any] = {}  # the same after the last save (this invocation's runs merged in)
        if self.path.is_file():
            from aumann import bounded
            from aumann.simulators.llm.records import check_count

            try:
                data = bounded.read_json(self.path, what="LLM usage ledger", error=ValueError)
                self.invocations = check_count("invocations", data.get("invocations", 0)) + 1
            except (OSError, ValueError, AttributeError, TypeError):
                self.invocations = 1
            else:
                self.runs = _run_counts(data.get("run_counts"))
        if backend is not None:
            backend.usage.merge(self.prior)
        self.total = None

    def forget_runs(self, runs: Iterable[int]) -> None:
        """Take the run counts of ``runs`` (decisions, abstentions, ... :data:`RUN_COUNTS`) out of the account and
        the ledger: runs of another config that the study removes from the folder (their decisions counted in this
        folder's ``llm_usage`` and ``llm_reliability`` beside this config's runs; a 1-run study reported the 120
        decisions of an earlier 3-run one). What they spent -- requests, tokens, cost -- stays: it was spent here."""
        from aumann.simulators.llm.usage import RUN_COUNTS

        for r in runs:
            counts = self.runs.pop(r, None)
            if counts is None:
                continue
            for account in (self.prior, getattr(self.backend, "usage", None)):
                if account is not None:
                    account.merge(counts, sign=-1)
                    for k in RUN_COUNTS:  # never below 0 (a ledger edited by hand)
                        setattr(account, k, max(0, getattr(account, k)))

    def describe(self) -> dict[str, Any]:
        if self.backend is None:
            return {"backend": "offline", "note": "offline policy: decisions counted, nothing sent (0 calls)"}
        return self.backend.describe()

    def save(self, usage: Any, exc: BaseException | None = None, written: Any = None) -> Any:
        """Save the ledger; returns the account saved. An invocation that ``exc`` stopped leaves out the
        decisions (and abstentions, cache hits) of the run it did not finish (``exc.llm_unfinished``): the
        resume computes that run again and counts them then. Its spend -- requests, tokens, cost -- stays.
        A run written now (``written``, or ``exc.llm_written``: run index → its run counts) that an earlier
        invocation had written and counted (``--strict`` recomputes a run whose optional stages did not all
        finish) replaces those counts: its decisions count once."""
        from aumann.simulators.llm.usage import RUN_COUNTS, Usage, invalid_rate, save_ledger

        lost = getattr(exc, "llm_unfinished", None)
        if isinstance(lost, Usage):
            usage = usage.copy().merge(lost.run_counts(), sign=-1)
        if written is None:
            written = getattr(exc, "llm_written", None)
        runs = dict(self.runs)
        for r, counts in (written or {}).items():
            if not isinstance(counts, Usage):
                continue
            if r in runs:  # counted when an earlier invocation wrote this run: the new counts replace them
                usage = usage.copy().merge(runs[r], sign=-1)
                for k in RUN_COUNTS:  # never below 0 (a ledger edited by hand)
                    setattr(usage, k, max(0, getattr(usage, k)))
            runs[r] = counts.run_counts()
        self.saved_runs = runs
        replies = list(getattr(self.backend, "invalid_replies", []) or [])
        extra = {"not_counted_until_resumed": lost.run_counts().counters()} if isinstance(lost, Usage) else {}
        save_ledger(self.path, usage, invocations=self.invocations, llm=self.describe(),
                    invalid_rate=round(invalid_rate(usage), 6), invalid_replies=replies[:20],
                    run_counts={str(r): {k: getattr(c, k) for k in RUN_COUNTS} for r, c in sorted(runs.items())},
                    **extra)
        return usage

    def finish(self, result: Any) -> dict[str, Any]:
        """Save the ledger; return the manifest/report fields ``llm_usage`` and ``llm``."""
        if self.backend is not None:
            total = self.backend.usage
        else:
            total = self.prior.copy().merge(getattr(result, "usage", None))
        total = self.save(total, written=getattr(result, "run_counts", None) or {})
        self.total = total
        return {"llm_usage": total.manifest_dict(), "llm": {**self.describe(), "invocations": self.invocations}}


def _run_counts(raw: Any) -> dict[int, Any]:
    """The ledger's ``run_counts`` (run index → its :data:`~aumann.simulators.llm.usage.RUN_COUNTS`); ``{}`` when
    absent (a ledger written before it was kept) or not of that form."""
    from aumann.simulators.llm.records import check_count
    from aumann.simulators.llm.usage import RUN_COUNTS, Usage

    if not isinstance(raw, dict):
        return {}
    try:
        return {int(r): Usage(**{k: check_count(k, c.get(k, 0)) for k in RUN_COUNTS}) for r, c in raw.items()
                if str(r).isdigit() and isinstance(c, dict)}
    except (ValueError, TypeError):
        return {}


@contextlib.contextmanager
def record_usage(out: Path, backend: Any, *, write_manifest: Callable[[dict[str, Any]], Any]) -> Iterator[_Account]:
    """Load the run directory's usage ledger and save it however the block ends (see the module)."""
    from aumann.simulators.llm import BudgetExceededError

    account = _Account(out, backend)
    restore = _exit_on_signals()
    finished = False
    try:
        yield account
        finished = True
    except BudgetExceededError as exc:
        if backend is not None:
            saved = account.save(backend.usage, exc)
            write_manifest({"status": "stopped", "stopped_because": str(exc),
                            "llm_usage": saved.manifest_dict(),
                            "llm": {**account.describe(), "invocations": account.invocations}})
        raise
    except BaseException as exc:
        if backend is not None:
            account.save(backend.usage, exc)
        raise
    finally:
        restore()
        if backend is not None and hasattr(backend, "close"):
            _close(backend, keep_failed=finished)


def _close(backend: Any, *, keep_failed: bool) -> None:
    """Close ``backend``; a run that stopped (``keep_failed=False``) does not store the failed decisions that no
    later answer confirmed (they may be the start of an outage: a resume asks them again)."""
    from aumann.simulators.llm.backend import LLMBackend

    if isinstance(backend, LLMBackend):
        backend.close(keep_failed=keep_failed)
    else:
        backend.close()


def _exit_on_signals() -> Callable[[], None]:
    """Turn SIGTERM/SIGHUP into ``SystemExit(128 + signal)`` while the usage block runs (so the ledger is
    saved on the way out); returns the function that restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def leave(signum: int, frame: Any) -> None:
        raise TerminatedBySignal(128 + signum)

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            try:
                previous[sig] = signal.signal(sig, leave)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                pass

    def restore() -> None:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)

    return restore


class ProgressLines:
    """A plain progress line on stderr every ``interval`` seconds when stderr is not a terminal."""

    def __init__(self, label: str, backend: Any = None, *, interval: float = 15.0, stream: Any = None,
                 force: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = force or not (hasattr(self.stream, "isatty") and self.stream.isatty())
        self.label = label
        self.backend = backend
        self.interval = float(interval)
        self.status = "starting"
        self.done = 0
        self.total = 0
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, status: str, done: int | None = None, total: int | None = None) -> None:
        self.status = status
        if done is not None:
            self.done = done
        if total is not None:
            self.total = total

    def line(self) -> str:
        from aumann.simulators.llm.usage import describe

        el = time.monotonic() - self._t0
        parts = [f"[{el:7.0f} s] {self.label}: {self.status}"]
        if self.total:
            parts.append(f"{self.done}/{self.total} stage(s)")
        if self.backend is not None and getattr(self.backend, "usage", None) is not None:
            parts.append(describe(self.backend.usage, price_known=getattr(self.backend, "price_known", True)))
        return " · ".join(parts)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                print(self.line(), file=self.stream, flush=True)

    def __enter__(self) -> ProgressLines:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="aumann-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
            with contextlib.suppress(Exception):
                print(self.line().replace(self.status, "finished" if exc[0] is None else "stopped", 1),
                      file=self.stream, flush=True)


def dry_run(scenario: Any, config: Any, out: Path, backend: Any, label: str, executor: Any, args: Any,
            console: Any) -> int:
    """Play the study with the offline policy answering cache misses; print the estimate. Sends and
    writes nothing (finished runs in ``out`` are read back and not counted)."""
    from aumann.cli.llm_options import ASSUMED_LATENCY
    from aumann.simulators.llm.estimate import estimate_run
    from aumann.studies.faithfulness import run_study

    console.print(f"dry run of {terminal_text(scenario.name, rich=True)}: {config.runs} run(s) with the offline "
                  f"policy in the loop (model {backend.model}, concurrency {backend.concurrency}) ...")
    try:
        result = run_study(scenario, config, out_dir=out if out.is_dir() else None, backend=backend,
                           backend_label=label, executor=executor, write=False)
    finally:
        if executor is not None:
            executor.close()
    latency = ASSUMED_LATENCY if getattr(args, "assumed_latency", None) is None else args.assumed_latency
    est = estimate_run(backend.usage, concurrency=backend.concurrency, latency=latency,
                       price=backend.price, rpm=args.rpm, tpm=args.tpm)
    print(terminal_text(f"{scenario.name}: {result.computed} run(s) to compute, {result.resumed} already finished in "
                        f"{out}"))
    print(est.text(model=backend.model, price=backend.price))
    return 0


__all__ = ["ProgressLines", "UsageColumn", "dry_run", "record_usage"]
