"""Validate an imported recipe as `grpo validate` would, before anything is written."""

from __future__ import annotations

import tempfile
from pathlib import Path

from grpo_cli.errors import GrpoError


def check_recipe_text(text: str, where: Path) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the recipe `text` as if it were saved at `where` (relative paths resolve there)."""
    from grpo_cli.recipe.loader import load_recipe
    from grpo_cli.validation import preflight

    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=where.parent, delete=False, encoding="utf-8") as tmp:
        tmp.write(text)
    try:
        try:
            pf = preflight(load_recipe(Path(tmp.name)))
        except GrpoError as exc:
            return [p.render() for p in exc.problems], []
        return [p.render() for p in pf.problems], list(pf.warnings)
    finally:
        Path(tmp.name).unlink(missing_ok=True)
