"""`grpo check-rewards`: call every reward exactly as TRL will, on known completions, before training.

A reward that crashes, returns the wrong number of values, never varies, or pays a degenerate
completion more than the right answer wastes a whole run; this finds it in seconds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.checking.probes import (
    Tokens,
    code_solution,
    is_code_row,
    make_probes,
    probe_style,
    read_completions,
    row_reference,
)
from grpo_cli.checking.stats import (
    RewardResult,
    Violation,
    assess,
    correlations,
    describe,
    frac_zero_std,
)
from grpo_cli.data.mapping import prepare_data
from grpo_cli.errors import GrpoError, RewardTimeoutError
from grpo_cli.evaluation import generate
from grpo_cli.models import load_model, load_tokenizer
from grpo_cli.models.loading import apply_overrides, model_reference
from grpo_cli.models.vision import load_processor, recipe_is_vision_language
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards import build_reward_funcs, inspect_reward
from grpo_cli.rewards.builtins.answers import completion_text
from grpo_cli.rewards.calling import call_reward, result_problem, value_problem
from grpo_cli.rewards.registry import required_columns
from grpo_cli.rewards.reward_model import RewardModelScorer

__all__ = ["CheckReport", "RewardResult", "Sample", "Violation", "check_rewards"]


@dataclass
class Sample:
    """One completion to score, in the group (prompt) it belongs to."""

    group: int
    row: int | None
    probe: str
    prompt: Any
    columns: dict[str, Any]
    completion: Any
    text: str
    ids: list[int]
    has_reference: bool = False
    cut: bool = False
    """The probe ran past max_completion_length and was cut there, as generation would cut it."""


@dataclass
class CheckReport:
    """Everything check-rewards found: per-completion scores, per-reward statistics, violations."""

    recipe: str
    source: str
    samples: list[Sample]
    rewards: list[RewardResult]
    totals: list[float | None]
    frac_zero_std: float | None
    correlation: dict[str, dict[str, float | None]]
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    probe_format: str = ""
    """How the probes were written (tags or bare answer), when source is "probes"."""
    row_lines: dict[int, str] = field(default_factory=dict)
    """Training row index -> its file and line ('train.jsonl line 4'): messages name both."""

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def groups(self) -> int:
        return len({s.group for s in self.samples})

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe, "source": self.source, "probe_format": self.probe_format, "ok": self.ok,
            "groups": self.groups, "completions": len(self.samples),
            "rewards": [r.to_dict() for r in self.rewards],
            "total": {**describe([t for t in self.totals if t is not None]),
                      "frac_reward_zero_std": self.frac_zero_std},
            "correlation": self.correlation,
            "samples": [{"row": s.row, "line": self.row_lines.get(s.row) if s.row is not None else None,
                         "group": s.group, "probe": s.probe, "completion": s.text,
                         "completion_tokens": len(s.ids),
                         "scores": {r.name: r.values[i] for r in self.rewards}, "total": self.totals[i]}
                        for i, s in enumerate(self.samples)],
            "violations": [v.to_dict() for v in self.violations],
            "notes": self.notes, "metrics_logged": self.metrics,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


# ---------------------------------------------------------------------------- gathering completions


def _rows(recipe: Recipe, tokenizer: Any) -> Any:
    return prepare_data(recipe, tokenizer)


def _spread(n: int, k: int) -> list[int]:
    """k row indices spread evenly over n rows (multi-task data gets every task)."""
    k = min(k, n)
    return sorted({(i * n) // k for i in range(k)})


def _columns(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "prompt"}


def _wrap(text: str, chat: bool) -> Any:
    return [{"role": "assistant", "content": text}] if chat else text


def _probe_samples(recipe: Recipe, rows: Any, indices: list[int], tokens: Any, budget: int) -> list[Sample]:
    style = probe_style(recipe)
    chat = recipe.data.prompt.chat
    out: list[Sample] = []
    for group, index in enumerate(indices):
        row = rows[index]
        cols = _columns(row)
        ref = row_reference(cols, recipe)
        known = bool(code_solution(cols)) if is_code_row(cols, style, ref) else ref is not None
        for name, text in make_probes(cols, style, ref, budget * tokens.CHARS_PER_TOKEN * 2):
            clipped, ids = tokens.clip(text, budget)
            out.append(Sample(group, index, name, row["prompt"], cols, _wrap(clipped, chat), clipped, ids,
                              has_reference=known, cut=clipped != text))
    return out


def _describe_probes(recipe: Recipe, report: CheckReport) -> None:
    report.probe_format = probe_style(recipe).describe()
    note = _format_note(recipe)
    if note:
        report.notes.append(note)


def _format_note(recipe: Recipe) -> str | None:
    """Say so when user rewards may expect a format the recipe never declares (the probes cannot follow it)."""
    style = probe_style(recipe)
    if style.declared_by or all(e.kind == "builtin" for e in recipe.rewards):
        return None
    return (f"the recipe declares no answer format (no tags in its system prompt or template, no think_tag/"
            f"answer_tag on a reward), so the probes are written as {style.describe()}; if your own rewards "
            "expect another format, their verdicts below are about the probes, not your rewards: score "
            "completions in your format with --completions, or write the format into data.prompt.system_prompt")


def _file_samples(recipe: Recipe, rows: Any, path: Path, tokens: Any) -> list[Sample]:
    lines = read_completions(path, len(rows), recipe)
    column_names = [c for c in rows.column_names if c != "prompt"]
    groups: dict[str, int] = {}
    out: list[Sample] = []
    for line in lines:
        if line.row is not None:
            row = rows[line.row]
            prompt, cols, key = row["prompt"], _columns(row), f"row:{line.row}"
        else:
            prompt = line.prompt
            cols = {**dict.fromkeys(column_names), **line.columns}
            key = json.dumps([prompt, line.columns], sort_keys=True, default=str)
        group = groups.setdefault(key, len(groups))
        text = completion_text(line.completion)
        ids = tokens.encode(text) + ([tokens.eos] if tokens.eos is not None else [])
        out.append(Sample(group, line.row, f"line {line.line}", prompt, cols, line.completion, text, ids))
    return sorted(out, key=lambda s: s.group)  # TRL's groups are consecutive; the sort is stable


def _generated_samples(recipe: Recipe, samples: int) -> tuple[list[Sample], Any]:
    loaded = load_model(recipe)
    rows = prepare_data(recipe, loaded.processing_class).train
    indices = _spread(len(rows), samples)
    picked = [rows[i] for i in indices]
    tr = recipe.training
    k = tr.num_generations
    images = [r["images"] for r in picked] if "images" in rows.column_names else None
    texts, ids, _ = generate(loaded.model, loaded.processing_class, [r["prompt"] for r in picked], k=k, images=images,
                             temperature=tr.temperature, top_p=tr.top_p,
                             max_new_tokens=tr.max_completion_length,
                             batch_size=max(1, 32 // k), seed=tr.seed)
    chat = recipe.data.prompt.chat
    out = [Sample(g, indices[g], f"sample {j}", row["prompt"], _columns(row), _wrap(texts[g * k + j], chat),
                  texts[g * k + j], ids[g * k + j]) for g, row in enumerate(picked) for j in range(k)]
    return out, loaded.tokenizer


# ---------------------------------------------------------------------------- calling rewards


class _Logs:
    """Stand-ins for TRL's log_extra / log_metric that keep what rewards log."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}

    def log_extra(self, column: str, values: list[Any]) -> None:
        pass

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(float(value))


