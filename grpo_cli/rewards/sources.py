"""A reward's source read without importing it: re-exports followed, training started at import time spotted.

`grpo validate` checks a `package.module:func` reference by reading the module with `ast`:
importing user code (or torch-heavy packages) would make validate slow and could run anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grpo_cli.user_code import find_module_file


def reexported(tree: ast.Module, func: str, path: Path, depth: int = 0) -> tuple[Path, str] | None:
    """(module file, name there) when `func` is imported by a `from X import func` anywhere in the module
    (including under `if TYPE_CHECKING:`, as lazy package faces do), or comes in through a `from X import *` of a
    module that defines or re-exports it (followed a few levels); None when it is not."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        alias = next((a for a in node.names if (a.asname or a.name) == func), None)
        star = any(a.name == "*" for a in node.names)
        if alias is None and not star:
            continue
        found = _imported_file(node, path)
        if alias is not None:
            return (found, alias.name) if found is not None else None
        if found is not None and depth < 5:
            try:
                inner = ast.parse(found.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            if any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == func for n in inner.body):
                return found, func
            deeper = reexported(inner, func, found, depth + 1)
            if deeper is not None:
                return deeper
    return None


def _imported_file(node: ast.ImportFrom, path: Path) -> Path | None:
    if not node.level:
        return find_module_file(node.module or "", [])
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    target = base.joinpath(*(node.module or "").split(".")) if node.module else base
    return next((c for c in (target.with_suffix(".py"), target / "__init__.py") if c.is_file()), None)


def trains_at_import(tree: ast.Module) -> tuple[int, str] | None:
    """(line, code) of training that importing a module runs: a `.train()` or `*GRPOTrainer(...)` call outside
    functions, classes and `if __name__ == "__main__":`; None when importing it only defines things."""
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(stmt, ast.If) and "__main__" in ast.unparse(stmt.test):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name == "train" or name.endswith("GRPOTrainer"):
                    return node.lineno, " ".join(ast.unparse(node).split())[:60]
    return None
