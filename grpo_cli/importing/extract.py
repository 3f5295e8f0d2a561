"""`grpo import trl SCRIPT.py --extract-rewards`: reward functions that cannot be referenced where they are (a
file whose top-level code trains, a def inside a function) copied into a module beside the recipe, with exactly
what they use: the imports, constants, helpers and closure values they name, found with `symtable` and resolved
where the function sits. A function that uses something known only at run time (a parameter of its enclosing
function, a local module) is not extracted: it stays refused, with the name that blocked it."""

from __future__ import annotations

import ast
import builtins
import symtable
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from grpo_cli.errors import GrpoError
from grpo_cli.importing.script_ast import Script
from grpo_cli.importing.script_rewards import module_file

BUILTINS = set(dir(builtins))


@dataclass
class Extracted:
    """The module text, the functions it defines, and the ones that could not be extracted (name -> why)."""

    text: str = ""
    names: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    decorators: list[tuple[str, str, int]] = field(default_factory=list)
    """(function, decorator, line) left off the copies: what they wrapped the function in is not copied."""


@dataclass
class _Pieces:
    imports: dict[str, str] = field(default_factory=dict)
    code: dict[int, tuple[int, str]] = field(default_factory=dict)  # id(node) -> (line, source)
    done: set[tuple[int, str]] = field(default_factory=set)
    decorators: list[tuple[str, str, int]] = field(default_factory=list)


class CannotExtract(Exception):
    pass


def extract(script: Script, functions: list[str]) -> Extracted:
    """A module holding `functions` (defs of the script, at any depth) and everything they use."""
    out = Extracted()
    pieces = _Pieces()
    for name in functions:
        func = _definition(script, name)
        if func is None:
            out.failed[name] = "its def is not in the script"
            continue
        trial = _Pieces(dict(pieces.imports), dict(pieces.code), set(pieces.done), list(pieces.decorators))
        try:
            _add_def(script, func, trial, 0)
        except CannotExtract as exc:
            out.failed[name] = str(exc)
            continue
        pieces = trial
        out.names.append(name)
    if out.names:
        out.text = _module_text(script, pieces)
        out.decorators = pieces.decorators
    return out


def _definition(script: Script, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = [d for d in script.defs.get(name, []) if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)]
    return found[0] if len(found) == 1 else None


def _source(node: ast.AST, script: Script) -> str:
    """The def's text moved to the left margin; the inside lines of a multi-line string keep their indentation,
    which is part of the string's value (a def in a marimo cell or a function is indented)."""
    text = ast.get_source_segment(script.text_source, node)
    if text is None:
        return ast.unparse(node)
    col = getattr(node, "col_offset", 0)
    inside = {line for n in ast.walk(node) if isinstance(n, ast.Constant | ast.JoinedStr)
              and (n.end_lineno or n.lineno) > n.lineno for line in range(n.lineno + 1, (n.end_lineno or 0) + 1)}
    lines = (" " * col + text).splitlines(keepends=True)
    start = getattr(node, "lineno", 1)
    return "".join(line if start + i in inside else line[min(col, len(line) - len(line.lstrip(" "))):]
                   for i, line in enumerate(lines))


def _add_def(script: Script, func: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, pieces: _Pieces,
             depth: int) -> None:
    if id(func) in pieces.code:
        return
    if depth > 20:
        raise CannotExtract("what it uses goes too deep")
    source = _source(func, script)  # the def without its decorators (ast puts them before the def's line)
    pieces.decorators += [(func.name, " ".join(ast.unparse(d).split()), d.lineno) for d in func.decorator_list]
    pieces.code[id(func)] = (func.lineno, source)
    for name in _free_names(source):
        _resolve(script, name, func, pieces, depth + 1)


def _free_names(source: str) -> list[str]:
    """Names a piece of code reads but does not define (its globals when it stands alone in a module)."""
    table = symtable.symtable(source, "<extract>", "exec")
    names: set[str] = set()

    def walk(t: symtable.SymbolTable) -> None:
        for symbol in t.get_symbols():  # standing alone, whatever came from outside is a global
            if symbol.is_global() and symbol.is_referenced():
                names.add(symbol.get_name())
        for child in t.get_children():
            walk(child)

    for child in table.get_children():
        walk(child)
    top = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    names |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.get_name() not in top}
    return sorted(n for n in names if n not in BUILTINS and n not in top)


