"""`grpo check-rewards`: call every reward as TRL will on probes, given completions or samples, and judge them.

- run.py: `check_rewards(recipe, ...)` -> `CheckReport` (scores, contract violations, notes).
- probes.py: the built-in probe completions (reference, wrong, empty, tags only, overlong, ...).
- stats.py: per-reward statistics, correlations and the hackability heuristics.
"""

from __future__ import annotations

from grpo_cli.rewards.check.dry_run import CheckReport, check_rewards
from grpo_cli.rewards.check.stats import describe

__all__ = ["CheckReport", "check_rewards", "describe"]
