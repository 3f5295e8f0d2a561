"""GRPO batch arithmetic, computed the way TRL 1.16 will, before anything loads.

TRL only checks these in GRPOConfig.__post_init__ (after the model loaded on a
cluster) and phrases the failure in its own terms. We compute them for the launch
profile's real number of processes and spell out the smallest fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_cli.errors import Problem

if TYPE_CHECKING:
    from grpo_cli.recipe.schema.training import TrainingSection

@dataclass
class BatchPlan:
    """Effective sizes of one GRPO step, as TRL will derive them."""

    world_size: int
    per_device: int
    grad_accum: int
    num_generations: int
    steps_per_generation: int
    generation_batch_size: int
    num_iterations: int

    @property
    def global_batch(self) -> int:
        """Completions per micro-step across all processes."""
        return self.per_device * self.world_size

    @property
    def completions_per_optimizer_step(self) -> int:
        return self.global_batch * self.grad_accum

    @property
    def prompts_per_generation(self) -> int:
        return self.generation_batch_size // self.num_generations

    def optimizer_steps_per_epoch(self, num_prompts: int) -> int:
        """TRL's RepeatSampler drops the last incomplete group of prompts."""
        generations = num_prompts // max(1, self.prompts_per_generation)
        return (generations * self.steps_per_generation * self.num_iterations) // self.grad_accum


def _next_multiple_fix(value: int, step_of: int, want_divisible_by: int) -> int:
    """Smallest v >= value with (v * step_of) % want_divisible_by == 0."""
    v = max(1, value)
    while (v * step_of) % want_divisible_by:
        v += 1
    return v


def _divisor_at_most(n: int, limit: int) -> int | None:
    for d in range(min(limit, n), 1, -1):
        if n % d == 0:
            return d
    return None


def plan_batches(t: TrainingSection, world_size: int, has_eval: bool) -> tuple[BatchPlan | None, list[Problem]]:
    """Check TRL's batch rules for a recipe's training values on `world_size` processes; return the plan and any
    problems."""
    problems: list[Problem] = []
    per_device = t.per_device_train_batch_size
    grad_accum = t.gradient_accumulation_steps
    num_gen = t.num_generations
    spg = t.steps_per_generation
    gbs = t.generation_batch_size
    global_batch = per_device * world_size
    procs = f"{world_size} process{'es' if world_size != 1 else ''}"
    if spg is not None and gbs is not None:
        problems.append(Problem("training.generation_batch_size",
                                "and training.steps_per_generation are both set; TRL derives one from the other",
                                "Remove one of them."))
        return None, problems
    if gbs is not None:
        if gbs % global_batch:
            fixed = math.lcm(gbs, global_batch)
            problems.append(Problem(
                "training.generation_batch_size",
                f"{gbs} is not divisible by the global batch {global_batch} "
                f"(per_device_train_batch_size {per_device} x {procs})",
                f"Use generation_batch_size: {fixed}, or make per_device_train_batch_size x processes divide {gbs}."))
            return None, problems
        spg = gbs // global_batch
    else:
        spg = spg if spg is not None else grad_accum
        gbs = global_batch * spg
    if gbs % num_gen:
        fixes = []
        if t.generation_batch_size is None:
            fixes.append(f"per_device_train_batch_size: {_next_multiple_fix(per_device, world_size * spg, num_gen)}")
            if t.steps_per_generation is None:
                fixes.append(f"gradient_accumulation_steps: {_next_multiple_fix(grad_accum, global_batch, num_gen)}")
            else:
                fixes.append(f"steps_per_generation: {_next_multiple_fix(spg, global_batch, num_gen)}")
        divisor = _divisor_at_most(gbs, num_gen)
        if divisor:
            fixes.append(f"num_generations: {divisor}")
        problems.append(Problem(
            "training.num_generations",
            f"the generation batch of {gbs} completions (per_device_train_batch_size {per_device} x {procs} x "
            f"steps_per_generation {spg}) is not divisible by num_generations {num_gen}, so prompt groups would "
            "be split",
            "Smallest fixes: " + " or ".join(fixes) + "." if fixes else ""))
    if has_eval and t.eval_strategy != "no":
        problems += _eval_batch_problems(t, world_size, num_gen, procs)
    plan = BatchPlan(world_size, per_device, grad_accum, num_gen, spg, gbs, t.num_iterations)
    return (None if problems else plan), problems


def _eval_batch_problems(t: TrainingSection, world_size: int, num_gen: int, procs: str) -> list[Problem]:
    """TRL's rule for evaluation batches: the global eval batch holds whole groups of num_generations_eval."""
    problems: list[Problem] = []
    num_eval = t.num_generations_eval or num_gen
    per_eval = t.per_device_eval_batch_size
    if (per_eval * world_size) % num_eval:
        good = _next_multiple_fix(per_eval, world_size, num_eval)
        problems.append(Problem(
            "training.per_device_eval_batch_size",
            f"the global eval batch {per_eval} x {procs} = {per_eval * world_size} is not divisible by the "
            f"{num_eval} generations used for evaluation",
            f"Use per_device_eval_batch_size: {good}, or set num_generations_eval to a divisor of "
            f"{per_eval * world_size}."))
    return problems