def _resolve(script: Script, name: str, at: ast.AST, pieces: _Pieces, depth: int) -> None:
    key = (id(script.scope(at)), name)
    if key in pieces.done:
        return
    pieces.done.add(key)
    if name in script.imports or _imported_module(script, name):
        _add_import(script, name, pieces)
        return
    func = script.function(name, at) or _class(script, name, at)
    if func is not None:
        _add_def(script, func, pieces, depth)
        return
    found: list[ast.Assign] = [
        stmt for scope in script.scopes(at) for _, _, stmt in script.assigns.get((id(scope), name), [])
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)]
    if not found:
        raise CannotExtract(f"it uses `{name}`, which is known only when the script runs")
    before = [s for s in found if s.lineno < getattr(at, "lineno", 0)]
    stmt = before[-1] if before else found[0]
    if not _safe(stmt.value):
        raise CannotExtract(f"it uses `{name}`, set by running code (line {stmt.lineno}: "
                            f"`{' '.join(ast.unparse(stmt.value).split())[:50]}`)")
    source = f"{name} = {ast.get_source_segment(script.text_source, stmt.value) or ast.unparse(stmt.value)}"
    pieces.code[id(stmt)] = (stmt.lineno, textwrap.dedent(source))
    for inner in _free_names(source):
        if inner != name:
            _resolve(script, inner, stmt, pieces, depth + 1)


def _class(script: Script, name: str, at: ast.AST) -> ast.ClassDef | None:
    """A class the function uses (`RustTool("build")`), defined where it can see it: copied like a def."""
    scopes = script.scopes_for(name, at)
    found = [d for d in script.defs.get(name, []) if isinstance(d, ast.ClassDef)
             and any(script.scope(d) is s for s in scopes)]
    return found[0] if len(found) == 1 else None


SAFE_CALLS = {"compile", "str", "int", "float", "bool", "len", "set", "frozenset", "list", "dict", "tuple",
              "escape", "join", "format", "strip", "lower", "upper", "replace", "get"}
"""Calls a copied constant may make (re.compile, str.join, os.environ.get...): nothing that loads or trains."""


def _safe(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            func = inner.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name not in SAFE_CALLS:
                return False
        elif isinstance(inner, ast.Lambda | ast.Await | ast.Yield | ast.YieldFrom):
            return False
    return True


def _imported_module(script: Script, name: str) -> bool:
    return any(isinstance(n, ast.Import) and any((a.asname or a.name.split(".")[0]) == name for a in n.names)
               for n in ast.walk(script.tree))


def _add_import(script: Script, name: str, pieces: _Pieces) -> None:
    for node in ast.walk(script.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    pieces.imports[name] = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    return
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    module = "." * node.level + (node.module or "")
                    if node.level or module_file(script.path.resolve().parent, module) is not None:
                        raise CannotExtract(f"it uses `{name}` from {module}, a module beside the script: "
                                            "reference that module instead")
                    pieces.imports[name] = f"from {module} import {alias.name}" + \
                        (f" as {alias.asname}" if alias.asname else "")
                    return


def _module_text(script: Script, pieces: _Pieces) -> str:
    head = (f'"""Reward functions of {script.path.name}, copied by `grpo import trl --extract-rewards` with what '
            "they use, so that\ngrpo can import them without running the script (its training runs when it is "
            'imported, or the\nfunctions are defined inside another function). Lines are those of the script."""\n')
    imports = sorted(set(pieces.imports.values()))
    body = [f"# {script.path.name}:{line}\n{text.rstrip()}\n" for line, text in sorted(pieces.code.values())]
    return head + "\n" + "\n".join(imports) + ("\n\n\n" if imports else "\n") + "\n\n".join(body)


def write_module(path: Path, text: str) -> None:
    """Write the extracted module, never over a different file the user has there."""
    if path.exists() and path.read_text(encoding="utf-8", errors="replace") != text:
        raise GrpoError(f"{path} exists and is not the module this import would write", where="--extract-rewards",
                        fix="Move it aside, or write the recipe elsewhere with -o.")
    path.write_text(text, encoding="utf-8")
