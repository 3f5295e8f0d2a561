"""Preflight checks of how the run trains: TRL's batch arithmetic for the real world size, the processes, the
learning rate and quantization against the hardware, and the tools and environments it rolls out with.

The training check settles `pf.batches` and writes the batch lines of the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.errors import Problem
from grpo_cli.findings import Findings
from grpo_cli.planning.topology import visible_gpu_count
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def check_training(recipe: Recipe, pf: Preflight) -> Findings:
    """The batch plan (TRL's divisibility rules), groups split over processes, a missing process count, a learning
    rate that would wreck a pretrained model, 4/8-bit loading without a GPU."""
    plan = pf.run.batches  # TRL's batch arithmetic, computed once by the run plan
    found = Findings(problems=list(pf.run.batch_problems))
    pf.batches = plan
    per_process = plan.per_device * plan.steps_per_generation if plan is not None else 0
    if plan is not None and plan.world_size > 1 and per_process % plan.num_generations:
        found.warnings.append(
            f"each process generates {plan.per_device * plan.steps_per_generation} completions per generation, not a "
            f"multiple of num_generations={plan.num_generations}: a prompt's group is split across processes, so "
            "rewards that compare completions within a call (e.g. `length`) see partial groups. TRL still gathers "
            "all rewards before computing advantages.")
    if recipe.launch.spec.multi_process and recipe.launch.num_processes is None and visible_gpu_count() == 0:
        found.warnings.append(f"launch.profile={recipe.launch.profile} without launch.num_processes and no GPU "
                              "visible here: `grpo train` will ask for --num-processes; the batch plan above "
                              "assumes 1 process.")
    lr = recipe.training.learning_rate
    if lr > 1e-3 and recipe.model.lora is None and not recipe.model.name_or_path.startswith("bundled:"):
        found.warnings.append(f"training.learning_rate={lr:g} is very high for full fine-tuning of a pretrained "
                              "model (1e-6 .. 1e-5 is typical); the policy may collapse.")
    if recipe.model.quantization and recipe.launch.spec.cpu_only:
        found.problems.append(Problem("model.quantization", "4/8-bit loading needs a CUDA GPU, but launch.profile is "
                                      "cpu", "Remove `quantization` or run on a GPU."))
    found.plan.update(_batch_lines(recipe, pf))
    if plan is not None and pf.train_rows and not plan.optimizer_steps_per_epoch(pf.train_rows):
        found.problems.append(_no_step(recipe, pf.train_rows, plan.prompts_per_generation))
    return found


def _no_step(recipe: Recipe, rows: int, prompts: int) -> Problem:
    """Too few training rows for one optimizer step: TRL's sampler drops an incomplete generation batch, so the
    run would load the model and stop at step 0 saying it completed."""
    filtered = recipe.data.pass_rate is not None
    where = "data.pass_rate" if filtered else "data"
    more = ("widen data.pass_rate.range or calibrate more prompts (`grpo calibrate --max-prompts`)" if filtered
            else "add rows, or loosen data.filter or data.max_samples")
    return Problem(where, f"{rows} training row(s){' after the pass-rate filter' if filtered else ''} give 0 optimizer "
                   f"steps: one step needs {prompts} prompts per generation batch (per_device_train_batch_size x "
                   "steps_per_generation / num_generations, all processes), and TRL's sampler drops an incomplete "
                   "one, so training would stop at step 0",
                   f"Give it at least {prompts} rows ({more}), or lower training.per_device_train_batch_size.")


def _batch_lines(recipe: Recipe, pf: Preflight) -> dict[str, object]:
    """The plan's lines of completions and steps (none when the batch arithmetic failed)."""
    b, lines = pf.batches, dict[str, object]()
    if b is None:
        return lines
    lines["completions per micro-step"] = f"{b.global_batch} ({b.per_device} per device x {b.world_size})"
    every = "micro-step" if b.steps_per_generation == 1 else f"{b.steps_per_generation} micro-steps"
    lines["generation batch"] = (f"{b.generation_batch_size} completions = {b.prompts_per_generation} prompts x "
                                 f"{b.num_generations} generations, every {every}")
    lines["completions per optimizer step"] = b.completions_per_optimizer_step
    max_steps, epochs = recipe.training.max_steps, recipe.training.num_train_epochs
    if max_steps > 0:
        lines["total optimizer steps"] = max_steps
    if pf.train_rows:
        per_epoch = b.optimizer_steps_per_epoch(pf.train_rows)
        lines["optimizer steps per epoch"] = per_epoch
        lines["total optimizer steps"] = max_steps if max_steps > 0 else int(per_epoch * epochs)
    return lines


def check_tools(recipe: Recipe, pf: Preflight) -> Findings:
    """Tools and environments, read statically (grpo_cli.tools, imported only for them); the plan's `tools` line."""
    if not recipe.tools and recipe.environment is None:
        found = Findings()
        if recipe.training.max_tool_calling_iterations is not None:
            found.warnings.append("training.max_tool_calling_iterations is set but the recipe has no `tools` or "
                                  "`environment`: it has no effect")
        return found
    from grpo_cli.tools import check_tools as check_statically

    return check_statically(recipe, pf.columns)
