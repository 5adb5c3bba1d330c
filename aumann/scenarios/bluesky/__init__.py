"""Bluesky cross-scale study: Jetstream ingestion, calibrated synthetic panel, sampling protocols, the study."""
