"""The `rewards` section: a weighted list of built-in, user-code or reward-model rewards."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from grpo_cli.recipe.schema.common import Section, check_reference

DEFAULT_TIMEOUT_S = 600.0


class RewardEntry(Section):
    """One reward. Give a built-in `name`, a `function` reference, or a reward `model`."""

    name: str | None = None
    """A built-in reward (see docs/rewards.md), or the metric label of a function/model reward."""
    function: str | None = None
    """User code: `package.module:func` or `path/to/file.py:func` (relative to the recipe)."""
    model: str | None = None
    """A sequence-classification reward model: hub id or local directory."""
    weight: float = 1.0
    """Weight of this reward in the total (TRL's reward_weights)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments bound to the reward function."""
    parallel: Annotated[int, Field(ge=0)] | Literal["auto"] = 0
    """Score rows in a pool of this many processes (for slow rewards like math-verify); `auto`: one per core
    that other work leaves free when training starts (no pool when only one is). The `code` built-in runs its
    sandboxes in parallel already (one per free core when 0 or `auto`); for it this sets how many."""

    @field_validator("parallel", mode="before")
    @classmethod
    def _parallel(cls, value: Any) -> Any:
        """One clear problem for a bad value, not one per member of the union."""
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
        raise ValueError(f"must be a number of processes (0: no pool) or `auto` (one per free core), got {value!r}")
    timeout: float | None = Field(DEFAULT_TIMEOUT_S, gt=0)
    """Seconds one call of a code reward may take (a call scores a whole generation batch). A call that runs
    longer stops `grpo train` with an error naming the reward, and is a violation in `grpo check-rewards`.
    `null` for no limit. Not the `code` built-in's per-test `params.timeout`."""

    @model_validator(mode="after")
    def _one_kind(self) -> RewardEntry:
        kinds = [k for k in ("function", "model") if getattr(self, k) is not None]
        if len(kinds) > 1:
            raise ValueError("give either `function` or `model`, not both")
        if not kinds and not self.name:
            raise ValueError("each reward needs a built-in `name`, a `function` or a `model`")
        if self.function is not None:
            check_reference(self.function, "function", "func")
        if self.model is not None and self.params:
            raise ValueError("a reward `model` takes no `params`")
        if self.model is not None and "timeout" in self.model_fields_set:
            raise ValueError("a reward `model` is run by TRL itself: `timeout` applies to code rewards only")
        return self

    @property
    def kind(self) -> str:
        return "function" if self.function else "model" if self.model else "builtin"

    @property
    def label(self) -> str:
        """The name metrics are logged under (rewards/<label>/mean)."""
        if self.name:
            return self.name
        if self.function:
            return self.function.rsplit(":", 1)[1]
        return (self.model or "reward_model").rstrip("/").rsplit("/", 1)[-1]
