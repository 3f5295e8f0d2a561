"""Lazy package faces: a package exports names whose modules load on first use, so `grpo --help` and
`grpo validate` import only what they need."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package`: `where` maps each exported name to the module defining it."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
