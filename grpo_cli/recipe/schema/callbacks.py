"""The `callbacks` section: the user's own transformers `TrainerCallback`s, by reference, with params."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from grpo_cli.recipe.schema.common import Section

_CLASS_REF = re.compile(r"^(?P<target>[^:]+(?:\.py)?):(?P<cls>[A-Za-z_][A-Za-z0-9_]*)$")


class CallbackEntry(Section):
    """One `TrainerCallback` class, constructed with `params` and handed to GRPOTrainer with grpo's own."""

    callback: str
    """`package.module:Class` or `path/to/file.py:Class` (relative to the recipe)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the class's constructor."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return {"callback": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _reference(self) -> CallbackEntry:
        if not _CLASS_REF.match(self.callback):
            raise ValueError(f"callback {self.callback!r} is not a reference: write `package.module:Class` or "
                             "`path/to/file.py:Class`")
        return self
