"""What `grpo import` prints: the recipe (unless written to a file), what was left out, and validate's word."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from grpo_cli.importing.common import ImportResult


def render_import(console: Console, result: ImportResult, text: str, out: Path | None, problems: list[str],
                  warnings: list[str], command: str | None = None) -> None:
    """The recipe (stdout when no -o), then the account of the translation and the validation result."""
    if out is None:
        console.print(text, markup=False, soft_wrap=True)
    state = "fully" if result.complete else f"partly: {len(result.unmapped)} setting(s) not carried over"
    console.print(f"converted {result.source} ({result.kind}) {state}", markup=False)
    for item in result.unmapped:
        console.print(f"  not carried over: {item.key} = {item.value!r}: {item.why}", markup=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"  note: {note}", markup=False, soft_wrap=True)
    for warning in warnings:
        console.print(f"  validate warns: {warning}", markup=False, soft_wrap=True)
    if problems:
        console.print("the converted recipe does not validate:", markup=False)
        for problem in problems:
            console.print(f"  {problem}", markup=False, soft_wrap=True)
        if out is not None:
            console.print(f"wrote {out}, marked NOT VALID at its top", markup=False)
        if command:
            console.print(f"finish it with:\n  {command}", markup=False, soft_wrap=True)
        else:  # nothing the import could be given changes its verdict: say what to edit, never repeat it
            import shlex

            where = shlex.quote(str(out)) if out is not None else "the recipe"
            console.print(f"finish it by hand: fix each problem above (in the source, or in {where}), then delete "
                          f"the recipe's `not_valid:` section; `grpo validate {where}` checks it", markup=False,
                          soft_wrap=True)
    elif out is not None:
        import shlex

        console.print(f"wrote {out}; it validates (`grpo validate {shlex.quote(str(out))}`)", markup=False)
