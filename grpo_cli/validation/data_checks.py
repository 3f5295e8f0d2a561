"""Preflight checks of the data and of what the rewards need of it: files, columns, rows, reward references.

The data check settles what the checks after it read: the columns the rewards and tools get (`pf.columns`),
the rows the run will see, and each local file's scan (`pf.scans`); the reward check settles `pf.rewards`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.data.derive import derived_roots
from grpo_cli.data.peek import FULL_SCAN_BYTES, scan_file
from grpo_cli.errors import GrpoError, Problem
from grpo_cli.findings import Findings
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards.loaders import inspect_reward

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def check_data(recipe: Recipe, pf: Preflight) -> Findings:
    """Where the rows come from; for local files, that they parse and have the columns the recipe names."""
    data, found = recipe.data, Findings()
    found.plan["data"] = _data_source(recipe, pf, found)
    found.plan["prompt"] = data.describe_prompt()
    if pf.train_rows is not None:
        found.plan["train rows"] = pf.train_rows
    if pf.eval_rows:
        found.plan["eval rows"] = pf.eval_rows
    return found


def _data_source(recipe: Recipe, pf: Preflight, found: Findings) -> str:
    """The plan's `data` line, after checking what can be checked of that source."""
    data = recipe.data
    if data.from_environment:
        pf.columns = []  # rewards get no row columns: only what TRL passes (prompts, completions, environments)
        return "no rows: the environment's reset() serves every prompt"
    if data.dataset:
        desc = f"hub dataset {data.dataset}" + (f" ({data.config})" if data.config else "") + f", split {data.split}"
        pf.columns = list(data.keep_columns) if data.keep_columns is not None else None
        found.warnings.append(f"hub dataset {data.dataset} is not read when validating: its columns "
                              f"({', '.join(data.prompt.columns)} for the prompt) are checked when training loads "
                              "it; `grpo check-rewards` with local `data.files` checks them now.")
        return desc
    files = data.file_map
    if data.split not in files:
        found.problems.append(Problem("data.files", f"has no {data.split!r} split (splits: {', '.join(files)})",
                                      "Name the training files under the key given by `data.split`."))
        return "local files"
    if data.eval_split and data.eval_split not in files:
        found.problems.append(Problem("data.eval_split", f"{data.eval_split!r} is not a key of data.files "
                                      f"(splits: {', '.join(files)})", "Add its files to `data.files`."))
    columns = _file_columns(recipe, pf, found)
    if columns is None:
        return "local files"
    _column_checks(recipe, pf, columns, found)
    _count_rows(recipe, pf, found)
    return "local files " + ", ".join(f"{s}: {', '.join(ps)}" for s, ps in files.items())


def _column_checks(recipe: Recipe, pf: Preflight, columns: list[str], found: Findings) -> None:
    """Every column the recipe names exists in the training files; settles the columns the rewards get."""
    data = recipe.data
    for name, root in derived_roots(data).items():
        if root not in columns:
            found.problems.append(Problem(f"data.columns.{name}", f"reads column {root!r}, which the data does not "
                                          f"have", f"Columns in the {data.split!r} files: {', '.join(columns)}."))
    columns = [*columns, *(c for c in data.columns if c not in columns)]
    for i, test in enumerate(data.filter):
        if test.column is not None and test.column not in columns:
            found.problems.append(Problem(f"data.filter[{i}].column", f"{test.column!r} is not a column of the data",
                                          f"Columns: {', '.join(columns)}."))
    missing = [c for c in data.prompt.columns if c not in columns]
    if missing:
        key = "data.prompt.column" if data.prompt.column else "data.prompt.template"
        found.problems.append(Problem(key, f"uses column(s) {', '.join(missing)} that the data does not have",
                                      f"Columns in the {data.split!r} files: {', '.join(columns)}."))
    if data.answer and data.answer.column not in columns:
        found.problems.append(Problem("data.answer.column", f"{data.answer.column!r} is not a column of the data",
                                      f"Columns: {', '.join(columns)}."))
    if data.keep_columns is not None:
        absent = [c for c in data.keep_columns if c not in columns and not (data.answer and c == data.answer.into)]
        if absent:
            found.problems.append(Problem("data.keep_columns", f"names column(s) {', '.join(absent)} the data lacks",
                                          f"Columns: {', '.join(columns)}."))
    kept = list(data.keep_columns) if data.keep_columns is not None else list(columns)
    pf.columns = [c for c in kept if c != "prompt"]


