"""Rendering of validate, train, memory, report, samples, launch and doctor."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grpo_cli.cli.render.tables import print_table


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
    print_table(console, table)
    for warning in pf.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def _fmt_value(value: Any) -> str:
    from grpo_cli.artefacts.report_data import number_text

    return str(value) if isinstance(value, str) else number_text(value)


def render_eval_pair(console: Console, before: Any, after: Any) -> None:
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
        table.add_row(key, _fmt_value(value), _fmt_value(other), (f"{change:+.4f}" if change is not None else ""))
    print_table(console, table)


def render_train_result(console: Console, result: Any) -> None:
    """The end-of-run summary: first vs last logging window, eval before/after, where things are."""
    if result.data_stats:
        names = {"train_rows": "training rows", "eval_rows": "eval rows", "train_dropped_long": "dropped (too long)",
                 "train_dropped_by_filter": "dropped by data.filter",
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
    if result.eval_before is not None:
        render_eval_pair(console, result.eval_before, result.eval_after)
    style = {"completed": "green", "interrupted": "yellow", "stopped": "red"}.get(result.status, "white")
    console.print(f"[{style}]{result.status}[/] at step {result.global_step}; outputs in {result.output_dir}")
    if result.message:
        console.print(result.message, markup=False, soft_wrap=True)  # a command in it must paste as one line


def render_memory_plan(console: Console, loaded: Any, plan: Any, why: str | None) -> None:
    """The per-GPU memory table of `grpo memory`, or why there is none."""
    if plan is None:
        console.print(f"[yellow]no memory plan:[/] {escape(why or 'unknown')}", soft_wrap=True)
        return
    title = (f"memory per GPU: {escape(loaded.model.name_or_path)}, profile {loaded.launch.profile}, "
             f"{plan.world_size} process{'es' if plan.world_size != 1 else ''}")
    table = Table(title=title, title_justify="left")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("how", overflow="fold")
    rows = plan.render_rows()
    for i, (name, gib, note) in enumerate(rows):
        style = "bold" if i == len(rows) - 1 else None
        table.add_row(escape(name), gib, escape(note), style=style, end_section=i == len(rows) - 2)
    print_table(console, table)
    console.print(f"config: {plan.source}", markup=False, soft_wrap=True)
    for note in plan.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if plan.warning:
        console.print(f"[yellow]warning:[/] {escape(plan.warning)}", soft_wrap=True)


def render_report_written(console: Console, run: Any, paths: Any) -> None:
    """One line on the run `grpo report` plotted, its health events, and where the files went."""
    from grpo_cli.artefacts.report import summarize_run

    summary = summarize_run(run)
    final, best = summary.final.means.get("reward"), summary.best
    line = f"{len(run.train)} training logs"
    if final is not None:
        line += f"; final reward {final:.4f}"
    if best is not None and best.means.get("reward") is not None:
        line += f", best {best.means['reward']:.4f} (step {best.last_step})"
    console.print(line, markup=False)
    if run.events:
        console.print(f"[yellow]{len(run.events)} health event(s):[/] "
                      + ", ".join(f"{e.get('guard')} at step {e.get('step')}" for e in run.events))
    console.print(f"wrote {paths.image} and {paths.summary}", markup=False, soft_wrap=True)


def render_samples(console: Console, rows: list[dict[str, Any]], title: str, width: int = 400) -> None:
    """`grpo samples`: one row per completion with its total reward, each reward and its advantage."""
    names: list[str] = []
    for r in rows:
        names += [n for n in (r.get("rewards") or {}) if n not in names]
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("step", justify="right")
    table.add_column("prompt", overflow="fold", ratio=2)
    with_reference = any(r.get("reference") for r in rows)
    if with_reference:
        table.add_column("reference", overflow="fold", ratio=1)
    table.add_column("completion", overflow="fold", ratio=3)
    table.add_column("reward", justify="right")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("adv.", justify="right")

    def cut(text: Any) -> str:
        text = str(text or "")
        return text if len(text) <= width else text[:width] + " …"

    from grpo_cli.artefacts.samples import reference_text

    for r in rows:
        scores = r.get("rewards") or {}
        reference = [cut(reference_text(r.get("reference")))] if with_reference else []
        table.add_row(str(r.get("step")), cut(r.get("prompt")), *reference, cut(r.get("completion")),
                      _fmt_value(r.get("reward")), *(_fmt_value(scores.get(n)) for n in names),
                      _fmt_value(r.get("advantage")), style=None)
    print_table(console, table)


def render_launch_file(console: Console, path: Any, start: str, *, job: str | None = None) -> None:
    """Where a cluster launch file was written and how to start it (or the job it was submitted as)."""
    console.print(f"wrote {path}", markup=False, soft_wrap=True)
    if job:
        console.print(f"submitted as Slurm job {job}; follow it with `squeue -j {job}`", markup=False)
    else:
        console.print(f"start it with: {start}", markup=False, soft_wrap=True)


_STATUS = {"ok": "[green]ok[/]", "missing": "[red]missing[/]", "incompatible": "[red]incompatible[/]",
           "absent": "[dim]not installed[/]"}


DOCTOR_WIDTH = 100  # the report fits a 100-column terminal or log; the last column folds


def render_doctor(console: Console, report: Any, *, as_json: bool = False) -> None:
    """`grpo doctor`: one row per component, then devices, notes and the problems with their fixes."""
    if as_json:
        console.print_json(json.dumps(report.as_dict()))
        return
    table = Table(title="grpo doctor", show_lines=False, width=min(console.width, DOCTOR_WIDTH))
    for col in ("component", "installed", "supported", "status"):
        table.add_column(col, no_wrap=True)
    table.add_column("range from", overflow="fold")
    table.add_row("torch build", escape(report.torch), "", "", "")
    for c in report.checks:
        status = _STATUS[c.status] + ("" if c.needed or c.status != "incompatible" else " (unused)")
        table.add_row(c.name, escape(c.found or "-"), escape(c.wants), status, escape(c.source))
    print_table(console, table)
    for d in report.devices:
        console.print(f"cuda:{d.index} {escape(d.name)}, {d.memory_gb:.1f} GiB, sm_{d.capability[0]}{d.capability[1]}, "
                      f"bf16 {'yes' if d.bf16 else 'no'}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    for problem in report.problems:
        console.print(f"[bold red]problem:[/] {escape(problem)}", soft_wrap=True)
    console.print("[green]ready[/]" if report.ok else f"[red]{len(report.problems)} problem(s)[/]")


def render_merge(console: Console, result: Any) -> None:
    """`grpo merge`: notes, the logit check, and how to load the standalone model."""
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    console.print(f"verified: largest logit difference vs base+adapter {result.max_diff:.3g} "
                  f"(tolerance {result.tolerance:.3g}, {result.dtype})")
    console.print(f"[green]merged[/] into {escape(str(result.out))} ({len(result.files)} files); load it with "
                  f"{result.auto_class}.from_pretrained({escape(repr(str(result.out)))}), no peft needed",
                  soft_wrap=True)


def render_push(console: Console, staged: Any, *, dry_run: bool) -> None:
    """`grpo push`: the checked card and what was (or would be) uploaded."""
    from grpo_cli import runs

    console.print(f"model card checked: {staged.folder / runs.CARD}", markup=False, soft_wrap=True)
    for warning in staged.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if dry_run:
        console.print(f"would upload {len(staged.files)} files to {staged.repo_id}: {', '.join(staged.files)}",
                      markup=False, soft_wrap=True)
    else:
        console.print(f"[green]pushed[/] {len(staged.files)} files to {escape(staged.url)}", soft_wrap=True)
