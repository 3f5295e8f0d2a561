"""What one `grpo train` run holds between its phases, and what it hands back (`training/run.py` drives it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.recipe.schema import Recipe
from grpo_cli.runs.manifest import Manifest

if TYPE_CHECKING:
    from rich.console import Console
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpo_cli.data.mapping import MappedData
    from grpo_cli.evaluation.scoring import EvalResult
    from grpo_cli.models.loading import LoadedModel
    from grpo_cli.threads import ThreadPlan
    from grpo_cli.tools.loading import Toolset
    from grpo_cli.training.callbacks import GracefulStop, MetricsJsonl
    from grpo_cli.training.sharding import ShardingProbe
    from grpo_cli.trl_compat import AsyncGRPOTrainer


@dataclass
class TrainResult:
    """What a run did: where it wrote, how it ended, and what it measured."""

    output_dir: Path
    status: str
    global_step: int
    metrics: list[dict[str, Any]] = field(default_factory=list, repr=False)
    summary: list[tuple[str, float, float]] = field(default_factory=list)
    eval_before: EvalResult | None = None
    eval_after: EvalResult | None = None
    data_stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    note: str = ""
    """A remark on the summary (why its first and last agree), "" when none applies."""
    time_check: list[str] = field(default_factory=list)
    """The steady step planned against measured, and the part that was off when it was far out."""


def is_main_process() -> bool:
    """Rank 0 (or a single process): the one that writes files and prints summaries."""
    return int(os.environ.get("RANK", "0")) == 0


def say(console: Console | None, text: str) -> None:
    """One line of a run's progress, on the main process's console."""
    if console is not None and is_main_process():
        console.print(text, markup=False, soft_wrap=True)


@dataclass
class RunState:
    """Everything one run holds between its phases."""

    recipe: Recipe
    out: Path
    console: Console | None
    ckpt: Path | None = None
    replace: bool = False
    resume_command: str | None = None
    aside: runs.SetAside | None = None
    threads: ThreadPlan = field(init=False)
    # Set by _build, in this order; read only after it (a failure before then never reaches them).
    loaded: LoadedModel = field(init=False)
    data: MappedData = field(init=False)
    reward_funcs: list[Any] = field(default_factory=list)  # functions, reward models, or their hub ids
    toolset: Toolset | None = None
    callbacks: list[TrainerCallback] = field(default_factory=list)
    metrics: MetricsJsonl = field(init=False)
    stopper: GracefulStop = field(init=False)
    probe: ShardingProbe = field(init=False)
    trainer: GRPOTrainer | AsyncGRPOTrainer | None = None  # AsyncGRPOTrainer: launch.vllm.mode async
    manifest: Manifest = field(default_factory=Manifest)  # written from `_start_run_dir` on
    result: TrainResult | None = None
