"""Rows a script builds in code from constants (`Dataset.from_list([{"prompt": [...], "answer": 0}] * 1000)`, a
comprehension over `range(N)`), evaluated without running anything: literals, names the script binds once to a
constant, `*`/`+` of lists and strings, a string's own pure methods, f-strings and comprehensions over a constant
range. Anything else (a call, a file, a name set twice or by running code) is not a constant, and the rows stay
refused."""

from __future__ import annotations

import ast
import string
from typing import Any

from grpo_cli.importing.script_ast import Script, call_name, receiver

MAX_ROWS = 100_000
MAX_CHARS = 50_000_000
"""A constant bigger than this is no longer the few copies of a prompt a notebook builds: left refused. Counted as
it is built (a string's characters, 8 a list item) and again as the rows JSON would hold them (a row repeated
counts each time), so no script evaluates to more memory than this or writes a larger file."""
STR_METHODS = {"strip", "lstrip", "rstrip", "lower", "upper", "replace", "removeprefix", "removesuffix", "title",
               "capitalize", "format"}


class NotConstant(Exception):
    pass


class Budget:
    """What one evaluation may still build (MAX_CHARS): each value is charged before it is made."""

    def __init__(self) -> None:
        self.left = MAX_CHARS

    def charge(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise NotConstant(f"larger than {MAX_CHARS:,} characters")


def constant(script: Script, node: ast.AST, env: dict[str, Any] | None = None, depth: int = 0,
             budget: Budget | None = None) -> Any:
    """The value of `node` when it is a constant expression; NotConstant when it depends on anything else."""
    env = env or {}
    budget = budget or Budget()
    budget.charge(1)  # every node: the time an evaluation takes is bounded too
    if depth > 30:
        raise NotConstant("too deep")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        items = [constant(script, e, env, depth + 1, budget) for e in node.elts if not isinstance(e, ast.Starred)]
        if len(items) != len(node.elts):
            raise NotConstant("a starred item")
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotConstant("a ** in a dict")
        return {constant(script, k, env, depth + 1, budget): constant(script, v, env, depth + 1, budget)  # type: ignore[arg-type]
                for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Name):
        return env[node.id] if node.id in env else _name(script, node, depth, budget)
    if isinstance(node, ast.BinOp):
        left = constant(script, node.left, env, depth + 1, budget)
        return _binop(node, left, constant(script, node.right, env, depth + 1, budget), budget)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = constant(script, node.operand, env, depth + 1, budget)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
    if isinstance(node, ast.JoinedStr):
        return "".join(_format(script, part, env, depth, budget) for part in node.values)
    if isinstance(node, ast.Call):
        return _method(script, node, env, depth, budget)
    if isinstance(node, ast.ListComp):
        return _comprehension(script, node, env, depth, budget)
    raise NotConstant(ast.unparse(node)[:40])


def _name(script: Script, node: ast.Name, depth: int, budget: Budget) -> Any:
    """A name the script binds exactly once, to a constant of immutable parts (a string, a number, a tuple)."""
    found = script.assignments(node.id, node)
    if len(found) != 1 or bindings(script, node.id) != 1 or not isinstance(found[0][2], ast.Assign):
        raise NotConstant(f"`{node.id}` is not bound once to a constant")
    value = constant(script, found[0][1], None, depth + 1, budget)
    if not _immutable(value):
        raise NotConstant(f"`{node.id}` holds a value code could change")
    return value


def bindings(script: Script, name: str) -> int:
    """How many places of the script bind `name`: assignments and `del`, and the statements that bind a name
    without `=` (def, class, import, `except ... as`, a match pattern, `global`), which the script runs too."""
    count = 0
    for n in ast.walk(script.tree):
        if isinstance(n, ast.Name):
            count += n.id == name and isinstance(n.ctx, ast.Store | ast.Del)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
            count += n.name == name
        elif isinstance(n, ast.alias):
            count += (n.asname or n.name.split(".")[0]) == name
        elif isinstance(n, ast.MatchAs | ast.MatchStar):
            count += n.name == name
        elif isinstance(n, ast.MatchMapping):
            count += n.rest == name
        elif isinstance(n, ast.Global | ast.Nonlocal):
            count += name in n.names
    return count


def _immutable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool | bytes)


def _size(value: Any) -> int:
    """What a string or sequence costs to hold: its characters, or 8 an item."""
    return len(value) if isinstance(value, str) else 8 * len(value) if isinstance(value, list | tuple) else 8


def _binop(node: ast.BinOp, left: Any, right: Any, budget: Budget) -> Any:
    if isinstance(node.op, ast.Mult) and isinstance(left, list | str) and isinstance(right, int) \
            and not isinstance(right, bool):
        if len(left) * max(right, 0) > MAX_ROWS * (1 if isinstance(left, list) else 100):
            raise NotConstant("too large")
        budget.charge(_size(left) * max(right, 0))
        return left * right
    if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, list | str | tuple):
        budget.charge(_size(left) + _size(right))
        return left + right
    if isinstance(node.op, ast.Add | ast.Sub | ast.Mult) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
            else left * right
    raise NotConstant(ast.unparse(node)[:40])


