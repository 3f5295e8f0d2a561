"""Evaluation by sampling: a recipe's held-out rows scored with its rewards, or a bundled benchmark suite.

`evaluate(EvalRequest(...))` is what `grpo eval` does (command.py: the request resolved once by `plan_evaluation`
into an `EvalRun`, then run on every model, one writer);
`EvalTask.for_recipe` and `evaluate_loaded` give `grpo train` its before/after numbers and task metric (task.py).
Sampling is batched transformers `generate` or vLLM's offline engine (backends.py); held_out.py
maps and scores a recipe's rows, suites.py a suite's (which suites exist is `grpo_cli.suite_table`); scoring.py has
the one settings and result types. Heavy libraries load only when sampling runs.
"""

from __future__ import annotations

from grpo_cli.evaluation.backends import check_backend, generate, one_model, prompt_texts
from grpo_cli.evaluation.command import EvalOutcome, EvalRequest, evaluate, label_models, plan_evaluation, write_results
from grpo_cli.evaluation.held_out import HeldOutScoring, evaluate_rows
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings, score, wilson_interval
from grpo_cli.evaluation.suites import Suite, get_suite
from grpo_cli.evaluation.task import (
    EvalRun,
    EvalTask,
    ModelInput,
    evaluate_loaded,
    evaluate_model,
    evaluate_models,
    prepare_run,
    run_models,
)

__all__ = [
    "EvalOutcome", "EvalRequest", "EvalResult", "EvalRun", "EvalSettings", "EvalTask", "HeldOutScoring", "ModelInput",
    "Suite", "check_backend", "evaluate", "evaluate_loaded", "evaluate_model", "evaluate_models", "evaluate_rows",
    "generate", "get_suite", "label_models", "one_model", "plan_evaluation", "prepare_run", "prompt_texts",
    "run_models", "score", "wilson_interval", "write_results",
]
