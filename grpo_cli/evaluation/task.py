"""One evaluation task for `grpo eval` and `grpo train` alike: what is sampled, how it is scored, and the loop that
runs it on each model in turn.

A task is a benchmark suite's problems (scored by the suite's answer extraction), or a recipe's held-out rows
scored with its rewards (and run as tool episodes when it has tools). `evaluate_model` samples and scores one
loaded model, which is what training's before/after, task metric and `eval.on_save` call. For `grpo eval`,
`prepare_run` resolves everything from the layers below once (the backend, every model's tokenizer and dtype, the
rows) into an `EvalRun`, and `run_models` loads each model in turn (one in memory at a time) and calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.backends import check_backend, generate, one_model, prompt_texts
from grpo_cli.evaluation.held_out import HeldOutScoring, evaluate_rows, load_eval_rows
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings
from grpo_cli.evaluation.suites import Suite, SuiteRow, get_suite, recipe_suite_files
from grpo_cli.models.loading import load_tokenizer_for, resolve_dtype
from grpo_cli.models.sources import saved_dtype
from grpo_cli.progress import reporting

if TYPE_CHECKING:
    from datasets import Dataset
    from rich.console import Console

    from grpo_cli.evaluation.backends import Sampler
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
        return resolve_dtype(recipe.model.dtype, recipe.launch.profile)

    dtype = recipe.model.dtype if recipe is not None else "auto"
    want = dtype if dtype != "auto" else (saved_dtype(source.weights) or "float32")
    return "float32" if device == "cpu" and want in ("bfloat16", "float16") else want


@dataclass
class ModelInput:
    """One model of an evaluation, resolved before any model loads: where it comes from, its tokenizer (the
    recipe's chat template and pad token applied for held-out rows) and the dtype it is sampled in."""

    source: ModelSource
    tokenizer: Any
    """transformers' tokenizer or processor (theirs, untyped to us)."""
    dtype: str


@dataclass
class EvalRun:
    """An evaluation with everything from the layers below resolved once: the task, its rows, every model's
    inputs, the sampler and the device. `run_models` only loads, samples and scores."""

    task: EvalTask
    models: list[ModelInput]
    rows: list[SuiteRow] | Dataset
    use_vllm: bool
    device: str


def prepare_run(task: EvalTask, sources: list[ModelSource], *, backend: str = "auto") -> EvalRun:
    """Check the backend, load every tokenizer, map the rows and place each model: all that can fail before a
    model loads (seconds), in one step."""
    import torch

    recipe = task.recipe
    held_out = recipe if task.suite is None else None  # the recipe whose rows, rewards and placement are used
    use_vllm = check_backend(backend, images=held_out is not None and held_out.data.images is not None,
                             tools=held_out is not None and task.scoring.toolset is not None,
                             profile=held_out.launch.profile if held_out is not None else "single")
    cpu_only = held_out is not None and held_out.launch.spec.cpu_only
    device = "cuda" if torch.cuda.is_available() and not cpu_only else "cpu"
    trust = bool(recipe.model.trust_remote_code) if recipe is not None else False
    models = [ModelInput(s, load_tokenizer_for(s, held_out, trust_remote_code=trust), _placement(task, s, device))
              for s in sources]
    rows = task.rows(models[0].tokenizer) if models else []
    return EvalRun(task, models, rows, use_vllm, device)


def run_models(plan: EvalRun, console: Console | None = None) -> list[EvalResult]:
    """Evaluate each model in turn on the same rows with the same seed; one model in memory at a time."""
    task, rows, s = plan.task, plan.rows, plan.task.settings
    recipe = task.recipe
    if task.suite is None:
        task.scoring.say_unscored(console)
    results = []
    for m in plan.models:
        if console is not None:
            console.print(_start_line(task, m.source, len(rows), plan.use_vllm), markup=False)
        with one_model(m.source, m.tokenizer, s, use_vllm=plan.use_vllm, dtype=m.dtype, device=plan.device,
                       trust_remote_code=bool(recipe.model.trust_remote_code) if recipe is not None else False,
                       revision=recipe.model.revision if recipe is not None and task.suite is None else None
                       ) as loaded:
            if task.suite is not None and loaded.model is not None and console is not None:
                warning = context_warning(loaded.model, m.tokenizer, task.suite.prompts(rows, m.tokenizer),
                                          s.max_new_tokens)
                if warning:
                    console.print(f"[yellow]warning:[/] {m.source.label}: {warning}", soft_wrap=True)
            with reporting(console, f"sampling ({m.source.label})", len(rows) * s.k, task.unit):
                results.append(evaluate_model(task, loaded.model, m.tokenizer, rows, label=m.source.label,
                                              sampler=loaded.sampler, source=m.source.describe()))
    return results


def evaluate_models(task: EvalTask, sources: list[ModelSource], *, backend: str = "auto",
                    console: Console | None = None) -> list[EvalResult]:
    """`prepare_run` then `run_models`: what a notebook calls with a task and the models to compare."""
    return run_models(prepare_run(task, sources, backend=backend), console)


def _start_line(task: EvalTask, source: ModelSource, n: int, use_vllm: bool) -> str:
    s = task.settings
    if task.suite is None:
        return f"evaluating {source.describe()} on {n} prompts x {s.k} samples{' (vLLM)' if use_vllm else ''}"
    return (f"{task.suite.name}: {source.describe()} on {n} problems x {s.k} "
            f"({'greedy' if s.temperature == 0 else f'T={s.temperature}'}){' with vLLM' if use_vllm else ''}")


def context_warning(model: Any, tokenizer: Any, prompts: list[Any], max_new_tokens: int) -> str | None:
    """Why the scores will mean nothing when the longest prompt plus the completion exceeds the model's context."""
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
