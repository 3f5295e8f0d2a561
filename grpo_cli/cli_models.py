"""`grpo eval` and `grpo merge`: thin shells over grpo_cli.evaluation and grpo_cli.merging.

Registered on the shared `app` by the import at the bottom of cli.py; nothing heavy is imported
until a command runs.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from grpo_cli.cli import OverridesArg, RecipeArg, _load, app, console, run_guarded

EVAL_EPILOG = (
    "Models can be hub ids, model dirs, LoRA adapter dirs (base read from adapter_config.json), grpo output "
    "dirs or checkpoint-N dirs. Without --model the recipe's own model is evaluated. Repeat --compare to put "
    "more models side by side; all see the same prompts and seed. Flags override the recipe's `eval` section."
)


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}%" if key.endswith("/rate") else f"{value:.4f}"
    return str(value)


def render_eval(out: Console, results: list[Any], title: str) -> None:
    """One column per model; with several, a change column after each model but the first."""
    summaries = [r.summary(rates=True) for r in results]
    keys: list[str] = []
    for s in summaries:
        keys += [k for k in s if k != "label" and k not in keys]
    caption = f"Δ: change from {results[0].label}" if len(results) > 1 else None
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    table.add_column("metric", no_wrap=True)
    for i, r in enumerate(results):
        table.add_column(r.label, justify="right", overflow="fold")
        if i:
            table.add_column("Δ", justify="right", no_wrap=True)
    for key in keys:
        cells = []
        first = summaries[0].get(key)
        for i, s in enumerate(summaries):
            value = s.get(key)
            cells.append(_fmt(key, value))
            if i:
                delta = value - first if isinstance(value, float) and isinstance(first, float) else None
                cells.append("" if delta is None else f"{100 * delta:+.1f}pp" if key.endswith("/rate")
                             else f"{delta:+.4f}")
        table.add_row(key, *cells)
    out.print(table)


def _unique_labels(results: list[Any]) -> None:
    seen: dict[str, int] = {}
    for r in results:
        seen[r.label] = seen.get(r.label, 0) + 1
        if seen[r.label] > 1:
            r.label = f"{r.label}#{seen[r.label]}"


@app.command("eval", epilog=EVAL_EPILOG)
def eval_cmd(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model to evaluate (default: the recipe's "
                                              "model).", show_default=False)] = None,
    adapter: Annotated[str | None, typer.Option("--adapter", help="LoRA adapter dir applied on top of --model.",
                                                show_default=False)] = None,
    split: Annotated[str | None, typer.Option("--split", help="Evaluate this split instead of the eval split.",
                                              show_default=False)] = None,
    file: Annotated[str | None, typer.Option("--file", help="Evaluate the rows of this .jsonl/.json/.csv/.parquet.",
                                             show_default=False)] = None,
    samples: Annotated[int | None, typer.Option("--samples", "-n", min=1, help="At most this many prompts "
                                                "(eval.max_samples).", show_default=False)] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-k", min=1, help="Samples per "
                                                        "prompt, the k of pass@k (eval.num_generations).",
                                                        show_default=False)] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t", min=0.0, help="Sampling temperature, "
                                                      "0 for greedy (eval.temperature).", show_default=False)] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", min=1, help="Prompts per generate call "
                                                   "(eval.batch_size).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where completions.jsonl and summary.json go "
                                             "(default: outputs/eval/<time>).", show_default=False)] = None,
    compare: Annotated[list[str] | None, typer.Option("--compare", help="Another model to evaluate side by side "
                                                      "(repeatable).", show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="auto (vLLM when installed and a GPU is present), "
                                         "transformers or vllm.")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an earlier evaluation in --out.")] = False,
) -> None:
    """Sample completions for held-out prompts and score them with the recipe's rewards: mean, pass@k, lengths."""

    def body() -> None:
        from grpo_cli.evaluation import EvalSettings, check_eval_out, run_eval, write_eval_outputs
        from grpo_cli.model_sources import resolve_model_source
        from grpo_cli.modeling import model_reference

        loaded = _load(recipe, overrides)
        settings = EvalSettings.from_recipe(loaded, samples=samples, k=num_generations, temperature=temperature,
                                            batch_size=batch_size)
        target = out or Path("outputs") / "eval" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        check_eval_out(target, force)
        first_ref = model or model_reference(loaded)
        trained = Path(loaded.output.dir)
        if model is None and (trained / "manifest.json").exists():
            console.print(f"note: evaluating the recipe's base model; add `--model {trained}` for the run trained "
                          f"there (or `--compare {trained}` for both side by side)", markup=False)
        sources = [resolve_model_source(first_ref, adapter=adapter, base_dir=loaded.base_dir)]
        sources += [resolve_model_source(ref, base_dir=loaded.base_dir, where="--compare") for ref in compare or []]
        results = run_eval(loaded, sources, settings, split=split, file=file, backend=backend, console=console)
        _unique_labels(results)
        completions, summary = write_eval_outputs(target, results, settings, sources)
        title = (f"{results[0].num_prompts} prompts x {settings.k} samples · T={settings.temperature} · "
                 f"seed {settings.seed}")
        render_eval(console, results, title)
        console.print(f"wrote {completions} and {summary}", markup=False)

    run_guarded(body)


@app.command()
def merge(
    adapter_dir: Annotated[str, typer.Argument(help="LoRA adapter dir, grpo output dir or checkpoint holding one.",
                                               show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the standalone model.",
                                      show_default=False)],
    base: Annotated[str | None, typer.Option("--base", help="Base model (default: from adapter_config.json).",
                                             show_default=False)] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="auto (the base's saved dtype), float32, bfloat16 or "
                                       "float16.")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out.")] = False,
    max_shard_size: Annotated[str, typer.Option("--max-shard-size", help="Split safetensors files above this "
                                                "size.")] = "5GB",
) -> None:
    """Fold a LoRA adapter into its base and save a standalone model (checked: logits must match)."""

    def body() -> None:
        from grpo_cli.merging import merge_adapter

        result = merge_adapter(adapter_dir, out, base=base, dtype=dtype, force=force, max_shard_size=max_shard_size,
                               console=console)
        for note in result.notes:
            console.print(f"[yellow]note:[/] {note}")
        console.print(f"verified: largest logit difference vs base+adapter {result.max_diff:.3g} "
                      f"(tolerance {result.tolerance:.3g}, {result.dtype})")
        console.print(f"[green]merged[/] into {result.out} ({len(result.files)} files); load it with "
                      f"AutoModelForCausalLM.from_pretrained({str(result.out)!r}), no peft needed", soft_wrap=True)

    run_guarded(body)
