"""Rendering of what validate, `grpo memory` and `grpo doctor` check before a run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grpo_cli.cli.render.tables import print_table

if TYPE_CHECKING:
    from grpo_cli.planning.memory import MemoryPlan
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.validation.checks import Preflight
    from grpo_cli.validation.doctor import Report


def render_preflight(console: Console, pf: Preflight, *, as_json: bool = False) -> None:
    """Print the plan of a valid recipe and its warnings."""
    if as_json:
        time_plan = pf.time_plan.as_dict() if pf.time_plan is not None else None
        console.print_json(json.dumps({"ok": pf.ok, "plan": pf.plan, "warnings": pf.warnings, "time_plan": time_plan,
                                       "run_plan": pf.run.as_dict()}))
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


def render_memory_plan(console: Console, loaded: Recipe, plan: MemoryPlan | None, why: str | None) -> None:
    """The memory table of `grpo memory` (per GPU, or host RAM on the cpu profile), or why there is none."""
    if plan is None:
        console.print(f"[yellow]no memory plan:[/] {escape(why or 'unknown')}", soft_wrap=True)
        return
    title = (f"memory {plan.per}: {escape(loaded.model.name_or_path)}, profile {loaded.launch.profile}, "
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


_STATUS = {"ok": "[green]ok[/]", "missing": "[red]missing[/]", "incompatible": "[red]incompatible[/]",
           "absent": "[dim]not installed[/]"}


DOCTOR_WIDTH = 100  # the report fits a 100-column terminal or log; the last column folds


def render_doctor(console: Console, report: Report, *, as_json: bool = False) -> None:
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
