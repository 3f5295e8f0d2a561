"""`grpo import open-r1|trl|axolotl CONFIG [-o recipe.yaml]`: a recipe from another tool's GRPO config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console, run_guarded

IMPORT_EPILOG = ("open-r1: a recipes/*/grpo/config_*.yaml; trl: a `trl grpo --config` YAML, or a training script "
                 "whose GRPOConfig(...) keywords are literals; axolotl: an `rl: grpo` config. The recipe is "
                 "validated before it is written; what could not be carried over is listed with the reason.")


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
) -> None:
    """Convert an open-r1, TRL or Axolotl GRPO config into a recipe, and say what it could not map and why."""

    def body() -> None:
        from grpo_cli.cli.render.importing import render_import, render_written
        from grpo_cli.importing import apply_overrides, import_config, recipe_yaml, set_launch
        from grpo_cli.importing.check import check_output, check_recipe_text, write_recipe

        if out is not None:
            check_output(out, config, force)
        result = import_config(kind, config)
        set_launch(result, profile, num_processes)
        apply_overrides(result, overrides or [])
        text = recipe_yaml(result)
        problems, warnings = check_recipe_text(text, out or Path.cwd() / "imported.yaml")
        problems = [*result.typos, *problems]
        render_import(console, result, text, out, problems, warnings)
        if problems:
            raise typer.Exit(2)
        if out is not None:
            write_recipe(out, text)
            render_written(console, out)

    run_guarded(body)
