"""What a check found, in one type: problems (fatal: `grpo validate` exits 2), warnings and plan lines.

Every preflight check returns one (validation/checks.py runs them from one ordered list and adds them up); the
static tool checks build one up (tools/static.py's ToolCheck is one). Layer 0, so a check in any package can
return it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpo_cli.errors import Problem


@dataclass(kw_only=True)
class Findings:
    """Problems (what, where, fix), warnings (one line each) and plan lines (label -> text) of a check."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)

    def add(self, other: Findings) -> None:
        """Append another check's findings after these (a plan line it repeats takes its value)."""
        self.problems += other.problems
        self.warnings += other.warnings
        self.plan.update(other.plan)
