"""Rendering of what a run left and is turned into: the report, samples, a merged model, a push."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from grpo_cli.cli.render.tables import cell, plain, print_table
from grpo_cli.terminal_text import visible

if TYPE_CHECKING:
    from grpo_cli.artefacts.export_gguf import GgufExport
    from grpo_cli.artefacts.hub import StagedPush
    from grpo_cli.artefacts.merge import MergeResult
    from grpo_cli.artefacts.report import ReportPaths
    from grpo_cli.artefacts.report_data import RunData


def render_report_written(console: Console, run: RunData, paths: ReportPaths) -> None:
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
                      + escape(visible(", ".join(f"{e.get('guard')} at step {e.get('step')}" for e in run.events))))
    console.print(f"wrote {paths.image} and {paths.summary}", markup=False, soft_wrap=True)


def render_samples(console: Console, rows: list[dict[str, Any]], title: str, width: int = 400) -> None:
    """`grpo samples`: one row per completion with its total reward, each reward and its advantage. Every text
    from completions.jsonl is a `plain` cell: a model's `[/]` or `ESC[2J` is shown, not obeyed."""
    names: list[str] = []
    for r in rows:
        names += [str(n) for n in (r.get("rewards") or {}) if str(n) not in names]
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("step", justify="right")
    table.add_column("prompt", overflow="fold", ratio=2)
    with_reference = any(r.get("reference") for r in rows)
    if with_reference:
        table.add_column("reference", overflow="fold", ratio=1)
    table.add_column("completion", overflow="fold", ratio=3)
    table.add_column("reward", justify="right")
    for n in names:
        table.add_column(plain(n), justify="right")
    table.add_column("adv.", justify="right")

    def cut(text: Any) -> Text:
        text = str(text or "")
        return plain(text if len(text) <= width else text[:width] + " …")

    from grpo_cli.artefacts.samples import reference_text

    for r in rows:
        scores = {str(k): v for k, v in (r.get("rewards") or {}).items()}
        reference = [cut(reference_text(r.get("reference")))] if with_reference else []
        table.add_row(plain(r.get("step")), cut(r.get("prompt")), *reference, cut(r.get("completion")),
                      plain(cell(r.get("reward"))), *(plain(cell(scores.get(n))) for n in names),
                      plain(cell(r.get("advantage"))), style=None)
    print_table(console, table)


def render_merge(console: Console, result: MergeResult) -> None:
    """`grpo merge`: notes, the logit check, and how to load the standalone model."""
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    console.print(f"verified: largest logit difference vs base+adapter {result.max_diff:.3g} "
                  f"(tolerance {result.tolerance:.3g}, {result.dtype})")
    console.print(f"[green]merged[/] into {escape(str(result.out))} ({len(result.files)} files); load it with "
                  f"{result.auto_class}.from_pretrained({escape(repr(str(result.out)))}), no peft needed",
                  soft_wrap=True)


def render_export(console: Console, result: GgufExport) -> None:
    """`grpo export --gguf`: the file, and how closely the copy read back reproduces the model."""
    console.print(f"verified: read back through grpo's GGUF loader, largest logit difference {result.max_diff:.3g} "
                  f"(tolerance {result.tolerance:.3g}, {result.kind}), tokenizer identical on the probe texts",
                  soft_wrap=True)
    console.print(f"[green]wrote[/] {escape(str(result.path))}; run it with llama.cpp (llama-cli -m FILE) or "
                  "Ollama (a Modelfile `FROM ./FILE`)", soft_wrap=True)
    if result.note:
        console.print(f"[yellow]note:[/] {escape(result.note)}", soft_wrap=True)


def render_push(console: Console, staged: StagedPush, *, dry_run: bool) -> None:
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
