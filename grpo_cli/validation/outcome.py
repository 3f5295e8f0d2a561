"""`Preflight`: what `grpo validate` found (problems, warnings, the plan) and what its checks settled for the
checks after them. A module of its own so that every check module can name it without importing the list of
checks (validation/checks.py), which imports them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_cli.data.peek import FileScan
from grpo_cli.errors import RecipeError
from grpo_cli.findings import Findings
from grpo_cli.planning.batching import BatchPlan
from grpo_cli.planning.run_plan import RunPlan
from grpo_cli.recipe.schema import Recipe
from grpo_cli.rewards.loaders import RewardInfo
from grpo_cli.step_rates import TimePlan


@dataclass
class Preflight(Findings):
    """The outcome of the preflight: problems (fatal), warnings and the plan, and what the checks settled."""

    recipe: Recipe
    batches: BatchPlan | None = None
    rewards: list[RewardInfo] = field(default_factory=list)
    columns: list[str] | None = None
    train_rows: int | None = None
    eval_rows: int | None = None
    scans: dict[str, FileScan] = field(default_factory=dict, repr=False)
    time_plan: TimePlan | None = None
    run: RunPlan = field(kw_only=True)
    """The run's launch decisions, made once (planning/run_plan.py): the checks read them, never decide again."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_for_problems(self) -> None:
        if self.problems:
            raise RecipeError(self.problems, source=self.recipe.source)
