"""What one evaluation samples with and what it scored: the settings, the result (a recipe's rewards or a suite's
`correct`), means, pass@k, the Wilson interval and the JSON records; and `score`, every reward on every completion.

Recipe evaluations and benchmark suites share these two types: a suite is an evaluation whose one reward is
`correct`, with the answers it extracted and its own headline numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_cli.rewards.calling import call_reward

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


@dataclass
class EvalSettings:
    """How every model of one evaluation is sampled (same seed: same prompts and draws); the defaults are a
    suite's: greedy pass@1, 512 new tokens, every problem."""

    k: int = 1
    """Completions per prompt; pass@k is scored over them."""
    temperature: float = 0.0
    """0 decodes greedily."""
    top_p: float = 1.0
    limit: int | None = None
    """The first `limit` prompts only (None: all of them)."""
    max_new_tokens: int = 512
    """Answers cut here count as truncated (and usually wrong)."""
    batch_size: int = 32
    """Prompts generated together."""
    seed: int = 1234

    @classmethod
    def resolve(cls, recipe: Recipe | None, *, suite: bool = False, limit: int | None = None, k: int | None = None,
                temperature: float | None = None, batch_size: int | None = None,
                max_new_tokens: int | None = None) -> EvalSettings:
        """Flags over the recipe's `eval` section over the defaults.

        For a suite the recipe's eval.temperature counts only when it was written in the recipe: suites decode
        greedily unless asked otherwise, and k > 1 without a temperature samples at T=1.
        """
        s = cls()
        if recipe is not None:
            ev = recipe.eval
            s = cls(k=ev.num_generations, temperature=ev.temperature, top_p=ev.top_p, limit=ev.max_samples,
                    max_new_tokens=ev.max_new_tokens or recipe.training.max_completion_length,
                    batch_size=ev.batch_size, seed=ev.seed)
            if suite and "temperature" not in ev.model_fields_set:
                s.temperature = 0.0
        s.k, s.limit, s.batch_size = k or s.k, limit or s.limit, batch_size or s.batch_size
        s.max_new_tokens = max_new_tokens or s.max_new_tokens
        if temperature is not None:
            s.temperature = temperature
        elif suite and s.k > 1 and s.temperature == 0:
            s.temperature = 1.0
        return s

    @property
    def decoding(self) -> str:
        return "greedy" if self.temperature == 0 else f"sampling T={self.temperature}"


