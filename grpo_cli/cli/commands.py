"""The explicit list of `grpo` verbs, in the order `grpo --help` shows them.

A new verb is one file in this package plus one line here; nothing registers itself by being imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from grpo_cli.cli import (
    check_rewards,
    check_tools,
    doctor,
    eval,
    import_config,
    launch,
    memory,
    merge,
    push,
    report,
    samples,
    schema,
    train,
    validate,
    vllm_serve,
)
from grpo_cli.cli.app import RECIPE_EPILOG


def get_commands() -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """(name, function, Typer options) for every verb."""
    return [
        ("validate", validate.validate, {"epilog": RECIPE_EPILOG}),
        ("schema", schema.schema, {}),
        ("check-rewards", check_rewards.check_rewards_command, {"epilog": check_rewards.CHECK_EPILOG}),
        ("check-tools", check_tools.check_tools_command, {"epilog": check_tools.CHECK_TOOLS_EPILOG}),
        ("train", train.train, {"epilog": RECIPE_EPILOG}),
        ("eval", eval.eval_cmd, {"epilog": eval.EVAL_EPILOG}),
        ("merge", merge.merge, {}),
        ("report", report.report, {}),
        ("samples", samples.samples, {}),
        ("push", push.push, {}),
        ("memory", memory.memory, {"epilog": RECIPE_EPILOG}),
        ("vllm-serve", vllm_serve.vllm_serve, {"epilog": RECIPE_EPILOG}),
        ("launch", launch.launch_app, {}),
        ("doctor", doctor.doctor, {"epilog": doctor.DOCTOR_EPILOG}),
        ("import", import_config.import_cmd, {"epilog": import_config.IMPORT_EPILOG}),
    ]


def register(app: typer.Typer) -> None:
    """Add every verb to `app` once (importing grpo_cli.cli calls this)."""
    known = {info.name for info in app.registered_commands}
    groups = {info.name for info in app.registered_groups}
    for name, func, options in get_commands():
        if isinstance(func, typer.Typer):  # a verb with sub-verbs (`grpo launch slurm`)
            if name not in groups:
                app.add_typer(func, name=name, **options)
        elif name not in known:
            app.command(name, **options)(func)
