"""Where tests find files outside the package: the checkout's root and the shared folder beside it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the real Jetstream sample (``../shared``, present on development machines only; tests skip without it)
JETSTREAM_SAMPLE = REPO.parent / "shared" / "data" / "bluesky" / "jetstream_v1_golden_20260525.jsonl"
