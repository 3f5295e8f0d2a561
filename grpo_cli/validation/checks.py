"""`grpo validate`: everything that can be checked before a model loads, and a plan of the run.

`CHECKS` is the one ordered list of preflight checks. Each has the same signature, `check(recipe, pf) ->
Findings`: it reads the recipe and what the checks before it settled on `pf` (the columns, rows, rewards, batch
plan), and returns its problems, warnings and plan lines, which `preflight` adds up in this order (the order
`grpo validate` reports them in). Each lives in the module of its concern. A new check is one function there and
one row here; a new plan line is also one entry in `PLAN_LINES`, which orders the plan whatever check wrote it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from grpo_cli.findings import Findings
from grpo_cli.planning.run_plan import RunPlan, plan_run
from grpo_cli.recipe.schema import Recipe
from grpo_cli.validation.callbacks import check_callbacks
from grpo_cli.validation.data_checks import check_data, check_rewards
from grpo_cli.validation.environment import check_packages
from grpo_cli.validation.eval_checks import check_eval
from grpo_cli.validation.model_checks import check_context_length, check_model, check_vllm
from grpo_cli.validation.outcome import Preflight
from grpo_cli.validation.plan_checks import (
    check_generation,
    check_generation_path,
    check_launch,
    check_memory,
    check_time,
)
from grpo_cli.validation.sampling_checks import check_pass_rate, check_sampling
from grpo_cli.validation.template_override import check_chat_template
from grpo_cli.validation.training_checks import check_tools, check_training
from grpo_cli.validation.training_keys import check_output, check_training_keys
from grpo_cli.validation.trl_rules import check_trl
from grpo_cli.validation.vision import check_vision

Check = Callable[[Recipe, Preflight], Findings]

CHECKS: tuple[Check, ...] = (
    check_model,          # model_checks.py: the model reference (directory, GGUF header, hub id)
    check_data,           # data_checks.py: files, columns, rows; settles pf.columns, rows, scans
    check_pass_rate,      # sampling_checks.py: `data.pass_rate` (grpo calibrate's file) narrows the training rows
    check_rewards,        # data_checks.py: reward references and the columns they need; settles pf.rewards
    check_tools,          # training_checks.py: tools and environments, read statically
    check_training,       # training_checks.py: TRL's batch arithmetic, processes, learning rate; settles pf.batches
    check_context_length,  # model_checks.py: prompt + completion within the model's positions
    check_trl,            # trl_rules.py: TRL's other raise sites the recipe decides
    check_packages,       # environment.py: the optional packages the recipe uses, in TRL's windows
    check_training_keys,  # training_keys.py: scheduler kwargs, Hub uploads, do_eval, logging steps
    check_callbacks,      # callbacks.py: `callbacks:` found without importing them
    check_chat_template,  # template_override.py: the recipe's chat template renders the first prompt
    check_eval,           # eval_checks.py: eval.every_steps / on_save, the sharded-evaluation rule
    check_output,         # training_keys.py: output.dir, the output.push_to_hub repo id
    check_vision,         # vision.py: image columns, the first images, vision-language rules
    check_vllm,           # model_checks.py: whether vLLM can serve the model, in which dtype
    check_generation,     # plan_checks.py: transformers or vLLM, whichever makes a CPU step shorter
    check_generation_path,  # plan_checks.py: merged adapter, static cache/compiled decode, or vLLM, and why
    check_sampling,       # sampling_checks.py: what `sampling:` needs and costs
    check_launch,         # plan_checks.py: processes, torch threads, reward pools
    check_memory,         # plan_checks.py: the memory plan per GPU
    check_time,           # plan_checks.py: the steady step, the run and its cost, from measured rates
)
"""Every preflight check, in the order its problems and warnings are reported."""

PLAN_LINES: tuple[tuple[str, ...], ...] = (
    ("model",), ("data",), ("prompt",), ("rewards",), ("launch",), ("output",), ("train rows",), ("eval rows",),
    ("completions per micro-step", "generation batch", "completions per optimizer step", "total optimizer steps",
     "optimizer steps per epoch"),  # the batch plan's lines, in the order check_training writes them
    ("chat template",), ("task metric",), ("model kind",), ("images",), ("tools",), ("vLLM",), ("async",),
    ("generation",), ("generation path",), ("sampling",),
    ("zero-advantage skip",), ("threads",), ("reward pools",), ("memory per GPU",),
    ("time per step", "time for the run", "cost"),
)
"""The order the plan prints in (a line not named here comes last)."""
_PLAN_RANK = {line: rank for rank, group in enumerate(PLAN_LINES) for line in group}


def preflight(recipe: Recipe, plan: RunPlan | None = None) -> Preflight:
    """Check everything checkable without loading a model; never raises for recipe problems.

    The checks read the run's launch decisions from `plan` (built here when None: planning.plan_run) and check
    the recipe as it will run (`launch.vllm.mode: auto` made concrete). `pf.run` is the plan with its time plan.
    """
    plan = plan_run(recipe) if plan is None else plan
    recipe = plan.recipe
    pf = Preflight(recipe, run=plan)
    for check in CHECKS:
        pf.add(check(recipe, pf))
    if plan.backend_why:  # what auto chose, and why, in place of the advice to set a mode
        pf.plan["generation"] = plan.backend_why
    pf.run = dataclasses.replace(plan, time=pf.time_plan)
    pf.plan = {line: pf.plan[line] for line in sorted(pf.plan, key=lambda k: _PLAN_RANK.get(k, len(PLAN_LINES)))}
    return pf
