"""Fixtures for the sample tests (see ``sample_helpers``)."""

from sample_helpers import kernel_name, scripted_only, serve_flask, thread_baseline

__all__ = ["kernel_name", "scripted_only", "serve_flask", "thread_baseline"]
