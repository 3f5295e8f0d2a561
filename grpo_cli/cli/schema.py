"""`grpo schema`: the recipe's JSON Schema or Markdown reference, generated from the pydantic models."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.app import console, run_guarded


def schema(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the Markdown reference instead.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the recipe's JSON Schema (point your YAML editor at it) or its Markdown reference."""

    def body() -> None:
        import json

        from grpo_cli.recipe.docs import recipe_json_schema, recipe_markdown

        text = recipe_markdown() if markdown else json.dumps(recipe_json_schema(), indent=2) + "\n"
        if out is None:
            sys.stdout.write(text)
        else:
            out.write_text(text, encoding="utf-8")
            console.print(f"wrote {out}")

    run_guarded(body)
