"""Shared base for recipe sections."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

BUNDLED_PREFIX = "bundled:"


class Section(BaseModel):
    """A recipe section: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=True)
