"""The recipe schema: the single source of truth for validation, `grpo schema` and the docs.

One module per section; `Recipe` ties them together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, PrivateAttr, model_validator

from grpo_cli.recipe.schema.callbacks import CallbackEntry
from grpo_cli.recipe.schema.common import Section, omitted_section
from grpo_cli.recipe.schema.data import AnswerSection, DataSection, ImagesSection, PromptSection
from grpo_cli.recipe.schema.evaluation import EvalSection
from grpo_cli.recipe.schema.health import HealthSection
from grpo_cli.recipe.schema.launch import LaunchSection, VllmSection
from grpo_cli.recipe.schema.model import LoraSection, ModelSection
from grpo_cli.recipe.schema.output import OutputSection
from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.recipe.schema.sampling import DynamicSamplingSection, SamplingSection
from grpo_cli.recipe.schema.tools import EnvironmentSection, ToolEntry
from grpo_cli.recipe.schema.training import TrainingSection

__all__ = [
    "AnswerSection",
    "CallbackEntry",
    "DataSection",
    "DynamicSamplingSection",
    "EnvironmentSection",
    "EvalSection",
    "ImagesSection",
    "HealthSection",
    "LaunchSection",
    "LoraSection",
    "ModelSection",
    "OutputSection",
    "PromptSection",
    "Recipe",
    "RewardEntry",
    "SamplingSection",
    "ToolEntry",
    "TrainingSection",
    "VllmSection",
]


def _data_may_be_absent(schema: dict[str, Any]) -> None:
    """`data` is required unless the recipe has an `environment` (filled in by `_environment_rows`)."""
    schema["required"] = [k for k in schema.get("required", []) if k != "data"]


class Recipe(Section):
    """A GRPO training recipe."""

    model_config = ConfigDict(**{**Section.model_config, "json_schema_extra": _data_may_be_absent})

    description: str | None = None
    """Free text shown by `grpo validate`."""
    model: ModelSection
    """The policy model."""
    data: DataSection
    """Training data and prompt mapping. A recipe with `environment:` may leave it out: the environment's
    `reset()` then serves every prompt (`from_environment: true`)."""
    rewards: list[RewardEntry] = []
    """Weighted rewards; the total is their weighted sum. At least one, unless the `environment` owns the reward
    (its class defines `get_reward`, which TRL adds as a reward of weight 1)."""
    tools: list[ToolEntry] = []
    """Functions the model may call during a rollout (TRL's `tools`); see docs/tools.md."""
    environment: EnvironmentSection | None = None
    """Environments whose methods are tools (TRL's `environment_factory`); see docs/tools.md."""
    training: TrainingSection = omitted_section()
    """TRL GRPOConfig fields."""
    sampling: SamplingSection = omitted_section()
    """Which generated groups a step learns from: dynamic sampling, skipping zero-advantage completions (off)."""
    launch: LaunchSection = omitted_section()
    """Processes, distributed profile and vLLM."""
    output: OutputSection = omitted_section()
    """Run outputs and trackers."""
    eval: EvalSection = omitted_section()
    """Held-out evaluation by sampling."""
    health: HealthSection = omitted_section()
    """Training health guards."""
    callbacks: list[CallbackEntry] = []
    """Your own transformers `TrainerCallback`s (`module:Class` or `file.py:Class`, or `{callback: ..., params:
    {...}}`), added to GRPOTrainer after grpo's own; `grpo validate` finds each class without importing it."""

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="")

    @property
    def base_dir(self) -> Path:
        """Directory relative paths in the recipe are resolved against (the recipe's own)."""
        return self._base_dir

    @property
    def source(self) -> str:
        """The recipe file this was loaded from ('' when built in Python)."""
        return self._source

    def resolve_path(self, path: str) -> Path:
        """Resolve a recipe path: `bundled:` assets, absolute, or relative to the recipe."""
        from grpo_cli.paths import resolve

        return resolve(path, self._base_dir)

    def local_model_dir(self, ref: str) -> Path | None:
        """The directory a model reference names, or None for a hub id."""
        from grpo_cli.paths import local_dir

        return local_dir(ref, self._base_dir)

    @model_validator(mode="before")
    @classmethod
    def _environment_rows(cls, value: Any) -> Any:
        """No `data:` beside an `environment:` is TRL's environment-only training: the environment serves prompts."""
        if isinstance(value, dict) and "data" not in value and value.get("environment") is not None:
            return {**value, "data": {"from_environment": True}}
        return value

    @model_validator(mode="after")
    def _unique_reward_labels(self) -> Recipe:
        if not self.rewards and self.environment is None:
            raise ValueError("`rewards` is empty: give at least one reward (a built-in `name`, a `function` or a "
                             "`model`); only an `environment` whose class defines get_reward may train without one")
        seen: set[str] = set()
        for entry in self.rewards:
            if entry.label in seen:
                raise ValueError(
                    f"two rewards are named {entry.label!r}; metrics would collide: give one a distinct `name`"
                )
            seen.add(entry.label)
        return self
