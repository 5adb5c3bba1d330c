"""Runnable scenarios."""
