"""A global a copied reward reads that the notebook sets by calling its own code (`_STDLIB_SET = _stdlib_names()`,
`benchmarker = Benchmarker(trials=3, timeout=10)`): the copy makes the same call when it is imported, as the cell
did when it ran, and that is exact only when the call computes from the copied code, literal arguments and the
interpreter itself. Whatever it would read from outside (files other than the interpreter's own, the network, a
subprocess, the model or its tokenizer) leaves it a refusal that names the line."""

from __future__ import annotations

import ast

from grpo_cli.importing.bound import tokenizer_binding
from grpo_cli.importing.script_ast import Script, call_name

FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "listdir", "scandir",
              "glob", "rglob", "walk", "exists", "is_file", "is_dir", "stat", "mkdir", "makedirs", "unlink",
              "remove", "rmtree", "rename", "replace", "touch"}
"""Calls that read or change the filesystem: allowed only on the interpreter's own directories."""
OUTSIDE_CALLS = {"load_dataset", "from_pretrained", "urlopen", "input", "system", "popen", "Popen", "run",
                 "check_output", "check_call", "call", "exec", "eval", "__import__", "import_module",
                 "load", "loads", "save", "download", "hf_hub_download", "snapshot_download", "get", "post",
                 "request", "connect", "generate", "fit", "train",
                 # namespaces and code made when it runs reach anything; so do these of os
                 "globals", "vars", "locals", "compile", "breakpoint", "getenv",
                 "putenv", "fork", "forkpty", "kill", "killpg", "posix_spawn", "posix_spawnp", "execl", "execle",
                 "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
                 "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"}
"""Calls that reach outside the copied code (a process, the network, a model, a file loader), or may: refused."""
OUTSIDE_ATTRIBUTES = {"environ", "environb", "argv", "orig_argv", "stdin", "modules", "__builtins__", "__dict__",
                      "__globals__", "__subclasses__"}
"""What the process was started with (its environment, arguments, input) or a way to any object: refused."""
ATTRIBUTE_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
"""Attribute access by a name: a literal name is read as the attribute; a name computed when it runs
(`getattr(os, "pop" + "en")`) may be any, so it is refused."""
OUTSIDE_MODULES = {"requests", "urllib", "http", "httpx", "socket", "aiohttp", "subprocess", "shutil",
                   "huggingface_hub", "datasets", "transformers", "torch", "trl", "unsloth", "vllm", "pickle"}
INTERPRETER = {("sysconfig", "get_path"), ("sysconfig", "get_paths"), ("sys", "prefix"), ("sys", "base_prefix"),
               ("sys", "exec_prefix"), ("sys", "base_exec_prefix")}
"""Where the interpreter keeps its own files: the same for the copy as for the notebook run in that Python."""
PATH_HELPERS = {"Path", "PurePath", "join", "dirname", "abspath", "iterdir", "listdir", "scandir"}


