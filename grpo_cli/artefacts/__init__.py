"""Post-run artefacts: what a finished (or stopped) run directory is turned into and read back as.

- report_data.py / report.py / report_plot.py: `grpo report` (report.md, report.png), also written after every run.
- time_split.py: the step time split read back from metrics.jsonl.
- samples.py: `grpo samples` (completions.jsonl read back).
- card.py: the Hub model card (README.md) of a run or merged model; hub.py: `grpo push` (staging, upload).
Nothing here imports torch, transformers or TRL; matplotlib and huggingface_hub load when a plot or upload runs.
"""

from __future__ import annotations

from grpo_cli.lazy import lazy_exports

_LAZY = {
    "write_card": "grpo_cli.artefacts.card",
    "push_run": "grpo_cli.artefacts.hub",
    "stage_run": "grpo_cli.artefacts.hub",
    "load_run": "grpo_cli.artefacts.report_data",
    "write_report": "grpo_cli.artefacts.report",
    "report_after_training": "grpo_cli.artefacts.report",
    "summarize_run": "grpo_cli.artefacts.report",
    "select_samples": "grpo_cli.artefacts.samples",
    "read_samples": "grpo_cli.artefacts.samples",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_exports(__name__, _LAZY)
