"""Held-out evaluation by sampling: the prompts of the training mapping, the rewards as TRL calls them.

`run_eval` is what `grpo eval` does; `evaluate_recipe_model` gives `grpo train` its before/after numbers.
Sampling is batched transformers `generate` (sampling.py) or vLLM's offline engine (sampling_vllm.py);
scoring.py turns completions into rewards, means and pass@k. Heavy libraries load only when sampling runs.
"""

from __future__ import annotations

from grpo_cli.evaluation.run import (
    EvalSettings,
    evaluate_recipe_model,
    evaluate_rows,
    label_models,
    run_eval,
    write_eval_outputs,
)
from grpo_cli.evaluation.sampling import generate, prompt_texts
from grpo_cli.evaluation.scoring import EvalResult, score

__all__ = [
    "EvalResult",
    "EvalSettings",
    "evaluate_recipe_model",
    "evaluate_rows",
    "generate",
    "label_models",
    "prompt_texts",
    "run_eval",
    "score",
    "write_eval_outputs",
]
