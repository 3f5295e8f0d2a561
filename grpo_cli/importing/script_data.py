"""The data a script trains on: its trainer's `train_dataset` traced back to the `load_dataset` that feeds it
(not the first one in the file, which may be an SFT warm-up set), through rebinding, helper functions, splits and
`dataset.map(...)`. A map that builds a chat prompt from a column (with a system prompt) and, optionally, a GSM8K
answer is carried as data.prompt / data.answer; any other transform is listed as lost with its line."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.importing.script_ast import NO, Script, call_name, keyword, receiver

PASS_THROUGH = {"shuffle", "flatten_indices", "with_format", "cast", "cast_column", "remove_columns"}
SPLITS = {"train_test_split"}


@dataclass
class DataFacts:
    cfg: dict[str, Any] = field(default_factory=dict)
    prompt: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    lost: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    found: bool = False


def read_data(script: Script, trainer: ast.Call) -> DataFacts:
    facts = DataFacts()
    node = keyword(trainer, "train_dataset")
    if node is not None:
        _trace(script, node, facts, 0)
    if not facts.found and node is not None:
        facts.lost.append(("GRPOTrainer(train_dataset=...)", script.source(node), "data built in code the importer "
                           f"could not follow (line {trainer.lineno}): give data.dataset or data.files"))
    return facts


def _trace(script: Script, node: ast.AST, facts: DataFacts, depth: int) -> None:
    if depth > 16 or facts.found:
        return
    if isinstance(node, ast.Name):
        found = script.lookup(node.id, node)
        if found is not None:
            _trace(script, found, facts, depth + 1)
        return
    if isinstance(node, ast.Subscript):  # ds["train"], split["train"]
        key = script.value(node.slice)
        if isinstance(key, str) and key not in ("train",) and not _splits(script, node.value):
            facts.cfg.setdefault("dataset_train_split", key)
        _trace(script, node.value, facts, depth + 1)
        return
    if not isinstance(node, ast.Call):
        return
    name = call_name(node)
    if name == "load_dataset":
        _load_dataset(script, node, facts)
    elif name == "map" and receiver(node) is not None:
        _map(script, node, facts)
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name in PASS_THROUGH | SPLITS and receiver(node) is not None:
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name in ("select", "filter", "take", "skip") and receiver(node) is not None:
        facts.lost.append((f"dataset.{name}(...)", script.source(node, 70), f"rows chosen in code (line "
                           f"{node.lineno}): grpo trains on the whole split; data.filter keeps rows by column"))
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    else:
        _helper(script, node, facts, depth)


def _splits(script: Script, node: ast.AST) -> bool:
    found = script.lookup(node.id, node) if isinstance(node, ast.Name) else node
    return isinstance(found, ast.Call) and call_name(found) in SPLITS


def _helper(script: Script, call: ast.Call, facts: DataFacts, depth: int) -> None:
    """`get_gsm8k_questions()` / `prepare(ds)`: follow what a def of the script returns."""
    func = script.function(call_name(call), call) if isinstance(call.func, ast.Name) else None
    where = script
    if func is None and isinstance(call.func, ast.Name):
        where, func = _imported_helper(script, call.func.id)
    if func is None:
        facts.lost.append(("train_dataset", script.source(call, 70), f"built by code the importer cannot read "
                           f"(line {call.lineno}): give data.dataset or data.files"))
        return
    returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None
               and where.scope(n) is func]
    if not returns:
        return
    if where is not script:
        facts.notes.append(f"data from {call.func.id}() in {where.path.name}"  # type: ignore[attr-defined]
                           f" (line {func.lineno}), which {script.path.name} imports")
    _trace(where, returns[-1], facts, depth + 1)
    for arg in call.args:  # a helper that maps its parameter: follow what the call passes it
        if not facts.found:
            _trace(script, arg, facts, depth + 1)


def _imported_helper(script: Script, name: str) -> tuple[Script, ast.FunctionDef | ast.AsyncFunctionDef | None]:
    """A data helper the script imports from a module beside it (`from data.gsm8k import get_questions`)."""
    from grpo_cli.importing.script_rewards import definition, module_file

    module = script.imports.get(name)
    file = module_file(script.path.resolve().parent, module) if module else None
    found = definition(file, name) if file is not None else None
    if found is None:
        return script, None
    try:
        other = Script.parse(found, found.read_text(encoding="utf-8"), script.config)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return script, None
    return other, other.function(name, other.tree)


def _load_dataset(script: Script, node: ast.Call, facts: DataFacts) -> None:
    source = node.args[0] if node.args else keyword(node, "path")
    name = script.text(source)
    if name is None:
        facts.lost.append(("load_dataset(...)", script.source(node, 70), f"a dataset named when the script runs "
                           f"(line {node.lineno}): give data.dataset or data.files"))
        facts.found = True
        return
    facts.found = True
    facts.notes.append(f"data from {script.where(node)}: {script.source(node, 80)}")
    data_files = script.value(keyword(node, "data_files"))
    if name in ("json", "csv", "parquet", "text") and data_files is not NO:
        facts.cfg["dataset_files"] = data_files
    else:
        facts.cfg["dataset_name"] = name
    config = node.args[1] if len(node.args) > 1 else keyword(node, "name")
    if config is not None and script.text(config):
        facts.cfg["dataset_config"] = script.text(config)
    split = script.text(keyword(node, "split"))
    if split:
        facts.cfg.setdefault("dataset_train_split", split)


def _map(script: Script, call: ast.Call, facts: DataFacts) -> None:
    fn = call.args[0] if call.args else keyword(call, "function")
    body = _returned_dict(script, fn, call)
    where = f"dataset.map at line {call.lineno}"
    if body is None:
        facts.lost.append((where, script.source(fn or call, 70), "a row transform the importer cannot read: write "
                           "its work as data.prompt / data.columns / data.answer"))
        return
    param = _parameter(script, fn, call)
    unread = []
    for key, value in body.items():
        if key == "prompt" and (prompt := _chat_prompt(script, value, param)) is not None:
            facts.prompt = prompt
        elif key == "answer" and (answer := _answer(script, value, param)) is not None:
            facts.answer = answer
        else:
            unread.append(key)
    if unread:
        facts.lost.append((where, ", ".join(unread), "columns built in code: write them as data.prompt / "
                           "data.columns / data.answer (the recipe reads the raw dataset's columns)"))


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
    """[{"role": "system", "content": S}?, {"role": "user", "content": x[col]}] -> data.prompt."""
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
    column = _column(messages[-1].get("content"), param)  # type: ignore[arg-type]
    if column is None:
        return None
    prompt: dict[str, Any] = {"column": column, "chat": True}
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
