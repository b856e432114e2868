"""Optional integrations, each behind an extra: :mod:`.celery` (``agentkit[celery]``),
:mod:`.mcp` (``agentkit[mcp]``) and :mod:`.tracing` (``agentkit[otel]``).

Nothing here is imported by ``import agentkit``; import the module you use.
"""
