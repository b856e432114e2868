"""The ``agentkit`` command line: ``run``, ``chat``, ``sessions`` and ``server``.

The console script is :func:`console_main`; :func:`main` is the same with its streams and
seams passed in, for tests and embedding.
"""

from .app import console_main, main

__all__ = ["console_main", "main"]
