"""Rows for environment-only training: chat prompts (empty, or the recipe's constant text) that `reset()` fills.

TRL 1.16's GRPOTrainer builds exactly these placeholder rows itself when `train_dataset` is None and an
`environment_factory` is given. grpo builds them here instead, so that `check-tools`, `check-rewards` and the
sampler see an ordinary dataset, and so that the run's data stats say what the run trained on.
"""

from __future__ import annotations

from typing import Any

from grpo_cli.recipe.schema import Recipe


def _rows_needed(recipe: Recipe) -> int:
    """Prompts in one generation batch, at least: TRL's sampler drops a batch it cannot fill."""
    return max(1, recipe.training.generation_batch(recipe.launch.world_size))


def environment_rows(recipe: Recipe) -> tuple[Any, None, dict[str, Any]]:
    """TRL's placeholder rows (one empty user message each), at least one generation batch of them: train, eval
    (none) and the data stats."""
    import datasets

    count = _rows_needed(recipe)
    prompt = recipe.data.prompt
    messages = [{"role": "system", "content": prompt.system_prompt}] if prompt.system_prompt else []
    messages.append({"role": "user", "content": (prompt.template or "").format()})  # constant text: {{ }} -> { }
    train = datasets.Dataset.from_dict({"prompt": [messages] * count})
    return train, None, {"environment_rows": count}
