"""Held-out evaluation by sampling: the prompts of the training mapping, the rewards as TRL calls them.

`evaluate(EvalRequest(...))` is what `grpo eval` does (command.py); `evaluate_recipe_model` gives `grpo train`
its before/after numbers.
Sampling is batched transformers `generate` (sampling.py) or vLLM's offline engine (sampling_vllm.py);
scoring.py turns completions into rewards, means and pass@k. suites.py / suite_run.py: the bundled benchmarks
(GSM8K, MATH-500, SVAMP) with their prompts, answer extraction and Wilson intervals.
Heavy libraries load only when sampling runs.
"""

from __future__ import annotations

from grpo_cli.evaluation.backend import check_backend
from grpo_cli.evaluation.command import EvalOutcome, EvalRequest, evaluate, label_models
from grpo_cli.evaluation.held_out import (
    EvalSettings,
    check_eval_out,
    evaluate_recipe_model,
    evaluate_rows,
    run_eval,
    write_eval_outputs,
)
from grpo_cli.evaluation.sampling import generate, prompt_texts
from grpo_cli.evaluation.scoring import EvalResult, score
from grpo_cli.evaluation.suite_run import SuiteResult, SuiteSettings, evaluate_suite, run_suite, write_suite_result
from grpo_cli.evaluation.suites import SUITES, Suite, get_suite, wilson_interval

__all__ = [
    "SUITES",
    "EvalOutcome",
    "EvalRequest",
    "EvalResult",
    "EvalSettings",
    "Suite",
    "SuiteResult",
    "SuiteSettings",
    "check_backend",
    "check_eval_out",
    "evaluate",
    "evaluate_recipe_model",
    "evaluate_rows",
    "evaluate_suite",
    "get_suite",
    "generate",
    "label_models",
    "prompt_texts",
    "run_eval",
    "run_suite",
    "score",
    "wilson_interval",
    "write_eval_outputs",
    "write_suite_result",
]