@dataclass
class EvalResult:
    """Scores of k sampled completions for each of n prompts (a suite: one 0/1 reward, `correct`)."""

    label: str
    num_prompts: int
    k: int
    rewards: dict[str, list[float | None]] = field(repr=False)
    completions: list[str] = field(default_factory=list, repr=False)
    lengths: list[int] = field(default_factory=list, repr=False)
    truncated: list[bool] = field(default_factory=list, repr=False)
    primary: str = ""
    prompts: list[Any] = field(default_factory=list, repr=False)
    """One entry per prompt (completions are prompt-major: k per prompt)."""
    columns: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    """Reward columns (e.g. the reference answer), one entry per prompt."""
    weights: dict[str, float] = field(default_factory=dict)
    """Reward weights, for the weighted total TRL optimises."""
    tool_calls: list[int] = field(default_factory=list, repr=False)
    """Tool calls per completion (recipes with tools: each completion is a multi-turn episode)."""
    tool_failures: list[int] = field(default_factory=list, repr=False)
    """Failed tool calls per completion (exceptions, timeouts, unknown tools)."""
    transcripts: list[Any] = field(default_factory=list, repr=False)
    """Each episode's messages after the prompt (assistant turns and tool results)."""
    settings: EvalSettings = field(default_factory=EvalSettings)
    source: str = ""
    """The model as `describe()` says it (where its weights came from)."""
    suite: str | None = None
    """The benchmark suite scored (None: a recipe's held-out rows and rewards)."""
    suite_size: int | None = None
    """Problems in the whole bundled suite (None: the user's own file)."""
    extracted: list[str | None] = field(default_factory=list, repr=False)
    """A suite's extracted answer per completion."""

    def mean(self, name: str) -> float | None:
        vals = [v for v in self.rewards[name] if v is not None and not math.isnan(v)]
        return sum(vals) / len(vals) if vals else None

    def std(self, name: str) -> float | None:
        vals = [v for v in self.rewards[name] if v is not None and not math.isnan(v)]
        if not vals:
            return None
        m = sum(vals) / len(vals)
        return math.sqrt(sum((v - m) ** 2 for v in vals) / len(vals))

    def is_binary(self, name: str) -> bool:
        return all(v in (0.0, 1.0) for v in self.rewards[name] if v is not None)

    def total(self) -> list[float]:
        """Weighted sum per completion, missing rewards counting 0 (TRL's nansum)."""
        n = len(next(iter(self.rewards.values()), []))
        return [sum(self.weights.get(k, 1.0) * (v[i] or 0.0) for k, v in self.rewards.items()) for i in range(n)]

    def pass_at(self, k: int, name: str | None = None) -> float | None:
        """Unbiased pass@k (Chen et al. 2021) over prompts, for a 0/1 reward."""
        name = name or self.primary
        if not name or not self.is_binary(name) or k > self.k:
            return None
        scores = self.rewards[name]
        total, counted = 0.0, 0
        for i in range(self.num_prompts):
            group = [s for s in scores[i * self.k:(i + 1) * self.k] if s is not None]
            if not group:
                continue
            n, c = len(group), int(sum(group))
            total += 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)
            counted += 1
        return total / counted if counted else None

    @property
    def accuracy(self) -> float:
        """pass@1 of the primary 0/1 reward (a suite's accuracy)."""
        return self.pass_at(1) or 0.0

    def summary(self, rates: bool = False) -> dict[str, Any]:
        """Headline numbers; `rates` adds the success rate of each 0/1 reward (`grpo eval` shows it)."""
        if self.suite is not None:
            return self._suite_summary()
        out: dict[str, Any] = {"label": self.label, "prompts": self.num_prompts, "k": self.k}
        if len(self.rewards) > 1:
            totals = self.total()
            out["reward/mean"] = sum(totals) / len(totals) if totals else None
        for name in self.rewards:
            out[f"{name}/mean"] = self.mean(name)
            out[f"{name}/std"] = self.std(name)
            if rates and self.is_binary(name) and self.mean(name) is not None:
                out[f"{name}/rate"] = self.mean(name)
        if self.primary and self.is_binary(self.primary):
            out["pass@1"] = self.pass_at(1)
            if self.k > 1:
                out[f"pass@{self.k}"] = self.pass_at(self.k)
        if self.lengths:
            out["mean_length"] = sum(self.lengths) / len(self.lengths)
            out["truncation_rate"] = sum(self.truncated) / len(self.truncated)
        if self.tool_calls:
            calls = sum(self.tool_calls)
            out["tools/calls_per_episode"] = calls / len(self.tool_calls)
            out["tools/failure_rate"] = sum(self.tool_failures) / calls if calls else 0.0
        return out

    def _suite_summary(self) -> dict[str, Any]:
        """A suite's headline: accuracy with its 95% Wilson interval over problems, pass@k, unanswered and cut."""
        n, correct = self.num_prompts, self.rewards["correct"]
        lo, hi = wilson_interval(self.accuracy * n, n)
        out: dict[str, Any] = {"suite": self.suite, "model": self.label, "source": self.source, "problems": n,
                               "suite_size": self.suite_size, "limit": self.settings.limit, "k": self.k,
                               "decoding": self.settings.decoding, "accuracy": self.accuracy, "ci95": [lo, hi],
                               "correct": int(sum(c or 0.0 for c in correct)) if self.k == 1 else None}
        if self.k > 1:
            out[f"pass@{self.k}"] = self.pass_at(self.k) or 0.0
        out["no_answer_rate"] = sum(e is None for e in self.extracted) / max(1, len(self.extracted))
        if self.truncated:
            out["truncation_rate"] = sum(self.truncated) / len(self.truncated)
        return out

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready row per completion: prompt, completion, every score, length, truncation."""
        if self.suite is not None:
            return [{"id": self.columns["id"][j // self.k], "sample": j % self.k,
                     "reference": self.columns["reference"][j // self.k], "extracted": self.extracted[j],
                     "correct": bool(self.rewards["correct"][j]), "completion": text}
                    for j, text in enumerate(self.completions)]
        rows = []
        for j, text in enumerate(self.completions):
            i = j // self.k
            row: dict[str, Any] = {"model": self.label, "prompt_index": i, "sample": j % self.k,
                                   "prompt": self.prompts[i] if i < len(self.prompts) else None, "completion": text,
                                   "rewards": {name: vals[j] for name, vals in self.rewards.items()}}
            if self.lengths:
                row.update(length=self.lengths[j], truncated=self.truncated[j])
            if self.tool_calls:
                row.update(tool_calls=self.tool_calls[j], tool_failures=self.tool_failures[j],
                           messages=self.transcripts[j])
            row.update({c: vals[i] for c, vals in self.columns.items() if c not in row and c != "images"})
            rows.append(row)
        return rows


def score(reward_funcs: list[Any], labels: list[str], prompts: list[Any], completions: list[Any],
          completion_ids: list[list[int]], columns: dict[str, list[Any]], extra: dict[str, Any] | None = None
          ) -> dict[str, list[float | None]]:
    """Scores of every reward for every completion, None where a reward does not apply.

    `extra` adds keyword arguments TRL passes in some runs (e.g. `environments`, one per completion).
    """
    scores: dict[str, list[float | None]] = {}
    for func, label in zip(reward_funcs, labels, strict=True):
        if isinstance(func, str):
            continue  # reward models are scored by TRL during training only
        values = call_reward(func, prompts=prompts, completions=completions, completion_ids=completion_ids,
                             trainer_state=None, **columns, **(extra or {}))
        scores[label] = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    return scores


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion: sensible at 0, 1 and small n, unlike p +- 1.96 se."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return (lo, hi)
