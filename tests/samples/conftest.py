"""Fixtures for the sample tests (see ``sample_helpers``)."""

from sample_helpers import scripted_only, thread_baseline

__all__ = ["scripted_only", "thread_baseline"]
