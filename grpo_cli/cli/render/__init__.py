"""Every rich table and message layout of the CLI, in one package, so the verbs stay thin and notebooks can
reuse it: `from grpo_cli.cli.render import render_train_result`.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "render_check_report": "rewards",
    "render_doctor": "runs",
    "render_eval": "evaluation",
    "render_eval_outcome": "evaluation",
    "render_eval_pair": "runs",
    "render_launch_file": "runs",
    "render_memory_plan": "runs",
    "render_merge": "runs",
    "render_preflight": "runs",
    "render_push": "runs",
    "render_report_written": "runs",
    "render_samples": "runs",
    "render_suite_results": "evaluation",
    "render_tool_dry_run": "rewards",
    "render_train_result": "runs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Each verb loads only the renderers it uses (keeps `grpo validate` instant)."""
    if name in _WHERE:
        return getattr(importlib.import_module(f"grpo_cli.cli.render.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
