"""Post-run artefacts: what a finished (or stopped) run directory is turned into and read back as.

- report_data.py / report.py / report_plot.py: `grpo report` (report.md, report.png), also written after every run.
- time_split.py: the step time split read back from metrics.jsonl.
- samples.py: `grpo samples` (completions.jsonl read back).
- card.py: the Hub model card (README.md) of a run or merged model; hub.py: `grpo push` (staging, upload);
  publish.py: what may be published (no local paths, smoke-test suites kept out of the Hub metadata).
- merge.py: `grpo merge`, a LoRA adapter folded into its base, verified by logits; export_gguf.py: `grpo export`,
  export_source.py: the model's files it reads, checked, and where `--out` may not land.
Above models/ (it imports models, never the reverse). Only merge and export import torch and transformers, when
they run; matplotlib and huggingface_hub load when a plot or upload runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.artefacts.card import write_card
    from grpo_cli.artefacts.hub import push_run, stage_run
    from grpo_cli.artefacts.merge import MergeResult, merge_adapter
    from grpo_cli.artefacts.report import report_after_training, summarize_run, write_report
    from grpo_cli.artefacts.report_data import load_run
    from grpo_cli.artefacts.samples import read_samples, select_samples

__all__ = [
    "MergeResult", "load_run", "merge_adapter", "push_run", "read_samples", "report_after_training",
    "select_samples", "stage_run", "summarize_run", "write_card", "write_report",
]

__getattr__ = lazy_exports(__name__)
