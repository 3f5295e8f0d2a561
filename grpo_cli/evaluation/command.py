"""What `grpo eval` does, as one function a notebook can call: a recipe's eval split scored with its rewards,
or a benchmark suite, as one `EvalTask` run on every model and written by one writer; every check that can fail
cheaply happens before a model loads.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.backends import check_backend
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings
from grpo_cli.evaluation.suites import get_suite, recipe_suite_files
from grpo_cli.evaluation.task import EvalRun, EvalTask, prepare_run, run_models
from grpo_cli.models.loading import source_reference
from grpo_cli.models.sources import resolve_model_source
from grpo_cli.paths import ASSETS_DIR, check_writable_dir
from grpo_cli.progress import quiet_libraries
from grpo_cli.recipe import load_recipe

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.models.sources import ModelSource
    from grpo_cli.recipe.schema import Recipe

EVAL_SUMMARY = "summary.json"
EVAL_FILES = (runs.COMPLETIONS, EVAL_SUMMARY)


@dataclass(kw_only=True)
class EvalRequest:
    """The eval command's arguments (flags override the recipe's `eval` section); keyword-only, as the flags are."""

    recipe: Path | None = None
    overrides: list[str] = field(default_factory=list)
    model: str | None = None
    adapter: str | None = None
    split: str | None = None
    file: str | None = None
    samples: int | None = None
    k: int | None = None
    temperature: float | None = None
    batch_size: int | None = None
    out: Path | None = None
    compare: list[str] = field(default_factory=list)
    backend: str = "auto"
    suite: str | None = None
    max_new_tokens: int | None = None
    force: bool = False


@dataclass
class EvalOutcome:
    """What ran (the task, one result per model) and the files written."""

    task: EvalTask
    results: list[EvalResult]
    written: list[Path]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Target:
    """What the positional argument named: a loaded recipe, or a model reference (with --suite), or both."""

    recipe: Recipe | None
    model: str | None


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(f"{label}#{seen[label]}" if seen[label] > 1 else label)
    return out


def label_models(results: list[EvalResult]) -> None:
    """Make model labels unique (`a`, `a#2`), so side-by-side columns and result files never collide."""
    for r, label in zip(results, _unique([r.label for r in results]), strict=True):
        r.label = label


def evaluate(req: EvalRequest, console: Console | None = None) -> EvalOutcome:
    """Run `grpo eval`: the benchmark named by --suite or the recipe's eval.suite, else the recipe's eval."""
    plan, targets, notes = plan_evaluation(req)  # every cheap check and lookup, before a model loads
    results = run_models(plan, console)
    label_models(results)  # the same model twice still gets two rows
    return EvalOutcome(plan.task, results, write_results(plan.task, results, targets), notes)


def plan_evaluation(req: EvalRequest) -> tuple[EvalRun, list[Path], list[str]]:
    """The request resolved once: the task, every model with its tokenizer and dtype, the rows, where results go
    (refusing to overwrite), and notes for the user. Nothing here loads a model."""
    if req.suite is not None and not req.suite.strip():
        get_suite(req.suite)  # `--suite ''` is a bad name, not "no suite" (others are checked with suite_files)
    target = _target(req)
    task = _task(req, target.recipe)  # a typo in a suite name is refused before torch loads (seconds)
    check_backend(req.backend)
    quiet_libraries()  # grpo says what matters (a context too short for the prompts) in its own words
    sources, notes = _sources(req, task, target)
    targets = _targets(req, task, sources)  # checked before any model loads
    return prepare_run(task, sources, backend=req.backend), targets, notes


def _target(req: EvalRequest) -> _Target:
    """The loaded recipe or None, and the model reference: with --suite the positional may be a model or run dir."""
    path, suite = req.recipe, req.suite
    if path is None:
        if suite is None:
            raise GrpoError("give a recipe, or --suite NAME with a model", where="command line",
                            fix="e.g. `grpo eval recipe.yaml` or `grpo eval --suite gsm8k --model DIR`.")
        return _Target(None, req.model)
    if path.is_dir() or not path.exists() and not path.name.endswith((".yaml", ".yml")):
        if suite is None:
            raise GrpoError(f"{path} is not a recipe file", where="RECIPE",
                            fix=f"To score a model on a benchmark, add --suite: `grpo eval --suite gsm8k {path}`.")
        if req.model is not None or req.overrides:
            raise GrpoError(f"give the model once: either {path} or --model {req.model}", where="command line")
        return _Target(None, str(path))
    return _Target(load_recipe(path, req.overrides), req.model)


def _task(req: EvalRequest, recipe: Recipe | None) -> EvalTask:
    """The suite named by --suite or eval.suite, else the recipe's held-out rows; flags over the recipe's settings."""
    name = req.suite or (recipe.eval.suite if recipe is not None else None)
    settings = EvalSettings.resolve(recipe, suite=bool(name), limit=req.samples, k=req.k, temperature=req.temperature,
                                    batch_size=req.batch_size, max_new_tokens=req.max_new_tokens)
    if name:
        return EvalTask(settings, get_suite(name, files=recipe_suite_files(recipe)), recipe)
    assert recipe is not None, "_target refuses a model without --suite"
    return EvalTask(settings, recipe=recipe, split=req.split, file=req.file)


def _sources(req: EvalRequest, task: EvalTask, target: _Target) -> tuple[list[ModelSource], list[str]]:
    """The models to evaluate, in order, and a note when the recipe's base model stands in for its trained run."""
    recipe, notes = target.recipe, []
    if task.suite is None and recipe is not None:
        trained = Path(recipe.output.dir)
        compared = {Path(c).expanduser().resolve() for c in req.compare}
        if req.model is None and runs.is_run_dir(trained) and trained.resolve() not in compared:
            notes.append(f"evaluating the recipe's base model; add `--model {trained}` for the run trained there "
                         f"(or `--compare {trained}` for both side by side)")
    model, base_dir = target.model, None  # paths from flags are relative to the current directory
    if model is None:
        if recipe is None:
            raise GrpoError("which model? --suite needs --model M, a model/run dir, or a recipe", where="--model",
                            fix="e.g. `grpo eval --suite gsm8k --model bundled:tiny-arith`.")
        model, base_dir = source_reference(recipe), recipe.base_dir  # the recipe's own model: to the recipe
    sources = [resolve_model_source(model, adapter=req.adapter, base_dir=base_dir)]
    return sources + [resolve_model_source(ref, where="--compare") for ref in req.compare], notes


