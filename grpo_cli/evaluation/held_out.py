"""Held-out evaluation by sampling: batched generation, reward scoring, pass@k.

Used by `grpo train` (before/after numbers) and `grpo eval`. Prompts go through exactly
the training data mapping, and rewards are called exactly as TRL calls them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.evaluation.sampling import generate
from grpo_cli.evaluation.sampling_vllm import Sampler
from grpo_cli.evaluation.scoring import EvalResult, score
from grpo_cli.progress import reporting
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from rich.console import Console


def evaluate_rows(model: Any, tokenizer: Any, rows: Any, reward_funcs: list[Any], labels: list[str], *,
                  k: int, temperature: float, top_p: float, max_new_tokens: int, batch_size: int, seed: int,
                  label: str = "", sampler: Sampler | None = None, weights: dict[str, float] | None = None,
                  toolset: Any = None, max_tool_iterations: int | None = None) -> EvalResult:
    """Sample k completions per row of a mapped dataset and score them (`sampler` replaces HF generate).

    With a `toolset` each completion is a multi-turn tool episode, run as TRL's tool loop runs it.
    """
    prompts = list(rows["prompt"])
    columns = {c: list(rows[c]) for c in rows.column_names if c != "prompt"}
    if toolset is not None:
        return _evaluate_episodes(model, tokenizer, prompts, columns, reward_funcs, labels, toolset, k=k,
                                  temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                  batch_size=batch_size, seed=seed, label=label, weights=weights,
                                  max_iterations=max_tool_iterations)
    if sampler is not None:
        texts, ids, truncated = sampler(prompts)
    else:
        texts, ids, truncated = generate(model, tokenizer, prompts, k=k, temperature=temperature, top_p=top_p,
                                         max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed,
                                         images=columns.get("images"))
    rep = [p for p in prompts for _ in range(k)]
    rep_cols = {c: [v for v in vals for _ in range(k)] for c, vals in columns.items()}
    chat = bool(prompts) and isinstance(prompts[0], list)
    completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    scores = score(reward_funcs, labels, rep, completions, ids, rep_cols)
    return EvalResult(label, len(prompts), k, scores, texts, [len(i) for i in ids], truncated, _primary(scores),
                      prompts, columns, dict(weights or {}))


def _primary(scores: dict[str, list[float | None]]) -> str:
    """The reward pass@k is computed on: the first 0/1 reward named like accuracy, else the first 0/1 one."""
    binary = [n for n, v in scores.items() if all(x in (0.0, 1.0) for x in v if x is not None)]
    return next((n for n in binary if "accuracy" in n), binary[0] if binary else next(iter(scores), ""))


def _evaluate_episodes(model: Any, tokenizer: Any, prompts: list[Any], columns: dict[str, list[Any]],
                       reward_funcs: list[Any], labels: list[str], toolset: Any, *, k: int, temperature: float,
                       top_p: float, max_new_tokens: int, batch_size: int, seed: int, label: str,
                       weights: dict[str, float] | None, max_iterations: int | None) -> EvalResult:
    """k tool episodes per prompt, scored with what TRL gives rewards (messages, environments)."""
    import torch

    from grpo_cli.tools import run_episodes, start_episodes

    torch.manual_seed(seed)
    rep = [p for p in prompts for _ in range(k)]
    rep_cols = {c: [v for v in vals for _ in range(k)] for c, vals in columns.items()}
    row_dicts = [{c: rep_cols[c][j] for c in rep_cols} for j in range(len(rep))]
    episodes = start_episodes(toolset, rep, row_dicts)
    run_episodes(model, tokenizer, toolset, episodes, max_tokens=max_new_tokens, max_iterations=max_iterations,
                 temperature=temperature, top_p=top_p, batch_size=batch_size)
    extra = {"environments": [e.environment for e in episodes]} if toolset.environments else None
    scores = score(reward_funcs, labels, [e.prompt for e in episodes], [e.completion for e in episodes],
                   [e.ids for e in episodes], rep_cols, extra)
    # Lengths count what the model wrote, as TRL's completions/mean_length does for tool runs (not tool results).
    return EvalResult(label, len(prompts), k, scores, [e.text for e in episodes], [e.model_tokens for e in episodes],
                      [e.truncated for e in episodes], _primary(scores), prompts, columns, dict(weights or {}),
                      [e.tool_calls for e in episodes], [e.tool_failures for e in episodes],
                      [e.completion for e in episodes])


def evaluate_recipe_model(recipe: Recipe, model: Any, tokenizer: Any, rows: Any, console: Console | None = None,
                          label: str = "") -> EvalResult:
    """Evaluate with the recipe's eval settings and rewards (eval.rewards, else the training rewards)."""
    from grpo_cli.rewards import load_reward
    from grpo_cli.tools import load_toolset

    entries = recipe.eval.rewards or recipe.rewards
    funcs = [load_reward(e, recipe.base_dir) for e in entries]
    ev = recipe.eval
    if ev.max_samples:
        rows = rows.select(range(min(ev.max_samples, len(rows))))
    max_new = ev.max_new_tokens or recipe.training.max_completion_length
    toolset = load_toolset(recipe)
    if console is not None:
        console.print(f"evaluating {len(rows)} held-out prompts x {ev.num_generations} samples ({label})",
                      markup=False, soft_wrap=True)
    unit = "episodes" if toolset is not None else "completions"
    with reporting(console, f"sampling ({label})", len(rows) * ev.num_generations, unit):
        return evaluate_rows(model, tokenizer, rows, funcs, [e.label for e in entries], k=ev.num_generations,
                             temperature=ev.temperature, top_p=ev.top_p, max_new_tokens=max_new,
                             batch_size=ev.batch_size, seed=ev.seed, label=label,
                             weights={e.label: e.weight for e in entries}, toolset=toolset,
                             max_tool_iterations=recipe.training.max_tool_calling_iterations)


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
                    temperature: float | None = None, batch_size: int | None = None,
                    max_new_tokens: int | None = None) -> EvalSettings:
        """The recipe's `eval` section with the command-line flags on top."""
        ev = recipe.eval
        max_new = max_new_tokens or ev.max_new_tokens or recipe.training.max_completion_length
        return cls(k or ev.num_generations, ev.temperature if temperature is None else temperature, ev.top_p,
                   max_new, batch_size or ev.batch_size, ev.seed, samples or ev.max_samples)


