"""Panels from the world: :mod:`aumann.data.synthetic` (a quick heavy-tailed demo panel) and
:mod:`aumann.data.bluesky` (Jetstream capture and ingestion, raw counts, a calibrated synthetic
generator). Importing this package imports nothing heavy."""

__all__: list[str] = []
