"""`grpo push RUN_DIR REPO_ID`: upload a model or adapter with its model card to the Hugging Face Hub."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console


def push(
    run_dir: Annotated[Path, typer.Argument(help="Output dir of `grpo train` or `grpo merge`.", show_default=False)],
    repo_id: Annotated[str, typer.Argument(help="Hub repository, user/name.", show_default=False)],
    public: Annotated[bool, typer.Option("--public", help="Create the repository public (default private).")]
    = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write and check the card, list the files, upload "
                                          "nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a README.md grpo did not write with its card.")]
    = False,
    base_model: Annotated[str | None, typer.Option("--base-model", help="Hub id of the base model when this "
                                                   "machine has it as a local directory (for the card and "
                                                   "adapter_config.json).")] = None,
) -> None:
    """Upload a trained model or adapter with its model card (README.md) to the Hugging Face Hub."""
    from grpo_cli.artefacts.hub import push_run
    from grpo_cli.cli.render import render_push

    staged = push_run(run_dir, repo_id, private=not public, dry_run=dry_run, base_model=base_model,
                      force=force)
    render_push(console, staged, dry_run=dry_run)