def _call(func: Any, batch: list[Sample], state: Any, logs: _Logs) -> Any:
    """One call with exactly TRL's keyword arguments; returns what the reward returned."""
    keys = list(batch[0].columns)
    kwargs: dict[str, Any] = {k: [s.columns.get(k) for s in batch] for k in keys}
    return call_reward(func, prompts=[s.prompt for s in batch], completions=[s.completion for s in batch],
                       completion_ids=[s.ids for s in batch], trainer_state=state, log_extra=logs.log_extra,
                       log_metric=logs.log_metric, **kwargs)


def _score(label: str, func: Any, samples: list[Sample], batches: list[list[int]], state: Any,
           logs: _Logs) -> RewardResult:
    res = RewardResult(label, [None] * len(samples))
    for n, idx in enumerate(batches):
        batch = [samples[i] for i in idx]
        start = time.perf_counter()
        try:
            result = _call(func, batch, state, logs)
        except RewardTimeoutError as exc:
            res.seconds.append(time.perf_counter() - start)
            skipped = [i for later in batches[n:] for i in later]  # each call would wait as long again
            res.add_error("timeout", f"{exc.seconds:g} s", skipped, len(skipped))
            break
        except Exception as exc:
            res.seconds.append(time.perf_counter() - start)
            culprits = [i for i in idx if _raises(func, samples[i], state)] or idx
            message = (str(exc).strip().splitlines() or [""])[0][:200]
            res.add_error("exception", f"raised {type(exc).__name__}: {message}", culprits, len(idx))
            continue
        res.seconds.append(time.perf_counter() - start)
        problem = result_problem(result, len(batch))
        if problem:
            res.add_error("length" if "values for" in problem else "not_list", problem, idx, len(idx))
            continue
        for i, value in zip(idx, result, strict=True):
            number, bad = value_problem(value)
            res.values[i] = number
            if bad:
                res.add_error(bad, repr(value), [i], 1)
    return res


def _raises(func: Any, sample: Sample, state: Any) -> bool:
    try:
        _call(func, [sample], state, _Logs())
        return False
    except Exception:
        return True


