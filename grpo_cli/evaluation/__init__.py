"""Evaluation by sampling: a recipe's held-out rows scored with its rewards, or a bundled benchmark suite.

`evaluate(EvalRequest(...))` is what `grpo eval` does (command.py: one `EvalTask` run on every model, one writer);
`EvalTask.for_recipe` and `evaluate_loaded` give `grpo train` its before/after numbers and task metric (task.py).
Sampling is batched transformers `generate` or vLLM's offline engine (sampling.py); held_out.py
maps and scores a recipe's rows, suites.py a suite's (which suites exist is `grpo_cli.suite_table`); scoring.py has
the one settings and result types. Heavy libraries load only when sampling runs.
"""

from __future__ import annotations

from grpo_cli.evaluation.command import EvalOutcome, EvalRequest, evaluate, label_models, write_results
from grpo_cli.evaluation.held_out import HeldOutScoring, evaluate_rows
from grpo_cli.evaluation.sampling import generate, prompt_texts
from grpo_cli.evaluation.scoring import EvalResult, EvalSettings, score, wilson_interval
from grpo_cli.evaluation.suites import Suite, get_suite
from grpo_cli.evaluation.task import EvalTask, check_backend, evaluate_loaded, evaluate_model, evaluate_models

__all__ = [
    "EvalOutcome",
    "EvalRequest",
    "EvalResult",
    "EvalSettings",
    "EvalTask",
    "HeldOutScoring",
    "Suite",
    "check_backend",
    "evaluate",
    "evaluate_loaded",
    "evaluate_model",
    "evaluate_models",
    "evaluate_rows",
    "generate",
    "get_suite",
    "label_models",
    "prompt_texts",
    "score",
    "wilson_interval",
    "write_results",
]
