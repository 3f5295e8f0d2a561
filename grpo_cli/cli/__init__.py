"""The `grpo` command line: a thin shell that parses arguments, calls the library and renders with rich.

`app` is the Typer application with every verb registered; `main` is the console-script entry point.
Nothing else imports this package.
"""

from __future__ import annotations

from grpo_cli.cli.app import app, main
from grpo_cli.cli.commands import register

register(app)

__all__ = ["app", "main"]
