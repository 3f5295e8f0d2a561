"""Shared base for recipe sections."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

_REFERENCE = re.compile(r"^(?P<target>[^:]+(?:\.py)?):(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


def check_reference(ref: str, what: str, name: str = "name") -> None:
    """How a recipe points at user code: `package.module:<name>` or `path/to/file.py:<name>`; else a ValueError
    that names the key (`what`) and shows both forms."""
    if not _REFERENCE.match(ref):
        raise ValueError(f"{what} {ref!r} is not a reference: write `package.module:{name}` or "
                         f"`path/to/file.py:{name}`")


def not_a_bool(value: Any, expected: str) -> Any:
    """A field validator's body (mode="before") for a number: `true` is not one, though pydantic reads it as 1."""
    if isinstance(value, bool):
        raise ValueError(f"must be {expected}, got {value}")
    return value


class Section(BaseModel):
    """A recipe section: unknown keys are errors (typos must not pass silently).

    Fields are documented with attribute docstrings. Pydantic's `use_attribute_docstrings`
    would parse every class's source at import (~0.1 s, a third of `grpo validate`), so
    `grpo_cli.recipe.docs` reads them only when the JSON Schema or the docs are generated.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, use_attribute_docstrings=False, defer_build=True)


def omitted_section() -> Any:
    """The default of a nested section: `{}`, which the parent validates into the section (`validate_default`).

    A default built by calling the section class would make each omitted section compile a validator of its
    own on first use, when the parent's validator already holds one (about 4 ms of `grpo validate`).
    """
    return Field(default_factory=dict)


class ReferenceEntry(Section):
    """An entry whose `reference_key` points at user code; a bare string is the same as `{<key>: <string>}`."""

    reference_key: ClassVar[str] = ""
    reference_name: ClassVar[str] = "name"
    """What the reference names, for the error message (`Class`, `func`)."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return {cls.reference_key: value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _valid_reference(self) -> ReferenceEntry:
        check_reference(getattr(self, self.reference_key), self.reference_key, self.reference_name)
        return self
