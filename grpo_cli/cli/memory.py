"""`grpo memory`: the per-GPU memory plan of a recipe, from the model's shape, without loading weights."""

from __future__ import annotations

from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, ProcessesOpt, ProfileOpt, RecipeArg, console, load


def memory(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    gpu_memory_gb: Annotated[float | None, typer.Option(
        "--gpu-memory-gb", min=1.0, help="Memory of one GPU in GiB (default: read with nvidia-smi when present).")]
    = None,
    profile: ProfileOpt = None,
    num_processes: ProcessesOpt = None,
) -> None:
    """Estimate memory per GPU from the model's config.json and the recipe, without loading weights."""
    from grpo_cli.cli.render import render_memory_plan
    from grpo_cli.planning import memory_plan
    from grpo_cli.validation.model_checks import check_model_reference

    loaded = load(recipe, overrides, profile=profile, num_processes=num_processes)
    check_model_reference(loaded)
    plan, why = memory_plan(loaded, gpu_memory_gb="auto" if gpu_memory_gb is None else gpu_memory_gb)
    render_memory_plan(console, loaded, plan, why)
