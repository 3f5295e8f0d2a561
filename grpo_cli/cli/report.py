"""`grpo report OUTPUT_DIR`: plot a run's curves and summarise it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console, say_first


def report(
    output_dir: Annotated[Path, typer.Argument(help="Output directory of a `grpo train` run.", show_default=False)],
    out: Annotated[Path | None, typer.Option("--out", help="Write the image here (the .md summary beside it); "
                                             "default OUTPUT_DIR/report.png and report.md.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing --out files.")] = False,
) -> None:
    """Plot a run's reward, spread, length, KL/entropy and learning-rate curves (PNG) and summarise it (Markdown)."""
    say_first(f"grpo report {output_dir}: drawing the curves (matplotlib loads first)")
    from grpo_cli.artefacts.report import load_run, write_report
    from grpo_cli.cli.render import render_report_written

    paths = write_report(output_dir, out, force=force)
    render_report_written(console, load_run(output_dir), paths)
