"""What a row transform (`dataset.map(fn)`, an Axolotl `datasets[].type` function) returns, as recipe keys: a chat
prompt from a column or a template of columns and text (with a system prompt) -> data.prompt; a column, or a GSM8K
`#### answer` extraction -> data.answer; `new: x["old"]` -> data.columns; anything else is named as unread."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.importing.script_ast import Script


@dataclass
class RowFacts:
    prompt: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    columns: dict[str, str] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)


def read_row_transform(script: Script, fn: ast.AST | None, at: ast.AST) -> RowFacts | None:
    """The recipe keys of `fn`'s returned dict; None when it returns no literal dict."""
    body = _returned_dict(script, fn, at)
    if body is None:
        return None
    param = _parameter(script, fn, at)
    rows = RowFacts()
    for key, value in body.items():
        if key == "prompt" and (prompt := _chat_prompt(script, value, param)) is not None:
            rows.prompt = prompt
        elif key == "answer" and (answer := _answer(script, value, param)) is not None:
            rows.answer = answer
        elif (column := _column(value, param)) is not None:
            if column != key:
                rows.columns[key] = column
        else:
            rows.unread.append(key)
    return rows


def axolotl_transform(file: Path, name: str) -> tuple[RowFacts | None, int]:
    """Axolotl's `def name(cfg, ...): def transform_fn(example, ...): return {...}; return transform_fn, {...}`."""
    try:
        script = Script.parse(file, file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None, 0
    outer = script.function(name, script.tree)
    if outer is None:
        return None, 0
    returns = [n.value for n in ast.walk(outer) if isinstance(n, ast.Return) and script.scope(n) is outer]
    first = returns[-1].elts[0] if returns and isinstance(returns[-1], ast.Tuple) and returns[-1].elts else None
    if isinstance(first, ast.Name):
        inner = script.function(first.id, first)
        if inner is not None:
            return read_row_transform(script, first, first), inner.lineno
    return None, outer.lineno


def _function_of(script: Script, fn: ast.AST | None, at: ast.AST) -> ast.AST | None:
    if isinstance(fn, ast.Lambda):
        return fn
    if isinstance(fn, ast.Name):
        return script.function(fn.id, at)
    return None


def _parameter(script: Script, fn: ast.AST | None, at: ast.AST) -> str:
    func = _function_of(script, fn, at)
    args = func.args.args if isinstance(func, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef) else []
    return args[0].arg if args else ""


def _returned_dict(script: Script, fn: ast.AST | None, at: ast.AST) -> dict[str, ast.AST] | None:
    func = _function_of(script, fn, at)
    if isinstance(func, ast.Lambda):
        value: ast.AST | None = func.body
    elif func is not None:
        found = [n.value for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None]
        value = found[-1] if len(found) == 1 else None
    else:
        value = None
    if not isinstance(value, ast.Dict) or any(k is None for k in value.keys):
        return None
    keys = [script.value(k) for k in value.keys]  # type: ignore[arg-type]
    if not all(isinstance(k, str) for k in keys):
        return None
    return dict(zip(keys, value.values, strict=True))


def _column(node: ast.AST, param: str) -> str | None:
    """`x["question"]` -> "question"."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == param:
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    return None


def _chat_prompt(script: Script, node: ast.AST, param: str) -> dict[str, Any] | None:
    """[{"role": "system", "content": S}?, {"role": "user", "content": x[col] or text + x[col] ...}] ->
    data.prompt (a column, or a template of the columns and the text)."""
    if not isinstance(node, ast.List) or not 1 <= len(node.elts) <= 2:
        return None
    messages = []
    for element in node.elts:
        if not isinstance(element, ast.Dict) or any(k is None for k in element.keys):
            return None
        messages.append({script.value(k): v for k, v in zip(element.keys, element.values, strict=True)})  # type: ignore[arg-type]
    roles = [script.value(m.get("role")) for m in messages]
    if roles not in (["user"], ["system", "user"]):
        return None
    content = messages[-1].get("content")
    column = _column(content, param) if content is not None else None
    template = _template(script, content, param) if content is not None and column is None else None
    if column is None and template is None:
        return None
    prompt: dict[str, Any] = {"column": column, "chat": True} if column else {"template": template, "chat": True}
    if len(messages) == 2:
        system = script.text(messages[0].get("content"))
        if system is None:
            return None
        prompt["system_prompt"] = system
    return prompt


def _answer(script: Script, node: ast.AST, param: str) -> dict[str, Any] | None:
    """x[col] -> that column; a GSM8K `#### answer` extraction (inline or in a helper) -> extract: gsm8k."""
    column = _column(node, param)
    if column is not None:
        return {"column": column}
    if isinstance(node, ast.Name) and (found := script.lookup(node.id, node)) is not None and found is not node:
        return _answer(script, found, param)  # label = x["answer"].split("####")[-1] ...; "answer": label
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        helper = script.function(node.func.id, node)
        if helper is not None and "####" in ast.unparse(helper):
            column = _column(node.args[0], param)
            first = node.args[0]
            if column is None and isinstance(first, ast.Name) and first.id == param and helper.args.args:
                inner = [c for n in ast.walk(helper) if (c := _column(n, helper.args.args[0].arg)) is not None]
                column = inner[0] if len(set(inner)) == 1 else None  # gold(x): x["answer"] inside the helper
            if column is not None:
                return {"column": column, "extract": "gsm8k"}
    if "####" in ast.unparse(node):
        inner = [c for n in ast.walk(node) if (c := _column(n, param)) is not None]
        if inner:
            return {"column": inner[0], "extract": "gsm8k"}
    return None


def _template(script: Script, node: ast.AST, param: str) -> str | None:
    """`SYSTEM + "\\n\\n" + x["text"]` or f"...{x['q']}..." -> "<text>\\n\\n{text}" (text braces doubled)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(script, node.left, param), _template(script, node.right, param)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            inner = part.value if isinstance(part, ast.FormattedValue) and part.format_spec is None else part
            piece = _template(script, inner, param)
            if piece is None:
                return None
            parts.append(piece)
        return "".join(parts)
    column = _column(node, param)
    if column is not None:
        return "{" + column + "}"
    text = script.value(node)
    return text.replace("{", "{{").replace("}", "}}") if isinstance(text, str) else None
