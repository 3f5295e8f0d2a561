"""`grpo vllm-serve`: start the generation server a `launch.vllm.mode: server` recipe trains against."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, RecipeArg, console, load


def vllm_serve(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    print_only: Annotated[bool, typer.Option("--print-only", help="Print the command instead of running it.")]
    = False,
) -> None:
    """Start the vLLM server a `launch.vllm.mode: server` recipe trains against (`vllm serve` as TRL documents it)."""
    from grpo_cli.launching.vllm_server import exec_server, server_env, server_gpu_env, vllm_serve_command

    loaded = load(recipe, overrides)
    cmd = vllm_serve_command(loaded)
    env = server_gpu_env(loaded)
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in {**env, **server_env(loaded)}.items())
    console.print(prefix + shlex.join(cmd), markup=False, soft_wrap=True)
    if not print_only:
        exec_server(cmd, env, loaded)
