"""Rich rendering shared by the CLI commands (kept out of cli.py so notebooks can reuse it)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table


def render_preflight(console: Console, pf: Any, *, as_json: bool = False) -> None:
    """Print the plan of a valid recipe and its warnings."""
    if as_json:
        console.print_json(json.dumps({"ok": pf.ok, "plan": pf.plan, "warnings": pf.warnings}))
        return
    title = f"{pf.recipe.source or 'recipe'} is valid"
    table = Table(title=title, show_header=False, title_justify="left", title_style="bold green")
    table.add_column("what", style="bold")
    table.add_column("plan")
    for key, value in pf.plan.items():
        table.add_row(key, str(value))
    console.print(table)
    for warning in pf.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def render_eval_pair(console: Console, before: Any, after: Any) -> None:
    """Side-by-side held-out scores before and after training."""
    a, b = before.summary(), (after.summary() if after else {})
    table = Table(title="held-out evaluation (sampling)", title_justify="left")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    for key, value in a.items():
        if key in ("label",):
            continue
        other = b.get(key)
        change = other - value if isinstance(value, float) and isinstance(other, float) else None
        table.add_row(key, _fmt(value), _fmt(other), (f"{change:+.4f}" if change is not None else ""))
    console.print(table)


def render_train_result(console: Console, result: Any) -> None:
    """The end-of-run summary: first vs last logging window, eval before/after, where things are."""
    if result.data_stats:
        names = {"train_rows": "training rows", "eval_rows": "eval rows", "train_dropped_long": "dropped (too long)",
                 "train_truncated": "truncated", "train_rows_without_answer": "rows without an answer"}
        parts = [f"{v} {names[k]}" for k, v in result.data_stats.items() if k in names]
        if parts:
            console.print("data: " + ", ".join(parts))
    if result.summary:
        table = Table(title="training: first vs last logging window", title_justify="left")
        table.add_column("metric")
        table.add_column("first", justify="right")
        table.add_column("last", justify="right")
        table.add_column("change", justify="right")
        for key, first, last in result.summary:
            table.add_row(key, f"{first:.4f}", f"{last:.4f}", f"{last - first:+.4f}")
        console.print(table)
    if result.eval_before is not None:
        render_eval_pair(console, result.eval_before, result.eval_after)
    style = {"completed": "green", "interrupted": "yellow", "stopped": "red"}.get(result.status, "white")
    console.print(f"[{style}]{result.status}[/] at step {result.global_step}; outputs in {result.output_dir}")
    if result.message:
        console.print(result.message, markup=False)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render_suite_results(console: Console, results: list[Any]) -> None:
    """`grpo eval --suite`: one row per model, accuracy with its 95% Wilson interval, change from the first."""
    first = results[0]
    k = first.k
    temperature = first.settings.temperature
    title = f"{first.suite}: {len(first.rows)} problems, " + (
        "greedy pass@1" if temperature == 0 else f"{k} samples at T={temperature}")
    table = Table(title=title, title_justify="left")
    for name, justify in (("model", "left"), ("accuracy", "right"), ("95% CI", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    if k > 1:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("no answer", justify="right")
    if len(results) > 1:
        table.add_column("Δ accuracy", justify="right")
    for r in results:
        s = r.summary()
        lo, hi = s["ci95"]
        cells = [r.label, _pct(s["accuracy"]), f"{100 * lo:.1f}–{100 * hi:.1f}%"]
        if k > 1:
            cells.append(_pct(s.get(f"pass@{k}")))
        cells.append(_pct(s["no_answer_rate"]))
        if len(results) > 1:
            cells.append("" if r is first else f"{100 * (r.accuracy - first.accuracy):+.1f}pp")
        table.add_row(*cells)
    console.print(table)


def render_samples(console: Console, rows: list[dict[str, Any]], title: str, width: int = 400) -> None:
    """`grpo samples`: one row per completion with its total reward, each reward and its advantage."""
    names: list[str] = []
    for r in rows:
        names += [n for n in (r.get("rewards") or {}) if n not in names]
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("step", justify="right")
    table.add_column("prompt", overflow="fold", ratio=2)
    table.add_column("completion", overflow="fold", ratio=3)
    table.add_column("reward", justify="right")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("adv.", justify="right")

    def cut(text: Any) -> str:
        text = str(text or "")
        return text if len(text) <= width else text[:width] + " …"

    for r in rows:
        scores = r.get("rewards") or {}
        table.add_row(str(r.get("step")), cut(r.get("prompt")), cut(r.get("completion")), _fmt(r.get("reward")),
                      *(_fmt(scores.get(n)) for n in names), _fmt(r.get("advantage")), style=None)
    console.print(table)