def _file_columns(recipe: Recipe, pf: Preflight, found: Findings) -> list[str] | None:
    """Every local file exists, parses to the last record (when small enough) and has rows; the training columns."""
    data = recipe.data
    columns: list[str] | None = None
    for split, paths in data.file_map.items():
        for p in paths:
            path = recipe.resolve_path(p)
            if not path.exists():
                found.problems.append(Problem(f"data.files.{split}", f"file {p} not found (looked at {path})",
                                              "Paths are relative to the recipe's directory."))
                continue
            try:
                scan = pf.scans[str(path)] = scan_file(path)
            except GrpoError as exc:
                found.problems.append(Problem(f"data.files.{split}", exc.problems[0].render()))
                continue
            if not scan.complete and path.suffix != ".json":
                found.warnings.append(f"{p} is over {FULL_SCAN_BYTES // 2**20} MB: only its first record was "
                                      "checked; a broken record further on is reported when training loads it.")
            if not scan.columns:
                found.problems.append(Problem(f"data.files.{split}", f"{p} has no rows",
                                              "Give a file with at least one record."))
                continue
            if split == data.split and columns is None:
                columns = scan.columns
    return columns


def _count_rows(recipe: Recipe, pf: Preflight, found: Findings) -> None:
    """Training and eval rows the run will see (after holdout and max_samples)."""
    data, files = recipe.data, recipe.data.file_map

    def rows(split: str) -> int:
        scans = [pf.scans.get(str(recipe.resolve_path(p))) for p in files.get(split, [])]
        return sum(scan.rows for scan in scans if scan is not None)

    pf.train_rows = rows(data.split)
    if data.eval_split:
        pf.eval_rows = rows(data.eval_split)
    elif data.eval_holdout:
        pf.eval_rows = int(data.eval_holdout) if data.eval_holdout >= 1 else max(1, int(pf.train_rows *
                                                                                         data.eval_holdout))
        if pf.eval_rows >= pf.train_rows:
            found.problems.append(Problem("data.eval_holdout", f"holds out {pf.eval_rows} rows of {pf.train_rows}",
                                          "Hold out fewer rows, or a fraction (e.g. 0.05)."))
        pf.train_rows -= pf.eval_rows
    if data.max_samples:
        pf.train_rows = min(pf.train_rows, data.max_samples)
    if data.max_eval_samples and pf.eval_rows:
        pf.eval_rows = min(pf.eval_rows, data.max_eval_samples)


def check_rewards(recipe: Recipe, pf: Preflight) -> Findings:
    """Each reward's reference, read without importing it, and the dataset columns it needs; the plan's line."""
    found = Findings()
    provided = None if pf.columns is None else set(pf.columns)
    if provided is not None and recipe.data.answer:
        provided.add(recipe.data.answer.into)
    for i, entry in enumerate(recipe.rewards):
        try:
            info = inspect_reward(entry, recipe.base_dir, i)
        except GrpoError as exc:
            found.problems += exc.problems
            continue
        pf.rewards.append(info)
        if provided is None:
            continue
        for alternatives in info.columns:
            if not provided.intersection(alternatives):
                need = " or ".join(f"`{c}`" for c in alternatives)
                found.problems.append(Problem(
                    f"rewards[{i}]", f"reward {entry.label!r} needs the dataset column {need}, which the data "
                    f"mapping does not provide (it provides: {', '.join(sorted(provided)) or 'nothing'})",
                    "Add the column to `data.keep_columns`, map it with `data.answer` (e.g. `into: answer`), "
                    "or bind a value with the reward's `params`."))
    found.plan["rewards"] = (", ".join(f"{r.label} x{e.weight:g}" for r, e in zip(pf.rewards, recipe.rewards,
                                                                                  strict=False))
                             or "the environment's get_reward x1")
    return found
