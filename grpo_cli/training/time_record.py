"""The run's side of the time plan: the plan it starts with, the steady step it measured, and the check of one
against the other (artefacts/time_check.py), remembered for the next plan on this machine (step_rates.py).
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any

from grpo_cli.artefacts.time_check import check_lines, compare, measure
from grpo_cli.hardware import machine
from grpo_cli.planning.decode_steps import length_points
from grpo_cli.planning.memory import memory_plan
from grpo_cli.planning.time_plan import choose_row, plan_time, recipe_shape
from grpo_cli.step_rates import RateRow, StepShape, TimePlan, candidate_rows, carry_fixed, remember
from grpo_cli.training.step_timing import StepTiming
from grpo_cli.training.zero_advantage import METRIC as SKIPPED

if TYPE_CHECKING:
    from grpo_cli.planning import RunPlan
    from grpo_cli.training.run_state import RunState


def planned_time(plan: RunPlan) -> TimePlan:
    """The time plan `grpo validate` printed, for the threads this run chose (its rates may depend on them): the
    run plan's; a plan built without the checks (no rows counted) gets one from the recipe's max_steps."""
    if plan.time is not None:
        return plan.time
    steps = plan.recipe.training.max_steps
    return plan_time(plan.recipe, steps=steps if steps > 0 else None, eval_prompts=None,
                     threads=plan.threads.torch_threads)


def _prompt_tokens(records: list[dict[str, Any]], shape: StepShape, global_step: int) -> float | None:
    """Mean prompt tokens per completion: TRL's running `num_tokens` (prompts + completions, every process) over
    the completions generated, less the mean completion length."""
    totals = [r["num_tokens"] for r in records if isinstance(r.get("num_tokens"), int | float)]
    lengths = [r["completions/mean_length"] for r in records
               if isinstance(r.get("completions/mean_length"), int | float)]
    if not totals or not lengths or global_step <= 0:
        return None
    per_completion = totals[-1] / (global_step * shape.completions * shape.processes)
    return max(0.0, per_completion - sum(lengths) / len(lengths))


def _trained(records: list[dict[str, Any]], skip: bool) -> float | None:
    """The share of completions that trained over the steady steps: 1 - the zero-advantage skip's logged
    skipped share; every completion without the skip; None with it when nothing was logged (a logging window
    longer than the run)."""
    logged = [r for r in records if isinstance(r.get(SKIPPED), int | float)]
    steady = [r for r in logged if r.get("step", 0) > 1] or logged
    if not steady:
        return None if skip else 1.0
    return round(1 - sum(r[SKIPPED] for r in steady) / len(steady), 4)


def _shape(run: RunState) -> StepShape:
    """The measured step's shape: the plan's, or (no plan) the recipe's with the loaded model's size."""
    plan = run.manifest.time_plan
    if plan is not None and plan.shape is not None:
        return plan.shape.model_copy()
    memory, _ = memory_plan(run.recipe, gpu_memory_gb=None, world_size=1)
    params = memory.params if memory is not None else sum(p.numel() for p in run.loaded.model.parameters())
    return recipe_shape(run.recipe, params, run.threads.torch_threads, "gpu" if run.loaded.device == "cuda" else "cpu")


def with_lengths(row: RateRow, batches: list[list[int]]) -> RateRow:
    """The row with its generation batches' completion lengths (the plan's decode steps at another batch size);
    as it is without any."""
    batches = [b for b in batches if b]
    if not batches:
        return row
    clipped, points = length_points([v for b in batches for v in b], row.shape.completion_tokens)
    longest = sum(max(b) for b in batches) / len(batches)
    return row.model_copy(update={"decode_steps": round(longest, 3), "clipped": round(clipped, 4), "lengths": points})


def measured_rates(run: RunState, steps: list[dict[str, float]], lengths: list[list[int]]) -> RateRow | None:
    """This process's steady steps as a rate row (None with fewer than two steps), with the completion lengths of
    its generation batches."""
    shape = _shape(run)
    assert run.trainer is not None
    shape.prompt_tokens = _prompt_tokens(run.metrics.records, shape, run.trainer.state.global_step)
    shape.trained = _trained(run.metrics.records, run.recipe.sampling.skip_zero_advantage)
    hardware = run.manifest.hardware
    gpus = [] if run.recipe.launch.spec.cpu_only or hardware is None else (hardware.gpus or [])
    command = shlex.join(["grpo", *(run.manifest.command or [])[1:]])
    here = machine(gpus)
    row = measure(steps, shape, machine=here, command=command, date=run.manifest.started or "",
                  run_dir=str(run.out), load=os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
    return with_fixed(with_lengths(row, lengths), here) if row is not None else None


def with_fixed(row: RateRow, here: str) -> RateRow:
    """The run's row with its fixed seconds per part: the fitted row it was planned from, scaled to this run, so
    the next plan here for another batch size has both terms after one run (two runs of one kind at two batch
    sizes replace it with their own fit when remembered)."""
    source = choose_row(row.shape, here, candidate_rows(here))
    fixed = carry_fixed(row, source) if source is not None else {}
    if source is None or not fixed:
        return row
    return row.model_copy(update={"fixed": fixed, "fit": f"the fixed share of {source.origin()}, scaled to this "
                                                          "run"})


def record_time(run: RunState, main: bool) -> list[str]:
    """Measure the run's steady step, keep it in the manifest and (main process) in this machine's file, and
    the end-of-run lines of plan against measured."""
    timer = next((c for c in run.callbacks if isinstance(c, StepTiming)), None)
    if timer is None or run.trainer is None:
        return []  # async mode: TRL's own step, not timed
    row = measured_rates(run, timer.history, timer.lengths)
    if row is None:
        return []
    run.manifest.step_rates = row
    lines = []
    if main:
        try:
            remember(row)
        except OSError as exc:
            lines.append(f"note: could not remember this run's rates for the next plan ({exc})")
    plan = run.manifest.time_plan
    check = compare(plan, row) if plan is not None else None
    return ([*check_lines(check, row.steps)] if check is not None else []) + lines
