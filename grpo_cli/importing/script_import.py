"""A TRL script (`grpo import trl train.py [--config launch.yaml]`) -> a recipe: the keys `trl_script` reads, mapped
as a `trl grpo` config's, plus what only a script has: the prompt its dataset.map builds, the model it builds in
code, rewards that cannot be referenced, and reward files that would run the training when imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_cli.importing import rows_file
from grpo_cli.importing.common import NO_REWARD, ImportResult
from grpo_cli.importing.hf import FROM_SCRIPT, import_hf_yaml
from grpo_cli.importing.script_model import MODEL_NEEDED
from grpo_cli.importing.script_rewards import NESTED, trains_at_import
from grpo_cli.importing.trl_script import (
    CONSTANT_PROMPT,
    ENVIRONMENT,
    SCRIPT_ANSWER,
    SCRIPT_COLUMNS,
    SCRIPT_PROMPT,
    SCRIPT_ROWS,
    TRLPARSER,
    UNREAD_REWARDS,
    apply_environment,
    read_script,
)


def import_script(path: Path, config: dict[str, Any] | None = None, config_path: Path | None = None,
                  extract_to: Path | None = None, rows_to: Path | None = None) -> ImportResult:
    cfg, skipped = read_script(path, config, extract_to)
    environment, prompt = cfg.pop(ENVIRONMENT, None), cfg.pop(CONSTANT_PROMPT, None)
    trlparser, model_needed = cfg.pop(TRLPARSER, False), cfg.pop(MODEL_NEEDED, None)
    unread: list[tuple[str, str]] = cfg.pop(UNREAD_REWARDS, [])
    script_prompt, answer = cfg.pop(SCRIPT_PROMPT, None), cfg.pop(SCRIPT_ANSWER, None)
    columns, rows = cfg.pop(SCRIPT_COLUMNS, None), cfg.pop(SCRIPT_ROWS, None)
    cfg_data = {key: cfg.pop(key) for key in ("max_samples", "eval_holdout") if key in cfg}
    cfg[FROM_SCRIPT] = True
    out = import_hf_yaml(cfg, str(path) if config_path is None else f"{path} with {config_path}", "trl")
    apply_environment(out, environment, prompt if environment is not None or rows is None else None)
    out.unmapped[:0] = skipped.unmapped
    out.notes[:0] = skipped.notes
    out.extracted = skipped.extracted
    if script_prompt is not None:
        out.put("data.prompt", script_prompt)
        out.notes.append("the script's dataset.map builds a chat prompt from a column: data.prompt"
                         + (" (with its system prompt)" if "system_prompt" in script_prompt else ""))
    if answer is not None:
        out.put("data.answer", answer)
    if columns:
        out.put("data.columns", {**(out.get("data.columns") or {}), **columns})
    for key in ("max_samples", "eval_holdout"):
        if key in cfg_data:
            out.put(f"data.{key}", cfg_data[key])
    if trlparser:
        out.problems.append(f"model, data: {path.name} reads its settings with TrlParser from the YAML it is "
                            "launched with (`--config FILE.yaml`; arguments on its command line are the same keys), "
                            "which names the model, the data and the training settings: give that YAML here too")
        out.needs["--config"] = "LAUNCH.yaml"
    elif model_needed is not None and out.get("model.name_or_path") is None:
        line, expression = model_needed
        out.refuse(f"model: {path.name} builds its model from `{expression}` (line {line}), known only when it "
                   "runs: give the model", "model.name_or_path", "HUB_ID_OR_PATH")
    if rows is not None and not any(out.get(f"data.{k}") for k in ("dataset", "files", "from_environment")):
        constant_rows_file(out, path, rows[0], rows[1], rows_to)
    if not trlparser and "--output" not in out.needs and \
            not any(out.get(f"data.{k}") for k in ("dataset", "files", "from_environment")):
        out.refuse(f"data: {path.name} builds its training rows in code the importer cannot read (each place is "
                   "listed under 'not carried over'): give the dataset they come from", "data.dataset",
                   "HUB_DATASET_ID")
    _unread_rewards(out, path, unread)
    _training_at_import(out)
    _local_packages(out, path)
    return out


TEMPLATE_COLUMNS = {"reasoning_effort", "enable_thinking"}
"""Row columns a chat template reads as keywords, which TRL's GRPOTrainer does not pass it from the rows."""


