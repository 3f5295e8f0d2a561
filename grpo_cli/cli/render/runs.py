"""Rendering of a training run's end: the first vs last window summary and held-out scores before/after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from grpo_cli.cli.render.tables import cell, print_table

if TYPE_CHECKING:
    from grpo_cli.evaluation.scoring import EvalResult
    from grpo_cli.training.run_state import TrainResult


def render_eval_pair(console: Console, before: EvalResult, after: EvalResult | None) -> None:
    """Side-by-side held-out scores before and after training."""
    a, b = before.summary(), (after.summary() if after else {})
    suite = a.get("suite")
    title = f"{suite} ({a.get('decoding')})" if suite else "held-out evaluation (sampling)"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    for key, value in a.items():
        if key in ("label", "suite", "model", "source", "decoding") or (suite and value is None):
            continue
        other = b.get(key)
        if key == "ci95":  # a suite's 95% interval, as percentages
            table.add_row("95% CI", *(f"{100 * v[0]:.1f}–{100 * v[1]:.1f}%" if v else "-" for v in (value, other)), "")
            continue
        change = other - value if isinstance(value, float) and isinstance(other, float) else None
        table.add_row(key, cell(value), cell(other), (f"{change:+.4f}" if change is not None else ""))
    print_table(console, table)


def render_train_result(console: Console, result: TrainResult) -> None:
    """The end-of-run summary: first vs last logging window, eval before/after, where things are."""
    if result.data_stats:
        names = {"train_rows": "training rows", "eval_rows": "eval rows", "train_dropped_long": "dropped (too long)",
                 "train_dropped_by_filter": "dropped by data.filter",
                 "train_dropped_by_pass_rate": "dropped by data.pass_rate",
                 "environment_rows": "empty prompts, each filled by the environment's reset()",
                 "train_truncated": "truncated", "train_rows_without_answer": "rows without an answer"}
        parts = [f"{v} {names[k]}" for k, v in result.data_stats.items() if k in names]
        if parts:
            console.print("data: " + ", ".join(parts))
    if result.summary:
        from grpo_cli.artefacts.summary import summary_window

        window = summary_window(sum(1 for r in result.metrics if "reward" in r))
        table = Table(title=f"training: first vs last logging window (mean of {window} logging step"
                            f"{'s' if window != 1 else ''} each)", title_justify="left")
        table.add_column("metric")
        table.add_column("first", justify="right")
        table.add_column("last", justify="right")
        table.add_column("change", justify="right")
        for key, first, last in result.summary:
            table.add_row(key, f"{first:.4f}", f"{last:.4f}", f"{last - first:+.4f}")
        print_table(console, table)
        if result.note:
            console.print(f"note: {result.note}", markup=False, soft_wrap=True)
    if result.eval_before is not None:
        render_eval_pair(console, result.eval_before, result.eval_after)
    for line in result.time_check:
        console.print(line, markup=False, soft_wrap=True)
    style = {"completed": "green", "interrupted": "yellow", "stopped": "red"}.get(result.status, "white")
    console.print(f"[{style}]{result.status}[/] at step {result.global_step}; outputs in {result.output_dir}")
    if result.message:
        console.print(result.message, markup=False, soft_wrap=True)  # a command in it must paste as one line
