"""`grpo train`: run a recipe with TRL's GRPOTrainer, re-launching under accelerate when needed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grpo_cli.cli.app import OverridesArg, RecipeArg, console, load, run_guarded


def train(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    output_dir: Annotated[Path | None, typer.Option("--output-dir", "-o", help="Override output.dir.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the latest checkpoint in the output dir, "
                                         "or from the checkpoint dir given right after the recipe/overrides.")]
    = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty output dir.")] = False,
    profile: Annotated[str | None, typer.Option("--profile", help="Override launch.profile.")] = None,
    num_processes: Annotated[int | None, typer.Option("--num-processes", help="Override launch.num_processes.")]
    = None,
    num_machines: Annotated[int | None, typer.Option("--num-machines", help="Override launch.num_machines.")] = None,
    machine_rank: Annotated[int | None, typer.Option("--machine-rank", help="Override launch.machine_rank.")] = None,
    main_process_ip: Annotated[str | None, typer.Option("--main-process-ip", help="Override launch.main_process_ip.")]
    = None,
) -> None:
    """Train a recipe with TRL's GRPOTrainer (re-launching under accelerate for multi-process profiles)."""

    def body() -> None:
        from grpo_cli.cli.render import render_train_result
        from grpo_cli.training import is_main_process
        from grpo_cli.training import train as run_train

        launch_overrides = _launch_overrides(profile, num_processes, num_machines, machine_rank, main_process_ip)
        # `--resume PATH`: a bare path among the overrides (overrides always contain '=').
        plain = [o for o in overrides or [] if "=" not in o]
        resume_path = plain[0] if resume and len(plain) == 1 else None  # checked by runs.plan_output_dir
        overrides_ = [o for o in overrides or [] if o != resume_path]
        loaded = load(recipe, [*overrides_, *launch_overrides])
        from grpo_cli.training.launch import maybe_relaunch, resume_command, train_passthrough

        passthrough = train_passthrough(output_dir, resume, resume_path, force)
        out = output_dir or Path(loaded.output.dir)
        code = maybe_relaunch(loaded, recipe, overrides_, launch_overrides, passthrough, lock_dir=out)
        if code is not None:
            raise typer.Exit(code)
        resume_arg: bool | str | None = resume_path or (True if resume else None)
        hint = resume_command(recipe, [*overrides_, *launch_overrides], out)
        result = run_train(loaded, output_dir=output_dir, resume=resume_arg, force=force, console=console,
                           resume_command=hint)
        if is_main_process():  # one summary per run, not one per process
            render_train_result(console, result)
        if result.status == "interrupted":
            raise typer.Exit(130)
        if result.status == "stopped":
            raise typer.Exit(3)

    run_guarded(body)


def _launch_overrides(profile: str | None, num_processes: int | None, num_machines: int | None,
                      machine_rank: int | None, main_process_ip: str | None) -> list[str]:
    pairs: dict[str, Any] = {"profile": profile, "num_processes": num_processes, "num_machines": num_machines,
                             "machine_rank": machine_rank, "main_process_ip": main_process_ip}
    return [f"launch.{k}={v}" for k, v in pairs.items() if v is not None]
