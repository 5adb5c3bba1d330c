"""What an LLM run would cost, from a dry run's counts: requests, tokens, dollars, wall time.

A dry run (``OpenAIBackend(dry_run=True, fallback=<the offline policy>)``) plays the whole study
with the offline policy answering in place of the model and counts what would be sent after the
cache. :func:`estimate_run` turns those counts into a :class:`RunEstimate`:

* time, factual runs: ``rounds × latency`` -- ``rounds`` = Σ over the runs' dependent batches of
  ⌈requests in the batch / concurrency⌉ (a sequential phase is a batch of one per request);
* time, forks: ⌈fork requests / concurrency⌉ × latency (forks run concurrently, their requests
  share the in-flight pool);
* never less than the rate limits allow: requests / rpm and tokens / tpm minutes.

It is an estimate: the model's answers change the trajectory (and so the later prompts) and real
latencies vary; prompt tokens are characters / 4.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from aumann.simulators.llm.prices import Price
from aumann.simulators.llm.usage import Usage


@dataclass(frozen=True)
class RunEstimate:
    """A dry run's forecast for the real run (see the module docstring)."""

    calls: int
    fork_calls: int
    cache_hits: int
    decisions: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    seconds: float
    concurrency: int
    latency_s: float

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self, *, model: str, price: Price | None) -> str:
        """A few lines for the console."""
        cost = (f"~${self.cost_usd:,.4f} ({model}: ${price.input:g} / ${price.output:g} per M input / output "
                f"tokens)" if price is not None and self.cost_usd is not None else
                f"unknown: no price for model {model!r} (add it with --prices FILE)")
        mins = self.seconds / 60
        when = f"{self.seconds:,.0f} s" if self.seconds < 600 else f"{mins:,.1f} min"
        return "\n".join([
            "Dry run: nothing was sent; the offline policy answered in place of the model.",
            f"  requests after the cache: {self.calls:,} ({self.calls - self.fork_calls:,} in the runs, "
            f"{self.fork_calls:,} in forks); {self.cache_hits:,} served by the cache; "
            f"{self.decisions:,} decisions",
            f"  tokens: ~{self.prompt_tokens:,} prompt + ~{self.completion_tokens:,} completion",
            f"  cost: {cost}",
            f"  time: ~{when} at concurrency {self.concurrency} and {self.latency_s:g} s per request",
            "  (an estimate: real answers change later prompts; tokens from the prompt and the schema's answer)",
        ])


def estimate_run(usage: Usage, *, concurrency: int, latency: float, price: Price | None,
                 rpm: float | None = None, tpm: float | None = None) -> RunEstimate:
    """Forecast the real run from a dry run's :class:`Usage` (see the module docstring)."""
    calls = usage.planned_calls
    fork_calls = usage.fork_planned_calls
    pt, ct = usage.planned_prompt_tokens, usage.planned_completion_tokens
    seconds = usage.rounds * latency + math.ceil(fork_calls / max(1, concurrency)) * latency
    if rpm:
        seconds = max(seconds, calls / rpm * 60.0)
    if tpm:
        seconds = max(seconds, (pt + ct) / tpm * 60.0)
    return RunEstimate(calls=calls, fork_calls=fork_calls, cache_hits=usage.cache_hits,
                       decisions=usage.total_decisions, prompt_tokens=pt, completion_tokens=ct,
                       cost_usd=price.cost(pt, ct) if price is not None else None, seconds=seconds,
                       concurrency=concurrency, latency_s=latency)


__all__ = ["RunEstimate", "estimate_run"]
