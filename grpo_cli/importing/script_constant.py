"""Rows a script builds in code from constants (`Dataset.from_list([{"prompt": [...], "answer": 0}] * 1000)`, a
comprehension over `range(N)`), evaluated without running anything: literals, names the script binds once to a
constant, `*`/`+` of lists and strings, a string's own pure methods, f-strings and comprehensions over a constant
range. Anything else (a call, a file, a name set twice or by running code) is not a constant, and the rows stay
refused."""

from __future__ import annotations

import ast
from typing import Any

from grpo_cli.importing.script_ast import Script, call_name, receiver

MAX_ROWS = 100_000
MAX_CHARS = 50_000_000
"""A constant bigger than this is no longer the few copies of a prompt a notebook builds: left refused."""
STR_METHODS = {"strip", "lstrip", "rstrip", "lower", "upper", "replace", "removeprefix", "removesuffix", "title",
               "capitalize", "format"}


class NotConstant(Exception):
    pass


def constant(script: Script, node: ast.AST, env: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """The value of `node` when it is a constant expression; NotConstant when it depends on anything else."""
    env = env or {}
    if depth > 30:
        raise NotConstant("too deep")
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        items = [constant(script, e, env, depth + 1) for e in node.elts if not isinstance(e, ast.Starred)]
        if len(items) != len(node.elts):
            raise NotConstant("a starred item")
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotConstant("a ** in a dict")
        return {constant(script, k, env, depth + 1): constant(script, v, env, depth + 1)  # type: ignore[arg-type]
                for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Name):
        return env[node.id] if node.id in env else _name(script, node, depth)
    if isinstance(node, ast.BinOp):
        return _binop(node, constant(script, node.left, env, depth + 1), constant(script, node.right, env, depth + 1))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = constant(script, node.operand, env, depth + 1)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
    if isinstance(node, ast.JoinedStr):
        return "".join(_format(script, part, env, depth) for part in node.values)
    if isinstance(node, ast.Call):
        return _method(script, node, env, depth)
    if isinstance(node, ast.ListComp):
        return _comprehension(script, node, env, depth)
    raise NotConstant(ast.unparse(node)[:40])


def _name(script: Script, node: ast.Name, depth: int) -> Any:
    """A name the script binds exactly once, to a constant of immutable parts (a string, a number, a tuple)."""
    found = script.assignments(node.id, node)
    stores = [n for n in ast.walk(script.tree) if isinstance(n, ast.Name) and n.id == node.id
              and isinstance(n.ctx, ast.Store)]
    if len(found) != 1 or len(stores) != 1 or not isinstance(found[0][2], ast.Assign):
        raise NotConstant(f"`{node.id}` is not bound once to a constant")
    value = constant(script, found[0][1], None, depth + 1)
    if not _immutable(value):
        raise NotConstant(f"`{node.id}` holds a value code could change")
    return value


def _immutable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool | bytes)


def _binop(node: ast.BinOp, left: Any, right: Any) -> Any:
    if isinstance(node.op, ast.Mult) and isinstance(left, list | str) and isinstance(right, int) \
            and not isinstance(right, bool):
        if len(left) * max(right, 0) > MAX_ROWS * (1 if isinstance(left, list) else 100):
            raise NotConstant("too large")
        return left * right
    if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, list | str | tuple):
        return left + right
    if isinstance(node.op, ast.Add | ast.Sub | ast.Mult) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
        return left + right if isinstance(node.op, ast.Add) else left - right if isinstance(node.op, ast.Sub) \
            else left * right
    raise NotConstant(ast.unparse(node)[:40])


def _format(script: Script, part: ast.AST, env: dict[str, Any], depth: int) -> str:
    if isinstance(part, ast.Constant):
        return str(part.value)
    if isinstance(part, ast.FormattedValue) and part.format_spec is None and part.conversion == -1:
        value = constant(script, part.value, env, depth + 1)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    raise NotConstant("a formatted value")


def _method(script: Script, node: ast.Call, env: dict[str, Any], depth: int) -> Any:
    """`text.strip()`, `"{}".format(x)`: a string's own method on constants."""
    owner = receiver(node)
    name = call_name(node)
    if owner is None or name not in STR_METHODS or any(k.arg is None for k in node.keywords):
        raise NotConstant(ast.unparse(node)[:40])
    text = constant(script, owner, env, depth + 1)
    args = [constant(script, a, env, depth + 1) for a in node.args]
    kwargs = {str(k.arg): constant(script, k.value, env, depth + 1) for k in node.keywords}
    if not isinstance(text, str) or not all(_immutable(v) for v in [*args, *kwargs.values()]):
        raise NotConstant(ast.unparse(node)[:40])
    if name == "format" and not all(isinstance(v, str | int | float) for v in [*args, *kwargs.values()]):
        raise NotConstant("format of a non-string")
    return getattr(text, name)(*args, **kwargs)  # a str method on strings: computes, reads nothing


def _comprehension(script: Script, node: ast.ListComp, env: dict[str, Any], depth: int) -> list[Any]:
    """`[ROW for i in range(N)]` (no conditions), ROW a constant that may use i."""
    if len(node.generators) != 1:
        raise NotConstant("a nested comprehension")
    gen = node.generators[0]
    call = gen.iter
    if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name) or not isinstance(call, ast.Call) or \
            call_name(call) != "range" or not isinstance(call.func, ast.Name) or "range" in script.defs:
        raise NotConstant("a comprehension not over range()")
    bounds = [constant(script, a, env, depth + 1) for a in call.args]
    if not 1 <= len(bounds) <= 3 or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise NotConstant("range() of non-integers")
    numbers = range(*bounds)
    if len(numbers) > MAX_ROWS:
        raise NotConstant("too large")
    return [constant(script, node.elt, {**env, gen.target.id: i}, depth + 1) for i in numbers]


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
    if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
        return None
    columns = set(value[0])
    if not all(isinstance(k, str) for k in columns) or any(set(r) != columns for r in value):
        return None
    return value
