"""`grpo calibrate`: k completions per training prompt from the base model, scored, one line per prompt.

Prompts come through exactly the training mapping (`prepare_data`), so each line's key matches the row
`data.pass_rate` filters. Batches of prompts are sampled in order, each with its own seed (the recipe's seed plus
the batch's first row), and appended to `calibration.partial.jsonl` as soon as they are scored: an interrupted
calibration keeps every finished batch, and `--resume` samples only the prompts it lacks (with the same batch size,
the same draws an uninterrupted run makes). When every prompt is in, the file becomes `calibration.jsonl`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.calibration.rows import earlier_rows
from grpo_cli.calibration.settings import (
    CALIBRATION,
    PARTIAL,
    SETTINGS,
    CalibrateRequest,
    CalibrationSettings,
    check_out,
    check_range,
    chosen_reward,
    settings_for,
)
from grpo_cli.calibration.summary import Calibrated, finish
from grpo_cli.data import prepare_data
from grpo_cli.data.pass_rate import prompt_key
from grpo_cli.errors import GrpoError, RecipeError
from grpo_cli.evaluation.backends import check_backend, generate, one_model
from grpo_cli.evaluation.scoring import score
from grpo_cli.interrupts import stop_between_units
from grpo_cli.models import load_tokenizer_for, resolve_model_source, source_reference
from grpo_cli.models.loading import resolve_dtype
from grpo_cli.paths import write_atomic
from grpo_cli.progress import advance, quiet_libraries, reporting
from grpo_cli.recipe import load_recipe
from grpo_cli.rewards import load_reward
from grpo_cli.validation.model_checks import context_length_findings

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe


@dataclass
class Pending:
    """The prompts still to sample: their rows (mapped), keys and positions in the training split."""

    rows: Any
    keys: list[str]
    sources: dict[str, int]
    """Every calibrated prompt's (done or pending) position in the training split as stored."""
    done: dict[str, dict[str, Any]] = field(default_factory=dict)


def default_out(recipe: Recipe) -> Path:
    """Beside the run directory, never in it (a run directory has its own overwrite rules)."""
    return Path(recipe.output.dir.rstrip("/") + "-calibration")


def calibrate(req: CalibrateRequest, console: Console | None = None) -> Calibrated:
    """Run `grpo calibrate`: every check that can fail cheaply happens before a model loads."""
    recipe = load_recipe(req.recipe, req.overrides)
    if recipe.data.from_environment:
        raise GrpoError("the recipe has no rows to calibrate: its environment serves every prompt from reset()",
                        where="data", fix="Calibrate a recipe with `data:` rows.")
    reward = chosen_reward(recipe, req.reward)
    check_range(req.range)
    settings = settings_for(recipe, req, reward)
    too_long = context_length_findings(recipe).problems  # what `grpo validate` refuses, before any sampling
    if too_long:
        raise RecipeError(too_long, source=recipe.source)
    out = req.out or default_out(recipe)
    replaced = check_out(out, settings, resume=req.resume, force=req.force)
    # each row's settings checked: none of another calibration is mixed in
    earlier = {} if req.force else earlier_rows(out, settings)
    use_vllm = check_backend(req.backend, images=recipe.data.images is not None, tools=bool(recipe.tools)
                             or recipe.environment is not None, profile=recipe.launch.profile)

    quiet_libraries()
    unfiltered = recipe.model_copy(update={"data": recipe.data.model_copy(update={"pass_rate": None})})
    source, tokenizer = _tokenizer(unfiltered)
    pending = _pending(unfiltered, tokenizer, out, req.max_prompts, earlier)
    total = len(pending.keys) + len(pending.done)
    out.mkdir(parents=True, exist_ok=True)
    for path in replaced:  # --force: the earlier calibration goes once nothing can refuse this one
        path.unlink(missing_ok=True)
    settings.save(out / SETTINGS, {"complete": False, "prompts": total})
    # the finished rows (a torn last line dropped) before new ones are appended; calibration.jsonl stays whole
    write_atomic(out / PARTIAL, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n"
                                            for r in pending.done.values()))
    if console is not None:
        console.print(f"calibrating {total} training prompts x {settings.k} completions with "
                      f"{source.describe()}, reward {reward!r}" + _resumed(pending, req.max_prompts),
                      markup=False, soft_wrap=True)
    try:
        _sample(unfiltered, source, tokenizer, pending, settings, out / PARTIAL, use_vllm, console)
    except KeyboardInterrupt:
        if console is not None:
            console.print(f"{len(pending.done)} of {total} prompts calibrated, kept in {out / PARTIAL}; continue "
                          f"with `{resume_command(req, out)}`", markup=False, soft_wrap=True)
        raise
    (out / PARTIAL).replace(out / CALIBRATION)
    return finish(recipe, unfiltered, out, settings, req.range, pending.done, pending.sources)


def resume_command(req: CalibrateRequest, out: Path) -> str:
    """The command that continues this calibration, every word shell-quoted (it is printed to be pasted)."""
    words = ["grpo", "calibrate", str(req.recipe), *req.overrides]
    for flag, value in (("-k", req.k), ("--max-prompts", req.max_prompts), ("-t", req.temperature),
                        ("--reward", req.reward)):
        if value is not None:
            words += [flag, str(value)]
    for flag, value, default in (("--batch-size", req.batch_size, 8), ("--threshold", req.threshold, 1.0),
                                 ("--range", req.range, "(0, 1)"), ("--backend", req.backend, "transformers")):
        if value != default:
            words += [flag, str(value)]
    return shlex.join([*words, "--out", str(out), "--resume"])


