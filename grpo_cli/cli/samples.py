"""`grpo samples RUN_DIR`: read the completions a run sampled at each logging step (completions.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console


def samples(
    run_dir: Annotated[Path, typer.Argument(help="Output directory of a `grpo train` run.", show_default=False)],
    step: Annotated[int | None, typer.Option("--step", help="Samples of this logging step (default: the last; "
                                             "with --worst/--best: the whole run).", show_default=False)] = None,
    worst: Annotated[bool, typer.Option("--worst", help="Lowest reward first.")] = False,
    best: Annotated[bool, typer.Option("--best", help="Highest reward first.")] = False,
    reward: Annotated[str | None, typer.Option("--reward", help="Order by this reward instead of the weighted "
                                               "total.", show_default=False)] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="Rows to show.")] = 10,
) -> None:
    """Print sampled prompts, completions, rewards and advantages from completions.jsonl: look for reward hacking."""
    from grpo_cli.artefacts.samples import select_samples
    from grpo_cli.cli.render import render_samples

    rows, title = select_samples(run_dir, step=step, worst=worst, best=best, reward=reward, limit=limit)
    render_samples(console, rows, title)
