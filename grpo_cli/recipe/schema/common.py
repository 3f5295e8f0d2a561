"""Shared base for recipe sections."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A recipe section: unknown keys are errors (typos must not pass silently).

    Fields are documented with attribute docstrings. Pydantic's `use_attribute_docstrings`
    would parse every class's source at import (~0.1 s, a third of `grpo validate`), so
    `grpo_cli.recipe.docs` reads them only when the JSON Schema or the docs are generated.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=False)
