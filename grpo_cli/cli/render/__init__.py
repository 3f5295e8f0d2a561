"""Every rich table and message layout of the CLI, in one package, so the verbs stay thin and notebooks can
reuse it: `from grpo_cli.cli.render import render_train_result`.
"""

from __future__ import annotations

from grpo_cli.lazy import lazy_exports

_WHERE = {
    "render_check_report": "grpo_cli.cli.render.rewards",
    "render_doctor": "grpo_cli.cli.render.runs",
    "render_eval": "grpo_cli.cli.render.evaluation",
    "render_eval_outcome": "grpo_cli.cli.render.evaluation",
    "render_eval_pair": "grpo_cli.cli.render.runs",
    "render_import": "grpo_cli.cli.render.importing",
    "render_launch_file": "grpo_cli.cli.render.runs",
    "render_memory_plan": "grpo_cli.cli.render.runs",
    "render_merge": "grpo_cli.cli.render.runs",
    "render_preflight": "grpo_cli.cli.render.runs",
    "render_push": "grpo_cli.cli.render.runs",
    "render_report_written": "grpo_cli.cli.render.runs",
    "render_samples": "grpo_cli.cli.render.runs",
    "render_suite_results": "grpo_cli.cli.render.evaluation",
    "render_tool_dry_run": "grpo_cli.cli.render.rewards",
    "render_train_result": "grpo_cli.cli.render.runs",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports(__name__, _WHERE)
