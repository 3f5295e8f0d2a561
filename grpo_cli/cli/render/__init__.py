"""Every rich table and message layout of the CLI, in one package, so the verbs stay thin and notebooks can
reuse it: `from grpo_cli.cli.render import render_train_result`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.cli.render.artefacts import (
        render_export,
        render_merge,
        render_push,
        render_report_written,
        render_samples,
    )
    from grpo_cli.cli.render.calibration import render_calibration
    from grpo_cli.cli.render.evaluation import render_eval, render_eval_outcome, render_suite_results
    from grpo_cli.cli.render.importing import render_import
    from grpo_cli.cli.render.launching import render_launch_file
    from grpo_cli.cli.render.rewards import render_check_report, render_tool_dry_run
    from grpo_cli.cli.render.runs import render_eval_pair, render_train_result
    from grpo_cli.cli.render.validation import render_doctor, render_memory_plan, render_preflight

__all__ = [
    "render_calibration",
    "render_check_report", "render_doctor", "render_eval", "render_export", "render_eval_outcome", "render_eval_pair",
    "render_import", "render_launch_file", "render_memory_plan", "render_merge", "render_preflight", "render_push",
    "render_report_written", "render_samples", "render_suite_results", "render_tool_dry_run", "render_train_result",
]

__getattr__ = lazy_exports(__name__)
