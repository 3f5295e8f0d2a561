"""`grpo schema`: the recipe's JSON Schema or Markdown reference, and the built-in reward reference."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console


def schema(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the Markdown reference instead.")] = False,
    rewards: Annotated[bool, typer.Option("--rewards", help="Print the built-in reward reference (Markdown); "
                                          "with --out, replace the generated block in that file.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the recipe's JSON Schema (point your YAML editor at it) or its Markdown reference."""
    import json

    if rewards:
        from grpo_cli.rewards.docs import builtins_markdown, write_into

        text = builtins_markdown()
        if out is not None:
            write_into(out, text)
            console.print(f"wrote the built-in reward reference into {out}")
            return
    else:
        from grpo_cli.recipe.docs import recipe_json_schema, recipe_markdown

        text = recipe_markdown() if markdown else json.dumps(recipe_json_schema(), indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"wrote {out}")
