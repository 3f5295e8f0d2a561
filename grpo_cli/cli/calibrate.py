"""`grpo calibrate`: the base model's pass rate on each training prompt, and a filter for the ones that teach."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, RecipeArg, console, say_first

CALIBRATE_EPILOG = (
    "Samples k completions per training prompt with the recipe's base model (the training mapping, temperature and "
    "completion length; k defaults to training.num_generations), scores them with the outcome reward (accuracy by "
    "default) and prints the pass-rate histogram. Writes OUT/calibration.jsonl (each prompt's pass rate), "
    "OUT/filtered.jsonl (the rows in --range, in the data's own columns) and OUT/override.yaml (the "
    "data.pass_rate block that makes validate and train keep them). Ctrl-C keeps every finished batch in "
    "OUT/calibration.partial.jsonl; --resume continues it, and also extends a finished calibration to a larger "
    "--max-prompts."
)


def calibrate_command(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    samples: Annotated[int | None, typer.Option("--samples", "-k", min=1, help="Completions per prompt (default: "
                                                "training.num_generations).", show_default=False)] = None,
    max_prompts: Annotated[int | None, typer.Option("--max-prompts", min=1, help="Calibrate at most this many "
                                                    "training prompts (the first, in training order).",
                                                    show_default=False)] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Prompts per generate call.")] = 8,
    temperature: Annotated[float | None, typer.Option("--temperature", "-t", help="Sampling temperature > 0 "
                                                      "(default: training.temperature).", show_default=False)] = None,
    reward: Annotated[str | None, typer.Option("--reward", help="The reward that decides pass or fail (default: "
                                               "the one named accuracy, else eval.metric, else the only reward).",
                                               show_default=False)] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="A completion passes when its reward is at least "
                                             "this.")] = 1.0,
    keep: Annotated[str, typer.Option("--range", help="Pass rates kept: (LOW, HIGH) leaves the ends out, "
                                      "[LOW, HIGH] keeps them.")] = "(0, 1)",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where the files go (default: output.dir with "
                                             "-calibration appended).", show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="transformers, vllm, or auto (vLLM when installed and "
                                         "a GPU is present).")] = "transformers",
    resume: Annotated[bool, typer.Option("--resume", help="Continue the calibration in --out.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the calibration in --out.")] = False,
) -> None:
    """Measure the base model's pass rate on each training prompt; keep the prompts that give a learning signal."""
    say_first(f"grpo calibrate {recipe}")
    from grpo_cli.calibration import CalibrateRequest, calibrate
    from grpo_cli.cli.render import render_calibration

    request = CalibrateRequest(recipe=recipe, overrides=overrides or [], k=samples, max_prompts=max_prompts,
                               batch_size=batch_size, temperature=temperature, reward=reward, threshold=threshold,
                               range=keep, out=out, backend=backend, resume=resume, force=force)
    render_calibration(console, calibrate(request, console=console), str(recipe))
