"""Tools and environments for agentic GRPO: load them (loading), guard them (guard), check them statically
(static, template), roll them out outside a trainer (episodes) and dry-run them (dryrun).

Sits between rewards and models in the layering: it reuses the reward reference loaders and is
used by preflight, evaluation, train and cli.
"""

from grpo_cli.tools.guard import ToolStats, ToolTimeout, guard
from grpo_cli.tools.loading import Toolset, environment_methods, load_toolset, make_environment
from grpo_cli.tools.static import ToolCheck, check_tools

__all__ = ["ToolCheck", "ToolStats", "ToolTimeout", "Toolset", "check_tools", "environment_methods", "guard",
           "load_toolset", "make_environment"]
