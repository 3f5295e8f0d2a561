"""Scoring sampled completions: every reward on every completion, means, pass@k and the JSON records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.rewards.calling import call_reward


@dataclass
class EvalResult:
    """Scores of k sampled completions for each of n prompts."""

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

    def summary(self, rates: bool = False) -> dict[str, Any]:
        """Headline numbers; `rates` adds the success rate of each 0/1 reward (`grpo eval` shows it)."""
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

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready row per completion: prompt, completion, every score, length, truncation."""
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