def constant_rows_file(out: ImportResult, path: Path, rows: list[dict[str, Any]], code: str,
                       rows_to: Path | None) -> None:
    """Rows the script builds from constants, written as a JSONL beside the recipe (data.files.train); without a
    recipe file (no -o) they stay refused, with a line saying -o writes them."""
    import json

    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if [json.loads(line) for line in text.splitlines()] != rows:
        return  # a value JSON does not keep as it is (a tuple, a non-string key): the refusal stays
    if rows_to is None:
        out.refuse(f"data: {path.name} builds its {len(rows)} rows from constants ({code}): with -o RECIPE.yaml "
                   "the import writes them beside the recipe as a JSONL (data.files.train)", "--output", "recipe.yaml")
        return
    target = rows_file(rows_to)
    out.rows_file = (target, text)
    out.put("data.files", {"train": target.name})
    distinct = len({json.dumps(row, sort_keys=True) for row in rows})
    out.notes.append(f"{path.name} builds its {len(rows)} rows from constants ({code}; {distinct} distinct): "
                     f"evaluated without running it and written to {target.name} beside the recipe (data.files.train)")
    for column in sorted(TEMPLATE_COLUMNS & set(rows[0])):
        values = {json.dumps(row[column]) for row in rows}
        value = rows[0][column] if len(values) == 1 else "..."
        out.drop(f"the rows' `{column}` column", str(value), "TRL's GRPOTrainer passes a row's columns to the "
                 "rewards, not to the chat template (an Unsloth trainer may): training.chat_template_kwargs: "
                 f"{{{column}: {value}}} renders every prompt with it")


def _local_packages(out: ImportResult, path: Path) -> None:
    """Rewards imported from a package beside the script are referenced as that module, which grpo finds from the
    recipe's directory or the one grpo runs in: say which."""
    tops = {str(e.get("function", "")).split(":")[0].split(".")[0] for e in out.get("rewards") or []
            if ":" in str(e.get("function", "")) and not str(e["function"]).split(":")[0].endswith(".py")}
    beside = sorted(t for t in tops if (path.parent / t).is_dir() or (path.parent / f"{t}.py").is_file())
    if beside:
        out.notes.append(f"rewards come from {', '.join(beside)} beside {path.name}, imported by module name as the "
                         f"script does: run grpo from {path.parent.resolve()} (or install the package)")


def _unread_rewards(out: ImportResult, path: Path, unread: list[tuple[str, str]]) -> None:
    if not unread:
        return
    if NO_REWARD in out.problems:
        out.problems.remove(NO_REWARD)
        out.needs.pop("rewards", None)
    for expression, why in unread:
        out.drop("GRPOTrainer(reward_funcs=...)", expression, why)
    names = ", ".join(e for e, _ in unread)
    nested = all(why.startswith(NESTED) for _, why in unread)
    fix = ("--extract-rewards copies them, with what they use, into a module beside the recipe; or move each "
           "into a module and name it" if nested else "move each into a module (a file beside the recipe) and name it")
    out.refuse(f"rewards: {path.name} gives its trainer reward functions grpo cannot import ({names}; each is listed "
               f"under 'not carried over' with the reason), and a recipe that trains without them trains something "
               f"else: {fix}", *(("--extract-rewards", "") if nested else
                                ("rewards", "[{function: rewards.py:FUNCTION}, ...]")))


def _training_at_import(out: ImportResult) -> None:
    """A reward referenced in a file whose top-level code trains: importing it would run the source's training."""
    by_file: dict[str, list[str]] = {}
    for entry in out.get("rewards") or []:
        target, _, func = str(entry.get("function", "")).rpartition(":")
        if target.endswith(".py"):
            by_file.setdefault(target, []).append(func)
    for file, funcs in by_file.items():
        found = trains_at_import(Path(file))
        if found is None:
            continue
        line, code = found
        listed = ", ".join(funcs)
        out.refuse(f"rewards: {Path(file).name} runs its training when imported (line {line}: `{code}`), and grpo "
                   f"imports it to call {listed}: --extract-rewards copies {listed} with what they use into a module "
                   "beside the recipe; or move them into a file of their own, or put the script's training under "
                   "`if __name__ == \"__main__\":`", "--extract-rewards", "")
