"""What every verb shares: the Typer app's global options, consoles, argument types, error guard, exit.

The verbs live one per file beside this one and are registered by `commands.register`. Nothing
heavy is imported at module level so `grpo --help` and `grpo validate` stay instant.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

# Pydantic scans every installed distribution for plugins on first use (~15 ms of a ~0.3 s
# `grpo validate`); grpo uses none. Users who rely on a pydantic plugin can set the variable.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _skip_plugin_loader() -> None:
    """With every plugin disabled, pydantic's plugin loader still imports importlib.metadata (email, zipfile,
    csv: about 5 % of `grpo validate`) before it answers "no plugins". A stand-in gives that answer directly.

    Only when the variable says `__all__` (the loader then returns no plugins without looking) and the loader
    is not loaded yet; pydantic imports nothing else from that module.
    """
    name = "pydantic.plugin._loader"
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or name in sys.modules:
        return
    import types

    loader = types.ModuleType(name, "grpo's stand-in: pydantic plugins are disabled (PYDANTIC_DISABLE_PLUGINS).")
    loader.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules[name] = loader


_skip_plugin_loader()

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from grpo_cli.progress import silence_cpu_accelerator_notice  # noqa: E402
from grpo_cli.terminal_text import visible  # noqa: E402
from grpo_cli.version import __version__  # noqa: E402

if TYPE_CHECKING:
    from grpo_cli.errors import GrpoError

PIPED_WIDTH = 120
P = ParamSpec("P")
R = TypeVar("R")


def make_console(stderr: bool = False) -> Console:
    """A terminal gets rich's usual console; piped output (a log file, CI) gets lines that never wrap
    mid-phrase (soft wrap) and tables laid out for 120 columns instead of rich's default 80."""
    # emoji off: `:name:` in a reward name or a completion prints as written (and rich's emoji table stays unloaded)
    plain = Console(stderr=stderr, highlight=False, emoji=False)
    if plain.is_terminal or os.environ.get("COLUMNS"):
        return plain
    return Console(stderr=stderr, highlight=False, emoji=False, width=PIPED_WIDTH, soft_wrap=True)


console = make_console()
err_console = make_console(stderr=True)

RECIPE_EPILOG = (
    "A recipe is YAML with the sections model, data, rewards, training, launch and output "
    "(see `grpo schema` and docs/recipes.md). Add `section.key=value` overrides after the recipe path, "
    "e.g. `training.learning_rate=1e-5 model.lora.r=8`."
)

_state = {"debug": False}

RecipeArg = Annotated[Path, typer.Argument(help="Recipe YAML file.", show_default=False)]
OverridesArg = Annotated[
    list[str] | None, typer.Argument(help="section.key=value overrides applied after the recipe.", show_default=False)
]
ReportJsonOpt = Annotated[bool, typer.Option("--json", help="Print the report as one JSON document.")]

# The launch flags every verb that reads a recipe takes, as `grpo train` does (flags win over the recipe).
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="Override launch.profile.")]
ProcessesOpt = Annotated[int | None, typer.Option("--num-processes", help="Override launch.num_processes.")]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", min=1, help="Override launch.threads: torch threads per training process (default: from the "
                             "free cores).")]


def _version(value: bool) -> None:
    if value:
        console.print(f"grpo {__version__}")
        raise typer.Exit()


def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["debug"] = debug


