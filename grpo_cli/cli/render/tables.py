"""Printing a titled table so that its title never wraps mid-phrase: rich wraps a title to the table's
width, which is often narrower than the title; the title goes on a line of its own instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from grpo_cli.terminal_text import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def print_table(console: Console, table: Table) -> None:
    """The table's title as one unwrapped line, the table, then its caption the same way."""
    title, caption = table.title, table.caption
    table.title = table.caption = None
    if title:
        shown = title if isinstance(title, Text) else Text(visible(str(title)), style=table.title_style or "bold")
        console.print(shown, soft_wrap=True)
    console.print(table)
    if caption:
        console.print(caption if isinstance(caption, Text) else Text(str(caption), style=table.caption_style or ""),
                      soft_wrap=True)


def cell(value: Any) -> str:
    """A table cell for a metric or score: text as it is, numbers by the one rule of `number_text`."""
    from grpo_cli.artefacts.report_data import number_text

    return str(value) if isinstance(value, str) else number_text(value)


def plain(value: Any) -> Text:
    """A cell of text grpo did not write (a prompt, a completion, a name from a run file): never read as rich
    markup, its control characters shown as escapes (`terminal_text.visible`)."""
    return Text(visible("" if value is None else str(value)))