def load_eval_rows(recipe: Recipe, tokenizer: Any, *, split: str | None = None, file: str | None = None) -> Any:
    """The prompts to evaluate, through exactly the training mapping: the recipe's eval split by default."""
    from grpo_cli.data import LOCAL_SUFFIXES, map_split, prepare_data

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


def run_eval(recipe: Recipe, sources: list[Any], settings: EvalSettings, *, split: str | None = None,
             file: str | None = None, backend: str = "auto", console: Console | None = None) -> list[EvalResult]:
    """Evaluate each model in turn on the same prompts with the same seed; one model in memory at a time."""

    import torch

    from grpo_cli.evaluation.backend import check_backend, one_model
    from grpo_cli.models.loading import apply_overrides, resolve_dtype
    from grpo_cli.models.sources import load_tokenizer_for
    from grpo_cli.rewards import load_reward
    from grpo_cli.tools import load_toolset

    toolset = load_toolset(recipe)
    use_vllm = check_backend(backend, images=recipe.data.images is not None, tools=toolset is not None,
                             profile=recipe.launch.profile)
    entries = recipe.eval.rewards or recipe.rewards
    funcs = [load_reward(e, recipe.base_dir) for e in entries]
    for e, f in zip(entries, funcs, strict=True):
        if isinstance(f, str) and console is not None:
            console.print(f"[yellow]note:[/] reward model {e.label!r} is not scored by grpo eval")
    dtype = resolve_dtype(recipe.model.dtype, recipe.launch.profile)
    device = "cuda" if torch.cuda.is_available() and not recipe.launch.spec.cpu_only else "cpu"
    rows = None
    results = []
    for source in sources:
        tokenizer = load_tokenizer_for(source, trust_remote_code=recipe.model.trust_remote_code)
        apply_overrides(tokenizer, recipe)  # the recipe's chat template / pad token, as training used them
        if rows is None:
            rows = load_eval_rows(recipe, tokenizer, split=split, file=file)
            if settings.max_samples:
                rows = rows.select(range(min(settings.max_samples, len(rows))))
            if len(rows) == 0:
                raise GrpoError("there are no prompts to evaluate", where=file or split or "data.eval_split")
        if console is not None:
            console.print(f"evaluating {source.describe()} on {len(rows)} prompts x {settings.k} samples"
                          f"{' (vLLM)' if use_vllm else ''}", markup=False)
        unit = "episodes" if toolset is not None else "completions"
        with (one_model(source, tokenizer, settings, use_vllm=use_vllm, dtype=dtype, device=device,
                        trust_remote_code=recipe.model.trust_remote_code, revision=recipe.model.revision) as loaded,
              reporting(console, f"sampling ({source.label})", len(rows) * settings.k, unit)):
            results.append(evaluate_rows(
                loaded.model, tokenizer, rows, funcs, [e.label for e in entries], k=settings.k,
                temperature=settings.temperature, top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                batch_size=settings.batch_size, seed=settings.seed, label=source.label, sampler=loaded.sampler,
                weights={e.label: e.weight for e in entries}, toolset=toolset,
                max_tool_iterations=recipe.training.max_tool_calling_iterations))
    return results


EVAL_SUMMARY = "summary.json"
EVAL_FILES = (runs.COMPLETIONS, EVAL_SUMMARY)


def check_eval_out(out: Path, force: bool) -> None:
    """Refuse, before any model loads, to overwrite an earlier evaluation in `out` unless forced."""
    from grpo_cli.paths import check_writable_dir

    check_writable_dir(out, "--out")
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
    completions = out / runs.COMPLETIONS
    with completions.open("w", encoding="utf-8") as f:
        for result in results:
            for row in result.records():
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    summary = out / EVAL_SUMMARY
    payload = {"settings": dataclasses.asdict(settings),
               "models": [{"label": r.label, "source": s.describe(), "summary": r.summary(rates=True)}
                          for r, s in zip(results, sources, strict=True)]}
    summary.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    return completions, summary
