"""The `tools` and `environment` sections: what the model may call during a rollout (TRL's tool loop)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from grpo_cli.recipe.schema.common import ReferenceEntry, Section, check_reference

RESULT_CHARS = 10_000
"""Default cap on a tool result's text: about 2,500 tokens, more than a completion budget usually holds."""


class ToolEntry(ReferenceEntry):
    """One tool the model may call: a plain function (sync or async) with type hints and an `Args:` docstring.

    A bare string is the same as `{function: <string>}`.
    """

    reference_key = "function"

    function: str
    """`package.module:func` or `path/to/file.py:func` (relative to the recipe)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments bound to the tool; they are hidden from the model's view of the tool."""
    timeout: float | None = Field(30.0, gt=0)
    """Seconds one call may take; a slower call counts as a tool failure and the model sees an error. null: no limit."""
    max_result_chars: int | None = Field(RESULT_CHARS, gt=0)
    """Longest result (characters of its text) that goes into the model's context; a longer one is cut there, ends
    with a note saying so, and is counted in the step log (`tools/results_cut`). null: no limit (a 5 MB result
    takes minutes to tokenize on every step)."""

    @property
    def name(self) -> str:
        """The function name: what the model calls and what errors name."""
        return self.function.rsplit(":", 1)[1]


class EnvironmentSection(Section):
    """Environments whose public methods become tools; `reset(**row)` starts each rollout.

    A bare string is the same as `{factory: <string>}`.
    """

    factory: str | dict[str, str]
    """A class (`envs.py:Class` or `package.module:Class`), or a mapping `name: class` that routes each row by
    its `environment` column (TRL's multi-environment mode)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Constructor keyword arguments; with several environments, a mapping `name: {arguments}`."""
    timeout: float | None = Field(30.0, gt=0)
    """Seconds one method call may take; a slower call counts as a tool failure. It bounds the constructor, `reset`
    and `get_reward` too, whose failure or timeout stops the run with their name. null: no limit."""
    max_result_chars: int | None = Field(RESULT_CHARS, gt=0)
    """Longest method result (characters) that goes into the model's context; longer ones are cut, as for tools."""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"factory": value}
        routes = isinstance(value, dict) and value and "factory" not in value
        if routes and all(isinstance(v, str) for v in value.values()):
            return {"factory": value}  # `environment: {name: envs.py:Class, ...}`
        return value

    @model_validator(mode="after")
    def _valid(self) -> EnvironmentSection:
        if isinstance(self.factory, dict):
            if not self.factory:
                raise ValueError("factory mapping is empty: give at least one `name: envs.py:Class`")
            for name, ref in self.factory.items():
                check_reference(ref, f"factory.{name}")
            for name, value in self.params.items():
                if name not in self.factory:
                    raise ValueError(f"params key {name!r} is not an environment name; with several environments "
                                     f"params are per name ({', '.join(self.factory)})")
                if not isinstance(value, dict):
                    raise ValueError(f"params.{name} must be a mapping of constructor arguments")
        else:
            check_reference(self.factory, "factory")
        return self

    @property
    def routed(self) -> bool:
        """Several environments, chosen per row by the `environment` column."""
        return isinstance(self.factory, dict)

    def classes(self) -> dict[str | None, str]:
        """name -> class reference (name None for a single environment)."""
        if isinstance(self.factory, dict):
            return {name: ref for name, ref in self.factory.items()}
        return {None: self.factory}

    def params_for(self, name: str | None) -> dict[str, Any]:
        """Constructor arguments of one environment."""
        return dict(self.params.get(name, {})) if name is not None else dict(self.params)
