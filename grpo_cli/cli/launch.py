"""`grpo launch slurm|skypilot`: write (and optionally submit) a cluster launch file from a recipe."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, RecipeArg, console, load

launch_app = typer.Typer(help="Write a cluster launch file (Slurm batch script, SkyPilot task) from a recipe.",
                         no_args_is_help=True, rich_markup_mode=None)

NodesOpt = Annotated[int, typer.Option("--nodes", min=1, help="Training machines.")]
GpusOpt = Annotated[int | None, typer.Option(
    "--gpus-per-node", min=0, help="GPUs (training processes) per node; default launch.num_processes / nodes. "
    "0 for CPU nodes (then launch.num_processes says how many processes).")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Where to write the file.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing --out file that grpo did not write.")]


@launch_app.command("slurm")
def slurm(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    nodes: NodesOpt = 1,
    vllm_node: Annotated[bool, typer.Option("--vllm-node", help="Add a node that runs the vLLM server "
                                            "(launch.vllm.mode: server).")] = False,
    gpus_per_node: GpusOpt = None,
    partition: Annotated[str | None, typer.Option("--partition", help="sbatch --partition.")] = None,
    time: Annotated[str | None, typer.Option("--time", help="sbatch --time, e.g. 24:00:00.")] = None,
    cpus_per_task: Annotated[int | None, typer.Option("--cpus-per-task", min=1, max=4096,
                                                      help="sbatch --cpus-per-task.")] = None,
    setup: Annotated[str | None, typer.Option("--setup", help="Shell line run before grpo on every node "
                                              "(default: activate this environment).")] = None,
    out: OutOpt = None,
    submit: Annotated[bool, typer.Option("--submit", help="Submit the script with sbatch.")] = False,
    force: ForceOpt = False,
) -> None:
    """Write an sbatch script that runs `grpo train` on N nodes (and a vLLM server node), after validating."""
    from grpo_cli.cli.render import render_launch_file
    from grpo_cli.launching.cluster import cluster_world, prepare_cluster
    from grpo_cli.launching.slurm import submit_sbatch, write_slurm
    from grpo_cli.validation import preflight

    loaded = load(recipe, overrides)
    flags = [w for k, v in (("--partition", partition), ("--time", time), ("--cpus-per-task", cpus_per_task),
                            ("--setup", setup), ("-o", out)) if v is not None for w in (k, str(v))]
    plan = prepare_cluster(loaded, recipe, list(overrides or []), nodes=nodes, vllm_node=vllm_node,
                           gpus_per_node=gpus_per_node, verb="slurm", flags=flags)
    preflight(cluster_world(recipe, list(overrides or []), plan)).raise_for_problems()  # checked for its world
    path = write_slurm(plan, out, setup=setup,
                       sbatch={"partition": partition, "time": time, "cpus-per-task": cpus_per_task}, force=force,
                       run_dir=Path(loaded.output.dir))
    job = submit_sbatch(path) if submit else None
    render_launch_file(console, path, f"sbatch {shlex.quote(str(path))}", job=job)


@launch_app.command("skypilot")
def skypilot(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    nodes: NodesOpt = 1,
    gpus_per_node: GpusOpt = None,
    accelerator: Annotated[str, typer.Option("--accelerator", help="SkyPilot GPU name, e.g. H100, A100-80GB.")]
    = "H100",
    out: OutOpt = None,
    force: ForceOpt = False,
) -> None:
    """Write a SkyPilot task YAML that runs `grpo train` on N nodes, after validating."""
    from grpo_cli.cli.render import render_launch_file
    from grpo_cli.launching.cluster import cluster_world, prepare_cluster, write_skypilot
    from grpo_cli.validation import preflight

    loaded = load(recipe, overrides)
    flags = ["--accelerator", accelerator, *(["-o", str(out)] if out is not None else [])]
    plan = prepare_cluster(loaded, recipe, list(overrides or []), nodes=nodes, vllm_node=False,
                           gpus_per_node=gpus_per_node, verb="skypilot", flags=flags)
    preflight(cluster_world(recipe, list(overrides or []), plan)).raise_for_problems()  # checked for its world
    path = write_skypilot(plan, out, accelerator=accelerator, recipe=loaded, force=force)
    render_launch_file(console, path, f"sky launch -c {plan.name} {shlex.quote(str(path))}")
