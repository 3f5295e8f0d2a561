"""Scale-out commands: `grpo vllm-serve` (the generation server) and `grpo memory` (the per-GPU plan).

Registered on the shared `app`; like cli.py, nothing heavy is imported at module level.
"""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from grpo_cli.cli import RECIPE_EPILOG, OverridesArg, RecipeArg, _load, app, console, run_guarded


@app.command("vllm-serve", epilog=RECIPE_EPILOG)
def vllm_serve(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    print_only: Annotated[bool, typer.Option("--print-only", help="Print the command instead of running it.")]
    = False,
) -> None:
    """Start the vLLM server a `launch.vllm.mode: server` recipe trains against (TRL's `trl vllm-serve`)."""

    def body() -> None:
        from grpo_cli.vllm_serve import exec_server, server_gpu_env, vllm_serve_command

        loaded = _load(recipe, overrides)
        cmd = vllm_serve_command(loaded)
        env = server_gpu_env(loaded)
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in env.items())
        console.print(prefix + shlex.join(cmd), markup=False, soft_wrap=True)
        if not print_only:
            exec_server(cmd, env)

    run_guarded(body)


@app.command(epilog=RECIPE_EPILOG)
def memory(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    gpu_memory_gb: Annotated[float | None, typer.Option(
        "--gpu-memory-gb", min=1.0, help="Memory of one GPU in GiB (default: read with nvidia-smi when present).")]
    = None,
) -> None:
    """Estimate memory per GPU from the model's config.json and the recipe, without loading weights."""

    def body() -> None:
        from rich.markup import escape
        from rich.table import Table

        from grpo_cli.memory import memory_plan

        loaded = _load(recipe, overrides)
        plan, why = memory_plan(loaded, gpu_memory_gb="auto" if gpu_memory_gb is None else gpu_memory_gb)
        if plan is None:
            console.print(f"[yellow]no memory plan:[/] {escape(why)}", soft_wrap=True)
            return
        title = (f"memory per GPU: {escape(loaded.model.name_or_path)}, profile {loaded.launch.profile}, "
                 f"{plan.world_size} process{'es' if plan.world_size != 1 else ''}")
        table = Table(title=title, title_justify="left")
        table.add_column("item")
        table.add_column("GiB", justify="right")
        table.add_column("how", overflow="fold")
        rows = plan.render_rows()
        for i, (name, gib, note) in enumerate(rows):
            style = "bold" if i == len(rows) - 1 else None
            table.add_row(escape(name), gib, escape(note), style=style, end_section=i == len(rows) - 2)
        console.print(table)
        console.print(f"config: {plan.source}", markup=False, soft_wrap=True)
        for note in plan.notes:
            console.print(f"note: {note}", markup=False, soft_wrap=True)
        if plan.warning:
            console.print(f"[yellow]warning:[/] {escape(plan.warning)}", soft_wrap=True)

    run_guarded(body)
