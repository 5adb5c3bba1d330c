"""LLM usage at the CLI edge of ``aumann run``: the live progress column, the ledger, dry runs.

* :class:`UsageColumn` shows calls done / planned, cache hits, tokens and cost so far in the
  progress bar (read live from the backend's :class:`~aumann.simulators.llm.Usage`).
* :func:`record_usage` keeps ``<out>/llm-usage.json``: what earlier invocations in the run
  directory spent is loaded first (a resumed run adds to it, the caps count it), and the account is
  saved however the invocation ends -- finished, stopped by ``--max-calls``/``--max-cost``
  (then ``manifest.json`` is written too, with the reason), or interrupted.
* :func:`dry_run` plays the study with the offline policy in the loop and prints the estimate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.progress import ProgressColumn
from rich.text import Text


class UsageColumn(ProgressColumn):
    """A progress-bar column: ``LLM 123 call(s) / 130 planned, 40 cached, 12.3k tok, $0.0021``."""

    def __init__(self, backend: Any) -> None:
        super().__init__()
        self.backend = backend

    def render(self, task: Any) -> Text:
        from aumann.simulators.llm.usage import describe

        return Text(describe(self.backend.usage, price_known=getattr(self.backend, "price_known", True)),
                    style="cyan")


class _Account:
    def __init__(self, out: Path, backend: Any) -> None:
        from aumann.simulators.llm.usage import LEDGER_NAME, load_ledger

        self.path = out / LEDGER_NAME
        self.backend = backend
        self.prior = load_ledger(self.path)
        self.invocations = 1
        if self.path.is_file():
            import json

            try:
                self.invocations = int(json.loads(self.path.read_text(encoding="utf-8")).get("invocations", 0)) + 1
            except (OSError, ValueError, AttributeError, TypeError):
                self.invocations = 1
        if backend is not None:
            backend.usage.merge(self.prior)
        self.total = None

    def describe(self) -> dict[str, Any]:
        if self.backend is None:
            return {"backend": "offline", "note": "offline policy: decisions counted, nothing sent (0 calls)"}
        return self.backend.describe()

    def save(self, usage: Any) -> None:
        from aumann.simulators.llm.usage import save_ledger

        save_ledger(self.path, usage, invocations=self.invocations, llm=self.describe())

    def finish(self, result: Any) -> dict[str, Any]:
        """Save the ledger; return the manifest/report fields ``llm_usage`` and ``llm``."""
        if self.backend is not None:
            total = self.backend.usage
        else:
            total = self.prior.copy().merge(getattr(result, "usage", None))
        self.total = total
        self.save(total)
        return {"llm_usage": total.manifest_dict(), "llm": {**self.describe(), "invocations": self.invocations}}


@contextlib.contextmanager
def record_usage(out: Path, backend: Any, *, write_manifest: Callable[[dict[str, Any]], Any]) -> Iterator[_Account]:
    """Load the run directory's usage ledger and save it however the block ends (see the module)."""
    from aumann.simulators.llm import BudgetExceededError

    account = _Account(out, backend)
    try:
        yield account
    except BudgetExceededError as exc:
        if backend is not None:
            account.save(backend.usage)
            write_manifest({"status": "stopped", "stopped_because": str(exc),
                            "llm_usage": backend.usage.manifest_dict(),
                            "llm": {**account.describe(), "invocations": account.invocations}})
        raise
    except BaseException:
        if backend is not None:
            account.save(backend.usage)
        raise
    finally:
        if backend is not None and hasattr(backend, "close"):
            backend.close()


def dry_run(scenario: Any, config: Any, out: Path, backend: Any, label: str, executor: Any, args: Any,
            console: Any) -> int:
    """Play the study with the offline policy answering cache misses; print the estimate. Sends and
    writes nothing (finished runs in ``out`` are read back and not counted)."""
    from aumann.simulators.llm.estimate import estimate_run
    from aumann.studies.faithfulness import run_study

    console.print(f"dry run of {scenario.name}: {config.runs} run(s) with the offline policy in the loop "
                  f"(model {backend.model}, concurrency {args.concurrency}) ...")
    try:
        result = run_study(scenario, config, out_dir=out if out.is_dir() else None, backend=backend,
                           backend_label=label, executor=executor, write=False)
    finally:
        if executor is not None:
            executor.close()
    est = estimate_run(backend.usage, concurrency=args.concurrency, latency=args.assumed_latency,
                       price=backend.price, rpm=args.rpm, tpm=args.tpm)
    print(f"{scenario.name}: {result.computed} run(s) to compute, {result.resumed} already finished in {out}")
    print(est.text(model=backend.model, price=backend.price))
    return 0


__all__ = ["UsageColumn", "dry_run", "record_usage"]
