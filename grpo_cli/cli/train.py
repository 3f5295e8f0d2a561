"""`grpo train`: run a recipe with TRL's GRPOTrainer, re-launching under accelerate when needed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, ProcessesOpt, ProfileOpt, RecipeArg, ThreadsOpt, console


def train(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    output_dir: Annotated[str | None, typer.Option("--output-dir", "-o", help="Override output.dir.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint in the output dir, "
                                         "or from the checkpoint dir given right after the recipe/overrides.")]
    = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty output dir.")] = False,
    profile: ProfileOpt = None,
    num_processes: ProcessesOpt = None,
    threads: ThreadsOpt = None,
    num_machines: Annotated[int | None, typer.Option("--num-machines", help="Override launch.num_machines.")] = None,
    machine_rank: Annotated[int | None, typer.Option("--machine-rank", help="Override launch.machine_rank.")] = None,
    main_process_ip: Annotated[str | None, typer.Option("--main-process-ip", help="Override launch.main_process_ip.")]
    = None,
) -> None:
    """Train a recipe with TRL's GRPOTrainer (re-launching under accelerate for multi-process profiles)."""
    from grpo_cli.cli.render import render_train_result
    from grpo_cli.errors import GrpoError
    from grpo_cli.train_command import EXIT_CODES, TrainRequest, run_train_command, split_resume_path
    from grpo_cli.training import is_main_process

    if output_dir is not None and not output_dir.strip():
        raise GrpoError("is empty: a run needs its own directory (an empty path would write into the current one)",
                        where="--output-dir", fix="Give a path such as outputs/NAME.")
    launch = {"profile": profile, "num_processes": num_processes, "num_machines": num_machines,
              "machine_rank": machine_rank, "main_process_ip": main_process_ip, "threads": threads}
    plain, resume_path = split_resume_path(list(overrides or []), resume)
    out = None if output_dir is None else Path(output_dir)
    request = TrainRequest(recipe=recipe, overrides=plain, output_dir=out, resume=resume,
                           resume_path=resume_path, force=force, launch=launch)
    code, result = run_train_command(request, console=console)
    if code is not None:  # accelerate ran the workers; they printed the summary
        raise typer.Exit(code)
    if is_main_process():  # one summary per run, not one per process
        render_train_result(console, result)
    if result.status in EXIT_CODES:
        raise typer.Exit(EXIT_CODES[result.status])
