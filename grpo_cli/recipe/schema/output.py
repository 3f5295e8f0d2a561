"""The `output` section: where a run writes and what it reports to."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from grpo_cli.recipe.schema.common import Section

Tracker = Literal["tensorboard", "wandb", "trackio", "none"]


class WandbSection(Section):
    """Where Weights & Biases files the run (its WANDB_* environment variables, set for the run)."""

    entity: str | None = None
    """Team or user (WANDB_ENTITY)."""
    project: str | None = None
    """Project (WANDB_PROJECT; transformers' default is `huggingface`)."""
    group: str | None = None
    """Run group (WANDB_RUN_GROUP), e.g. to keep the processes of a sweep together."""
    tags: list[str] = []
    """Run tags (WANDB_TAGS)."""


class OutputSection(Section):
    """Where the model, checkpoints, metrics and manifest of a run go."""

    dir: str = "outputs/run"
    """Output directory (relative to the current directory). `grpo train --output-dir` overrides it."""
    overwrite: Literal["refuse", "resume", "force"] = "refuse"
    """What to do when the directory is not empty: refuse (default), resume from its latest checkpoint,
    or force (delete it first)."""
    report_to: list[Tracker] = Field(default_factory=lambda: list[Tracker](["tensorboard"]))
    """Experiment trackers; TensorBoard is local and needs no account."""
    save_adapter_only: bool = True
    """With LoRA, save only the adapter (use `grpo merge` for a standalone model)."""
    completions_per_log: int = Field(8, ge=0)
    """Completions sampled into OUTPUT_DIR/completions.jsonl at each logging step (prompt, completion, each
    reward, advantage; read them with `grpo samples`); 0 turns it off."""
    run_name: str | None = None
    """The run's name in the trackers (TRL's `run_name`); the output directory's name when absent."""
    wandb: WandbSection | None = None
    """W&B entity / project / group / tags (needs `wandb` in report_to)."""
    trackio_project: str | None = None
    """Trackio project (TRL's `project`; transformers' default is `huggingface`)."""
    tensorboard_dir: str | None = None
    """TensorBoard log directory (TENSORBOARD_LOGGING_DIR); OUTPUT_DIR/runs/... when absent."""
    push_to_hub: str | None = None
    """Hub repository id (`user/name`) to upload the final model or adapter and its model card to when training
    completes (needs a Hub token, e.g. `huggingface-cli login`); `grpo push` does the same later."""
    hub_private: bool = True
    """Create the Hub repository as private."""

    @field_validator("dir")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty: a run needs its own directory (an empty path would write into the current "
                             "one). Give a path such as outputs/NAME")
        return value

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value
