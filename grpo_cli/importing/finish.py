"""The last step of `grpo import`: references written relative to the recipe, `${NAME}` placeholders a source's
launcher fills (envsubst) read from the environment, validation as `grpo validate` does it, the process count the
source's batch arithmetic needs, and, when the recipe does not validate, the exact command that finishes it (the
recipe is still written, marked as not valid)."""

from __future__ import annotations

import copy
import os
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.importing import recipe_yaml, set_launch
from grpo_cli.importing.check import check_recipe_text
from grpo_cli.importing.common import ImportResult
from grpo_cli.importing.hub_names import hub_model
from grpo_cli.recipe import marked

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
UNSET = re.compile(r"\$([A-Z][A-Z0-9_]{2,}), which is not set")
MISSING_HERE = re.compile(r"^(model\.name_or_path|data\.files\.\w+): .*(?:is not a model directory|not found)")
"""A model directory or data file the source's machine had and this one does not."""
SECTIONS = {"model", "data", "rewards", "tools", "environment", "callbacks", "training", "launch", "output", "eval",
            "description"}


@dataclass
class Request:
    """What the user asked: `grpo import KIND CONFIG [OVERRIDES] [--config] [--profile] [--num-processes] [-o]`."""

    kind: str
    config: Path
    overrides: list[str] = field(default_factory=list)
    profile: str | None = None
    num_processes: int | None = None
    script_config: Path | None = None
    out: Path | None = None
    extract_rewards: bool = False


@dataclass
class Outcome:
    text: str
    problems: list[str]
    warnings: list[str]
    command: str | None = None
    """The command that finishes a refused recipe; None when only a hand edit can (the problems say where)."""


def finish(result: ImportResult, request: Request) -> Outcome:
    """Validate the converted recipe; a refused one keeps its text, marked, with the command that finishes it."""
    recipe_path = request.out or Path.cwd() / "imported.yaml"
    relativize(result, recipe_path.parent)
    names = launcher_placeholders(result)
    problems, warnings = _validate(result, recipe_path, names)
    processes = None
    if request.num_processes is None and any(_batch(p) for p in problems):
        processes = _processes(result, recipe_path, names, problems)
        if processes is not None and processes == result.processes_hint:
            set_launch(result, request.profile, processes)  # how the source ran: apply it
            result.notes.append(f"launch.num_processes: {processes}, as the source ran (vLLM on GPU {processes}, "
                                f"training on GPUs 0-{processes - 1})")
            problems, warnings = _validate(result, recipe_path, names)
            processes = None
        elif processes is not None:
            problems = [p for p in problems if not _batch(p)]
            result.problems.append(f"launch.num_processes: the batch settings only divide on {processes} training "
                                   f"processes (the source ran on several GPUs): give --num-processes {processes}")
    missing = [n for n in names if n not in os.environ]
    for name in missing:
        result.problems.append(f"{name}: `${{{name}}}` is filled by the source's launcher (e.g. `{name}=... envsubst "
                               f"< {request.config.name}`); the recipe reads it as ${{oc.env:{name}}}: set {name} "
                               "where you validate and train")
    problems = merge_problems(result.problems, problems)
    if not problems:
        return Outcome(recipe_yaml(result), [], warnings)
    unset = [n for p in problems for n in UNSET.findall(p) if n not in missing]  # $MORPH_API_KEY, which is not set
    for found in (MISSING_HERE.match(p) for p in problems):  # a path on the source's machine: an override fixes it
        if found is not None:
            key = found.group(1) if isinstance(result.get("data.files"), dict) or found.group(1).startswith(
                "model") else "data.files"  # one path (not a split mapping) is replaced whole
            result.needs.setdefault(key, "HUB_ID_OR_PATH" if key.startswith("model") else "LOCAL_FILE")
    problems += _hub_named(result)
    command = finishing_command(request, result, processes, missing + list(dict.fromkeys(unset)))
    header = ["# NOT VALID: `grpo import` could not finish this recipe. Every grpo command refuses it while it has "
              f"its `{marked.KEY}:` section",
              "# (why, and the command that finishes it); delete that section to use it as it is."]
    text = recipe_yaml(result, marked.mark(problems, command))
    return Outcome("\n".join(header) + "\n" + text, problems, warnings, command)


def _hub_named(result: ImportResult) -> list[str]:
    """A model directory named exactly as a well-known hub model: the command names that model, saying so."""
    path = str(result.get("model.name_or_path") or "")
    hub = hub_model(path) if result.needs.get("model.name_or_path") == "HUB_ID_OR_PATH" else None
    if hub is None:
        return []
    result.needs["model.name_or_path"] = hub
    return [f"model.name_or_path: {path} is named as the hub model {hub}, which the command below names, assuming "
            "the directory held those weights as downloaded (if it held others, give its path on this machine)"]


def relativize(result: ImportResult, base: Path) -> None:
    """`/abs/train.py:func` references -> relative to the recipe's directory (where grpo resolves them)."""
    def rel(ref: str) -> str:
        target, sep, name = ref.rpartition(":")
        if sep and target.endswith(".py") and os.path.isabs(target):
            return f"{os.path.relpath(target, base.resolve())}:{name}"
        return ref

    for entry in result.recipe.get("rewards") or []:
        if isinstance(entry, dict) and "function" in entry:
            entry["function"] = rel(str(entry["function"]))
    if isinstance(result.recipe.get("environment"), str):
        result.recipe["environment"] = rel(result.recipe["environment"])


