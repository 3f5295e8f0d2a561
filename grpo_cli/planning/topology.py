"""Process topology: visible GPUs, the number of training processes a recipe gets, and why.

Shared by `grpo validate` (the plan), the memory plan and the accelerate re-launch, so the world size
is computed by one rule.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem, RecipeError
from grpo_cli.planning.batching import plan_batches
from grpo_cli.planning.model_config import find_model_config
from grpo_cli.planning.shapes import ModelShape
from grpo_cli.threads import choose_threads

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.threads import ThreadPlan


EVERY_STEPS_SHARDED_FIX = ("Drop eval.every_steps for sharded profiles (eval.before_after still works: it "
                           "evaluates the saved model)")
"""The start of the fix for evaluation during a sharded run; each place that finds it names the other profile."""


def installed(module: str) -> bool:
    """Whether a module can be imported, without importing it (importing deepspeed/vllm takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def visible_gpu_count() -> int:
    """CUDA GPUs this process may use (honours CUDA_VISIBLE_DEVICES); 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _server_on_this_layout(recipe: Recipe) -> bool:
    """A vLLM server that shares the training node's GPUs (single node, server mode)."""
    v = recipe.launch.vllm
    return v.uses_server and recipe.launch.num_machines == 1 and v.server_gpus > 0


def resolve_num_processes(recipe: Recipe, gpus: int | None = None) -> int:
    """Training processes across all machines: launch.num_processes, else derived from the visible GPUs."""
    launch = recipe.launch
    if not launch.spec.multi_process:
        return 1
    if launch.num_processes is not None:
        n = launch.num_processes
    else:
        gpus = visible_gpu_count() if gpus is None else gpus
        if gpus == 0:
            raise GrpoError(f"profile {launch.profile!r} needs a number of processes and no CUDA GPU is visible",
                            where="launch.num_processes",
                            fix="Pass `--num-processes N` (on CPU at most one per core, e.g. "
                                f"`--profile {launch.profile} --num-processes 2`).")
        if launch.vllm.uses_server and launch.num_machines > 1:
            raise GrpoError("a multi-node run with a vLLM server cannot derive its process count from the GPUs",
                            where="launch.num_processes",
                            fix="Pass `--num-processes N` with N the training GPUs on all nodes together "
                                "(the server usually runs on a node of its own).")
        n = gpus * launch.num_machines
        if _server_on_this_layout(recipe):
            n = gpus - launch.vllm.server_gpus
            if n < 1:
                raise GrpoError(f"{gpus} GPU(s) visible and launch.vllm.server_gpus={launch.vllm.server_gpus} "
                                "leaves none for training", where="launch.vllm.server_gpus",
                                fix="Run the server on another machine (`launch.vllm.host`), or use "
                                    "`launch.vllm.mode=colocate` to share the GPUs.")
    if launch.num_machines > 1 and n % launch.num_machines:
        raise GrpoError(f"{n} processes cannot be split evenly over {launch.num_machines} machines",
                        where="launch.num_processes",
                        fix="accelerate starts num_processes / num_machines processes on every node: use a "
                            f"multiple of {launch.num_machines}.")
    return n


def world_size_explanation(recipe: Recipe, gpus: int | None = None) -> str:
    """One line saying how many training processes the run gets and why (for validate and errors)."""
    return processes_and_why(recipe, gpus)[1]


def processes_and_why(recipe: Recipe, gpus: int | None = None) -> tuple[int | None, str, Problem | None]:
    """(training processes, the line saying why, None), resolved once; (None, what is missing, the problem) when
    they cannot be (the launcher raises it; `grpo validate` only shows it)."""
    launch = recipe.launch
    profile = launch.profile
    try:
        n = resolve_num_processes(recipe, gpus)
    except GrpoError as exc:
        return None, exc.problems[0].what, exc.problems[0]
    if not launch.spec.multi_process:
        return n, f"1 training process (profile {profile})", None
    v = launch.vllm
    server = f"{v.server_gpus} taken by the vLLM server" if _server_on_this_layout(recipe) else ""
    nodes = f" over {launch.num_machines} machines" if launch.num_machines > 1 else ""
    if launch.num_processes is not None:
        text = f"{n} training process{'es' if n != 1 else ''}{nodes} (launch.num_processes)"
        if server:
            text += f"; the vLLM server needs {v.server_gpus} more GPU(s) (launch.vllm.server_gpus)"
        return n, text, None
    gpus = visible_gpu_count() if gpus is None else gpus
    per_node = f"{gpus} GPU{'s' if gpus != 1 else ''} visible"
    if server:
        return n, f"{per_node}, {server} → {n} training process{'es' if n != 1 else ''}", None
    if nodes:
        per_node += f" per machine{nodes}"
    return n, f"{per_node} → {n} training processes", None


def check_batches_for_world(recipe: Recipe, n: int, gpus: int | None) -> None:
    """TRL's batch arithmetic for the real process count (the recipe alone may not say it)."""
    _, problems = plan_batches(recipe.training, n, recipe.data.has_eval)
    if problems:
        why = world_size_explanation(recipe, gpus)
        for p in problems:
            p.fix = f"{p.fix.rstrip('.')}. (World size: {why}.)" if p.fix else f"World size: {why}."
        raise RecipeError(problems, source=recipe.source)


def thread_plan(recipe: Recipe, gpus: int | None = None, *, sample: bool = False,
                processes: int | None = None) -> ThreadPlan:
    """The threads each training process of this recipe gets on this machine now (grpo_cli.threads).

    The model's parameter count comes from its config (no weights loaded) when it can be found: a
    tiny model gets one thread per process. `sample`: judge the busy cores by a half-second sample (what
    `grpo train` does) instead of the load average (what the instant `grpo validate` does). `processes`: the
    count already resolved (the run plan's), else resolved here.
    """
    launch = recipe.launch
    if processes is None:  # `processes`: the count the run plan resolved already
        try:
            processes = resolve_num_processes(recipe, gpus)
        except GrpoError:
            processes = launch.num_machines
    per_node = max(1, processes // launch.num_machines)
    params = None
    try:
        config, _ = find_model_config(recipe)
        if config is not None:
            params = ModelShape.from_config(config).params
    except (ValueError, KeyError, TypeError, OSError):
        params = None
    return choose_threads(per_node, override=launch.threads, model_params=params, sample=sample)