def _batches(samples: list[Sample], per_call: int) -> list[list[int]]:
    """Consecutive whole groups, about `per_call` completions a call, as TRL's generation batch."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i, s in enumerate(samples):
        if current and samples[current[-1]].group != s.group and len(current) >= per_call:
            batches.append(current)
            current = []
        current.append(i)
    return [*batches, current] if current else batches


# ---------------------------------------------------------------------------- the check


def _reward_funcs(recipe: Recipe) -> list[Any]:
    for i, entry in enumerate(recipe.rewards):
        inspect_reward(entry, recipe.base_dir, i)
    funcs = build_reward_funcs(recipe, training=False)
    kwargs = recipe.training.chat_template_kwargs
    return [RewardModelScorer(f, e.label, chat_template_kwargs=kwargs, where=f"rewards[{i}].model")
            if isinstance(f, str) else f for i, (f, e) in enumerate(zip(funcs, recipe.rewards, strict=True))]


def _tokenizer(recipe: Recipe, notes: list[str]) -> Any:
    try:
        if recipe_is_vision_language(recipe):  # the processor counts image tokens when prompts are length-filtered
            processor = load_processor(model_reference(recipe), revision=recipe.model.revision,
                                       trust_remote_code=recipe.model.trust_remote_code)
            apply_overrides(processor, recipe)
            return processor
        return load_tokenizer(recipe, local_only=True)
    except GrpoError as exc:
        notes.append(f"tokenizer of {recipe.model.name_or_path} not available ({exc.problems[0].what}); prompts "
                     "were not length-filtered and completion_ids are estimated at 4 characters a token")
        return None


def _trainer_state(recipe: Recipe) -> Any:
    from transformers import TrainerState

    return TrainerState(max_steps=recipe.training.max_steps, global_step=0)


def _totals(results: list[RewardResult], weights: list[float], n: int) -> list[float | None]:
    """TRL's total: a weighted nansum, except that a completion every reward skipped is NaN (no advantage)."""
    return [None if all(r.values[i] is None for r in results)
            else sum(w * v for w, r in zip(weights, results, strict=True) if (v := r.values[i]) is not None)
            for i in range(n)]


def _refuse_bad_request(recipe: Recipe, completions: str | Path | None, samples: int, generate: bool) -> None:
    """The dry run's own input errors, before a tokenizer or model loads."""
    if samples < 1:
        raise GrpoError(f"--samples must be at least 1, got {samples}", where="--samples")
    if completions is not None and generate:
        raise GrpoError("--completions and --generate both choose where completions come from",
                        where="command line", fix="Give one of them.")
    if not recipe.rewards:
        raise GrpoError("the recipe has no `rewards` to check: its reward is the environment's get_reward, which "
                        "scores the environment's state after a rollout, not a completion's text", where="rewards",
                        fix="Run `grpo check-tools RECIPE`: it resets the environment, calls each method and "
                            "get_reward, and names what fails.")


def _samples(recipe: Recipe, completions: str | Path | None, samples: int, generate: bool,
             notes: list[str]) -> tuple[list[Sample], str, Any]:
    """The completions to score, their source (generate, file, probes) and the row -> file:line lookup, if any."""
    if generate:
        return _generated_samples(recipe, samples)[0], "generate", None
    tokenizer = _tokenizer(recipe, notes)
    rows = (mapped := _rows(recipe, tokenizer)).train
    tokens = Tokens(getattr(tokenizer, "tokenizer", tokenizer))  # a VLM processor holds the tokenizer
    if completions is not None:
        return _file_samples(recipe, rows, Path(completions), tokens), "file", mapped.locate_train
    budget = recipe.training.max_completion_length
    return _probe_samples(recipe, rows, _spread(len(rows), samples), tokens, budget), "probes", mapped.locate_train


def check_rewards(recipe: Recipe, completions: str | Path | None = None, samples: int = 8,
                  generate: bool = False) -> CheckReport:
    """Score probes (default), a completions file, or freshly generated samples with every recipe reward.

    Raises GrpoError for bad input (recipe, data, file, reward references); contract violations are
    returned in `report.violations`.
    """
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()  # a dry run: keep the output to the report
    hf_logging.disable_progress_bar()
    _refuse_bad_request(recipe, completions, samples, generate)
    notes: list[str] = []
    funcs = _reward_funcs(recipe)
    try:
        found, source, locate = _samples(recipe, completions, samples, generate, notes)
        world = recipe.launch.world_size  # TRL calls each reward on one process's share of the generation batch
        per_call = max(1, recipe.training.generation_batch(world) // world)
        batches = _batches(found, per_call)
        state, logs = _trainer_state(recipe), _Logs()
        results = [_score(e.label, f, found, batches, state, logs) for e, f in zip(recipe.rewards, funcs, strict=True)]
    finally:
        for f in funcs:
            if hasattr(f, "close"):
                f.close()
    weights = [float(e.weight) for e in recipe.rewards]
    for res, entry in zip(results, recipe.rewards, strict=True):
        res.kind, res.weight = entry.kind, float(entry.weight)
        res.needs_reference = entry.kind != "builtin" or bool(required_columns(entry.name))
    totals = _totals(results, weights, len(found))
    groups = [s.group for s in found]
    report = CheckReport(str(recipe.source), source, found, results, totals, frac_zero_std(totals, groups),
                         correlations(results), notes=notes,
                         metrics={k: sum(v) / len(v) for k, v in logs.metrics.items()},
                         row_lines={s.row: locate(s.row) for s in found if s.row is not None} if locate else {})
    if source == "probes":
        _describe_probes(recipe, report)
    assess(report, groups)
    return report
