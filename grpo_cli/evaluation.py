"""Held-out evaluation by sampling: batched generation, reward scoring, pass@k.

Used by `grpo train` (before/after numbers) and `grpo eval`. Prompts go through exactly
the training data mapping, and rewards are called exactly as TRL calls them.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation_vllm import vllm_available, vllm_sampler
from grpo_cli.schema import Recipe

Sampler = Callable[[list[Any]], tuple[list[str], list[list[int]], list[bool]]]


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
            row.update({c: vals[i] for c, vals in self.columns.items() if c not in row})
            rows.append(row)
        return rows


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
    # As TRL: plain prompts get the tokenizer's special tokens (e.g. BOS); chat templates carry their own.
    special = not (prompts and isinstance(prompts[0], list))
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
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=special).to(device)
            sample = temperature > 0
            with torch.inference_mode():
                gen = model.generate(**enc, do_sample=sample, temperature=temperature if sample else None,
                                     top_p=top_p if sample else None, top_k=0 if sample else None,
                                     max_new_tokens=max_new_tokens, num_return_sequences=k if sample else 1,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
            if not sample and k > 1:  # greedy is deterministic: k copies of the one answer
                gen = gen.repeat_interleave(k, dim=0)
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
                  label: str = "", sampler: Sampler | None = None, weights: dict[str, float] | None = None
                  ) -> EvalResult:
    """Sample k completions per row of a mapped dataset and score them (`sampler` replaces HF generate)."""
    prompts = list(rows["prompt"])
    columns = {c: list(rows[c]) for c in rows.column_names if c != "prompt"}
    if sampler is not None:
        texts, ids, truncated = sampler(prompts)
    else:
        texts, ids, truncated = generate(model, tokenizer, prompts, k=k, temperature=temperature, top_p=top_p,
                                         max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    rep = [p for p in prompts for _ in range(k)]
    rep_cols = {c: [v for v in vals for _ in range(k)] for c, vals in columns.items()}
    chat = bool(prompts) and isinstance(prompts[0], list)
    completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    scores = score(reward_funcs, labels, rep, completions, ids, rep_cols)
    binary = [n for n, v in scores.items() if all(x in (0.0, 1.0) for x in v if x is not None)]
    primary = next((n for n in binary if "accuracy" in n), binary[0] if binary else next(iter(scores), ""))
    return EvalResult(label, len(prompts), k, scores, texts, [len(i) for i in ids], truncated, primary, prompts,
                      columns, dict(weights or {}))


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
                         batch_size=ev.batch_size, seed=ev.seed, label=label,
                         weights={e.label: e.weight for e in entries})


# ---------------------------------------------------------------------------- `grpo eval`


@dataclass
class EvalSettings:
    """Sampling settings shared by every model of one `grpo eval` (same seed ⇒ same prompts and draws)."""

    k: int
    temperature: float
    top_p: float
    max_new_tokens: int
    batch_size: int
    seed: int
    max_samples: int | None

    @classmethod
    def from_recipe(cls, recipe: Recipe, *, samples: int | None = None, k: int | None = None,
                    temperature: float | None = None, batch_size: int | None = None) -> EvalSettings:
        """The recipe's `eval` section with the command-line flags on top."""
        ev = recipe.eval
        max_new = ev.max_new_tokens or int(recipe.training.get("max_completion_length") or 256)
        return cls(k or ev.num_generations, ev.temperature if temperature is None else temperature, ev.top_p,
                   max_new, batch_size or ev.batch_size, ev.seed, samples or ev.max_samples)


def load_eval_rows(recipe: Recipe, tokenizer: Any, *, split: str | None = None, file: str | None = None) -> Any:
    """The prompts to evaluate, through exactly the training mapping: the recipe's eval split by default."""
    from grpo_cli.data import mapping
    from grpo_cli.schema.data import LOCAL_SUFFIXES

    if split and file:
        raise GrpoError("give --split or --file, not both", where="command line")
    data = recipe.data
    if not split and not file:
        if not data.has_eval:
            raise GrpoError("the recipe has no eval split (data.eval_split / data.eval_holdout)", where="data",
                            fix="Pass --split NAME or --file PATH, or set `data.eval_split` in the recipe.")
        rows = mapping.prepare_data(recipe, tokenizer).eval
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
    ds = mapping._load_split(data, recipe, split, where)
    mapping._check_columns(ds, data, where)
    return mapping._limit_length(mapping._map(ds, data), data, tokenizer, {}, "eval")