def _resumed(pending: Pending, max_prompts: int | None) -> str:
    if not pending.done:
        return ""
    more = ""
    if max_prompts is not None and len(pending.done) >= max_prompts:
        more = f"; --max-prompts {max_prompts} asks no more, and every finished row is kept"
    return f" ({len(pending.done)} done before, resumed{more})"


def _tokenizer(recipe: Recipe) -> tuple[Any, Any]:
    source = resolve_model_source(source_reference(recipe), base_dir=recipe.base_dir, where="model.name_or_path")
    # the recipe's chat template / pad token, as training uses them
    return source, load_tokenizer_for(source, recipe, trust_remote_code=recipe.model.trust_remote_code)


def _pending(recipe: Recipe, tokenizer: Any, out: Path, max_prompts: int | None,
             earlier: dict[str, dict[str, Any]]) -> Pending:
    """The training rows to calibrate (the first `max_prompts`, one per distinct prompt) less those done; every
    finished row is kept, whatever `max_prompts` says now."""
    mapped = prepare_data(recipe, tokenizer)
    rows = mapped.train
    position: dict[str, int] = {}  # each distinct prompt's first row, in training order
    for i, prompt in enumerate(rows["prompt"]):
        position.setdefault(prompt_key(prompt), i)
    keys = list(position)[:max_prompts] if max_prompts is not None else list(position)
    unknown = [row for key, row in earlier.items() if key not in position]
    if unknown:
        raise GrpoError(f"{len(unknown)} of the {len(earlier)} finished rows in {out} are of prompts this recipe's "
                        f"training split does not make (the first: {unknown[0].get('prompt')!r}): its data, "
                        "data.prompt or chat template changed since; resuming would mix the two in one file",
                        where="--resume", fix="Calibrate into another --out, or replace the calibration with --force.")
    todo = [key for key in keys if key not in earlier]
    sources = {key: mapped.train_sources[position[key]] for key in [*earlier, *todo]}
    return Pending(rows.select([position[key] for key in todo]), todo, sources, dict(earlier))


def _sample(recipe: Recipe, source: Any, tokenizer: Any, pending: Pending, settings: CalibrationSettings,
            partial: Path, use_vllm: bool, console: Console | None) -> None:
    """Sample, score and append each batch of pending prompts."""
    import torch

    entry = next(e for e in recipe.rewards if e.label == settings.reward)
    reward = load_reward(entry, recipe.base_dir)
    n = len(pending.keys)
    if n == 0:
        return
    dtype = resolve_dtype(recipe.model.dtype, recipe.launch.profile)
    device = "cuda" if torch.cuda.is_available() and not recipe.launch.spec.cpu_only else "cpu"
    offset = len(pending.done)
    with (one_model(source, tokenizer, settings.sampling(), use_vllm=use_vllm, dtype=dtype, device=device,
                    trust_remote_code=recipe.model.trust_remote_code, revision=recipe.model.revision) as loaded,
          reporting(console, "calibrating", n * settings.k, "completions"),
          partial.open("a", encoding="utf-8") as fh, stop_between_units() as stop):
        for start in range(0, n, settings.batch_size):
            stop.check()  # Ctrl-C lands here, between batches: raised inside a finaliser it would be lost
            batch = pending.rows.select(range(start, min(start + settings.batch_size, n)))
            records = _batch(loaded, tokenizer, batch, reward, settings, offset + start)
            if loaded.sampler is not None:
                advance(len(records) * settings.k)
            for key, record in zip(pending.keys[start:start + len(records)], records, strict=True):
                record = {"key": key, **record, "settings": settings.row()}
                pending.done[key] = record
                fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            fh.flush()
        stop.check()


def _batch(loaded: Any, tokenizer: Any, batch: Any, reward: Any, settings: CalibrationSettings,
           first: int) -> list[dict[str, Any]]:
    """One batch of prompts: k completions each, the chosen reward per completion, the pass count."""
    prompts = list(batch["prompt"])
    columns = {c: list(batch[c]) for c in batch.column_names if c != "prompt"}
    k = settings.k
    if loaded.sampler is not None:
        texts, ids, _ = loaded.sampler(prompts)
    else:
        texts, ids, _ = generate(loaded.model, tokenizer, prompts, k=k, temperature=settings.temperature,
                                 top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                                 batch_size=len(prompts), seed=settings.seed + first, images=columns.get("images"))
    chat = bool(prompts) and isinstance(prompts[0], list)
    completions: list[Any] = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    rep_cols = {c: [v for v in vals for _ in range(k)] for c, vals in columns.items()}
    scores = score([reward], [settings.reward], [p for p in prompts for _ in range(k)], completions, ids,
                   rep_cols)[settings.reward]
    out = []
    for i, prompt in enumerate(prompts):
        group = scores[i * k:(i + 1) * k]
        passes = sum(1 for s in group if s is not None and s >= settings.threshold)
        out.append({"prompt": prompt, "k": k, "passes": passes, "pass_rate": passes / k, "scores": group,
                    "completions": texts[i * k:(i + 1) * k]})
    return out
