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

from grpo_cli.importing.bound import WRAPPER, WRAPPER_CODE, conflict, tokenizer_binding
from grpo_cli.importing.extract_calls import changed_later, outside, own_call
from grpo_cli.importing.script_ast import Script, call_name
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
    bound: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Script-time globals given from the recipe (`bound.py`): name -> (line, the statement that made it)."""
    runs: list[tuple[str, int, str]] = field(default_factory=list)
    """(name, line, statement) of calls of the notebook's own code the module makes when imported, as its cells did."""


@dataclass
class _Pieces:
    imports: dict[str, str] = field(default_factory=dict)
    code: dict[int, tuple[int, str]] = field(default_factory=dict)  # id(node) -> (line, source)
    done: set[tuple[int, str]] = field(default_factory=set)
    decorators: list[tuple[str, str, int]] = field(default_factory=list)
    recipe: str = "recipe.yaml"
    bound: dict[str, tuple[int, str]] = field(default_factory=dict)
    runs: list[tuple[str, int, str]] = field(default_factory=list)

    def copy(self) -> _Pieces:
        return _Pieces(dict(self.imports), dict(self.code), set(self.done), list(self.decorators), self.recipe,
                       dict(self.bound), list(self.runs))


class CannotExtract(Exception):
    pass


def extract(script: Script, functions: list[str], recipe: str = "recipe.yaml") -> Extracted:
    """A module holding `functions` (defs of the script, at any depth) and everything they use; a tokenizer the
    script loads is bound to the one of `recipe` (the recipe file the module sits beside)."""
    out = Extracted()
    pieces = _Pieces(recipe=recipe)
    for name in functions:
        func = _definition(script, name)
        if func is None:
            out.failed[name] = "its def is not in the script"
            continue
        trial = pieces.copy()
        try:
            _add_def(script, func, trial, 0)
            for bound in trial.bound:
                reason = conflict(script, bound, [text for _, text in trial.code.values()])
                if reason is not None:
                    raise CannotExtract(reason)
        except CannotExtract as exc:
            out.failed[name] = str(exc)
            continue
        pieces = trial
        out.names.append(name)
    if out.names:
        out.text = _module_text(script, pieces)
        out.decorators = pieces.decorators
        out.bound = pieces.bound
        out.runs = pieces.runs
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
    kept = [d for d in func.decorator_list if not _registers(script, d)] if depth else []
    pieces.decorators += [(func.name, " ".join(ast.unparse(d).split()), d.lineno) for d in func.decorator_list
                          if not depth]
    source = "".join(f"@{ast.unparse(d)}\n" for d in kept) + source  # a helper's `@contextmanager` is its meaning
    pieces.code[id(func)] = (func.lineno, source)
    for name in _free_names(source, set(script.defs)):
        _resolve(script, name, func, pieces, depth + 1)


def _registers(script: Script, decorator: ast.expr) -> bool:
    """marimo's `@app.function` / `@app.cell`: it registers the def with the notebook and changes nothing else."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if not (script.cells and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
        return False
    app = script.lookup(target.value.id, script.tree)
    return isinstance(app, ast.Call) and call_name(app) == "App"


def _free_names(source: str, shadowed: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Names a piece of code reads but does not define (its globals when it stands alone in a module); a builtin's
    name counts when the script defines its own (`class TimeoutError(Exception)`)."""
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
    return sorted(n for n in names if (n not in BUILTINS or n in shadowed) and n not in top)


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
    if name in BUILTINS:  # a def of that name elsewhere in the script, not where the code sees it
        return
    binding = tokenizer_binding(script, name)
    if isinstance(binding, str):
        raise CannotExtract(binding)
    if binding is not None:  # the tokenizer grpo trains with, loaded on first use
        line, statement = binding
        pieces.code[-1] = (0, WRAPPER_CODE)
        pieces.code[-2 - line] = (line, f"{name} = {WRAPPER}({pieces.recipe!r})  # was: {statement[:80]}")
        pieces.bound[name] = binding
        return
    found: list[ast.Assign] = [
        stmt for scope in script.scopes_for(name, at) for _, _, stmt in script.assigns.get((id(scope), name), [])
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)]
    if not found:
        raise CannotExtract(f"it uses `{name}`, which is known only when the script runs")
    before = [s for s in found if s.lineno < getattr(at, "lineno", 0)]
    stmt = before[-1] if before else found[0]
    block = _enclosing_block(script, stmt)
    if block is not None:  # set in a loop or a branch: the statement as a whole, or nothing
        _add_block(script, name, block, found, pieces, depth)
        return
    if not _safe(stmt.value, script):
        _own_call(script, name, stmt, pieces)
    source = f"{name} = {ast.get_source_segment(script.text_source, stmt.value) or ast.unparse(stmt.value)}"
    pieces.code[id(stmt)] = (stmt.lineno, textwrap.dedent(source))
    for inner in _free_names(source, set(script.defs)):
        if inner != name:
            _resolve(script, inner, stmt, pieces, depth + 1)


