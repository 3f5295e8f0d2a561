"""Preflight checks of `eval:`: the metric the evaluation during training can produce, and where it cannot run.

The sharded-evaluation rule is written here once: evaluation generates on the main process alone, so a profile
that shards the weights over several processes would wait forever. training/sharding.py finds the same at run
time (a launch that shards where the recipe could not say so) and gives the same fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.errors import Problem
from grpo_cli.findings import Findings
from grpo_cli.planning.topology import EVERY_STEPS_SHARDED_FIX
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight

def sharded_eval_problems(recipe: Recipe) -> list[Problem]:
    """eval.on_save and eval.every_steps evaluate on the main process alone: under sharded weights it would hang."""
    if not (recipe.launch.spec.shards_weights and (recipe.launch.num_processes or 2) > 1):
        return []
    ev = recipe.eval
    head = f"evaluates on the main process alone, but launch.profile={recipe.launch.profile} shards the weights"
    problems = []
    if ev.on_save:
        problems.append(Problem("eval.on_save", f"{head}, so generating would wait forever",
                                "Use `grpo eval --suite` on the saved checkpoints instead, or launch.profile ddp."))
    if ev.every_steps:
        problems.append(Problem("eval.every_steps", f"{head} over the processes, so generating would wait forever "
                                "for the others",
                                f"{EVERY_STEPS_SHARDED_FIX}, or use `launch.profile=ddp` (or zero2)."))
    return problems


def check_eval(recipe: Recipe, pf: Preflight) -> Findings:
    """eval.every_steps must name a metric the evaluation can produce, on data it has; the plan's task metric."""
    ev = recipe.eval
    found = Findings(problems=sharded_eval_problems(recipe))
    if ev.on_save and recipe.training.save_strategy == "no":
        found.warnings.append("eval.on_save evaluates saved checkpoints, but training.save_strategy is 'no'")
    if not ev.every_steps:
        return found
    if ev.suite and ev.metric != "accuracy":
        found.problems.append(Problem("eval.metric", f"a suite measures accuracy, not {ev.metric!r}",
                                      "Use eval.metric: accuracy with eval.suite, or drop eval.suite to score the "
                                      "eval split with a reward."))
    elif not ev.suite:
        labels = [e.label for e in (ev.rewards or recipe.rewards)]
        if ev.metric not in ("accuracy", "reward", *labels):
            found.problems.append(Problem("eval.metric", f"{ev.metric!r} is not a reward of this recipe",
                                          f"Use accuracy, reward (the weighted total) or one of: {', '.join(labels)}."))
        if not recipe.data.has_eval:
            found.problems.append(Problem("eval.every_steps", "scores the eval split, but the recipe has none",
                                          "Set data.eval_split or data.eval_holdout, or name a bundled suite in "
                                          "eval.suite."))
    found.plan["task metric"] = (f"task/{ev.suite or 'eval'}/{ev.metric} every {ev.every_steps} steps, best kept in "
                                 f"{recipe.output.dir}/best" + (f", early stop after {ev.early_stopping_patience} "
                                                                 "evaluations without improvement"
                                                                 if ev.early_stopping_patience else ""))
    return found
