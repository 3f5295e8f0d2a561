"""The explicit list of `grpo` verbs, in the order `grpo --help` shows them.

A new verb is one file in this package plus one line here; nothing registers itself by being imported, and
every verb is wrapped in the error guard here, so its function is flat (no guard of its own).
A command line that names its verb gets an app with that verb alone (`app_for`): Typer inspects the
signature of every registered function before it parses anything, and importing and inspecting every verb
(`VERBS`) was a tenth of `grpo validate`. `grpo --help` and anything else get every verb.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import typer

from grpo_cli.cli import base

# (verb, module in grpo_cli.cli, its function or Typer app, the name of its epilog: in that module, else in base)
VERBS: list[tuple[str, str, str, str | None]] = [
    ("validate", "validate", "validate", "RECIPE_EPILOG"),
    ("schema", "schema", "schema", None),
    ("check-rewards", "check_rewards", "check_rewards_command", "CHECK_EPILOG"),
    ("check-tools", "check_tools", "check_tools_command", "CHECK_TOOLS_EPILOG"),
    ("train", "train", "train", "RECIPE_EPILOG"),
    ("eval", "eval", "eval_cmd", "EVAL_EPILOG"),
    ("calibrate", "calibrate", "calibrate_command", "CALIBRATE_EPILOG"),
    ("merge", "merge", "merge", None),
    ("export", "export", "export", None),
    ("report", "report", "report", None),
    ("samples", "samples", "samples", None),
    ("push", "push", "push", None),
    ("memory", "memory", "memory", "RECIPE_EPILOG"),
    ("vllm-serve", "vllm_serve", "vllm_serve", "RECIPE_EPILOG"),
    ("launch", "launch", "launch_app", None),
    ("doctor", "doctor", "doctor", "DOCTOR_EPILOG"),
    ("import", "import_config", "import_cmd", "IMPORT_EPILOG"),
]


def _command(verb: tuple[str, str, str, str | None]) -> tuple[str, Callable[..., Any], dict[str, Any]]:
    name, module_name, attribute, epilog = verb
    module = importlib.import_module(f"grpo_cli.cli.{module_name}")
    options = {"epilog": getattr(module, epilog, None) or getattr(base, epilog)} if epilog else {}
    return name, getattr(module, attribute), options


def get_commands() -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """(name, function, Typer options) for every verb."""
    return [_command(verb) for verb in VERBS]


def register(app: typer.Typer, only: str | None = None) -> None:
    """Add every verb (or the one named `only`) to `app` once, each run through `base.guarded`: a verb is a flat
    function, and this is the one place its errors are turned into a paragraph and an exit code."""
    known = {info.name for info in app.registered_commands}
    groups = {info.name for info in app.registered_groups}
    for verb in VERBS:
        if only is not None and verb[0] != only:
            continue
        name, func, options = _command(verb)
        if isinstance(func, typer.Typer):  # a verb with sub-verbs (`grpo launch slurm`)
            for sub in func.registered_commands:
                sub.callback = base.guarded(sub.callback) if sub.callback else None
            if name not in groups:
                app.add_typer(func, name=name, **options)
        elif name not in known:
            app.command(name, **options)(base.guarded(func))


_full: list[typer.Typer] = []


def full_app() -> typer.Typer:
    """The app with every verb (built once): `grpo --help`, and `from grpo_cli.cli import app`."""
    if not _full:
        app = base.new_app()
        register(app)
        _full.append(app)
    return _full[0]


def app_for(argv: list[str]) -> typer.Typer:
    """The app for this command line: the named verb alone, or every verb when none is named first.

    The verb is the first argument, or the second after `--debug` (the one global option that does not
    print and exit). Anything else, such as a misspelt verb or `--help`, gets the full app and its message.
    """
    verb = argv[1] if argv[:1] == ["--debug"] and len(argv) > 1 else (argv[0] if argv else None)
    if verb not in {name for name, *_ in VERBS}:
        return full_app()
    app = base.new_app()
    register(app, only=verb)
    return app
