"""The data a script trains on: its trainer's `train_dataset` traced back to the `load_dataset` that feeds it
(not the first one in the file, which may be an SFT warm-up set), through rebinding, helper functions, splits and
`dataset.map(...)`. A map that builds a chat prompt from a column (with a system prompt) and, optionally, a GSM8K
answer is carried as data.prompt / data.answer; any other transform is listed as lost with its line."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.importing.script_ast import NO, Script, call_name, keyword, receiver
from grpo_cli.importing.script_constant import constant_rows
from grpo_cli.importing.script_rewards import definition, module_file
from grpo_cli.importing.script_rows import read_row_transform

PASS_THROUGH = {"shuffle", "flatten_indices", "with_format", "cast", "cast_column", "remove_columns"}
SPLITS = {"train_test_split"}


@dataclass
class DataFacts:
    cfg: dict[str, Any] = field(default_factory=dict)
    prompt: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    columns: dict[str, str] = field(default_factory=dict)
    lost: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    found: bool = False
    rows: list[dict[str, Any]] | None = None
    """Rows the script builds from constants (`Dataset.from_list([...] * 1000)`), evaluated: script_constant."""
    rows_code: str = ""


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
    elif name in ("from_list", "from_dict") and (rows := _constant_rows(script, node)) is not None:
        facts.rows, facts.found = rows, True
        facts.rows_code = f"`{script.source(node, 70)}` (line {node.lineno})"
    elif name in PASS_THROUGH and receiver(node) is not None:
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name in SPLITS and receiver(node) is not None:
        _holdout(script, node, facts)
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name in ("select", "take") and _first_rows(script, node) is not None:
        facts.cfg["max_samples"] = _first_rows(script, node)
        facts.notes.append(f"{script.source(node, 60)} (line {node.lineno}) -> data.max_samples (after the shuffle)")
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    elif name in ("select", "filter", "take", "skip") and receiver(node) is not None:
        facts.lost.append((f"dataset.{name}(...)", script.source(node, 70), f"rows chosen in code (line "
                           f"{node.lineno}): grpo trains on the whole split; data.filter keeps rows by column"))
        _trace(script, receiver(node), facts, depth + 1)  # type: ignore[arg-type]
    else:
        _helper(script, node, facts, depth)


def _constant_rows(script: Script, node: ast.Call) -> list[dict[str, Any]] | None:
    """`Dataset.from_list(CONSTANT)` of the datasets library: its rows, when the argument is a constant."""
    owner = receiver(node)
    if not (isinstance(owner, ast.Name) and script.imports.get(owner.id) == "datasets"):
        return None
    return constant_rows(script, node)


def _first_rows(script: Script, node: ast.Call) -> int | None:
    """N of `ds.select(range(N))` / `ds.take(N)`: the first N rows."""
    arg = node.args[0] if len(node.args) == 1 else None
    if isinstance(arg, ast.Call) and call_name(arg) == "range" and len(arg.args) == 1:
        arg = arg.args[0]
    value = script.value(arg) if arg is not None else NO
    return value if isinstance(value, int) and value > 0 and receiver(node) is not None else None


def _holdout(script: Script, node: ast.Call, facts: DataFacts) -> None:
    """`ds.train_test_split(test_size=0.1)` feeding the trainer's ["train"]: rows held out -> data.eval_holdout."""
    size = script.value(keyword(node, "test_size") or (node.args[0] if node.args else None))
    if isinstance(size, int | float) and size > 0 and "eval_holdout" not in facts.cfg:
        facts.cfg["eval_holdout"] = size
        facts.notes.append(f"{script.source(node, 50)} (line {node.lineno}) -> data.eval_holdout: {size}")
    elif size is not NO:
        facts.lost.append(("dataset.train_test_split(...)", script.source(node, 60), f"a split made in code (line "
                           f"{node.lineno}): give data.eval_holdout"))


def held_out(script: Script, node: ast.AST) -> bool:
    """Whether `node` is the "test" side of a `train_test_split` (what data.eval_holdout evaluates on)."""
    found = script.lookup(node.id, node) if isinstance(node, ast.Name) else node
    return isinstance(found, ast.Subscript) and script.value(found.slice) == "test" and _splits(script, found.value)


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
    if where is script:
        script.bind(func, call)  # create_dataset(path, SYSTEM_PROMPT): its parameters hold what the call passes
    else:
        facts.notes.append(f"data from {call.func.id}() in {where.path.name}"  # type: ignore[attr-defined]
                           f" (line {func.lineno}), which {script.path.name} imports")
    _trace(where, returns[-1], facts, depth + 1)
    for arg in call.args:  # a helper that maps its parameter: follow what the call passes it
        if not facts.found:
            _trace(script, arg, facts, depth + 1)


def _imported_helper(script: Script, name: str) -> tuple[Script, ast.FunctionDef | ast.AsyncFunctionDef | None]:
    """A data helper the script imports from a module beside it (`from data.gsm8k import get_questions`)."""
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
    rows = read_row_transform(script, fn, call)
    where = f"dataset.map at line {call.lineno}"
    if rows is None:
        facts.lost.append((where, script.source(fn or call, 70), "a row transform the importer cannot read: write "
                           "its work as data.prompt / data.columns / data.answer"))
        return
    facts.prompt = rows.prompt or facts.prompt
    facts.answer = rows.answer or facts.answer
    facts.columns.update(rows.columns)
    if rows.unread:
        facts.lost.append((where, ", ".join(rows.unread), "columns built in code: write them as data.prompt / "
                           "data.columns / data.answer (the recipe reads the raw dataset's columns)"))
