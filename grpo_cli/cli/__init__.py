"""The `grpo` command line: a thin shell that parses arguments, calls the library and renders with rich.

`main` is the console-script entry point; `app` is the Typer application with every verb registered
(built on first use, so running one verb imports only that verb's module). Nothing else imports this package.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: the verb named on the command line (or every verb) on grpo's app.

    The cyclic garbage collector is off while the CLI starts: imports and the recipe schema allocate many
    objects and few cycles, and its passes were 5 % of `grpo validate`. `run_app` turns it back on for every
    command that runs longer than a read-and-print.
    """
    gc.disable()
    from grpo_cli.cli.base import run_app
    from grpo_cli.cli.commands import app_for

    run_app(app_for(sys.argv[1:]))


def __getattr__(name: str) -> Any:
    if name == "app":
        from grpo_cli.cli.commands import full_app

        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
