"""A marimo app read as the notebook it is, not as a module of unrelated functions: each `@app.cell` function is a
cell, its parameters are names other cells define (what they assign and return), so a name used in one cell is
looked up in the cell that defines it. An input widget's `.value` (`mo.ui.text(value="Qwen/...")`) reads the
widget's initial value, which is what the app runs with until someone changes the input."""

from __future__ import annotations

import ast

WIDGETS = {"text", "text_area", "number", "slider", "checkbox", "switch", "dropdown", "radio", "date", "code_editor"}
"""`mo.ui.*` inputs whose `value=` is the value the app starts with."""


def _is_cell(node: ast.stmt) -> bool:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "cell" and isinstance(target.value, ast.Name):
            return True
    return False


def is_marimo_app(tree: ast.Module) -> bool:
    """`import marimo` and at least one `@app.cell` function."""
    imports = any(isinstance(n, ast.Import) and any(a.name == "marimo" for a in n.names) for n in tree.body)
    return imports and any(_is_cell(n) for n in tree.body)


def _defined(cell: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """What a cell defines for the others: its own assignments, defs, classes and imports, at any block depth but
    not inside a def of its own (marimo makes every such name global; the returned tuple lists those used)."""
    names: list[str] = []
    todo: list[ast.AST] = list(cell.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(stmt.name)
            continue
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            names += [a.asname or a.name.split(".")[0] for a in stmt.names]
        elif isinstance(stmt, ast.With | ast.For):  # `with ... as bar:`, `for name in ...:`
            bound = [i.optional_vars for i in stmt.items] if isinstance(stmt, ast.With) else [stmt.target]
            names += [n.id for t in bound if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]
        todo += [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)]
    return names


def cell_index(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """name -> the cell that defines it (the first, as marimo allows one); empty for a plain script."""
    if not is_marimo_app(tree):
        return {}
    index: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if _is_cell(node):
            for name in _defined(node):  # type: ignore[arg-type]
                if not name.startswith("_"):  # marimo keeps `_name` to its cell
                    index.setdefault(name, node)  # type: ignore[arg-type]
    return index


def widget(found: ast.AST | None) -> ast.AST | None:
    """The `value=` of `mo.ui.text(value=...)` (any input in WIDGETS); None for anything else."""
    if not isinstance(found, ast.Call) or not isinstance(found.func, ast.Attribute):
        return None
    owner = found.func.value
    if found.func.attr not in WIDGETS or not (isinstance(owner, ast.Attribute) and owner.attr == "ui"):
        return None
    return next((kw.value for kw in found.keywords if kw.arg == "value"), None)


def app_note(path_name: str, cells: dict[str, ast.AST], widgets: dict[str, int]) -> list[str]:
    """What reading the app as a notebook involved, said once."""
    count = len({id(c) for c in cells.values()})
    notes = [f"{path_name} is a marimo app: its @app.cell functions ({count} that define names) are read as one "
             "notebook, a cell's parameters being the names other cells define"]
    if widgets:
        read = ", ".join(f"{name} (line {line})" for name, line in sorted(widgets.items()))
        notes.append(f"read from the app's input widgets as they start: {read}; a run with other inputs trains "
                     "something else (override them here as section.key=value)")
    return notes
