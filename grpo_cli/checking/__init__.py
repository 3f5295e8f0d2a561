"""The dry runs: `grpo check-rewards` and `grpo check-tools`, which call the user's rewards and tools before training.

- rewards.py: `check_rewards(recipe, ...)` -> `CheckReport` (scores, contract violations, notes); with
  `--generate` it samples completions with the evaluation sampler from the recipe's model.
- probes.py: the built-in probe completions (reference, wrong, empty, tags only, overlong, ...).
- stats.py: per-reward statistics, correlations and the hackability heuristics (`describe`).
- tools.py: `dry_run(recipe, ...)` -> `DryRun`: each tool's schema, example calls, one scripted episode per
  environment; tool_preview.py: the first prompt as the model sees it and a tool call parsed back;
  tool_examples.py: example arguments from a tool's JSON schema.

A package of its own because a dry run uses everything below it (data, rewards, tools, models, evaluation): in
rewards/ or tools/ it pointed up the layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.checking.rewards import CheckReport, check_rewards
    from grpo_cli.checking.stats import describe
    from grpo_cli.checking.tools import DryRun, dry_run

__all__ = ["CheckReport", "DryRun", "check_rewards", "describe", "dry_run"]

__getattr__ = lazy_exports(__name__)
