"""Validate an imported recipe as `grpo validate` would, before anything is written; and write it safely."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from grpo_cli.errors import GrpoError
from grpo_cli.paths import terminate_as_interrupt, write_atomic
from grpo_cli.recipe.loader import resolve_recipe, validate_recipe
from grpo_cli.validation import preflight


def check_recipe_text(text: str, where: Path) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the recipe `text` as if it were saved at `where` (relative paths resolve there).

    The text is read from a private temporary directory, never from beside `where`: checking writes nothing
    where the user looks, creates no directory, and an interrupted check leaves nothing behind.
    """
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="grpo-import-") as tmp_dir:
        tmp = Path(tmp_dir) / "recipe.yaml"
        tmp.write_text(text, encoding="utf-8")
        try:
            recipe = validate_recipe(resolve_recipe(tmp), source=str(where))
            recipe._base_dir = where.resolve().parent
            recipe._source = str(where)
            pf = preflight(recipe)
        except GrpoError as exc:
            return [p.render() for p in exc.problems], []
    return [p.render() for p in pf.problems], list(pf.warnings)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_plain_path(path: Path, where: str) -> None:
    """A path named in the recipe's comments and references: a line break there would add lines to the YAML."""
    import re

    if re.search(r"[\x00-\x1f\x7f]", str(path)):
        raise GrpoError(f"the path {str(path)!r} contains a line break or another control character, which would "
                        "break the recipe written from it", where=where,
                        fix="Rename it (or use a path without such characters).")


def check_output(out: Path, source: Path, force: bool) -> None:
    """Refuse an `-o` that would lose a user's file: the source config itself (even with --force), a directory,
    or an existing file without --force; or a path with a line break. Checked before anything is converted or
    written."""
    check_plain_path(out, "-o")
    if out.exists() and _same_file(out, source):
        raise GrpoError(f"{out} is the config being imported; writing the recipe there would replace it",
                        where="-o", fix="Write the recipe to another file, e.g. `-o recipe.yaml`.")
    if out.is_dir():
        raise GrpoError(f"{out} is a directory", where="-o",
                        fix=f"Give the path of the recipe file to write, e.g. `-o {out / 'recipe.yaml'}`.")
    if out.exists() and not force:
        raise GrpoError(f"{out} already exists; refusing to overwrite it", where="-o",
                        fix="Choose another -o, or pass --force to replace it.")
    if out.exists() and not out.is_file():
        raise GrpoError(f"{out} is not a regular file", where="-o", fix="Give the path of a regular file.")


def write_recipe(out: Path, text: str) -> None:
    """Write the recipe whole or not at all; its missing directories are made only now that there is something
    to write, and removed again when the write fails or is interrupted."""
    import contextlib

    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]  # deepest first
    written = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, text)
        written = True
    except OSError as exc:
        raise GrpoError(f"cannot write {out}: {exc.strerror or exc}", where="-o",
                        fix="Pass -o a path you can write to.") from None
    finally:
        for directory in made if not written else []:
            with contextlib.suppress(OSError):
                directory.rmdir()