def _targets(req: EvalRequest, task: EvalTask, sources: list[ModelSource]) -> list[Path]:
    """Where results go (a suite's next to each model, else one directory for all), refusing to overwrite an
    earlier evaluation there unless forced."""
    files: tuple[str, ...]
    if task.suite is None:
        targets = [req.out or Path("outputs") / "eval" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")]
        files, what = EVAL_FILES, "an evaluation"
    else:
        labels = _unique([s.label for s in sources])
        several = len(sources) > 1
        targets = [req.out / re.sub(r"[^\w.-]+", "_", label) if req.out is not None and several
                   else req.out or default_result_dir(s) for s, label in zip(sources, labels, strict=True)]
        files, what = (runs.suite_result(task.suite.name),), f"a {task.suite.name} result"
    for target in targets:
        check_writable_dir(target, "--out")
        earlier = [name for name in files if (target / name).exists()]
        if earlier and not req.force:
            raise GrpoError(f"{target} already holds {what} ({', '.join(earlier)}); refusing to overwrite it",
                            where="--out", fix="Choose another --out, or pass --force to replace it.")
    return targets


def default_result_dir(source: ModelSource) -> Path:
    """Next to the model: the run dir, checkpoint or model dir; outputs/eval/<name> for hub and bundled models."""
    local = source.local  # resolved when the source was
    if local is not None and local.is_dir() and local != ASSETS_DIR and ASSETS_DIR not in local.parents:
        return local
    return Path("outputs") / "eval" / re.sub(r"[^\w.-]+", "_", source.label)


def write_results(task: EvalTask, results: list[EvalResult], targets: list[Path]) -> list[Path]:
    """The one writer: every completion as JSONL, and the settings with the headline numbers as JSON.

    A suite writes DIR/eval-<suite>.json and DIR/eval-<suite>-completions.jsonl next to each model; a recipe
    evaluation writes completions.jsonl and summary.json (one summary per model) into one directory.
    """
    settings = asdict(task.settings)
    if task.suite is not None:
        name = task.suite.name
        for result, target in zip(results, targets, strict=True):
            _write_jsonl(target / runs.suite_completions(name), result.records())
            _write_json(target / runs.suite_result(name), {"settings": settings, "summary": result.summary()})
        return [t / runs.suite_result(name) for t in targets]
    [target] = targets
    completions, summary = target / runs.COMPLETIONS, target / EVAL_SUMMARY
    _write_jsonl(completions, [row for r in results for row in r.records()])
    _write_json(summary, {"settings": settings, "models": [{"label": r.label, "source": r.source,
                                                            "summary": r.summary(rates=True)} for r in results]})
    return [completions, summary]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _write_json(path: Path, payload: dict[str, object]) -> None:
    """Written whole or not at all (a reader never sees half a summary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
