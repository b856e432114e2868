"""Names a package resolves from its modules on first use (PEP 562): how ``agentkit`` keeps
``import agentkit`` light, and how ``agentkit.evals`` loads nothing until a name is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(
    package: str, homes: Mapping[str, Iterable[str]], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: a name of ``homes`` (module -> names) is
    imported from its module when first asked for, and kept in ``namespace`` (the package's
    globals) so the next lookup finds it there; any other name is an ``AttributeError``."""
    home = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