def run_eval(recipe: Recipe, sources: list[Any], settings: EvalSettings, *, split: str | None = None,
             file: str | None = None, backend: str = "auto", console: Any = None) -> list[EvalResult]:
    """Evaluate each model in turn on the same prompts with the same seed; one model in memory at a time."""
    import gc

    import torch

    from grpo_cli.model_sources import load_source_model, load_tokenizer_for
    from grpo_cli.modeling import resolve_dtype
    from grpo_cli.rewards import load_reward

    if backend not in ("auto", "transformers", "vllm"):
        raise GrpoError(f"unknown backend {backend!r}", where="--backend", fix="Use auto, transformers or vllm.")
    use_vllm = backend == "vllm" or (backend == "auto" and vllm_available(recipe.launch.profile))
    if backend == "vllm" and not vllm_available():
        raise GrpoError("--backend vllm needs vLLM installed and a CUDA GPU", where="--backend",
                        fix="pip install 'grpo-cli[vllm]' on a GPU machine, or use --backend transformers.")
    entries = recipe.eval.rewards or recipe.rewards
    funcs = [load_reward(e, recipe.base_dir) for e in entries]
    for e, f in zip(entries, funcs, strict=True):
        if isinstance(f, str) and console is not None:
            console.print(f"[yellow]note:[/] reward model {e.label!r} is not scored by grpo eval")
    dtype = resolve_dtype(recipe.model.dtype, recipe.launch.profile)
    device = "cuda" if torch.cuda.is_available() and recipe.launch.profile != "cpu" else "cpu"
    rows = None
    results = []
    for source in sources:
        tokenizer = load_tokenizer_for(source, trust_remote_code=recipe.model.trust_remote_code)
        if rows is None:
            rows = load_eval_rows(recipe, tokenizer, split=split, file=file)
            if settings.max_samples:
                rows = rows.select(range(min(settings.max_samples, len(rows))))
            if len(rows) == 0:
                raise GrpoError("there are no prompts to evaluate", where=file or split or "data.eval_split")
        if console is not None:
            console.print(f"evaluating {source.describe()} on {len(rows)} prompts x {settings.k} samples"
                          f"{' (vLLM)' if use_vllm else ''}", markup=False)
        model, close = None, None
        sampler: Sampler | None = None
        if use_vllm:
            sampler, close = vllm_sampler(source, tokenizer, settings, dtype, recipe.model.trust_remote_code)
        else:
            model = load_source_model(source, dtype=dtype, device=device, revision=recipe.model.revision,
                                      trust_remote_code=recipe.model.trust_remote_code)
        try:
            results.append(evaluate_rows(model, tokenizer, rows, funcs, [e.label for e in entries], k=settings.k,
                                         temperature=settings.temperature, top_p=settings.top_p,
                                         max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                                         seed=settings.seed, label=source.label, sampler=sampler,
                                         weights={e.label: e.weight for e in entries}))
        finally:
            if close is not None:
                close()
            del model
            gc.collect()
    return results


EVAL_FILES = ("completions.jsonl", "summary.json")


def check_eval_out(out: Path, force: bool) -> None:
    """Refuse, before any model loads, to overwrite an earlier evaluation in `out` unless forced."""
    if out.exists() and not out.is_dir():
        raise GrpoError(f"{out} exists and is a file", where="--out", fix="Give a directory path.")
    earlier = [name for name in EVAL_FILES if (out / name).exists()]
    if earlier and not force:
        raise GrpoError(f"{out} already holds an evaluation ({', '.join(earlier)}); refusing to overwrite it",
                        where="--out", fix="Choose another --out, or pass --force to replace that evaluation.")


def write_eval_outputs(out: Path, results: list[EvalResult], settings: EvalSettings,
                       sources: list[Any]) -> tuple[Path, Path]:
    """completions.jsonl (every completion with its scores) and summary.json (settings + one summary per model)."""
    import dataclasses
    import json

    out.mkdir(parents=True, exist_ok=True)
    completions = out / "completions.jsonl"
    with completions.open("w", encoding="utf-8") as f:
        for result in results:
            for row in result.records():
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    summary = out / "summary.json"
    payload = {"settings": dataclasses.asdict(settings),
               "models": [{"label": r.label, "source": s.describe(), "summary": r.summary(rates=True)}
                          for r, s in zip(results, sources, strict=True)]}
    summary.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    return completions, summary
