"""Running a benchmark suite on models: generate, extract, score, and write JSON next to the model.

Accuracy is pass@1 over problems (greedy decoding by default, so one sample is the answer); with
k samples per problem it is the mean of the unbiased per-problem pass@1 and pass@k is added. The
95% interval is Wilson's, over the number of problems.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.suites import Suite, SuiteRow, get_suite, pass_at_k, wilson_interval
from grpo_cli.progress import reporting

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe

SuiteSampler = Any  # callable(prompts) -> (texts, ids, truncated), as evaluation.Sampler


@dataclass
class SuiteSettings:
    """How a suite is sampled: greedy pass@1 unless k > 1 (then temperature must be > 0)."""

    k: int = 1
    """Completions per problem; pass@k is scored over them."""
    temperature: float = 0.0
    """0 decodes greedily."""
    top_p: float = 1.0
    limit: int | None = None
    """The first `limit` problems only (None: the whole suite)."""
    max_new_tokens: int = 512
    """Answers cut here count as truncated (and usually wrong)."""
    batch_size: int = 32
    """Prompts generated together."""
    seed: int = 1234


@dataclass
class SuiteResult:
    """One model's completions on one suite, scored."""

    suite: str
    label: str
    settings: SuiteSettings
    rows: list[SuiteRow] = field(repr=False)
    completions: list[str] = field(repr=False)
    """Prompt-major: settings.k per row."""
    extracted: list[str | None] = field(repr=False)
    correct: list[bool] = field(repr=False)
    truncated: list[bool] = field(default_factory=list, repr=False)
    source: str = ""

    @property
    def k(self) -> int:
        return self.settings.k

    def per_problem(self) -> list[int]:
        """Correct samples per problem."""
        return [sum(self.correct[i * self.k:(i + 1) * self.k]) for i in range(len(self.rows))]

    def pass_at(self, k: int) -> float:
        counts = self.per_problem()
        return sum(pass_at_k(self.k, c, k) for c in counts) / len(counts) if counts else 0.0

    @property
    def accuracy(self) -> float:
        return self.pass_at(1)

    def ci95(self) -> tuple[float, float]:
        return wilson_interval(self.accuracy * len(self.rows), len(self.rows))

    def summary(self) -> dict[str, Any]:
        """The headline numbers written to JSON and shown in tables."""
        lo, hi = self.ci95()
        out: dict[str, Any] = {"suite": self.suite, "model": self.label, "source": self.source,
                               "problems": len(self.rows), "suite_size": suite_size(self.suite),
                               "limit": self.settings.limit, "k": self.k,
                               "decoding": "greedy" if self.settings.temperature == 0 else
                               f"sampling T={self.settings.temperature}",
                               "accuracy": self.accuracy, "ci95": [lo, hi],
                               "correct": sum(self.per_problem()) if self.k == 1 else None}
        if self.k > 1:
            out[f"pass@{self.k}"] = self.pass_at(self.k)
        out["no_answer_rate"] = sum(e is None for e in self.extracted) / max(1, len(self.extracted))
        if self.truncated:
            out["truncation_rate"] = sum(self.truncated) / len(self.truncated)
        return out

    def records(self) -> list[dict[str, Any]]:
        rows = []
        for j, text in enumerate(self.completions):
            row = self.rows[j // self.k]
            rows.append({"id": row.id, "sample": j % self.k, "reference": row.reference,
                         "extracted": self.extracted[j], "correct": self.correct[j], "completion": text})
        return rows


@cache
def suite_size(name: str) -> int | None:
    """How many problems the whole bundled suite has (a `--limit` run covers fewer: a smoke test, not a result);
    None for a suite read from the user's own file (`eval.suite_files`), which is never a Hub result."""
    try:
        return len(get_suite(name).rows())
    except GrpoError:
        return None


def suite_prompts(suite: Suite, rows: list[SuiteRow], tokenizer: Any) -> list[Any]:
    """Chat messages when the tokenizer has a chat template (the suites' zero-shot chat prompt), else text."""
    if getattr(tokenizer, "chat_template", None):
        return [suite.messages(r) for r in rows]
    return [suite.prompt(r) for r in rows]


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


def score_suite(suite: Suite, rows: list[SuiteRow], texts: list[str], settings: SuiteSettings, *, label: str = "",
                truncated: list[bool] | None = None, source: str = "") -> SuiteResult:
    """Extract and compare every completion (prompt-major, settings.k per row)."""
    refs = [r.reference for r in rows for _ in range(settings.k)]
    extracted = [suite.extract(t) for t in texts]
    correct = [suite.is_correct(t, ref) for t, ref in zip(texts, refs, strict=True)]
    return SuiteResult(suite.name, label, settings, rows, list(texts), extracted, correct, list(truncated or []),
                       source)


def evaluate_suite(model: Any, tokenizer: Any, suite: Suite, rows: list[SuiteRow], settings: SuiteSettings, *,
                   label: str = "", sampler: SuiteSampler | None = None, source: str = "") -> SuiteResult:
    """Generate for every row in batches (HF generate, or `sampler` such as vLLM) and score."""
    from grpo_cli.evaluation.sampling import generate

    prompts = suite_prompts(suite, rows, tokenizer)
    if sampler is not None:
        texts, _, truncated = sampler(prompts)
    else:
        texts, _, truncated = generate(model, tokenizer, prompts, k=settings.k, temperature=settings.temperature,
                                       top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                                       batch_size=settings.batch_size, seed=settings.seed)
    return score_suite(suite, rows, texts, settings, label=label, truncated=truncated, source=source)


def run_suite(name: str, sources: list[Any], settings: SuiteSettings, *, backend: str = "auto", dtype: str = "auto",
              trust_remote_code: bool = False, console: Console | None = None,
              files: dict[str, Any] | None = None) -> list[SuiteResult]:
    """Evaluate each model in turn on the same problems with the same settings; one model in memory at a time."""

    import torch

    from grpo_cli.evaluation.held_out import EvalSettings
    from grpo_cli.models.sources import load_tokenizer_for, saved_dtype

    suite = get_suite(name, files=files)
    rows = suite.rows(settings.limit)
    from grpo_cli.evaluation.backend import check_backend, one_model

    use_vllm = check_backend(backend)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for source in sources:
        tokenizer = load_tokenizer_for(source, trust_remote_code=trust_remote_code)
        want = dtype if dtype != "auto" else (saved_dtype(source.weights) or "float32")
        if device == "cpu" and want in ("bfloat16", "float16"):
            want = "float32"
        if console is not None:
            console.print(f"{suite.name}: {source.describe()} on {len(rows)} problems x {settings.k} "
                          f"({'greedy' if settings.temperature == 0 else f'T={settings.temperature}'})"
                          f"{' with vLLM' if use_vllm else ''}", markup=False)
        ev = EvalSettings(settings.k, settings.temperature, settings.top_p, settings.max_new_tokens,
                          settings.batch_size, settings.seed, settings.limit)
        with one_model(source, tokenizer, ev, use_vllm=use_vllm, dtype=want, device=device,
                       trust_remote_code=trust_remote_code) as loaded:
            if loaded.model is not None:
                prompts = suite_prompts(suite, rows, tokenizer)
                warning = context_warning(loaded.model, tokenizer, prompts, settings.max_new_tokens)
                if warning and console is not None:
                    console.print(f"[yellow]warning:[/] {source.label}: {warning}", soft_wrap=True)
            with reporting(console, f"sampling ({source.label})", len(rows) * settings.k, "completions"):
                results.append(evaluate_suite(loaded.model, tokenizer, suite, rows, settings, label=source.label,
                                              sampler=loaded.sampler, source=source.describe()))
    return results


def default_result_dir(source: Any) -> Path:
    """Next to the model: the run dir, checkpoint or model dir; outputs/eval/<name> for hub and bundled models."""
    from grpo_cli.models.sources import local_path
    from grpo_cli.paths import ASSETS_DIR

    path = local_path(source.reference) if source.kind != "hub" else None
    if path is not None and path.is_dir():
        resolved = path.resolve()
        if resolved != ASSETS_DIR and ASSETS_DIR not in resolved.parents:
            return resolved
    return Path("outputs") / "eval" / re.sub(r"[^\w.-]+", "_", source.label)


def write_suite_result(result: SuiteResult, directory: Path) -> tuple[Path, Path]:
    """DIR/eval-<suite>.json (settings and summary) and DIR/eval-<suite>-completions.jsonl."""
    import dataclasses

    directory.mkdir(parents=True, exist_ok=True)
    summary = directory / runs.suite_result(result.suite)
    completions = directory / runs.suite_completions(result.suite)
    with completions.open("w", encoding="utf-8") as fh:
        for rec in result.records():
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    payload = {"settings": dataclasses.asdict(result.settings), "summary": result.summary()}
    tmp = summary.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(summary)
    return summary, completions


def suite_settings(recipe: Recipe | None = None, *, k: int | None = None, temperature: float | None = None,
                   limit: int | None = None, batch_size: int | None = None,
                   max_new_tokens: int | None = None) -> SuiteSettings:
    """Flags over the recipe's `eval` section over the suite defaults (greedy, one sample, 512 new tokens).

    A recipe's eval.temperature counts only when it was written in the recipe: suites decode greedily
    unless asked otherwise; k > 1 without a temperature samples at T=1.
    """
    s = SuiteSettings()
    if recipe is not None:
        ev = recipe.eval
        s.k, s.top_p, s.batch_size, s.seed, s.limit = ev.num_generations, ev.top_p, ev.batch_size, ev.seed, \
            ev.max_samples
        if "temperature" in ev.model_fields_set:
            s.temperature = ev.temperature
        s.max_new_tokens = ev.max_new_tokens or recipe.training.max_completion_length
    s.k = k or s.k
    s.limit = limit or s.limit
    s.batch_size = batch_size or s.batch_size
    s.max_new_tokens = max_new_tokens or s.max_new_tokens
    if temperature is not None:
        s.temperature = temperature
    elif s.k > 1 and s.temperature == 0:
        s.temperature = 1.0
    return s
