"""Which generation backend makes this recipe's step shorter on the CPU, said in the plan before anything loads.

On a CPU, vLLM generates several times faster than transformers' `generate` (in bfloat16), but colocated with the
trainer it takes the trainer's weights after each optimizer step (TRL merges a LoRA adapter into the base and
hands vLLM the whole model; vLLM re-packs each linear layer for oneDNN). Whether the step gets shorter is the
balance of the two, and both scale with what `validate` knows: generation with completions x tokens x parameters,
the sync with the parameters. The constants are the measured SmolLM2-135M steps on this project's 2-core machine
(docs/performance.md, "Time to accuracy"); the estimate says so. GPUs are not estimated: vLLM on a GPU has not
been measured here. `launch.vllm.mode: auto` chooses by the same estimate (`choose_backend`).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, NamedTuple

from grpo_cli.planning.memory import memory_plan
from grpo_cli.planning.model_config import find_model_config

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


class CpuGeneration(NamedTuple):
    """Measured on 2 cores (2026-11-27, load 2): SmolLM2-135M LoRA, 16 completions x 32 tokens a step, float32."""

    work: float = 16 * 32 * 134.5e6  # completions x tokens x parameters of the measured step
    transformers_s: float = 6.6  # generation a step with transformers (shared prompt prefill)
    vllm_speedup: float = 3.1  # the same generation in vLLM colocate: 2.1 s
    reload_s: float = 0.05  # vLLM colocate's weight sync a step, fixed part
    reload_s_per_gb: float = 0.65  # and per GB of float32 weights (SmolLM2's 0.54 GB: 0.4 s)


CPU = CpuGeneration()
WORTH_IT = 0.15  # a backend is advised when it saves at least this share of the estimated generation + reload


def cpu_estimate(params: int, completions: int, tokens: int) -> tuple[float, float, float]:
    """(transformers generation s, vLLM generation s, vLLM weight reload s) per optimizer step, estimated."""
    hf = CPU.transformers_s * completions * tokens * params / CPU.work
    return hf, hf / CPU.vllm_speedup, CPU.reload_s + CPU.reload_s_per_gb * params * 4 / 1e9


def step_estimate(recipe: Recipe) -> tuple[float, float, float] | None:
    """(transformers generation s, vLLM generation s, weight sync s) for one optimizer step of one process, or
    None when the model's size is unknown. The plan's line and `auto` both read this one estimate."""
    plan, _ = memory_plan(recipe, gpu_memory_gb=None, world_size=1)
    if plan is None:
        return None
    training = recipe.training  # each process generates its own micro-batches, every one of them
    per_step = training.per_device_train_batch_size * training.gradient_accumulation_steps
    return cpu_estimate(plan.params, per_step, training.max_completion_length)


def vllm_is_faster(hf: float, with_vllm: float) -> bool:
    """vLLM colocate (generation + sync) saves at least WORTH_IT of transformers' generation."""
    return with_vllm < (1 - WORTH_IT) * hf


def choose_backend(recipe: Recipe) -> tuple[Recipe, str]:
    """`launch.vllm.mode: auto` made concrete on this machine, and why; any other recipe unchanged (and "").

    Colocate where vLLM is installed and can serve the model, and on a CPU only where the estimate above says it
    shortens the step; off otherwise. `grpo validate` and `grpo train` both choose through here, so the plan says
    what the run will do.
    """
    if recipe.launch.vllm.mode != "auto":
        return recipe, ""
    mode, why = _auto_mode(recipe)
    return _with_mode(recipe, mode), f"auto chose {'vLLM colocate' if mode == 'colocate' else 'transformers'}: {why}"


def _auto_mode(recipe: Recipe) -> tuple[str, str]:
    estimate = _cpu_figures(recipe) if recipe.launch.spec.cpu_only else None
    if importlib.util.find_spec("vllm") is None:
        with_it = f" (with it: {estimate[1]}; scripts/install_vllm_cpu.sh)" if estimate and estimate[0] else ""
        return "off", f"vLLM is not installed{with_it}"
    from grpo_cli.planning.vllm_support import vllm_model_findings

    config, _ = find_model_config(recipe)
    problems = vllm_model_findings(_with_mode(recipe, "colocate"), config).problems
    if problems:
        return "off", f"vLLM cannot serve this model here ({problems[0].what})"
    if not recipe.launch.spec.cpu_only:
        return "colocate", "vLLM is installed (on GPUs the usual choice; not estimated, GPUs are unmeasured here)"
    if estimate is None:
        return "off", "the model's size is unknown, so the two cannot be compared"
    return ("colocate" if estimate[0] else "off"), estimate[1]


def _cpu_figures(recipe: Recipe) -> tuple[bool, str] | None:
    """(vLLM colocate is faster, the estimate in words), or None when the model's size is unknown."""
    estimate = step_estimate(recipe)
    if estimate is None:
        return None
    hf, vllm, sync = estimate
    return (vllm_is_faster(hf, vllm + sync),
            f"vLLM colocate ~{vllm + sync:.1f} s against transformers ~{hf:.1f} s of generation a step, estimated "
            "from steps measured on 2 cores")


def _with_mode(recipe: Recipe, mode: str) -> Recipe:
    """The recipe with another `launch.vllm.mode` (a copy: the user's recipe object stays as loaded)."""
    vllm = recipe.launch.vllm.model_copy(update={"mode": mode})
    return recipe.model_copy(update={"launch": recipe.launch.model_copy(update={"vllm": vllm})})
