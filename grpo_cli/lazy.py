"""Lazy package faces: a package exports names whose modules load on first use, so `grpo --help` and
`grpo validate` import only what they need.

The face's `if TYPE_CHECKING:` block is the one list of its lazy names: type checkers and IDEs read it as
ordinary imports, and `lazy_exports` reads it (once, on the first lazy lookup) to know where each name lives.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def type_checking_imports(path: str | Path) -> dict[str, str]:
    """name -> module for every `from MODULE import NAME as NAME` under a top-level `if TYPE_CHECKING:`."""
    import ast

    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    return {alias.asname or alias.name: node.module
            for block in tree.body
            if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for node in block.body if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names}


def lazy_exports(package: str) -> Callable[[str], Any]:
    """A module-level `__getattr__` for the face `package`: each name its `if TYPE_CHECKING:` block imports
    loads from that module on first use."""
    where: dict[str, str] = {}

    def __getattr__(name: str) -> Any:
        if not where:
            where.update(type_checking_imports(sys.modules[package].__file__ or ""))
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
