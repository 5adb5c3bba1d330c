"""Bluesky panels from the world: Jetstream capture and ingestion, raw counts, a calibrated synthetic generator.

* :mod:`~aumann.data.bluesky.capture`: record the live Jetstream into daily JSONL files;
* :mod:`~aumann.data.bluesky.ingest` (+ ``jetstream``, ``ingest_sql``, ``topics``, ``filters``,
  ``profiles``, ``ingest_report``): Jetstream files → :class:`~aumann.data.bluesky.counts.RawCounts`;
* :mod:`~aumann.data.bluesky.synth`: a calibrated SYNTHETIC RawCounts generator;
* :mod:`~aumann.data.bluesky.build`: what ``aumann bluesky build-panel`` writes.

The cross-scale study over these counts is :mod:`aumann.studies.crossscale`.
"""
