"""`grpo doctor`: this machine's Python, torch build, GPUs and libraries against what TRL 1.16 supports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, ProcessesOpt, ProfileOpt, console, load

DOCTOR_EPILOG = ("Exit code 1 when something needed is missing or outside its supported window: the core libraries "
                 "always, and with a recipe also what it uses (vLLM, DeepSpeed, bitsandbytes, flash-attn, "
                 "liger-kernel, a CUDA GPU, bf16).")


def doctor(
    recipe: Annotated[Path | None, typer.Argument(help="Recipe whose needs to check as well.", show_default=False)]
    = None,
    overrides: OverridesArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    profile: ProfileOpt = None,
    num_processes: ProcessesOpt = None,
) -> None:
    """Check Python, the torch build, CUDA devices, bf16, NCCL and library versions against TRL 1.16's windows."""
    from grpo_cli.cli.render import render_doctor
    from grpo_cli.validation.doctor import doctor as run_doctor

    if recipe is None and (profile or num_processes):
        from grpo_cli.errors import GrpoError

        raise GrpoError("--profile and --num-processes describe a recipe's launch, and no recipe was given",
                        where="grpo doctor", fix="Pass the recipe first: `grpo doctor RECIPE --profile P`.")
    loaded = load(recipe, overrides, profile=profile, num_processes=num_processes) if recipe else None
    report = run_doctor(loaded)
    if loaded is not None:  # "ready" means the recipe itself passes too
        from grpo_cli.validation import preflight

        problems = preflight(loaded).problems
        if problems:
            report.problems.append(f"the recipe does not pass `grpo validate` ({len(problems)} problem(s); "
                                   f"first: {problems[0].render()}); run `grpo validate {recipe}` for all")
    render_doctor(console, report, as_json=as_json)
    if not report.ok:
        raise typer.Exit(1)
