"""The one loop that applies `HOOKS`, gated by the installed TRL's version: never a blind patch.

On a TRL inside a hook's verified range the hook is applied, as it always was. Outside it, a hook this run does
not rely on is left out silently; an optimisation or measurement the run would use is skipped with one line; a
feature the recipe asks for is refused in one paragraph (exit 2) naming the TRL version and the hook.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from grpo_cli import trl_compat
from grpo_cli.errors import GrpoError
from grpo_cli.training.hooks.table import HOOKS, Build, Hook, Stage, Trainer


def skip_line(hook: Hook, version: str) -> str:
    """The one line an unverified TRL gets for an optimisation (or measurement) it goes without."""
    return (f"TRL {version} is outside trl{trl_compat.spec(hook.verified)}, where grpo's {hook.kind} hook "
            f"`{hook.name}` ({hook.module}) was verified: skipped, {', '.join(hook.replaces)} run as TRL ships them.")


def refusal(hook: Hook, version: str) -> GrpoError:
    """The paragraph an unverified TRL gets for a feature the recipe uses."""
    pip = shlex.quote("trl" + trl_compat.spec(hook.verified))
    return GrpoError(f"TRL {version} is installed, but {hook.needed_by} needs grpo's hook `{hook.name}` "
                     f"({hook.module}), which replaces {', '.join(hook.replaces)} and was verified on "
                     f"trl{trl_compat.spec(hook.verified)} only; grpo does not patch a TRL it has not checked",
                     where=hook.needed_by,
                     fix=f"Install a verified TRL (`pip install {pip}`), or train without {hook.needed_by}.")


def attach_hooks(stage: Stage, trainer: Trainer, build: Build, say: Callable[[str], None]) -> list[str]:
    """Apply this stage's hooks for this trainer, in list order; the names of those applied."""
    version = trl_compat.installed() or "(none)"
    applied = []
    for hook in HOOKS:
        if hook.stage != stage or hook.trainer != trainer:
            continue
        if not trl_compat.is_verified(version, hook.verified):
            if not hook.used(build.run):
                continue
            if hook.kind == "feature":
                raise refusal(hook, version)
            say(skip_line(hook, version))
            continue
        hook.apply(build)
        applied.append(hook.name)
    return applied
