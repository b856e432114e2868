"""Fixtures for the sample tests (see ``sample_helpers``)."""

from sample_helpers import scripted_only, serve_flask, thread_baseline

__all__ = ["scripted_only", "serve_flask", "thread_baseline"]
