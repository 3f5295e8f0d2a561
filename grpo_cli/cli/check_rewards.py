"""`grpo check-rewards`: a dry run of the recipe's rewards on probes, given completions or samples."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grpo_cli.cli.base import (
    RECIPE_EPILOG,
    OverridesArg,
    RecipeArg,
    Renderer,
    ReportJsonOpt,
    load,
    run_check,
    say_first,
)

CHECK_EPILOG = (
    RECIPE_EPILOG + " Completions come from built-in probes for each sampled row (reference answer, wrong "
    "answer, empty, tags only, no reasoning, overlong, repeated text), from --completions (JSONL: "
    '{"row": 3, "completion": "..."} or {"prompt": "...", "completion": "...", "answer": "..."}), '
    "or from the recipe's model with --generate. Exit codes: 0 every reward passes, 1 a contract is "
    "violated, 2 bad input. See docs/rewards.md."
)


def check_rewards_command(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    samples: Annotated[int, typer.Option("--samples", "-n", min=1, help="Data rows to sample (spread evenly).")] = 8,
    completions: Annotated[Path | None, typer.Option("--completions", help="Score the completions in this JSONL "
                                                     "file instead of the built-in probes.")] = None,
    generate: Annotated[bool, typer.Option("--generate", help="Sample num_generations completions per prompt "
                                           "from the recipe's model (loads the model).")] = False,
    as_json: ReportJsonOpt = False,
) -> None:
    """Call every reward exactly as TRL will, on probes or given completions; flag broken or hackable rewards."""

    def report() -> tuple[Any, Renderer]:
        say_first(f"grpo check-rewards {recipe}: " + ("sampling from the recipe's model" if generate else
                  "scoring completions" if completions else "scoring probe completions"), stderr=as_json)
        from grpo_cli.checking import check_rewards
        from grpo_cli.cli.render import render_check_report

        loaded = load(recipe, overrides)
        return check_rewards(loaded, completions=completions, samples=samples, generate=generate), render_check_report

    run_check(report, as_json)
