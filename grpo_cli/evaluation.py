"""Held-out evaluation by sampling: batched generation, reward scoring, pass@k.

Used by `grpo train` (before/after numbers) and `grpo eval`. Prompts go through exactly
the training data mapping, and rewards are called exactly as TRL calls them.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.schema import Recipe


@dataclass
class EvalResult:
    """Scores of k sampled completions for each of n prompts."""

    label: str
    num_prompts: int
    k: int
    rewards: dict[str, list[float | None]]
    completions: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    primary: str = ""

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

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "prompts": self.num_prompts, "k": self.k}
        for name in self.rewards:
            out[f"{name}/mean"] = self.mean(name)
            out[f"{name}/std"] = self.std(name)
        if self.primary and self.is_binary(self.primary):
            out["pass@1"] = self.pass_at(1)
            if self.k > 1:
                out[f"pass@{self.k}"] = self.pass_at(self.k)
        if self.lengths:
            out["mean_length"] = sum(self.lengths) / len(self.lengths)
            out["truncation_rate"] = sum(self.truncated) / len(self.truncated)
        return out


def _prompt_texts(prompts: list[Any], tokenizer: Any) -> list[str]:
    texts = []
    for p in prompts:
        if isinstance(p, list):
            texts.append(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False))
        else:
            texts.append(p)
    return texts


def generate(model: Any, tokenizer: Any, prompts: list[Any], *, k: int, temperature: float, top_p: float,
             max_new_tokens: int, batch_size: int, seed: int) -> tuple[list[str], list[list[int]], list[bool]]:
    """k samples per prompt, batched with left padding; returns texts, token ids and truncation flags."""
    import torch

    torch.manual_seed(seed)
    device = next(model.parameters()).device
    texts = _prompt_texts(prompts, tokenizer)
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    was_training = model.training
    model.eval()
    out_texts: list[str] = []
    out_ids: list[list[int]] = []
    truncated: list[bool] = []
    try:
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            sample = temperature > 0
            with torch.inference_mode():
                gen = model.generate(**enc, do_sample=sample, temperature=temperature if sample else None,
                                     top_p=top_p if sample else None, top_k=0 if sample else None,
                                     max_new_tokens=max_new_tokens, num_return_sequences=k,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
            new = gen[:, enc["input_ids"].shape[1]:].tolist()
            for ids in new:
                if eos in ids:
                    ids = ids[:ids.index(eos) + 1]
                    truncated.append(False)
                else:
                    ids = [t for t in ids if t != tokenizer.pad_token_id] if tokenizer.pad_token_id != eos else ids
                    truncated.append(True)
                out_ids.append(ids)
                out_texts.append(tokenizer.decode(ids, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    return out_texts, out_ids, truncated


def call_reward(func: Any, **kwargs: Any) -> list[float | None]:
    """Call a reward as TRL does (keywords only; async functions awaited)."""
    result = func(**kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(result)
    return list(result)


def score(reward_funcs: list[Any], labels: list[str], prompts: list[Any], completions: list[Any],
          completion_ids: list[list[int]], columns: dict[str, list[Any]]) -> dict[str, list[float | None]]:
    """Scores of every reward for every completion, None where a reward does not apply."""
    scores: dict[str, list[float | None]] = {}
    for func, label in zip(reward_funcs, labels, strict=True):
        if isinstance(func, str):
            continue  # reward models are scored by TRL during training only
        values = call_reward(func, prompts=prompts, completions=completions, completion_ids=completion_ids,
                             trainer_state=None, **columns)
        scores[label] = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    return scores


def evaluate_rows(model: Any, tokenizer: Any, rows: Any, reward_funcs: list[Any], labels: list[str], *,
                  k: int, temperature: float, top_p: float, max_new_tokens: int, batch_size: int, seed: int,
                  label: str = "") -> EvalResult:
    """Sample k completions per row of a mapped dataset and score them."""
    prompts = list(rows["prompt"])
    columns = {c: list(rows[c]) for c in rows.column_names if c != "prompt"}
    texts, ids, truncated = generate(model, tokenizer, prompts, k=k, temperature=temperature, top_p=top_p,
                                     max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    rep = [p for p in prompts for _ in range(k)]
    rep_cols = {c: [v for v in vals for _ in range(k)] for c, vals in columns.items()}
    chat = bool(prompts) and isinstance(prompts[0], list)
    completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    scores = score(reward_funcs, labels, rep, completions, ids, rep_cols)
    primary = next((n for n in scores if "accuracy" in n), next(iter(scores), ""))
    return EvalResult(label, len(prompts), k, scores, texts, [len(i) for i in ids], truncated, primary)


def evaluate_recipe_model(recipe: Recipe, model: Any, tokenizer: Any, rows: Any, console: Any = None,
                          label: str = "") -> EvalResult:
    """Evaluate with the recipe's eval settings and rewards (eval.rewards, else the training rewards)."""
    from grpo_cli.rewards import load_reward

    entries = recipe.eval.rewards or recipe.rewards
    funcs = [load_reward(e, recipe.base_dir) for e in entries]
    ev = recipe.eval
    if ev.max_samples:
        rows = rows.select(range(min(ev.max_samples, len(rows))))
    max_new = ev.max_new_tokens or int(recipe.training.get("max_completion_length") or 256)
    if console is not None:
        console.print(f"evaluating {len(rows)} held-out prompts x {ev.num_generations} samples ({label})")
    return evaluate_rows(model, tokenizer, rows, funcs, [e.label for e in entries], k=ev.num_generations,
                         temperature=ev.temperature, top_p=ev.top_p, max_new_tokens=max_new,
                         batch_size=ev.batch_size, seed=ev.seed, label=label)
