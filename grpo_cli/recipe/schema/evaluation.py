"""The `eval` section: held-out evaluation by sampling, used by `grpo train` and `grpo eval`."""

from __future__ import annotations

from pydantic import Field, model_validator

from grpo_cli.recipe.schema.common import Section
from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.suite_table import suite_problem


class EvalSection(Section):
    """How held-out prompts are sampled and scored."""

    before_after: bool = False
    """`grpo train`: evaluate the eval split before and after training and print both."""
    num_generations: int = Field(1, ge=1)
    """Completions per prompt (k of pass@k)."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; 0 means greedy."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling."""
    max_new_tokens: int | None = Field(None, gt=0)
    """Longest completion; defaults to training.max_completion_length."""
    max_samples: int | None = Field(None, gt=0)
    """Evaluate at most this many prompts."""
    batch_size: int = Field(64, ge=1)
    """Prompts per generate call."""
    seed: int = Field(1234, ge=0, le=2**32 - 1)
    """Sampling seed (the same for every model compared)."""
    rewards: list[RewardEntry] | None = None
    """Eval-only rewards; the training rewards when absent."""
    suite: str | None = None
    """A benchmark to evaluate instead of the eval split (`grpo eval`, before_after, every_steps): a suite grpo ships
    (`grpo eval --help` and docs/eval-and-merge.md list them) or a name in `suite_files`; its own zero-shot prompt
    and answer extraction, greedy unless `temperature` is set. max_samples limits its problems."""
    suite_files: dict[str, str] = Field(default_factory=dict)
    """Benchmarks grpo does not ship (AIME 2024/2025 ...) from your own copy: name -> a JSONL of {problem (or
    question), answer} rows, relative to the recipe; scored by the last \\boxed{} answer."""
    on_save: list[str] = []
    """`grpo train`: evaluate every saved checkpoint on these suites (bundled, or named in `suite_files`), greedy
    unless `temperature` is set, `max_samples` problems each; log `suite/<name>/accuracy` and write
    CHECKPOINT/suites.json beside it."""
    every_steps: int | None = Field(None, gt=0)
    """`grpo train`: evaluate the task metric every N steps (and before step 1), log it as `task/<metric>`, and
    keep the best checkpoint in OUTPUT_DIR/best."""
    metric: str = "accuracy"
    """Task metric: `accuracy` (a suite's correctness, or pass@1 of the eval split's 0/1 reward), `reward` (the
    weighted total) or the label of one reward (its mean)."""
    greater_is_better: bool = True
    """Whether a higher task metric is better (false for e.g. a length penalty)."""
    early_stopping_patience: int | None = Field(None, ge=1)
    """`grpo train`: stop when the task metric has not improved for this many evaluations in a row."""

    @model_validator(mode="after")
    def _known_suites(self) -> EvalSection:
        """A suite must be a row of the suite table or a name in suite_files (the same rule as `grpo eval`)."""
        if not self.suite and not self.on_save:
            return self  # most recipes name no suite
        for key, names in (("suite", [self.suite] if self.suite else []), ("on_save", self.on_save)):
            for name in names:
                problem = suite_problem(name, dict(self.suite_files))
                if problem is not None:
                    raise ValueError(f"{key} {name!r}: {problem.what}. {problem.fix}")
        return self
