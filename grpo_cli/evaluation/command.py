"""What `grpo eval` does, as one function a notebook can call: a recipe's eval split scored with its rewards,
or a bundled benchmark suite; every check that can fail cheaply happens before a model loads.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.backend import check_backend

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe


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
    """What ran and where it was written; `suite` is set for a benchmark, else `settings` for a recipe eval."""

    results: list[Any]
    written: list[Path]
    notes: list[str] = field(default_factory=list)
    suite: str | None = None
    settings: Any = None


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(f"{label}#{seen[label]}" if seen[label] > 1 else label)
    return out


def label_models(results: list[Any]) -> None:
    """Make model labels unique (`a`, `a#2`), so side-by-side columns and result files never collide."""
    for r, label in zip(results, _unique([r.label for r in results]), strict=True):
        r.label = label


def evaluate(req: EvalRequest, console: Console | None = None) -> EvalOutcome:
    """Run `grpo eval`: the benchmark named by --suite or the recipe's eval.suite, else the recipe's eval."""
    from grpo_cli.evaluation.suites import get_suite, recipe_suite_files

    if req.suite is not None and not req.suite.strip():
        get_suite(req.suite)  # `--suite ''` is a bad name, not "no suite" (others are checked with suite_files)
    recipe, model = _target(req)
    suite = req.suite or (recipe.eval.suite if recipe is not None else None)
    if suite:
        get_suite(suite, files=recipe_suite_files(recipe))  # a typo is refused before torch loads (seconds)
    check_backend(req.backend)
    from grpo_cli.progress import quiet_libraries

    quiet_libraries()  # grpo says what matters (a context too short for the prompts) in its own words
    if suite:
        return _suite(req, suite, recipe, model, console)
    return _recipe(req, recipe, console)


def _target(req: EvalRequest) -> tuple[Any, str | None]:
    """(loaded recipe or None, model reference): with --suite the positional may be a model or run dir."""
    from grpo_cli.recipe import load_recipe

    path, suite = req.recipe, req.suite
    if path is None:
        if suite is None:
            raise GrpoError("give a recipe, or --suite NAME with a model", where="command line",
                            fix="e.g. `grpo eval recipe.yaml` or `grpo eval --suite gsm8k --model DIR`.")
        return None, req.model
    if path.is_dir() or not path.exists() and not path.name.endswith((".yaml", ".yml")):
        if suite is None:
            raise GrpoError(f"{path} is not a recipe file", where="RECIPE",
                            fix=f"To score a model on a benchmark, add --suite: `grpo eval --suite gsm8k {path}`.")
        if req.model is not None or req.overrides:
            raise GrpoError(f"give the model once: either {path} or --model {req.model}", where="command line")
        return None, str(path)
    return load_recipe(path, req.overrides), req.model


def _suite(req: EvalRequest, name: str, recipe: Recipe, model: str | None, console: Console | None) -> EvalOutcome:
    from grpo_cli.evaluation.suite_run import default_result_dir, run_suite, suite_settings, write_suite_result
    from grpo_cli.evaluation.suites import get_suite, recipe_suite_files
    from grpo_cli.models import resolve_model_source, source_reference
    from grpo_cli.paths import check_writable_dir

    files = recipe_suite_files(recipe)
    get_suite(name, files=files)  # a bad name fails before any model loads
    check_backend(req.backend)
    base_dir = None  # paths from flags are relative to the current directory; the recipe's model to the recipe
    if model is None:
        if recipe is None:
            raise GrpoError("which model? --suite needs --model M, a model/run dir, or a recipe", where="--model",
                            fix="e.g. `grpo eval --suite gsm8k --model bundled:tiny-arith`.")
        model, base_dir = source_reference(recipe), recipe.base_dir
    sources = [resolve_model_source(model, adapter=req.adapter, base_dir=base_dir)]
    sources += [resolve_model_source(ref, where="--compare") for ref in req.compare]
    labels = _unique([s.label for s in sources])
    targets = [req.out / re.sub(r"[^\w.-]+", "_", label) if req.out is not None and len(sources) > 1
               else req.out or default_result_dir(s) for s, label in zip(sources, labels, strict=True)]
    for target in targets:  # before any model loads
        check_writable_dir(target, "--out")
        if (target / runs.suite_result(name)).exists() and not req.force:
            raise GrpoError(f"{target} already holds a {name} result ({runs.suite_result(name)}); refusing to "
                            "overwrite it", where="--out", fix="Choose another --out, or pass --force to replace it.")
    settings = suite_settings(recipe, k=req.k, temperature=req.temperature, limit=req.samples,
                              batch_size=req.batch_size, max_new_tokens=req.max_new_tokens)
    dtype = recipe.model.dtype if recipe is not None else "auto"
    trust = bool(recipe.model.trust_remote_code) if recipe is not None else False
    results = run_suite(name, sources, settings, backend=req.backend, dtype=dtype, trust_remote_code=trust, files=files,
                        console=console)
    label_models(results)  # the same model twice still gets two rows
    written = [write_suite_result(r, t)[0] for r, t in zip(results, targets, strict=True)]
    return EvalOutcome(results, written, suite=name)


def _recipe(req: EvalRequest, recipe: Recipe, console: Console | None) -> EvalOutcome:
    from grpo_cli.evaluation.held_out import EvalSettings, check_eval_out, run_eval, write_eval_outputs
    from grpo_cli.models import resolve_model_source, source_reference

    settings = EvalSettings.from_recipe(recipe, samples=req.samples, k=req.k, temperature=req.temperature,
                                        batch_size=req.batch_size, max_new_tokens=req.max_new_tokens)
    target = req.out or Path("outputs") / "eval" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    check_eval_out(target, req.force)  # before any model loads
    notes = []
    trained = Path(recipe.output.dir)
    compared = {Path(c).expanduser().resolve() for c in req.compare}
    if req.model is None and runs.is_run_dir(trained) and trained.resolve() not in compared:
        notes.append(f"evaluating the recipe's base model; add `--model {trained}` for the run trained there "
                     f"(or `--compare {trained}` for both side by side)")
    first_ref = req.model or source_reference(recipe)
    # Paths from flags are relative to the current directory; the recipe's own model to the recipe.
    sources = [resolve_model_source(first_ref, adapter=req.adapter, base_dir=None if req.model else recipe.base_dir)]
    sources += [resolve_model_source(ref, where="--compare") for ref in req.compare]
    results = run_eval(recipe, sources, settings, split=req.split, file=req.file, backend=req.backend,
                       console=console)
    label_models(results)
    completions, summary = write_eval_outputs(target, results, settings, sources)
    return EvalOutcome(results, [completions, summary], notes, settings=settings)
