"""Tools and environments for agentic GRPO: load them (loading), guard them with timeouts (guard), check them
statically for `grpo validate` (static, template), roll them out outside a trainer (episodes) and dry-run them
(`grpo check-tools`: dryrun, preview).

Sits beside models, above rewards (whose reference loaders it reuses); validation, evaluation, training and cli
use it. Only the static checks load eagerly, so `grpo validate` stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports
from grpo_cli.tools.static import ToolCheck, check_tools

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.tools.dryrun import dry_run as dry_run
    from grpo_cli.tools.episodes import (
        Episode as Episode,
        run_episodes as run_episodes,
        start_episodes as start_episodes,
    )
    from grpo_cli.tools.guard import (
        ToolStats as ToolStats,
        ToolTimeout as ToolTimeout,
        guard as guard,
        stats_markdown as stats_markdown,
    )
    from grpo_cli.tools.loading import (
        Toolset as Toolset,
        environment_methods as environment_methods,
        load_toolset as load_toolset,
        make_environment as make_environment,
    )

_LAZY = {"ToolStats": "grpo_cli.tools.guard", "ToolTimeout": "grpo_cli.tools.guard", "guard": "grpo_cli.tools.guard",
         "stats_markdown": "grpo_cli.tools.guard",
         "Toolset": "grpo_cli.tools.loading", "environment_methods": "grpo_cli.tools.loading",
         "load_toolset": "grpo_cli.tools.loading", "make_environment": "grpo_cli.tools.loading",
         "Episode": "grpo_cli.tools.episodes", "run_episodes": "grpo_cli.tools.episodes",
         "start_episodes": "grpo_cli.tools.episodes", "dry_run": "grpo_cli.tools.dryrun"}

__all__ = ["ToolCheck", "check_tools", *_LAZY]

__getattr__ = lazy_exports(__name__, _LAZY)
