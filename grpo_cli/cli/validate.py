"""`grpo validate`: check a recipe without loading any model and print the plan."""

from __future__ import annotations

from typing import Annotated

import typer

from grpo_cli.cli.base import OverridesArg, ProcessesOpt, ProfileOpt, RecipeArg, ThreadsOpt, console, load


def validate(
    recipe: RecipeArg,
    overrides: OverridesArg = None,
    print_recipe: Annotated[bool, typer.Option("--print", help="Print the resolved recipe as YAML.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    profile: ProfileOpt = None,
    num_processes: ProcessesOpt = None,
    threads: ThreadsOpt = None,
    price_per_hour: Annotated[float | None, typer.Option(
        "--price-per-hour", help="What one device-hour costs (sets launch.price_per_hour): the plan adds the "
        "run's cost.")] = None,
) -> None:
    """Check a recipe without loading any model: schema, batch arithmetic, data, rewards; print the plan."""
    from grpo_cli.cli.render import render_preflight
    from grpo_cli.validation import preflight

    loaded = load(recipe, overrides, profile=profile, num_processes=num_processes, threads=threads,
                  price_per_hour=price_per_hour)
    if print_recipe:
        from grpo_cli.recipe import dump_yaml

        # soft_wrap: never cut lines (a copied recipe stays valid YAML; wrapping a huge value is quadratic).
        console.print(dump_yaml(loaded.model_dump(mode="json", exclude_defaults=False)), markup=False,
                      soft_wrap=True)
    pf = preflight(loaded)
    pf.raise_for_problems()
    render_preflight(console, pf, as_json=as_json)
