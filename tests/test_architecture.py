"""The package's shape, held by tests: no import circles (of modules or of packages), layers only point down,
small files and functions.

The import graph is read from the source with `ast` (module-level and function-level imports alike), so a
lazy import that closes a circle is caught too; a package face's `if TYPE_CHECKING:` block (its lazy names, for
type checkers) never runs and is no edge. docs/architecture.md explains the layers and the face rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "grpo_cli"
# Lower number = lower layer. A module may import its own layer or lower ones.
LAYERS = {"grpo_cli": 0, "version": 0, "errors": 0, "findings": 0, "user_code": 0, "lazy": 0, "threads": 0,
          "hardware": 0, "progress": 0, "paths": 0, "runs": 0, "gguf": 0,
          "suite_table": 0, "trl_compat": 0, "model_files": 0, "terminal_text": 0, "step_rates": 0, "interrupts": 0,
          "assets": 0,
          "recipe": 1, "data": 2, "rewards": 2, "tools": 3, "models": 3, "artefacts": 3,
          "planning": 4, "validation": 4, "evaluation": 5, "importing": 5, "launching": 5, "calibration": 5,
          "checking": 6, "training": 6,
          "cli": 7, "train_command": 7, "__main__": 8}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _graph() -> dict[str, set[str]]:
    """module -> grpo_cli modules it imports (a `from pkg import name` counts as pkg, or pkg.name if a module)."""
    mods = _modules()

    def known(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for block in _type_checking_blocks(tree) for n in ast.walk(block)} \
            if path.name == "__init__.py" else set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("grpo_cli"):
                    found = known(target)
                    if found != mod and not mod.startswith(found + "."):  # a package's own parents are not edges
                        edges[mod].add(found)
    return edges


def _type_checking_blocks(tree: ast.Module) -> list[ast.If]:
    return [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
            and n.test.id == "TYPE_CHECKING"]


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "grpo_cli"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_layers_only_point_down() -> None:
    upward = sorted({(m, f"grpo_cli.{_package(t)}") for m, ts in _graph().items() for t in ts
                     if LAYERS[_package(t)] > LAYERS[_package(m)]})
    assert not upward, f"imports pointing up a layer: {upward}"


def test_no_package_loops() -> None:
    """Packages of one layer may use each other, but only one way round: models -> artefacts -> models is a
    circle between packages even when no module imports itself back (the module-level test cannot see it)."""
    edges: dict[str, set[str]] = {}
    for mod, targets in _graph().items():
        edges.setdefault(_package(mod), set()).update(_package(t) for t in targets if _package(t) != _package(mod))
    loops = {tuple(loop): sorted((m, t) for m, ts in _graph().items() for t in ts
                                 if _package(m) in loop and _package(t) in loop and _package(t) != _package(m))
             for loop in _cycles(edges)}
    assert not loops, f"packages importing each other (the imports that make each loop): {loops}"


def test_recipe_imports_nothing_above_it_and_cli_is_imported_by_nobody() -> None:
    edges = _graph()
    for mod, targets in edges.items():
        if _package(mod) == "recipe":
            # suite_table: the suite names `eval.suite` accepts (plain data that imports nothing of grpo_cli);
            # trl_compat: where the installed TRL keeps AsyncGRPOConfig's source (stdlib only)
            assert {_package(t) for t in targets} <= {"recipe", "errors", "paths", "suite_table", "trl_compat"}, (
                mod, targets)
        if _package(mod) not in ("cli", "__main__"):
            assert not any(_package(t) == "cli" for t in targets), (mod, targets)


def test_no_private_names_imported_across_packages() -> None:
    mods = _modules()
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grpo_cli")
                    and _package(node.module) != _package(mod)):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, f"{mod} imports private {private} from {node.module}"


def test_files_and_functions_stay_small() -> None:
    long_files = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long_files, f"modules over 400 lines: {long_files}"
    long_funcs = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                body = node.body[0] if node.body else None
                if isinstance(body, ast.Expr) and isinstance(body.value, ast.Constant) and isinstance(
                        body.value.value, str):  # the docstring documents; it is not logic to split
                    length -= (body.end_lineno or body.lineno) - body.lineno + 1
                if length > 60:
                    long_funcs.append(f"{path.relative_to(ROOT)}:{node.name} ({length} lines)")
    assert not long_funcs, f"functions over 60 lines of code: {long_funcs}"


# Faces whose `__getattr__` computes a value instead of re-exporting a name (the Typer app, the dict of every
# built-in reward): they follow the rule for everything else they export.
COMPUTED_FACES = {"grpo_cli.cli": {"app"}, "grpo_cli.rewards.builtins": {"BUILTINS", "completion_text"}}


def test_every_face_follows_the_one_pattern() -> None:
    """A package's `__init__` lists its exports in `__all__`; names whose modules load on first use are imported
    under `if TYPE_CHECKING:` (so type checkers and IDEs see them, re-exported through `__all__`) and served by
    `__getattr__ = lazy_exports(__name__)`, which reads that block; nothing else defines a module `__getattr__`."""
    import importlib

    from grpo_cli.lazy import type_checking_imports

    for mod, path in _modules().items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assigned = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            assert mod in COMPUTED_FACES, f"{mod}: a face's lazy names go through `lazy_exports(__name__)`"
            continue
        if "__getattr__" not in assigned:
            continue  # an eager face (or none): every name is imported where it is exported
        assert ast.unparse(assigned["__getattr__"]) == "lazy_exports(__name__)", mod
        lazy = type_checking_imports(path)
        assert lazy, f"{mod}: a lazy face imports its lazy names under `if TYPE_CHECKING:`"
        face = importlib.import_module(mod)
        assert set(lazy) <= set(face.__all__), f"{mod}: every lazy name is in `__all__`"
        for name, module in lazy.items():
            assert getattr(face, name) is getattr(importlib.import_module(module), name), (mod, name)
        assert all(hasattr(face, name) for name in face.__all__), mod


def test_training_face_names_every_module_of_its_package() -> None:
    """training/ is the largest package: its face's docstring is the map a reader starts from."""
    import grpo_cli.training as training

    doc = training.__doc__ or ""
    names = [p.name for p in (PACKAGE / "training").iterdir()
             if p.suffix == ".py" and p.name != "__init__.py" or (p / "__init__.py").exists()]
    missing = [n for n in names if (n if n.endswith(".py") else n + "/") not in doc]
    assert not missing, f"grpo_cli/training/__init__.py does not name {missing}"
