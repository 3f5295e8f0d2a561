"""`callbacks:` checked before training, without importing user code: the class exists, its params fit."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import Problem, did_you_mean
from grpo_cli.findings import Findings
from grpo_cli.recipe.schema import Recipe
from grpo_cli.user_code import find_module_file, split_reference

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def _source(ref: str, base_dir: Path) -> tuple[Path | None, str | None]:
    """(the file defining the reference, or None; what is wrong when it cannot be found)."""
    target, _ = split_reference(ref)
    if target.endswith(".py"):
        path = (base_dir / target).expanduser()
        return (path, None) if path.is_file() else (None, f"file {target} not found (looked at {path})")
    found = find_module_file(target, [base_dir, Path.cwd()])
    if found is None and importlib.util.find_spec(target.split(".")[0]) is None:
        return None, f"module {target!r} cannot be found"
    return found, None  # a compiled or namespace module is checked when training imports it


def check_callbacks(recipe: Recipe, pf: Preflight) -> Findings:
    """The recipe's `callbacks:`, read without importing them."""
    return Findings(problems=callback_problems(recipe) if recipe.callbacks else [])


def callback_problems(recipe: Recipe) -> list[Problem]:
    """One problem per callback whose file, class or constructor parameters do not fit the recipe."""
    problems: list[Problem] = []
    for i, entry in enumerate(recipe.callbacks):
        where = f"callbacks[{i}]"
        path, missing = _source(entry.callback, recipe.base_dir)
        if missing:
            problems.append(Problem(f"{where}.callback", missing, "Paths are relative to the recipe's directory; "
                                    "a module must be importable (installed, or beside the recipe)."))
            continue
        if path is None:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as exc:
            problems.append(Problem(f"{where}.callback", f"{path} has a syntax error at line {exc.lineno}: {exc.msg}"))
            continue
        name = split_reference(entry.callback)[1]
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        if name not in classes:
            imported = {(a.asname or a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom | ast.Import)
                        for a in n.names}
            if name not in imported:
                guess = did_you_mean(name, list(classes))
                problems.append(Problem(f"{where}.callback", f"{path} has no class {name!r}",
                                        f"Did you mean `{guess}`?" if guess else
                                        f"Classes defined there: {', '.join(sorted(classes)) or 'none'}."))
            continue
        problems += _params(classes[name], entry.params, f"{where}.params")
    return problems


def _params(node: ast.ClassDef, params: dict, where: str) -> list[Problem]:
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        if params and not node.bases[1:] and all(getattr(b, "id", getattr(b, "attr", "")) == "TrainerCallback"
                                                 for b in node.bases):
            return [Problem(where, f"{node.name} takes no constructor arguments, but params are given",
                            "Remove `params`, or give the class an __init__ that takes them.")]
        return []
    a = init.args
    if a.kwarg is not None:
        return []
    names = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]][1:]
    return [Problem(f"{where}.{key}", f"is not a parameter of {node.name}.__init__",
                    f"Its parameters are: {', '.join(names) or 'none'}.") for key in params if key not in names]
