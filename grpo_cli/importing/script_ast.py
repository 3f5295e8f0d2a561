"""A Python training script as a careful reader sees it, without running it: which value a name holds where it
is used (the last assignment before that line in the same function, then the module), literals, string
constants and f-strings of them, and `script_args.key` attributes filled from the script's TrlParser YAML."""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.importing.script_marimo import cell_index, widget


def parse(text: str, path: Path) -> ast.Module:
    """ast.parse without the SyntaxWarnings of someone else's code (invalid escapes in docstrings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text, filename=str(path))


NO = object()
"""The value of an expression that cannot be known without running the script."""


def call_name(node: ast.AST) -> str:
    """`f` for `f(...)`, `m.f(...)` and `a.b.f(...)`; '' otherwise."""
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def receiver(node: ast.Call) -> ast.AST | None:
    """`x` in `x.method(...)`."""
    return node.func.value if isinstance(node.func, ast.Attribute) else None


def keyword(node: ast.Call, *names: str) -> ast.AST | None:
    for kw in node.keywords:
        if kw.arg in names:
            return kw.value
    return None


@dataclass
class Script:
    """A parsed script: its tree, parents, imports, definitions and assignments by scope."""

    path: Path
    tree: ast.Module
    config: dict[str, Any] = field(default_factory=dict)
    text_source: str = ""
    """The YAML a TrlParser script is launched with (`--config`), for `script_args.key` / `training_args.key`."""
    parents: dict[int, ast.AST] = field(default_factory=dict)
    assigns: dict[tuple[int, str], list[tuple[int, ast.AST, ast.stmt]]] = field(default_factory=dict)
    """(scope id, name) -> [(line, value, the assignment statement)] in source order."""
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)
    star_modules: list[str] = field(default_factory=list)
    arg_defaults: dict[str, ast.Call] = field(default_factory=dict)
    """argparse dest -> its `add_argument(...)`: `args.model_name` reads the default when nothing is passed."""
    defaults_used: set[str] = field(default_factory=set)
    cells: dict[str, ast.AST] = field(default_factory=dict)
    """A marimo app's name -> the `@app.cell` function that defines it (script_marimo); empty for a script."""
    widgets_used: dict[str, int] = field(default_factory=dict)
    """marimo input widgets whose initial `.value` was read -> their line."""
    bound: dict[tuple[int, str], ast.AST] = field(default_factory=dict)
    """(id of a def, parameter) -> the argument the call being followed passes it."""

    @classmethod
    def parse(cls, path: Path, text: str, config: dict[str, Any] | None = None) -> Script:
        script = cls(path, parse(text, path), dict(config or {}), text)
        for node in ast.walk(script.tree):
            for child in ast.iter_child_nodes(node):
                script.parents[id(child)] = node
        for node in ast.walk(script.tree):
            script._index(node)
        script.cells = dict(cell_index(script.tree))
        return script

    def _index(self, node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    self.star_modules.append(module)
                else:
                    self.imports[alias.asname or alias.name] = module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.imports[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.Call) and call_name(node) == "add_argument" and node.args:
            flag = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            dest = keyword(node, "dest")
            if isinstance(flag, str) and flag.startswith("--"):
                name = dest.value if isinstance(dest, ast.Constant) else flag.lstrip("-").replace("-", "_")
                self.arg_defaults.setdefault(str(name), node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                self._bind(target, node.value, node)

    def _bind(self, target: ast.AST, value: ast.AST, stmt: ast.stmt) -> None:
        scope = id(self.scope(stmt))
        if isinstance(target, ast.Name):
            self.assigns.setdefault((scope, target.id), []).append((stmt.lineno, value, stmt))
        elif isinstance(target, ast.Tuple | ast.List):
            for i, element in enumerate(target.elts):  # `model, tokenizer = f(...)`: the first is f's model
                if isinstance(element, ast.Name):
                    item = value.elts[i] if isinstance(value, ast.Tuple | ast.List) and i < len(value.elts) else value
                    self.assigns.setdefault((scope, element.id), []).append((stmt.lineno, item, stmt))

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) a node belongs to."""
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            parent = self.parents.get(id(parent))
        return parent if parent is not None else self.tree

    def scopes(self, node: ast.AST) -> list[ast.AST]:
        out = [self.scope(node)]
        while out[-1] is not self.tree:
            out.append(self.scope(out[-1]))
        return out

    def scopes_for(self, name: str, at: ast.AST) -> list[ast.AST]:
        """The scopes `name` is looked up in from `at`; in a marimo app the cell defining it comes before the module
        (a cell's parameters are the names other cells define)."""
        out = self.scopes(at)
        cell = self.cells.get(name)
        if cell is not None and all(cell is not s for s in out):
            out.insert(len(out) - 1, cell)
        return out

    def bind(self, func: ast.AST, call: ast.Call) -> None:
        """Follow `func` as called by `call`: its parameters hold the call's arguments."""
        params = func.args.args if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) else []
        for param, arg in zip(params, call.args, strict=False):
            self.bound[(id(func), param.arg)] = arg
        for kw in call.keywords:
            if kw.arg is not None and any(p.arg == kw.arg for p in params):
                self.bound[(id(func), kw.arg)] = kw.value

    def assignments(self, name: str, at: ast.AST) -> list[tuple[int, ast.AST, ast.stmt]]:
        """Where `name`, as used at `at`, may have been set: its own scope's assignments, else an outer one's."""
        for scope in self.scopes_for(name, at):
            found = self.assigns.get((id(scope), name))
            if found:
                return found
        return []

    def lookup(self, name: str, at: ast.AST) -> ast.AST | None:
        """The value `name` holds at `at`: the last assignment before that line in the nearest scope that sets it
        (a module constant set after a function that uses it still counts)."""
        line = getattr(at, "lineno", 10**9)
        own = self.scopes(at)
        for scope in self.scopes_for(name, at):
            found = self.assigns.get((id(scope), name))
            if not found and (id(scope), name) in self.bound:
                return self.bound[(id(scope), name)]
            if not found:
                continue
            if all(scope is not s for s in own):  # another marimo cell: what it leaves the name holding
                return found[-1][1]
            before = [value for _, value, stmt in found if (stmt.end_lineno or stmt.lineno) < line
                      and not self.exclusive(stmt, at)]
            if before:
                return before[-1]
            if scope is self.tree and len(found) == 1:
                return found[0][1]
        return None

    def _branch(self, node: ast.AST) -> list[tuple[int, str]]:
        """(id of each enclosing `if`, which side) from the innermost out."""
        out, child, parent = [], node, self.parents.get(id(node))
        while parent is not None:
            if isinstance(parent, ast.If):
                out.append((id(parent), "body" if any(child is n for n in parent.body) else
                            "orelse" if any(child is n for n in parent.orelse) else "test"))
            child, parent = parent, self.parents.get(id(parent))
        return out

    def exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """Whether a and b sit on different sides of one `if` (never both run)."""
        sides = dict(self._branch(b))
        return any(key in sides and sides[key] != side for key, side in self._branch(a))

    def value(self, node: ast.AST | None, depth: int = 0) -> Any:
        """The literal a node evaluates to, following names, f-strings and `args.key` of the TrlParser YAML;
        NO when it depends on the run."""
        if node is None or depth > 8:
            return NO
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Name):
            found = self.lookup(node.id, node)
            return self.value(found, depth + 1) if found is not None else NO
        if isinstance(node, ast.Attribute) and node.attr == "value" and isinstance(node.value, ast.Name) and \
                (initial := widget(self.lookup(node.value.id, node))) is not None:
            found = self.value(initial, depth + 1)  # a marimo input as the app starts
            if found is not NO:
                self.widgets_used[node.value.id] = getattr(initial, "lineno", 0)
            return found
        if isinstance(node, ast.Dict | ast.List | ast.Tuple):
            return self._container(node, depth)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in self.config:
            return self.config[node.attr]  # script_args.dataset_id_or_path, model_args.model_name_or_path
        if isinstance(node, ast.Attribute) and node.attr in self.arg_defaults:
            default = keyword(self.arg_defaults[node.attr], "default")
            given = self.value(default, depth + 1) if default is not None else NO
            if given is not NO:
                self.defaults_used.add(node.attr)
            return given
        if isinstance(node, ast.JoinedStr):
            return self._fstring(node, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left, depth + 1), self.value(node.right, depth + 1)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
        return NO

    def _container(self, node: ast.Dict | ast.List | ast.Tuple, depth: int) -> Any:
        """`{"train": path}`, `[a, b]` whose parts are known."""
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                return NO
            keys = [self.value(k, depth + 1) for k in node.keys]
            values = [self.value(v, depth + 1) for v in node.values]
            if any(x is NO for x in keys + values) or not all(isinstance(k, str | int) for k in keys):
                return NO
            return dict(zip(keys, values, strict=True))
        items = [self.value(e, depth + 1) for e in node.elts]
        if any(x is NO for x in items):
            return NO
        return items if isinstance(node, ast.List) else tuple(items)

    def _fstring(self, node: ast.JoinedStr, depth: int) -> Any:
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and part.format_spec is None and part.conversion == -1:
                inner = self.value(part.value, depth + 1)
                if inner is NO or isinstance(inner, dict | list):
                    return NO
                parts.append(str(inner))
            else:
                return NO
        return "".join(parts)

    def text(self, node: ast.AST | None) -> str | None:
        found = self.value(node)
        return found if isinstance(found, str) else None

    def function(self, name: str, at: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The def `name` used at `at` refers to: one in an enclosing function first, then a module-level one."""
        candidates = [d for d in self.defs.get(name, []) if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)]
        scopes = self.scopes_for(name, at)
        for scope in scopes:
            for candidate in candidates:
                if self.scope(candidate) is scope:
                    return candidate
        return None

    def is_top_level(self, node: ast.AST) -> bool:
        return self.scope(node) is self.tree

    def calls(self, *names: str) -> list[ast.Call]:
        """Every call of a function or method with one of these names, in source order."""
        found = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and call_name(n) in names]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))

    def source(self, node: ast.AST, width: int = 90) -> str:
        text = " ".join(ast.unparse(node).split())
        return text if len(text) <= width else text[:width - 3] + "..."

    def defaults_note(self) -> str | None:
        """What was read from argparse defaults, said once: another launch may pass other values."""
        if not self.defaults_used:
            return None
        flags = ", ".join(f"--{name} (line {self.arg_defaults[name].lineno})" for name in sorted(self.defaults_used))
        return (f"read from the script's command-line defaults: {flags}; a launch that passes other values trains "
                "something else (override them here as section.key=value)")

    def where(self, node: ast.AST) -> str:
        return f"{self.path.name}:{getattr(node, 'lineno', '?')}"
