"""`grpo check-tools`: a dry run of the recipe's tools and environments before any GPU time."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grpo_cli.cli.base import RECIPE_EPILOG, OverridesArg, RecipeArg, Renderer, ReportJsonOpt, load, run_check

CHECK_TOOLS_EPILOG = (
    RECIPE_EPILOG + " Prints each tool's JSON schema as the model sees it and the first prompt rendered with "
    "the tools, checks that a rendered tool call parses back, calls every tool (arguments from --examples, JSONL "
    '{"tool": "add", "arguments": {"a": 1, "b": 2}}, or generated from the schema), and plays one scripted '
    "episode per environment. Exit codes: 0 all good, 1 a tool is flagged, 2 bad input. See docs/tools.md."
)


def check_tools_command(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    examples: Annotated[Path | None, typer.Option("--examples", help="JSONL of example calls "
                                                  '({"tool": ..., "arguments": {...}}).')] = None,
    no_model: Annotated[bool, typer.Option("--no-model", help="Skip the tokenizer (no prompt preview, no "
                                           "parse check).")] = False,
    as_json: ReportJsonOpt = False,
) -> None:
    """Show what the model sees of each tool, call every tool and environment, flag broken ones."""

    def report() -> tuple[Any, Renderer]:
        import datasets
        from transformers.utils import logging as hf_logging

        from grpo_cli.checking import dry_run
        from grpo_cli.cli.render import render_tool_dry_run

        datasets.disable_progress_bars()
        hf_logging.disable_progress_bar()
        loaded = load(recipe, overrides)
        return dry_run(loaded, examples=examples, with_model=not no_model), render_tool_dry_run

    run_check(report, as_json)