def own_call(script: Script, value: ast.AST, at: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef \
        | None:
    """The notebook's def or class that `NAME = callee(literal arguments)` calls; None for anything else."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    found = _own(script, value.func.id, at)
    arguments = [*value.args, *(k.value for k in value.keywords)]
    if found is None or any(k.arg is None for k in value.keywords) or any(isinstance(a, ast.Starred)
                                                                           for a in value.args):
        return None
    literal = all(isinstance(n, ast.Constant | ast.UnaryOp | ast.BinOp | ast.operator | ast.unaryop | ast.Name
                             | ast.Load | ast.Tuple | ast.List) for a in arguments for n in ast.walk(a))
    return found if literal else None


def _reachable(script: Script, callee: ast.AST) -> list[ast.AST]:
    """The callee and the notebook's defs and classes it names, transitively (what the call may run)."""
    out, todo, seen = [], [callee], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for name in [n for n in ast.walk(node) if isinstance(n, ast.Name)]:
            found = _own(script, name.id, name)
            todo += [found] if found is not None else []
    return out


def _own(script: Script, name: str, at: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    """The def or class of the notebook `name` refers to at `at` (a cell's own first, then other cells')."""
    found = script.function(name, at)
    if found is not None:
        return found
    scopes = script.scopes_for(name, at)
    classes = [d for d in script.defs.get(name, []) if isinstance(d, ast.ClassDef)
               and any(script.scope(d) is s for s in scopes)]
    return classes[0] if len(classes) == 1 else None


def _interpreter_names(node: ast.AST, script: Script) -> set[str]:
    """Local names that hold a path of the interpreter's own (`stdlib_dir = Path(sysconfig.get_path("stdlib"))`,
    `for p in stdlib_dir.iterdir()`)."""
    names: set[str] = set()
    for _ in range(3):  # a few passes settle chains of assignments
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and _interpreter_path(inner.value, names, script):
                names |= {t.id for t in inner.targets if isinstance(t, ast.Name)}
            elif isinstance(inner, ast.For | ast.comprehension) and isinstance(inner.target, ast.Name) and \
                    _interpreter_path(inner.iter, names, script):
                names.add(inner.target.id)
    return names


def _interpreter_path(node: ast.AST, names: set[str], script: Script) -> bool:
    """Built only from the interpreter's paths, literals and path joins."""
    seeded = False
    for inner in ast.walk(node):
        interpreter = isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and \
            (script.imports.get(inner.value.id), inner.attr) in INTERPRETER
        if interpreter or (isinstance(inner, ast.Name) and inner.id in names):
            seeded = True
        elif isinstance(inner, ast.Call) and call_name(inner) not in PATH_HELPERS and not (
                isinstance(inner.func, ast.Attribute) and (script.imports.get(getattr(inner.func.value, "id", "")),
                                                           inner.func.attr) in INTERPRETER):
            return False
    return seeded


def outside(script: Script, callee: ast.AST, stmt: ast.stmt) -> str | None:
    """Why running `stmt` (which calls `callee`) in the copy would not compute what the cell did; None if exact."""
    for node in [stmt, *_reachable(script, callee)]:
        if getattr(node, "lineno", 0) > stmt.lineno:  # the copy keeps the notebook's line order
            name, line = getattr(node, "name", "?"), getattr(node, "lineno", 0)
            return f"it needs `{name}`, defined after the call (line {line})"
        local = _interpreter_names(node, script)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and isinstance(tokenizer_binding(script, inner.id), tuple | str):
                return f"it reads `{inner.id}`, the model's tokenizer (line {inner.lineno})"
            if isinstance(inner, ast.Name) and script.imports.get(inner.id, "").split(".")[0] in OUTSIDE_MODULES:
                return f"it uses `{inner.id}` ({script.imports[inner.id]}, line {inner.lineno})"
            if isinstance(inner, ast.Attribute) and inner.attr in OUTSIDE_ATTRIBUTES:
                return f"`{' '.join(ast.unparse(inner).split())[:50]}` (line {inner.lineno}) reaches outside the " \
                       "copied code"
            if not isinstance(inner, ast.Call):
                continue
            name = call_name(inner)
            if name in ATTRIBUTE_CALLS and isinstance(inner.func, ast.Name):
                attr = inner.args[1] if len(inner.args) > 1 else None
                if not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)) or \
                        attr.value in OUTSIDE_CALLS | FILE_CALLS | OUTSIDE_ATTRIBUTES:
                    return f"`{' '.join(ast.unparse(inner).split())[:50]}` (line {inner.lineno}) reaches outside " \
                           "the copied code"
            target = inner.func.value if isinstance(inner.func, ast.Attribute) else \
                inner.args[0] if inner.args else None
            on_interpreter = target is not None and _interpreter_path(target, local, script)
            if name in OUTSIDE_CALLS or (name in FILE_CALLS and not on_interpreter):
                what = "reads or changes files" if name in FILE_CALLS else "reaches outside the copied code"
                return f"`{' '.join(ast.unparse(inner).split())[:50]}` (line {inner.lineno}) {what}"
    return None


MUTATORS = {"add", "append", "extend", "update", "pop", "remove", "clear", "discard", "insert", "setdefault",
            "popitem", "sort", "reverse", "__setitem__", "__setattr__"}


def changed_later(script: Script, name: str, stmt: ast.stmt) -> str | None:
    """Where the script changes the object `name` holds after making it (`name.x = ...`, `name[k] = ...`,
    `name += ...`, `name.append(...)`): the copy would keep the value as made, so it is not exact."""
    for node in ast.walk(script.tree):
        if node is stmt or _local(script, node, name, stmt):
            continue
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            base = target.value if isinstance(target, ast.Attribute | ast.Subscript) else \
                target if isinstance(node, ast.AugAssign) else None
            if isinstance(base, ast.Name) and base.id == name:
                return f"line {getattr(node, 'lineno', 0)} changes it: `{' '.join(ast.unparse(node).split())[:50]}`"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            return f"line {node.lineno} changes it: `{' '.join(ast.unparse(node).split())[:50]}`"
    return None


def _local(script: Script, node: ast.AST, name: str, stmt: ast.stmt) -> bool:
    """`name` at `node` is another variable: one its own function assigns, not the global the statement sets."""
    scope = script.scope(node)
    return scope is not script.scope(stmt) and (id(scope), name) in script.assigns