def _own_call(script: Script, name: str, stmt: ast.Assign, pieces: _Pieces) -> None:
    """`NAME = f(literals)` calling the notebook's own def or class: copied, to run when the module is imported as
    the cell ran, when the call computes only from copied code and the interpreter (`extract_calls`)."""
    text = f"`{' '.join(ast.unparse(stmt.value).split())[:50]}`"
    callee = own_call(script, stmt.value, stmt)
    if callee is None:
        raise CannotExtract(f"it uses `{name}`, set by running code (line {stmt.lineno}: {text})")
    why = outside(script, callee, stmt) or changed_later(script, name, stmt)
    if why is not None:
        raise CannotExtract(f"it uses `{name}`, set by {text} (line {stmt.lineno}), whose code is not exact in a "
                            f"copy: {why}")
    pieces.runs.append((name, stmt.lineno, " ".join(ast.unparse(stmt).split())))


def _enclosing_block(script: Script, stmt: ast.stmt) -> ast.stmt | None:
    """The statement of its scope's body that holds `stmt` (a `for` or `if` around it); None when `stmt` is one."""
    scope = script.scope(stmt)
    node: ast.AST = stmt
    while (parent := script.parents.get(id(node))) is not None and parent is not scope:
        node = parent
    return None if node is stmt else node if isinstance(node, ast.stmt) else None


BLOCK_STATEMENTS = (ast.For, ast.If, ast.Assign, ast.Pass, ast.Break, ast.Continue)


def _add_block(script: Script, name: str, block: ast.stmt, found: list[ast.Assign], pieces: _Pieces,
               depth: int) -> None:
    """A module-level `for`/`if` that sets `name` (`for token in tokenizer.get_added_vocab(): ...`), copied whole
    with the plain assignments before it of the names it sets, when all it does is compute names from pure calls."""
    where = f"`{name}`, set inside a statement at line {block.lineno}"
    if script.scope(block) is not script.tree or not isinstance(block, ast.For | ast.If):
        raise CannotExtract(f"it uses {where} that runs when the script runs")
    inner = [n for n in ast.walk(block) if isinstance(n, ast.stmt)]
    if not all(isinstance(n, BLOCK_STATEMENTS) for n in inner) or any(
            isinstance(t, ast.Attribute | ast.Subscript) for n in inner if isinstance(n, ast.Assign)
            for t in n.targets):
        raise CannotExtract(f"it uses {where} that does more than compute names")
    expressions = [n for n in ast.walk(block) if isinstance(n, ast.expr) and not isinstance(n, ast.Name)]
    if not all(_safe(e, script) for e in expressions):
        raise CannotExtract(f"it uses {where} that calls running code")
    text = textwrap.dedent(ast.get_source_segment(script.text_source, block) or ast.unparse(block))
    pieces.code[id(block)] = (block.lineno, text)
    earlier = [s for s in found if s.lineno < block.lineno and _enclosing_block(script, s) is None]
    if earlier:  # e.g. `reasoning_end = None` before the loop: the value when the loop sets nothing
        if not _safe(earlier[-1].value, script):
            raise CannotExtract(f"it uses `{name}`, set by running code (line {earlier[-1].lineno})")
        pieces.code[id(earlier[-1])] = (earlier[-1].lineno, f"{name} = {ast.unparse(earlier[-1].value)}")
    for free in _free_names(text, set(script.defs)):
        _resolve(script, free, block, pieces, depth + 1)