def launcher_placeholders(result: ImportResult) -> list[str]:
    """`${VERSION}` (not a recipe key) in any value -> `${oc.env:VERSION}`; the names, in order."""
    found: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            def env(match: re.Match[str]) -> str:
                if match.group(1) in SECTIONS:
                    return match.group(0)
                if match.group(1) not in found:
                    found.append(match.group(1))
                return f"${{oc.env:{match.group(1)}}}"
            return PLACEHOLDER.sub(env, node)
        return node

    result.recipe = walk(result.recipe)
    for name in found:
        result.notes.append(f"${{{name}}} is a placeholder the source's launcher fills (envsubst): -> "
                            f"${{oc.env:{name}}}, read from the environment when grpo runs")
    return found


@contextmanager
def _environment(names: list[str]) -> Iterator[None]:
    """Stand-in values for unset launcher placeholders, so the rest of the recipe is validated."""
    unset = [n for n in names if n not in os.environ]
    os.environ.update({n: n for n in unset})
    try:
        yield
    finally:
        for name in unset:
            os.environ.pop(name, None)


def _validate(result: ImportResult, where: Path, names: list[str]) -> tuple[list[str], list[str]]:
    with _environment(names), _module_in_place(result, where) as (trial, moved):
        problems, warnings = check_recipe_text(recipe_yaml(trial), where)
    if moved is not None:  # say the module's own path, not the temporary copy's
        problems = [p.replace(*moved) for p in problems]
        warnings = [w.replace(*moved) for w in warnings]
    return problems, warnings


@contextmanager
def _module_in_place(result: ImportResult, where: Path) -> Iterator[tuple[ImportResult, tuple[str, str] | None]]:
    """The extracted rewards module (and the rows file) are written only with the recipe, after every check:
    validation reads temporary copies of them, the recipe's references pointed there."""
    if result.extracted is None and result.rows_file is None:
        yield result, None
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="grpo-import-module-") as tmp:
        trial = copy.deepcopy(result)
        if result.rows_file is not None:
            rows_path = Path(tmp) / result.rows_file[0].name
            rows_path.write_text(result.rows_file[1], encoding="utf-8")
            trial.put("data.files", {"train": str(rows_path)})
        if result.extracted is None:
            yield trial, (str(Path(tmp) / result.rows_file[0].name), str(result.rows_file[0]))  # type: ignore[index]
            return
        module, text = result.extracted
        copy_path = Path(tmp) / module.name
        copy_path.write_text(text, encoding="utf-8")
        for entry in trial.recipe.get("rewards") or []:
            target, sep, name = str(entry.get("function", "")).rpartition(":") if isinstance(entry, dict) \
                else ("", "", "")
            if sep and (where.parent / target).resolve() == module.resolve():
                entry["function"] = f"{copy_path}:{name}"
        yield trial, (str(copy_path), str(module))


def _batch(problem: str) -> bool:
    """A batch-arithmetic problem that depends on the number of processes."""
    return problem.startswith("training.") and " process" in problem


def _processes(result: ImportResult, where: Path, names: list[str], problems: list[str]) -> int | None:
    """The fewest training processes (the source's own count first) on which the batch settings divide."""
    others = [p for p in problems if not _batch(p)]
    candidates = [result.processes_hint] if result.processes_hint else []
    candidates += [n for n in (*range(2, 17), 24, 32, 48, 64) if n not in candidates]
    for count in candidates:
        trial = copy.deepcopy(result)
        set_launch(trial, None, count)
        found, _ = _validate(trial, where, names)
        if not any(_batch(p) for p in found) and len(found) <= len(others):
            return count
    return None


def merge_problems(own: list[str], validation: list[str]) -> list[str]:
    """The import's own problems first; a validation problem on the same key says less and is dropped."""
    keys = [k for p in own for k in p.split(":", 1)[0].split(", ")]

    def said(problem: str) -> bool:
        key = problem.split(":", 1)[0]
        return any(key.startswith(k) or f"`{k}`" in problem for k in keys)

    return own + [p for p in validation if not said(p)]


def finishing_command(request: Request, result: ImportResult, processes: int | None, env: list[str]) -> str | None:
    """`grpo import ...` as the user ran it, plus what finishes it (placeholders in capitals); None when nothing
    the import can be given would change its verdict (the problems are fixed by hand, in the source or recipe)."""
    # -o: the refused recipe is written there, marked NOT VALID, so finishing it replaces that file (--force)
    again = f" -o {shlex.quote(str(request.out))} --force" if request.out is not None else ""
    if result.next_command is not None:
        return result.next_command + again
    options = {k: v for k, v in result.needs.items() if k.startswith("--")}
    if request.extract_rewards:
        options.pop("--extract-rewards", None)  # it ran; what it could not copy is named in the problems
    added = [f"{k}={v}" for k, v in result.needs.items() if not k.startswith("--")]
    if not (env or added or options or processes):
        return None
    words = [f"{name}=..." for name in env] + ["grpo", "import", request.kind, str(request.config)]
    words += request.overrides + added
    if request.script_config is not None:
        options["--config"] = str(request.script_config)
    if request.profile:
        options["--profile"] = request.profile
    if request.num_processes or processes:
        options["--num-processes"] = str(request.num_processes or processes)
    for option, value in options.items():
        words += [option, value] if value else [option]
    if request.out is not None:
        words += ["-o", str(request.out), "--force"]
    elif "--extract-rewards" in options and "--output" not in options:
        words += ["-o", "recipe.yaml"]  # the extracted module is written beside the recipe
    return " ".join(w if w.endswith("=...") else shlex.quote(w) for w in words)
