"""The reward functions a script hands its trainer, as references grpo can import: a def at the top of the script
(`script.py:name`), one imported from a file beside it (followed through `from x import *` and a package's
re-exports), an installed module's (`module:name`), TRL's `trl.rewards`; and why one cannot be read (a def inside
a function, a lambda, a list chosen at run time). A file whose top-level code trains is never referenced."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from grpo_cli.importing.script_ast import NO, Script, call_name, keyword, parse
from grpo_cli.rewards import sources


@dataclass
class Rewards:
    """The trainer's reward_funcs in order: (entry in `trl grpo` form or None, expression, why it is None)."""

    entries: list[tuple[str | None, str, str]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [ref for ref, _, _ in self.entries if ref is not None]

    @property
    def unread(self) -> list[tuple[str, str]]:
        return [(expression, why) for ref, expression, why in self.entries if ref is None]


NESTED = "defined inside "
"""How the reason for a def inside a function starts (such a def can be extracted)."""


def read_rewards(script: Script, trainer: ast.Call) -> Rewards:
    out = Rewards()
    node = keyword(trainer, "reward_funcs")
    if node is None:
        return out
    items, why = _items(script, node)
    if items is None:
        out.entries.append((None, script.source(node), why))
        return out
    for item in items:
        ref, why = reference(script, item)
        out.entries.append((ref, script.source(item, 60), why))
    return out


def _items(script: Script, node: ast.AST) -> tuple[list[ast.AST] | None, str]:
    if isinstance(node, ast.List | ast.Tuple):
        return list(node.elts), ""
    if not isinstance(node, ast.Name):
        return [node], ""
    found = script.assignments(node.id, node)
    lines = ", ".join(str(line) for line, _, _ in found)
    if len(found) > 1:
        chosen = _chosen_by_default(script, found)
        if chosen is None:
            return None, f"a list chosen when the script runs (set at lines {lines}): name the rewards in `rewards:`"
        found = [chosen]
    if not found:
        return [node], ""
    line, value, _ = found[0]
    if not isinstance(value, ast.List | ast.Tuple):
        return None, f"built when the script runs (line {line}: `{_short(value)}`): name the rewards"
    items: list[ast.AST] = list(value.elts)
    for call in script.calls("append", "extend"):
        target = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(target, ast.Name) and target.id == node.id and call.args:
            arg = call.args[0]
            items += list(arg.elts) if call_name(call) == "extend" and isinstance(arg, ast.List) else [arg]
    return items, ""


def _chosen_by_default(script: Script, found: list[tuple[int, ast.AST, ast.stmt]]
                       ) -> tuple[int, ast.AST, ast.stmt] | None:
    """Of assignments in `if args.flag == "value":` branches, the one the flag's argparse default selects (an
    empty-list start before the branches aside); None when that is not how the list is chosen."""
    chosen = []
    for entry in found:
        test = _branch_test(script, entry[2])
        if test is None:
            if isinstance(entry[1], ast.List | ast.Tuple) and not entry[1].elts:
                continue
            return None
        left, right = test
        value = script.value(left)
        if value is not NO and value == script.value(right):
            chosen.append(entry)
    return chosen[0] if len(chosen) == 1 else None


def _branch_test(script: Script, stmt: ast.stmt) -> tuple[ast.AST, ast.AST] | None:
    parent = script.parents.get(id(stmt))
    if isinstance(parent, ast.If) and any(stmt is n for n in parent.body):
        test = parent.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return test.left, test.comparators[0]
    return None


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 70 else text[:67] + "..."


def reference(script: Script, item: ast.AST) -> tuple[str | None, str]:
    """(a reward_funcs entry, '') or (None, why it cannot be imported)."""
    if isinstance(item, ast.Constant) and isinstance(item.value, str):
        return f"model={item.value}", ""  # a reward model id
    if isinstance(item, ast.Lambda):
        return None, f"a lambda (line {item.lineno}): grpo imports rewards by name; make it a def in a module"
    if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id in script.imports:
        return f"{script.imports[item.value.id]}:{item.attr}", ""
    if not isinstance(item, ast.Name):
        return None, f"an expression evaluated when the script runs (line {getattr(item, 'lineno', '?')})"
    name = item.id
    module = script.imports.get(name, "")
    if module.startswith("trl.rewards") or (module == "trl" and name.endswith("_reward")):
        return name, ""
    local = script.function(name, item)
    if local is not None and script.is_top_level(local):
        return f"{script.path.resolve()}:{name}", ""
    if local is not None:
        outer = script.scope(local)
        where = f"a marimo cell (the cell at line {getattr(outer, 'lineno', '?')}, the def at line {local.lineno})" \
            if any(outer is c for c in script.cells.values()) else \
            f"{getattr(outer, 'name', 'a function')}() (line {local.lineno})"
        return None, (f"{NESTED}{where}, where grpo cannot import it: move `def {name}` to the top level of a "
                      "module")
    return _imported(script, name, module)


def _imported(script: Script, name: str, module: str) -> tuple[str | None, str]:
    base = script.path.resolve().parent
    candidates = [module] if module else script.star_modules
    for mod in candidates:
        file = module_file(base, mod)
        if file is not None:
            found = definition(file, name)
            if found is not None:
                return f"{_module_name(file, mod, found) or found}:{name}", ""
        elif module and not module.startswith("."):
            return f"{module}:{name}", ""
    if script.star_modules:
        return None, (f"not found in the modules the script star-imports ({', '.join(script.star_modules)}): "
                      "name its file in `rewards:`")
    return None, "not a name the script imports or defines"


def _module_name(file: Path, module: str, found: Path) -> str | None:
    """The dotted name grpo imports `found` by when the script imports `module` (a package beside it) absolutely:
    its own imports then resolve as they do for the script. None for a relative import (a file path is used)."""
    if module.startswith("."):
        return None
    depth = len(module.split(".")) - (0 if file.name == "__init__.py" else 1)
    root = file.parents[depth]  # pkg/mod.py for `pkg.mod` -> the directory holding pkg
    try:
        relative = found.with_suffix("").relative_to(root)
    except ValueError:
        return None
    names = list(relative.parts)
    if names and names[-1] == "__init__":
        names.pop()
    return ".".join(names) or None


def module_file(base: Path, module: str) -> Path | None:
    """The file of `module` (`pkg.mod`, `.mod`) beside `base` or in a parent (a package root), if any."""
    dots = len(module) - len(module.lstrip("."))
    parts = [p for p in module.lstrip(".").split(".") if p]
    roots = [base.parents[dots - 2] if dots > 1 else base] if dots else [base, *list(base.parents)[:3]]
    for root in roots:
        path = root.joinpath(*parts)
        for found in (path.with_suffix(".py"), path / "__init__.py"):
            if parts and found.is_file():
                return found
    return None


def definition(file: Path, name: str, depth: int = 0) -> Path | None:
    """The file that defines `name` as seen from `file`: itself, or a module it re-exports it from (named or `*`)."""
    if depth > 6:
        return None
    try:
        tree = parse(file.read_text(encoding="utf-8"), file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return file
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(a.name in (name, "*") and not a.asname for a in node.names):
            target = module_file(file.parent, "." * node.level + (node.module or ""))
            found = definition(target, name, depth + 1) if target is not None else None
            if found is not None:
                return found
    return None


def trains_at_import(file: Path) -> tuple[int, str] | None:
    """(line, code) of training that importing `file` runs (rewards.sources.trains_at_import); None if none."""
    try:
        tree = parse(file.read_text(encoding="utf-8"), file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return sources.trains_at_import(tree)