def _format(script: Script, part: ast.AST, env: dict[str, Any], depth: int, budget: Budget) -> str:
    if isinstance(part, ast.Constant):
        return str(part.value)
    if isinstance(part, ast.FormattedValue) and part.format_spec is None and part.conversion == -1:
        value = constant(script, part.value, env, depth + 1, budget)
        if isinstance(value, str | int) and not isinstance(value, bool):
            budget.charge(len(str(value)))
            return str(value)
    raise NotConstant("a formatted value")


def _method(script: Script, node: ast.Call, env: dict[str, Any], depth: int, budget: Budget) -> Any:
    """`text.strip()`, `"{}".format(x)`: a string's own method on constants."""
    owner = receiver(node)
    name = call_name(node)
    if owner is None or name not in STR_METHODS or any(k.arg is None for k in node.keywords):
        raise NotConstant(ast.unparse(node)[:40])
    text = constant(script, owner, env, depth + 1, budget)
    args = [constant(script, a, env, depth + 1, budget) for a in node.args]
    kwargs = {str(k.arg): constant(script, k.value, env, depth + 1, budget) for k in node.keywords}
    if not isinstance(text, str) or not all(_immutable(v) for v in [*args, *kwargs.values()]):
        raise NotConstant(ast.unparse(node)[:40])
    if name == "format" and not all(isinstance(v, str | int | float) for v in [*args, *kwargs.values()]):
        raise NotConstant("format of a non-string")
    budget.charge(_result_bound(text, name, [*args, *kwargs.values()]))
    return getattr(text, name)(*args, **kwargs)  # a str method on strings: computes, reads nothing


def _result_bound(text: str, name: str, args: list[Any]) -> int:
    """At most how long a str method's result is, known before it runs: `replace` inserts its new text at most
    once per character and between them, `format` each argument (at its spec's widths and precisions) at each
    field; the rest change case (at most 3 characters each) or cut."""
    if name == "replace" and len(args) >= 2 and isinstance(args[1], str) and isinstance(args[0], str):
        return len(text) + (len(text) + 1) * max(len(args[1]) - len(args[0]), 0)
    if name == "format":
        fields = [spec or "" for _, field_name, spec, _ in string.Formatter().parse(text) if field_name is not None]
        if any("{" in spec for spec in fields):
            raise NotConstant("a format spec made of fields")
        widest = max((len(str(v)) for v in args), default=0) + 30  # a float's own digits at most
        numbers = [int(n) for spec in fields for n in "".join(c if c.isdigit() else " " for c in spec).split()]
        return len(text) + len(fields) * widest + sum(numbers)
    return 3 * len(text)


def _comprehension(script: Script, node: ast.ListComp, env: dict[str, Any], depth: int,
                   budget: Budget) -> list[Any]:
    """`[ROW for i in range(N)]` (no conditions), ROW a constant that may use i."""
    if len(node.generators) != 1:
        raise NotConstant("a nested comprehension")
    gen = node.generators[0]
    call = gen.iter
    if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name) or not isinstance(call, ast.Call) or \
            call_name(call) != "range" or not isinstance(call.func, ast.Name) or bindings(script, "range"):
        raise NotConstant("a comprehension not over range()")
    bounds = [constant(script, a, env, depth + 1, budget) for a in call.args]
    if not 1 <= len(bounds) <= 3 or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise NotConstant("range() of non-integers")
    numbers = range(*bounds)
    if len(numbers) > MAX_ROWS:
        raise NotConstant("too large")
    budget.charge(8 * len(numbers))
    return [constant(script, node.elt, {**env, gen.target.id: i}, depth + 1, budget) for i in numbers]


def _written_size(value: Any, seen: dict[int, int]) -> int:
    """About how many characters the rows take as JSON, a value repeated counted every time it appears (the list
    `[ROW] * 1000` holds one row a thousand times; its file holds a thousand); each distinct value sized once."""
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, dict):
        size = sum(_written_size(k, seen) + _written_size(v, seen) + 2 for k, v in value.items()) + 2
    elif isinstance(value, list | tuple):
        size = sum(_written_size(v, seen) + 2 for v in value) + 2
    else:
        size = len(value) + 2 if isinstance(value, str) else value.bit_length() // 3 + 2 if isinstance(value, int) \
            else 24
    seen[id(value)] = size
    return size


def constant_rows(script: Script, call: ast.Call) -> list[dict[str, Any]] | None:
    """The rows of `Dataset.from_list(CONSTANT)` / `Dataset.from_dict(CONSTANT)`; None when they are not constant
    (or not a list of flat-keyed rows with the same columns)."""
    if len(call.args) != 1 or call.keywords:
        return None
    try:
        value = constant(script, call.args[0])
    except (NotConstant, TypeError, ValueError, AttributeError, IndexError, KeyError):
        return None
    if call_name(call) == "from_dict" and isinstance(value, dict) and value and \
            all(isinstance(v, list) for v in value.values()) and len({len(v) for v in value.values()}) == 1:
        value = [dict(zip(value, row, strict=True)) for row in zip(*value.values(), strict=True)]
    if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value) or \
            _written_size(value, {}) > MAX_CHARS:
        return None
    columns = set(value[0])
    if not all(isinstance(k, str) for k in columns) or any(set(r) != columns for r in value):
        return None
    return value
