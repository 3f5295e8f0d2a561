"""`grpo import open-r1|trl|axolotl CONFIG [-o recipe.yaml]`: a recipe from another tool's GRPO config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console

IMPORT_EPILOG = ("open-r1: a recipes/*/grpo/config_*.yaml; trl: a `trl grpo --config` YAML, or a training script "
                 "(read, not run: its GRPOConfig, the calls that build its model, data and rewards; a TrlParser "
                 "script with --config); axolotl: an `rl: grpo` config. The recipe is validated as `grpo validate` "
                 "does; what could not be carried over is listed with the reason, and a recipe that does not "
                 "validate is written marked NOT VALID, with the command that finishes it.")


def import_cmd(
    kind: Annotated[str, typer.Argument(help="open-r1, trl or axolotl.", show_default=False)],
    config: Annotated[Path, typer.Argument(help="The foreign config (YAML, or a TRL .py script).",
                                           show_default=False)],
    overrides: Annotated[list[str] | None, typer.Argument(help="section.key=value settings the config does not "
                                                          "give (e.g. model.name_or_path for a fragment).",
                                                          show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("-o", "--output", help="Write the recipe here (default: print it).")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing -o file (never the config itself).")]
    = False,
    profile: Annotated[str | None, typer.Option("--profile", help="launch.profile the source ran with (e.g. zero2 "
                                                "for open-r1's `accelerate launch --config_file zero2.yaml`).")] = None,
    num_processes: Annotated[int | None, typer.Option("--num-processes", help="Training processes the source ran "
                                                      "with (the batch arithmetic depends on it).")] = None,
    script_config: Annotated[Path | None, typer.Option("--config", help="For a TrlParser script: the YAML it is "
                                                       "launched with (its model, data and training keys).")] = None,
    extract_rewards: Annotated[bool | None, typer.Option("--extract-rewards/--no-extract-rewards", help="Copy "
                                                         "reward functions grpo cannot import in place (defined "
                                                         "inside a function or a marimo cell, or in a script that "
                                                         "trains when imported) into RECIPE_rewards.py beside the "
                                                         "recipe; on by default with -o.", show_default=False)]
    = None,
) -> None:
    """Convert an open-r1, TRL or Axolotl GRPO config into a recipe, and say what it could not map and why."""
    from grpo_cli.cli.render.importing import render_import
    from grpo_cli.importing import apply_overrides, import_config, rewards_module, rows_file, set_launch
    from grpo_cli.importing.check import check_module, check_output, check_plain_path, check_rows, write_recipe
    from grpo_cli.importing.finish import Request, finish

    check_plain_path(config, "CONFIG")
    if script_config is not None:
        check_plain_path(script_config, "--config")
    extract = extract_rewards if extract_rewards is not None else out is not None  # exact copies: on by default
    module = rewards_module(out) if extract else None
    if out is not None:  # before anything is converted or written
        check_output(out, [config, *([script_config] if script_config is not None else [])], force, module,
                     rows_file(out))
    result = import_config(kind, config, script_config, out if extract else None, out)
    set_launch(result, profile, num_processes)
    apply_overrides(result, overrides or [])
    outcome = finish(result, Request(kind, config, overrides or [], profile, num_processes, script_config, out,
                                     extract))
    if out is not None:
        if result.extracted is not None:
            check_module(*result.extracted, force)
        if result.rows_file is not None:
            check_rows(*result.rows_file)
        # whole or not at all; "wrote" is said only after this
        write_recipe(out, outcome.text, result.extracted, result.rows_file)
    render_import(console, result, outcome.text, out, outcome.problems, outcome.warnings, outcome.command)
    if outcome.problems:
        raise typer.Exit(2)
