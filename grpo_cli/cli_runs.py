"""`grpo samples` and `grpo push`: commands over a finished (or running) run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli import app, console, run_guarded


@app.command()
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

    def body() -> None:
        from grpo_cli.completions_log import read_samples
        from grpo_cli.errors import GrpoError
        from grpo_cli.render import render_samples

        if worst and best:
            raise GrpoError("give --worst or --best, not both", where="command line")
        order = "worst" if worst else "best" if best else ("worst" if reward else None)
        rows, steps = read_samples(run_dir, step=step, order=order, reward=reward, limit=limit)
        where = f"step {step}" if step is not None else (f"steps {steps[0]}–{steps[-1]}" if order
                                                         else f"step {steps[-1]}")
        what = f"{order} by {reward or 'total reward'}, " if order else ""
        render_samples(console, rows, f"{run_dir} · {where} · {what}{len(rows)} shown")

    run_guarded(body)


@app.command()
def push(
    run_dir: Annotated[Path, typer.Argument(help="Output dir of `grpo train` or `grpo merge`.", show_default=False)],
    repo_id: Annotated[str, typer.Argument(help="Hub repository, user/name.", show_default=False)],
    public: Annotated[bool, typer.Option("--public", help="Create the repository public (default private).")]
    = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write and check the card, list the files, upload "
                                          "nothing.")] = False,
) -> None:
    """Upload a trained model or adapter with its model card (README.md) to the Hugging Face Hub."""

    def body() -> None:
        from grpo_cli.hub_push import push_run

        staged = push_run(run_dir, repo_id, private=not public, dry_run=dry_run)
        console.print(f"model card checked: {staged.folder / 'README.md'}", markup=False, soft_wrap=True)
        if dry_run:
            console.print(f"would upload {len(staged.files)} files to {repo_id}: {', '.join(staged.files)}",
                          markup=False, soft_wrap=True)
        else:
            console.print(f"[green]pushed[/] {len(staged.files)} files to {staged.url}", soft_wrap=True)

    run_guarded(body)
