"""Every rich table and message layout of the CLI, in one package, so the verbs stay thin and notebooks can
reuse it: `from grpo_cli.cli.render import render_train_result`.
"""

from __future__ import annotations

from grpo_cli.cli.render.evaluation import (
    render_eval,
    render_eval_outcome,
    render_suite_results,
)
from grpo_cli.cli.render.rewards import (
    render_check_report,
    render_tool_dry_run,
)
from grpo_cli.cli.render.runs import (
    render_doctor,
    render_eval_pair,
    render_launch_file,
    render_memory_plan,
    render_merge,
    render_preflight,
    render_push,
    render_report_written,
    render_samples,
    render_train_result,
)

__all__ = [
    "render_check_report",
    "render_doctor",
    "render_eval",
    "render_eval_outcome",
    "render_eval_pair",
    "render_launch_file",
    "render_memory_plan",
    "render_merge",
    "render_preflight",
    "render_push",
    "render_report_written",
    "render_samples",
    "render_suite_results",
    "render_tool_dry_run",
    "render_train_result",
]
