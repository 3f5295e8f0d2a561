"""`grpo report OUTPUT_DIR`: plot a run's curves and summarise it; registered on the shared `app`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli import app, console, run_guarded


@app.command()
def report(
    output_dir: Annotated[Path, typer.Argument(help="Output directory of a `grpo train` run.", show_default=False)],
    out: Annotated[Path | None, typer.Option("--out", help="Write the image here (the .md summary beside it); "
                                             "default OUTPUT_DIR/report.png and report.md.")] = None,
) -> None:
    """Plot a run's reward, spread, length, KL/entropy and learning-rate curves (PNG) and summarise it (Markdown)."""

    def body() -> None:
        from grpo_cli.report import load_run, summarize, write_report

        paths = write_report(output_dir, out)
        run = load_run(output_dir)
        summary = summarize(run)
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

    run_guarded(body)
