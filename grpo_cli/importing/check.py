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


def check_output(out: Path, sources: list[Path], force: bool, module: Path | None = None,
                 rows: Path | None = None) -> None:
    """Refuse an `-o` that would lose a user's file: a file being imported (the config, the script, its `--config`
    YAML; even with --force), a directory, or an existing file without --force; a path with a line break; a
    place nothing can be written (under a file, a read-only directory). The rewards module written beside the
    recipe is held to the same rules. Checked before anything is converted or written."""
    check_plain_path(out, "-o")
    beside = [(module, "the rewards module"), (rows, "the rows file")]
    for target, what in ((out, "the recipe"), *((p, w) for p, w in beside if p is not None)):
        for source, label in zip(sources, ("the config", "the --config YAML"), strict=False):
            if target.exists() and _same_file(target, source):
                raise GrpoError(f"{target} is {label} being imported; writing {what} there would replace it "
                                "(--force never does)", where="-o",
                                fix="Write the recipe to another file, e.g. `-o recipe.yaml`.")
    if out.is_dir():
        raise GrpoError(f"{out} is a directory", where="-o",
                        fix=f"Give the path of the recipe file to write, e.g. `-o {out / 'recipe.yaml'}`.")
    if out.exists() and not force:
        raise GrpoError(f"{out} already exists; refusing to overwrite it", where="-o",
                        fix="Choose another -o, or pass --force to replace it.")
    if out.exists() and not out.is_file():
        raise GrpoError(f"{out} is not a regular file", where="-o", fix="Give the path of a regular file.")
    _check_writable(out)


def _check_writable(out: Path) -> None:
    """The deepest existing directory above `out` must be a directory grpo may write in (it makes the rest)."""
    above = next((p for p in [out.parent, *out.parent.parents] if os.path.lexists(p)), Path.cwd())
    if not above.is_dir():
        raise GrpoError(f"cannot write {out}: {above} is not a directory", where="-o",
                        fix="Give -o a path in a directory.")
    if not os.access(above, os.W_OK | os.X_OK):
        raise GrpoError(f"cannot write {out}: {above} is not writable", where="-o",
                        fix="Pass -o a path you can write to.")


def check_module(module: Path, text: str, force: bool) -> None:
    """The extracted rewards module: a file there that is not this import's module is the user's, and stays."""
    if not module.exists():
        return
    if not module.is_file():
        raise GrpoError(f"{module} (where the rewards are copied, beside the recipe) is not a regular file",
                        where="-o", fix="Move it aside, or write the recipe elsewhere with -o.")
    current = module.read_text(encoding="utf-8", errors="replace")
    ours = current.startswith(text.split("\n", 1)[0])  # the header this import writes
    if current != text and not (force and ours):
        raise GrpoError(f"{module} exists and is not the module this import would write", where="--extract-rewards",
                        fix="Move it aside, write the recipe elsewhere with -o, or pass --no-extract-rewards."
                            + ("" if ours else " (--force replaces only a module grpo import wrote.)"))


def check_rows(path: Path, text: str) -> None:
    """The rows file: one there with other rows is the user's (or another import's), and stays."""
    if not path.exists():
        return
    if not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != text:
        raise GrpoError(f"{path} (where the rows the source builds are written, beside the recipe) exists with other "
                        "content", where="-o", fix="Move it aside, or write the recipe elsewhere with -o.")


def write_recipe(out: Path, text: str, module: tuple[Path, str] | None = None,
                 rows: tuple[Path, str] | None = None) -> None:
    """Write the recipe (and the rewards module and rows file beside it) whole or not at all; missing directories
    are made only now that there is something to write, and removed again, with the files written, when a write
    fails or is interrupted."""
    import contextlib

    made = [p for p in [out.parent, *out.parent.parents] if not p.exists()]  # deepest first
    beside = [f for f in (module, rows) if f is not None]
    new = [path for path, _ in beside if not path.exists()]
    written = False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for path, content in beside:
            write_atomic(path, content)
        write_atomic(out, text)
        written = True
    except OSError as exc:
        raise GrpoError(f"cannot write {out}: {exc.strerror or exc}", where="-o",
                        fix="Pass -o a path you can write to.") from None
    finally:
        for path in new if not written else []:
            with contextlib.suppress(OSError):
                path.unlink()
        for directory in made if not written else []:
            with contextlib.suppress(OSError):
                directory.rmdir()
