"""`grpo train recipe.yaml --max-steps 3`: an option that is a recipe key gets the override that sets it.

Click would say only "No such option: --max-steps". Recipe keys are set after the recipe as
`section.key=value`; a user who knows TRL's `--max_steps` flags reaches for the option form first.
Read before Click parses anything, from the command's own options and the recipe schema (no torch).
"""

from __future__ import annotations

from typing import Any


def recipe_key_for(name: str) -> str | None:
    """`training.max_steps` for `max_steps` (a GRPOConfig field), `model.dtype` for `dtype`; None if no key."""
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.recipe.trl_fields import grpo_config_fields

    if name in Recipe.model_fields and name != "training":
        return None  # a section, not a key
    for section, info in Recipe.model_fields.items():
        model = info.annotation
        fields = getattr(model, "model_fields", None)
        if isinstance(fields, dict) and name in fields and section != "training":
            return f"{section}.{name}"
    try:
        return f"training.{name}" if name in grpo_config_fields() else None
    except Exception:  # noqa: BLE001 - TRL missing or unreadable: no hint, Click's own message stands
        return None


def unknown_option_hint(command: Any, argv: list[str], verb: str = "train") -> str | None:
    """The error paragraph for the first `--option` of `argv` (after the verb) that `command` (the verb's Click
    command) does not take but a recipe key matches; None when there is none."""
    known = {opt for p in command.params for opt in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    for i, token in enumerate(argv):
        if token == "--":
            break
        if not token.startswith("--") or token.split("=", 1)[0] in known:
            continue
        option, _, value = token.partition("=")
        key = recipe_key_for(option[2:].replace("-", "_"))
        if key is None:
            continue
        if not value and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
        from grpo_cli.errors import GrpoError

        return GrpoError(f"{option} is not an option of `grpo {verb}`; recipe keys are set as overrides after the "
                         "recipe", where="command line",
                         fix=f"Write `{key}={value or 'VALUE'}`: grpo {verb} recipe.yaml {key}={value or 'VALUE'}"
                         ).render()
    return None
