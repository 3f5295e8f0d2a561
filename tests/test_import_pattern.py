"""Where grpo's imports of its own modules stand: at the top of the module, unless something needs them inside a
function (docs/architecture.md, "Imports").

A function-level `from grpo_cli... import ...` is kept only when moving it up would change what a user notices:
- the CLI verbs (`cli/`) import the library when they run, so `grpo --help` loads none of it;
- the target loads torch, transformers, TRL, datasets, PEFT, vLLM, accelerate or numpy and the module does not;
- the module is loaded by `grpo validate` on some shipped recipe (or by `grpo --help` / `grpo schema`) and the
  target is not: validate would load one more module than it needs;
- a bare interpreter imports the module on its own (`rewards/sandbox.py`), so its top level is stdlib only;
- it is a package face (`__init__.py`): its modules load on first use, which is what a face is for.
The validate paths are measured by running the real commands, so a new branch-only check stays lazy by itself.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from grpo_cli.lazy import type_checking_imports
from tests.conftest import ROOT
from tests.test_architecture import _modules, _type_checking_blocks

HEAVY = {"torch", "transformers", "trl", "datasets", "peft", "vllm", "accelerate", "deepspeed", "numpy"}
BARE = {"grpo_cli.rewards.sandbox"}  # imported by `python -I -S` from its own directory (see its docstring)
_LOADED = ("import sys; from grpo_cli.cli import app; from typer.testing import CliRunner; "
           "r = CliRunner().invoke(app, sys.argv[1:]); "
           "print(r.exit_code, ' '.join(k for k in sys.modules if k.startswith('grpo_cli')))")


def _startup_sets() -> list[set[str]]:
    """The grpo modules that `grpo validate RECIPE` (each shipped recipe), `grpo --help` and `grpo schema` load."""
    runs = [["validate", str(r)] for r in sorted((ROOT / "recipes").glob("*.yaml"))] + [["--help"], ["schema"]]
    out = []
    for args in runs:
        done = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, check=True)
        code, *loaded = done.stdout.split()
        assert code in ("0", "1"), f"grpo {' '.join(args)} failed ({code}): its path would be cut short"
        out.append(set(loaded))
    return out


def _top_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """What runs when the module is imported (module scope and its try blocks; not `if TYPE_CHECKING:`)."""
    nodes: list[ast.stmt] = [*tree.body, *(s for n in tree.body if isinstance(n, ast.Try) for s in n.body)]
    return [n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)]


def _loads(node: ast.ImportFrom, mods: dict[str, Path]) -> set[str]:
    """The grpo modules an import statement loads: the module, or for a face's lazy name the module behind it."""
    module = node.module or ""
    faces = type_checking_imports(mods[module]) if mods.get(module, Path()).name == "__init__.py" else {}
    out = {module} if module in mods else set()
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        out.add(sub if sub in mods else faces.get(alias.name, module))
    return {m for m in out if m in mods}


def _heavy(mods: dict[str, Path], trees: dict[str, ast.Module]) -> set[str]:
    """Modules whose import loads a heavy library, directly or through grpo modules imported at their top."""
    edges: dict[str, set[str]] = {}
    heavy = set()
    for mod, tree in trees.items():
        edges[mod] = set()
        for node in _top_imports(tree):
            if isinstance(node, ast.Import):
                roots = [a.name for a in node.names]
            elif node.level == 0:
                roots = [node.module or ""]
                if roots[0].startswith("grpo_cli"):
                    edges[mod] |= _loads(node, mods)
            else:
                roots = []  # a sibling import (the sandbox's fallback): none of grpo's own are relative
            if any(r.split(".")[0] in HEAVY for r in roots):
                heavy.add(mod)
    changed = True
    while changed:
        grown = {m for m, e in edges.items() if m not in heavy and e & heavy}
        heavy |= grown
        changed = bool(grown)
    return heavy


def _body_imports(tree: ast.Module) -> list[tuple[ast.ImportFrom, str]]:
    """grpo imports inside functions (absolute, as the project writes them), with the function's name."""
    found = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in func.body:
                for node in ast.walk(stmt):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_cli") \
                            and node.level == 0:
                        found.append((node, func.name))
    return found


def test_grpo_modules_import_each_other_at_the_top_unless_something_needs_the_body() -> None:
    mods = _modules()
    trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in mods.items()}
    heavy, startup = _heavy(mods, trees), _startup_sets()
    assert {"grpo_cli.cli.base", "grpo_cli.recipe.loader", "grpo_cli.validation.checks"} <= set().union(*startup)
    assert "grpo_cli.training.callbacks" in heavy and "grpo_cli.recipe.schema" not in heavy
    needless = set()
    for mod, tree in trees.items():
        if mod.startswith("grpo_cli.cli") or mod in BARE or mods[mod].name == "__init__.py":
            continue
        type_only = {id(n) for b in _type_checking_blocks(tree) for n in ast.walk(b)}
        for node, func in _body_imports(tree):
            loads = _loads(node, mods) - {mod}
            if id(node) in type_only or not loads or (loads & heavy and mod not in heavy) \
                    or any(mod in s and not loads <= s for s in startup):
                continue
            needless.add(f"{mods[mod].relative_to(ROOT)}:{node.lineno} `from {node.module} import ...` in {func}()")
    assert not needless, ("grpo imports inside functions that nothing needs there (not heavy, not on grpo "
                          "validate's path, no bare interpreter): move them to the top\n" + "\n".join(sorted(needless)))