def new_app() -> typer.Typer:
    """The `grpo` app with its global options (--debug, --version) and no verbs yet."""
    app = typer.Typer(
        name="grpo",
        help="Declarative GRPO fine-tuning: write one YAML recipe, check it in a second, train it anywhere.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_main)
    return app


Renderer = Callable[[Console, Any], None]


def run_check(make: Callable[[], tuple[Any, Renderer]], as_json: bool) -> None:
    """Run a dry run (check-rewards, check-tools): `make` returns its report and the renderer (imported there,
    so `--help` stays fast); print the report as one JSON document or rendered; exit 1 when it flagged
    something."""
    report, render = make()
    if as_json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        render(console, report)
    exit_with(0 if report.ok else 1)


def say_first(text: str, *, stderr: bool = False) -> None:
    """A command's first line, printed before the seconds of importing torch, TRL or matplotlib (15 s under
    load), so no command starts in silence; on stderr when stdout carries a JSON document."""
    (err_console if stderr else console).print(text, markup=False, soft_wrap=True)


def exit_with(code: int | None) -> None:
    """End a command with `code` (nothing to do for 0 or None)."""
    if code:
        raise typer.Exit(code)


def guarded(verb: Callable[P, R]) -> Callable[P, R]:
    """`verb` run through `run_guarded`: what `commands.register` adds to the app, so every verb is a flat
    function and its errors still become one paragraph. functools.wraps keeps the signature Typer reads."""
    if getattr(verb, "__grpo_guarded__", False):
        return verb

    @functools.wraps(verb)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return run_guarded(lambda: verb(*args, **kwargs))

    run.__grpo_guarded__ = True  # type: ignore[attr-defined]
    return run


def run_guarded(func: Callable[[], R]) -> R:
    """Run a command body: user errors become one paragraph and exit code 2, no traceback."""
    from grpo_cli.errors import GrpoError

    try:
        return func()
    except GrpoError as exc:
        if _state["debug"]:
            raise
        _paragraph(exc)
    except KeyboardInterrupt:
        _interrupt()
    except RuntimeError as exc:  # pathlib's resolve() on a link that points back to itself, wherever a path is
        loop = str(exc).removeprefix("Symlink loop from ")
        if _state["debug"] or loop == str(exc):
            raise
        _paragraph(GrpoError("is a symbolic link that points back to itself (a loop)", where=loop.strip("'"),
                             fix="Point the link at a real file or directory, or give the path of the file itself."))
    except Exception as exc:  # Ctrl-C or SIGTERM inside a library that wraps it (pydantic building a validator)
        if _state["debug"] or not _interrupted(exc):
            raise
        _interrupt()


def _paragraph(exc: GrpoError) -> NoReturn:
    """The one place an error becomes its paragraph on stderr and its exit code."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(visible(exc.render()))}", soft_wrap=True)
    raise typer.Exit(exc.exit_code) from None


def _interrupt() -> NoReturn:
    err_console.print("[yellow]interrupted[/]")
    raise typer.Exit(130) from None


def _interrupted(exc: BaseException) -> bool:
    """An exception raised because a KeyboardInterrupt went through it: in its cause or context chain, or, for
    pydantic-core's SchemaError, only in its message (its Rust side keeps the text, not the exception)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt) or str(link).rstrip().endswith("KeyboardInterrupt:"):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def load(recipe: Path, overrides: list[str] | None, **launch: Any) -> Any:
    """The recipe with its overrides, then the launch flags given (`profile=`, `num_processes=`, ...)."""
    from grpo_cli.recipe.loader import load_recipe

    flags = [f"launch.{k}={v}" for k, v in launch.items() if v is not None]
    return load_recipe(recipe, [*(overrides or []), *flags])


# Commands that only read files and print: they may skip interpreter teardown (tens of ms of
# module garbage collection), which is a fifth of `grpo validate`'s wall time.
_FAST_EXIT = {"validate", "schema", "--help", "--version"}


def _option_hint(app: typer.Typer, argv: list[str]) -> str | None:
    """The override to write for an `--option` that is a recipe key (`--max-steps 3`), before Click refuses it."""
    verb = next((a for a in argv if not a.startswith("-")), None)
    rest = argv[argv.index(verb) + 1:] if verb else []
    if not any(a.startswith("--") and a not in ("--help", "--json") for a in rest):
        return None
    import typer.main

    commands = getattr(typer.main.get_command(app), "commands", None) or {}  # Typer may vendor its own Click
    command = commands.get(verb or "")
    if command is None or hasattr(command, "commands"):  # not a verb here, or one with sub-verbs
        return None
    from rich.markup import escape

    from grpo_cli.cli.option_hints import unknown_option_hint

    found = unknown_option_hint(command, rest, verb or "")
    return escape(found) if found else None


def run_app(app: typer.Typer) -> None:
    """Run `app` on the command line; commands that only read and print skip interpreter teardown, keep the
    garbage collector off (`main` turned it off) and never import DeepSpeed, whose CPU notice the others
    silence."""
    if not _FAST_EXIT.intersection(sys.argv[1:3]):
        gc.enable()
        silence_cpu_accelerator_notice()
    hint = _option_hint(app, sys.argv[1:])
    if hint:
        err_console.print(f"[bold red]error:[/] {hint}", soft_wrap=True, markup=True, highlight=False)
        sys.exit(2)
    try:
        app()
    except SystemExit as exc:
        if _FAST_EXIT.intersection(sys.argv[1:3]) or len(sys.argv) == 1:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise
