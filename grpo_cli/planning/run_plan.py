"""`RunPlan`: every launch decision of one run, made once before it starts, as one typed, frozen value.

`plan_run` asks each planner of this package one time: the generation backend (`launch.vllm.mode: auto` made
concrete), the training processes, TRL's batch arithmetic, the torch threads, the per-GPU memory and the CPU
generation estimate. `grpo validate` prints it (validation's checks read it, never decide again), `grpo train`
builds it once in the parent and passes its choices to re-launched workers as the launch overrides they read,
and `train(recipe, plan)` acts on it. Like TRL's `GRPOConfig.__post_init__`, which derives the batch values once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from grpo_cli.planning.batching import BatchPlan, plan_batches
from grpo_cli.planning.fast_generation import GenerationPath, generation_path
from grpo_cli.planning.generation_choice import choose_backend, step_estimate
from grpo_cli.planning.memory import MemoryPlan, memory_plan
from grpo_cli.planning.topology import processes_and_why, thread_plan

if TYPE_CHECKING:
    from grpo_cli.errors import Problem
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.step_rates import TimePlan
    from grpo_cli.threads import ThreadPlan


@dataclass(frozen=True)
class GenerationEstimate:
    """Seconds of one optimizer step's generation on this CPU, per process (planning/generation_choice.py)."""

    transformers_s: float
    vllm_s: float
    weight_sync_s: float


@dataclass(frozen=True)
class RunPlan:
    """What the run will do, decided before it starts; every field is read, none decided again."""

    recipe: Recipe
    """The recipe as it runs: `launch.vllm.mode: auto` made concrete (a copy; the loaded recipe is unchanged)."""
    backend_why: str
    """Why `auto` chose the backend; "" when the recipe named one."""
    processes: int | None
    """Training processes over all machines; None when they cannot be resolved (`processes_why` says why)."""
    processes_why: str
    processes_problem: Problem | None
    """Why the processes cannot be resolved (a multi-process profile with no GPU and no count): raised at launch."""
    gpus: int | None
    """The CUDA GPUs counted for the launch; None when nothing needed the count."""
    batches: BatchPlan | None
    """TRL's batch values for the recipe's world size; None when its arithmetic fails (`batch_problems`)."""
    batch_problems: tuple[Problem, ...]
    threads: ThreadPlan
    memory: MemoryPlan | None
    """The per-GPU memory plan (None on the cpu profile, or with `memory_why` when the model's shape is unknown)."""
    memory_why: str
    generation: GenerationPath | None
    """The transformers generation path and its speed-ups (None in async mode, where TRL's own path runs)."""
    estimate: GenerationEstimate | None
    """Transformers against vLLM colocate on the CPU (None off the CPU or when the model's size is unknown)."""
    time: TimePlan | None = None
    """The time plan from measured rates, filled by the preflight once the rows are counted."""

    @property
    def backend(self) -> str:
        """`launch.vllm.mode` as the run uses it: off, colocate, server or async."""
        return self.recipe.launch.vllm.mode

    def launch_overrides(self) -> list[str]:
        """The choices a re-launched worker reads instead of making them again (as recipe overrides)."""
        chosen = [f"launch.vllm.mode={self.backend}"] if self.backend_why else []
        if self.recipe.launch.num_processes is None and self.recipe.launch.spec.multi_process and self.processes:
            chosen.append(f"launch.num_processes={self.processes}")
        return chosen

    def as_dict(self) -> dict[str, object]:
        """The plan for `grpo validate --json` (the recipe itself is `--print`'s)."""
        return {"backend": self.backend, "backend_why": self.backend_why, "processes": self.processes,
                "processes_why": self.processes_why, "gpus": self.gpus,
                "batches": asdict(self.batches) if self.batches is not None else None,
                "threads": asdict(self.threads),
                "memory_per_gpu_gib": round(self.memory.total_gb, 3) if self.memory is not None else None,
                "memory_why": self.memory_why,
                "generation_path": self.generation.line() if self.generation is not None else None,
                "generation_estimate": asdict(self.estimate) if self.estimate is not None else None,
                "time_plan": self.time.as_dict() if self.time is not None else None}


def plan_run(recipe: Recipe, *, sample_threads: bool = False, gpus: int | None = None) -> RunPlan:
    """Every launch decision for `recipe`, each made once. `sample_threads`: judge the free cores by a half-second
    sample (`grpo train`) rather than the load average (the instant `grpo validate`); `gpus`: the GPUs counted
    already (counting imports torch, so only a launch that needs the count passes it)."""
    recipe, backend_why = choose_backend(recipe)
    processes, processes_why, processes_problem = processes_and_why(recipe, gpus)
    batches, problems = plan_batches(recipe.training, recipe.launch.world_size, recipe.data.has_eval)
    threads = thread_plan(recipe, gpus, sample=sample_threads, processes=processes)
    memory, memory_why = None, ""
    if not recipe.launch.spec.cpu_only:
        memory, memory_why = memory_plan(recipe, world_size=processes)
    mode = recipe.launch.vllm.mode
    path = None if mode == "async" else generation_path(recipe, cuda=not recipe.launch.spec.cpu_only)
    estimate = None
    if recipe.launch.spec.cpu_only and mode != "async" and batches is not None:
        figures = step_estimate(recipe)
        estimate = GenerationEstimate(*figures) if figures is not None else None
    return RunPlan(recipe, backend_why, processes, processes_why, processes_problem, gpus, batches, tuple(problems),
                   threads, memory, memory_why, path, estimate)
