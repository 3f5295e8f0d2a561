"""Tools and environments for agentic GRPO: load them (loading), guard them with timeouts (guard), check them
statically for `grpo validate` (static, template) and roll them out outside a trainer (episodes).

Sits beside models, above rewards (whose calling and loading of reward functions it reuses); validation,
evaluation, checking (`grpo check-tools`), training and cli use it. Only the static checks load eagerly, so
`grpo validate` stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports
from grpo_cli.tools.static import ToolCheck, check_tools

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.tools.episodes import Episode, run_episodes, start_episodes
    from grpo_cli.tools.guard import ToolStats, ToolTimeout, stats_markdown
    from grpo_cli.tools.loading import Toolset, environment_methods, load_toolset, make_environment

__all__ = [
    "Episode", "ToolCheck", "ToolStats", "ToolTimeout", "Toolset", "check_tools", "environment_methods",
    "load_toolset", "make_environment", "run_episodes", "start_episodes", "stats_markdown",
]

__getattr__ = lazy_exports(__name__)
