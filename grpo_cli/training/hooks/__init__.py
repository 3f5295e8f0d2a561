"""Every patch grpo applies to TRL: one ordered list (`table.HOOKS`: what each replaces, the TRL it was verified
on, the recipe feature that needs it, optimisation or feature) and the one loop that applies it, gated by the
installed TRL's version (`attach.attach_hooks`). The hooks' code lives in the training module of each concern.
"""

from __future__ import annotations

from grpo_cli.training.hooks.attach import attach_hooks
from grpo_cli.training.hooks.table import HOOKS, Build, Hook

__all__ = ["HOOKS", "Build", "Hook", "attach_hooks"]