def _class(script: Script, name: str, at: ast.AST) -> ast.ClassDef | None:
    """A class the function uses (`RustTool("build")`), defined where it can see it: copied like a def."""
    scopes = script.scopes_for(name, at)
    found = [d for d in script.defs.get(name, []) if isinstance(d, ast.ClassDef)
             and any(script.scope(d) is s for s in scopes)]
    return found[0] if len(found) == 1 else None


PURE_BUILTINS = {"str", "int", "float", "bool", "len", "set", "frozenset", "list", "dict", "tuple", "sorted", "range",
                 "min", "max", "abs", "round", "sum", "any", "all", "chr", "ord", "repr"}
PURE_MODULE_CALLS = {("re", "compile"), ("re", "escape"), ("os", "getenv"), ("string", "Template")}
TOKENIZER_READS = {"get_added_vocab", "get_vocab", "convert_tokens_to_ids", "convert_ids_to_tokens", "encode",
                   "decode", "tokenize"}
"""Methods of the bound tokenizer that read it (`bound.conflict` refuses when the script changed what they read)."""
STRING_METHODS = {"join", "format", "strip", "lstrip", "rstrip", "lower", "upper", "replace", "split", "splitlines",
                  "encode", "title"}
"""What a copied constant may call: builtins that compute a value, `re.compile`, reading the environment, and a
string literal's own methods. Decided by what the name is bound to, never by an attribute's name alone
(`os.replace` and `requests.get` share names with str and dict methods)."""


def _safe(node: ast.AST, script: Script) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and not _pure_call(inner.func, script):
            return False
        if isinstance(inner, ast.Lambda | ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr):
            return False
    return True


def _pure_call(func: ast.AST, script: Script) -> bool:
    if isinstance(func, ast.Name):  # a builtin the script does not rebind
        return func.id in PURE_BUILTINS and func.id not in script.defs and func.id not in script.imports \
            and not any(name == func.id for _, name in script.assigns)
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    if _string(receiver):  # "".join(...), "{}".format(...).strip()
        return func.attr in STRING_METHODS
    if isinstance(receiver, ast.Name) and func.attr in TOKENIZER_READS and isinstance(
            tokenizer_binding(script, receiver.id), tuple):  # the bound tokenizer, read
        return True
    if func.attr in ("keys", "values", "items") and isinstance(receiver, ast.Call) and isinstance(
            receiver.func, ast.Attribute) and receiver.func.attr in ("get_added_vocab", "get_vocab") and \
            _pure_call(receiver.func, script):
        return True
    if isinstance(receiver, ast.Name):
        return (receiver.id, func.attr) in PURE_MODULE_CALLS and _module_bound(script, receiver.id, receiver.id)
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name):  # os.environ.get
        return (receiver.value.id, receiver.attr, func.attr) == ("os", "environ", "get") \
            and _module_bound(script, "os", "os")
    return False


def _string(node: ast.AST) -> bool:
    """A string literal, an f-string, or a string method called on one: its methods compute, nothing else."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STRING_METHODS \
        and node.func.attr not in ("split", "splitlines", "encode") and _string(node.func.value)


def _module_bound(script: Script, name: str, module: str) -> bool:
    """`name` is the module `module` (`import re`), and nothing else in the script rebinds it."""
    imported = [a for n in ast.walk(script.tree) if isinstance(n, ast.Import) for a in n.names
                if (a.asname or a.name.split(".")[0]) == name]
    return bool(imported) and all(a.name == module for a in imported) and script.imports.get(name) == module \
        and name not in script.defs and not any(n == name for _, n in script.assigns)


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
    head = (f'"""Reward functions of {script.path.name}, copied by `grpo import` (--extract-rewards) with what they '
            f"use, so that\ngrpo can import them without running {script.path.name} (its training runs when it is "
            "imported, the functions are\ndefined inside another function or a notebook cell, or the file is part "
            'of a package). Lines are its lines."""\n')
    imports = sorted(set(pieces.imports.values()))
    body = [f"# {f'{script.path.name}:{line}' if line else 'grpo import: binds what the script loads at run time'}"
            f"\n{text.rstrip()}\n" for line, text in sorted(pieces.code.values())]
    return head + "\n" + "\n".join(imports) + ("\n\n\n" if imports else "\n") + "\n\n".join(body)
