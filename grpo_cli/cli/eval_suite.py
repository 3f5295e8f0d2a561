"""`grpo eval --suite`: the benchmark branch of the eval command (argument handling and rendering only)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpo_cli.cli.app import console, load
from grpo_cli.errors import GrpoError


def suite_target(recipe: Path | None, overrides: list[str] | None, suite: str | None,
                 model: str | None) -> tuple[Any, str | None]:
    """(loaded recipe or None, model reference): with --suite the positional may be a model/run dir."""
    if recipe is None:
        if suite is None:
            raise GrpoError("give a recipe, or --suite NAME with a model", where="command line",
                            fix="e.g. `grpo eval recipe.yaml` or `grpo eval --suite gsm8k --model DIR`.")
        return None, model
    if recipe.is_dir() or not recipe.exists() and not recipe.name.endswith((".yaml", ".yml")):
        if suite is None:
            raise GrpoError(f"{recipe} is not a recipe file", where="RECIPE",
                            fix=f"To score a model on a benchmark, add --suite: `grpo eval --suite gsm8k {recipe}`.")
        if model is not None or overrides:
            raise GrpoError(f"give the model once: either {recipe} or --model {model}", where="command line")
        return None, str(recipe)
    return load(recipe, overrides), model


def eval_suite(name: str, recipe: Any, model: str | None, *, adapter: str | None, compare: list[str],
               out: Path | None, k: int | None, temperature: float | None, limit: int | None,
               batch_size: int | None, max_new_tokens: int | None, backend: str) -> None:
    """Score the model (and --compare models) on a suite; print the table; write JSON next to each model."""
    from grpo_cli.cli.render import render_suite_results
    from grpo_cli.evaluation.suite_run import default_result_dir, run_suite, suite_settings, write_suite_result
    from grpo_cli.evaluation.suites import get_suite
    from grpo_cli.models.sources import resolve_model_source

    get_suite(name)  # a bad name fails before any model loads
    if backend not in ("auto", "transformers", "vllm"):
        raise GrpoError(f"unknown backend {backend!r}", where="--backend", fix="Use auto, transformers or vllm.")
    base_dir = None  # paths from flags are relative to the current directory; the recipe's model to the recipe
    if model is None:
        if recipe is None:
            raise GrpoError("which model? --suite needs --model M, a model/run dir, or a recipe", where="--model",
                            fix="e.g. `grpo eval --suite gsm8k --model bundled:tiny-arith`.")
        from grpo_cli.models import model_reference

        model, base_dir = model_reference(recipe), recipe.base_dir
    sources = [resolve_model_source(model, adapter=adapter, base_dir=base_dir)]
    sources += [resolve_model_source(ref, where="--compare") for ref in compare]
    settings = suite_settings(recipe, k=k, temperature=temperature, limit=limit, batch_size=batch_size,
                              max_new_tokens=max_new_tokens)
    dtype = recipe.model.dtype if recipe is not None else "auto"
    trust = bool(recipe.model.trust_remote_code) if recipe is not None else False
    results = run_suite(name, sources, settings, backend=backend, dtype=dtype, trust_remote_code=trust,
                        console=console)
    seen: dict[str, int] = {}
    for r in results:  # the same model twice must still get two rows and two result files
        seen[r.label] = seen.get(r.label, 0) + 1
        r.label = f"{r.label}#{seen[r.label]}" if seen[r.label] > 1 else r.label
    render_suite_results(console, results)
    for result, source in zip(results, sources, strict=True):
        where = out / re.sub(r"[^\w.-]+", "_", result.label) if out is not None and len(results) > 1 else out
        summary, _ = write_suite_result(result, where or default_result_dir(source))
        console.print(f"wrote {summary}", markup=False, soft_wrap=True)
