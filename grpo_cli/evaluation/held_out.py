"""A recipe's held-out rows: read through exactly the training data mapping, sampled, and scored with the recipe's
rewards called exactly as TRL calls them (as multi-turn tool episodes when the recipe has tools).

`evaluation.task` runs this for `grpo train` (before/after numbers, the task metric) and `grpo eval`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.data import LOCAL_SUFFIXES, map_split, prepare_data
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.backends import generate
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings, score
from grpo_cli.rewards import load_reward
from grpo_cli.tools import load_toolset, run_episodes, start_episodes

if TYPE_CHECKING:
    from datasets import Dataset
    from rich.console import Console

    from grpo_cli.evaluation.backends import Sampler
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.tools import Toolset


@dataclass
class HeldOutScoring:
    """What scores held-out completions: the recipe's eval rewards (else its training rewards) and its tools."""

    funcs: list[Any]
    """TRL rewards: callables, or a reward model's path (scored by TRL during training only)."""
    labels: list[str]
    weights: dict[str, float]
    toolset: Toolset | None
    max_tool_iterations: int | None

    @classmethod
    def load(cls, recipe: Recipe) -> HeldOutScoring:
        entries = recipe.eval.rewards or recipe.rewards
        return cls([load_reward(e, recipe.base_dir) for e in entries], [e.label for e in entries],
                   {e.label: e.weight for e in entries}, load_toolset(recipe),
                   recipe.training.max_tool_calling_iterations)

    def say_unscored(self, console: Console | None) -> None:
        for label, func in zip(self.labels, self.funcs, strict=True):
            if isinstance(func, str) and console is not None:
                console.print(f"[yellow]note:[/] reward model {label!r} is not scored by grpo eval")


def evaluate_rows(model: Any, tokenizer: Any, rows: Dataset, scoring: HeldOutScoring, settings: EvalSettings, *,
                  label: str = "", sampler: Sampler | None = None, source: str = "") -> EvalResult:
    """Sample k completions per row of a mapped dataset and score them (`sampler` replaces HF generate).

    With a toolset each completion is a multi-turn tool episode, run as TRL's tool loop runs it.
    """
    prompts = list(rows["prompt"])
    columns = {c: list(rows[c]) for c in rows.column_names if c != "prompt"}
    s = settings
    if scoring.toolset is not None:
        result = _evaluate_episodes(model, tokenizer, prompts, columns, scoring, s, label)
    else:
        if sampler is not None:
            texts, ids, truncated = sampler(prompts)
        else:
            texts, ids, truncated = generate(model, tokenizer, prompts, k=s.k, temperature=s.temperature,
                                             top_p=s.top_p, max_new_tokens=s.max_new_tokens, batch_size=s.batch_size,
                                             seed=s.seed, images=columns.get("images"))
        rep = [p for p in prompts for _ in range(s.k)]
        rep_cols = {c: [v for v in vals for _ in range(s.k)] for c, vals in columns.items()}
        chat = bool(prompts) and isinstance(prompts[0], list)
        completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
        scores = score(scoring.funcs, scoring.labels, rep, completions, ids, rep_cols)
        result = EvalResult(label, len(prompts), s.k, scores, texts, [len(i) for i in ids], truncated,
                            _primary(scores), prompts, columns, dict(scoring.weights))
    result.settings, result.source = settings, source
    return result


def _primary(scores: dict[str, list[float | None]]) -> str:
    """The reward pass@k is computed on: the first 0/1 reward named like accuracy, else the first 0/1 one."""
    binary = [n for n, v in scores.items() if all(x in (0.0, 1.0) for x in v if x is not None)]
    return next((n for n in binary if "accuracy" in n), binary[0] if binary else next(iter(scores), ""))


def _evaluate_episodes(model: Any, tokenizer: Any, prompts: list[Any], columns: dict[str, list[Any]],
                       scoring: HeldOutScoring, s: EvalSettings, label: str) -> EvalResult:
    """k tool episodes per prompt, scored with what TRL gives rewards (messages, environments)."""
    import torch

    toolset = scoring.toolset
    assert toolset is not None
    torch.manual_seed(s.seed)
    rep = [p for p in prompts for _ in range(s.k)]
    rep_cols = {c: [v for v in vals for _ in range(s.k)] for c, vals in columns.items()}
    row_dicts = [{c: rep_cols[c][j] for c in rep_cols} for j in range(len(rep))]
    episodes = start_episodes(toolset, rep, row_dicts)
    run_episodes(model, tokenizer, toolset, episodes, max_tokens=s.max_new_tokens,
                 max_iterations=scoring.max_tool_iterations, temperature=s.temperature, top_p=s.top_p,
                 batch_size=s.batch_size)
    extra = {"environments": [e.environment for e in episodes]} if toolset.environments else None
    scores = score(scoring.funcs, scoring.labels, [e.prompt for e in episodes], [e.completion for e in episodes],
                   [e.ids for e in episodes], rep_cols, extra)
    # Lengths count what the model wrote, as TRL's completions/mean_length does for tool runs (not tool results).
    return EvalResult(label, len(prompts), s.k, scores, [e.text for e in episodes], [e.model_tokens for e in episodes],
                      [e.truncated for e in episodes], _primary(scores), prompts, columns, dict(scoring.weights),
                      [e.tool_calls for e in episodes], [e.tool_failures for e in episodes],
                      [e.completion for e in episodes])


def load_eval_rows(recipe: Recipe, tokenizer: Any, *, split: str | None = None, file: str | None = None) -> Dataset:
    """The prompts to evaluate, through exactly the training mapping: the recipe's eval split by default."""
    if split and file:
        raise GrpoError("give --split or --file, not both", where="command line")
    data = recipe.data
    if data.from_environment:
        raise GrpoError("the recipe has no rows to hold out: its environment serves every prompt from reset() "
                        "(environment-only training), and grpo's held-out sampling reads rows", where="data",
                        fix="Judge the run by its reward curve (rewards/<environment class>/mean in metrics.jsonl and "
                            "report.md), or give `data:` rows (with `eval_split`) that the environment's reset() "
                            "receives.")
    if not split and not file:
        if not data.has_eval:
            raise GrpoError("the recipe has no eval split (data.eval_split / data.eval_holdout)", where="data",
                            fix="Pass --split NAME or --file PATH, or set `data.eval_split` in the recipe.")
        rows = prepare_data(recipe, tokenizer).eval
        assert rows is not None
        return rows
    if file:
        path = Path(file).expanduser().resolve()
        if not path.is_file():
            raise GrpoError(f"file {file} not found", where="--file",
                            fix="Give an existing .jsonl/.json/.csv/.parquet file.")
        if not path.name.endswith(LOCAL_SUFFIXES):
            raise GrpoError(f"{file} is not a supported data file", where="--file",
                            fix=f"Use one of {', '.join(LOCAL_SUFFIXES)}.")
        data = data.model_copy(update={"dataset": None, "files": {"eval": [str(path)]}})
        split, where = "eval", "--file"
    else:
        where = "--split"
        if data.files is not None and split not in data.file_map:
            raise GrpoError(f"split {split!r} is not in data.files", where="--split",
                            fix=f"Splits of this recipe: {', '.join(data.file_map)}; or pass --file PATH.")
    assert split is not None
    return map_split(recipe, tokenizer, split, data=data, where=where)
