"""The `callbacks` section: the user's own transformers `TrainerCallback`s, by reference, with params."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from grpo_cli.recipe.schema.common import ReferenceEntry


class CallbackEntry(ReferenceEntry):
    """One `TrainerCallback` class, constructed with `params` and handed to GRPOTrainer with grpo's own."""

    reference_key, reference_name = "callback", "Class"

    callback: str
    """`package.module:Class` or `path/to/file.py:Class` (relative to the recipe)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the class's constructor."""
