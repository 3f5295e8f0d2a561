"""Import a recipe's tools and environments and turn them into what GRPOTrainer takes.

References resolve exactly as reward references do (same import rules, same errors).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.runs.manifest import ToolUse
from grpo_cli.tools.guard import ToolStats, guard, guarded_class
from grpo_cli.tools.lifecycle import guarded_factory
from grpo_cli.user_code import import_reference

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


def environment_methods(cls: type) -> list[str]:
    """The methods TRL exposes as tools: public functions of the class other than reset and get_reward."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not n.startswith("_") and n not in ("reset", "get_reward")]


@dataclass
class Toolset:
    """The loaded tools and environments of a recipe, plus per-tool call statistics."""

    tools: list[Any] = field(default_factory=list)
    """Guarded standalone tool functions."""
    environments: dict[str | None, Any] = field(default_factory=dict)
    """name -> zero-argument factory (None is the single, unrouted environment)."""
    classes: dict[str | None, type] = field(default_factory=dict)
    """name -> the user's environment class (before guarding)."""
    stats: dict[str, ToolStats] = field(default_factory=dict)

    @property
    def routed(self) -> bool:
        return None not in self.environments and bool(self.environments)

    def trainer_kwargs(self) -> dict[str, Any]:
        """`GRPOTrainer(**kwargs)` for these tools: `tools` and `environment_factory` (TRL's own names)."""
        kw: dict[str, Any] = {}
        if self.tools:
            kw["tools"] = list(self.tools)
        if self.environments:
            kw["environment_factory"] = dict(self.environments) if self.routed else self.environments[None]
        return kw

    def tools_for(self, env: Any | None) -> list[Any]:
        """The callables one rollout may use: the standalone tools plus its environment's methods."""
        methods = [getattr(env, n) for n in environment_methods(type(env))] if env is not None else []
        return [*self.tools, *methods]

    def summary(self) -> dict[str, ToolUse]:
        """Per-tool calls, failures, timeouts and mean seconds (for the manifest)."""
        return {name: s.summary() for name, s in self.stats.items() if s.calls}


def load_toolset(recipe: Recipe) -> Toolset | None:
    """Import every tool and environment of the recipe (None when it has neither)."""
    if not recipe.tools and recipe.environment is None:
        return None
    toolset = Toolset()
    for i, entry in enumerate(recipe.tools):
        where = f"tools[{i}].function"
        func = import_reference(entry.function, recipe.base_dir, where)
        if not (inspect.isfunction(func) or inspect.ismethod(func)):
            raise GrpoError(f"{entry.function} is a {type(func).__name__}, not a function", where=where,
                            fix="Tools must be plain functions (def or async def) with type hints and a docstring.")
        sig = inspect.signature(func)
        for key in entry.params:
            if key not in sig.parameters:
                raise GrpoError(f"params key {key!r} is not a parameter of {entry.name}",
                                where=f"tools[{i}].params.{key}",
                                fix=f"Its parameters are: {', '.join(sig.parameters)}.")
        stats = toolset.stats.setdefault(entry.name, ToolStats())
        toolset.tools.append(guard(func, name=entry.name, params=entry.params, timeout=entry.timeout, stats=stats,
                                   max_chars=entry.max_result_chars))
    env = recipe.environment
    if env is not None:
        for name, ref in env.classes().items():
            where = "environment.factory" + (f".{name}" if name is not None else "")
            cls = import_reference(ref, recipe.base_dir, where, kind="class")
            if not callable(getattr(cls, "reset", None)):
                raise GrpoError(f"environment class {cls.__name__} has no `reset` method", where=where,
                                fix="Add `def reset(self, **kwargs) -> str | None:` (it starts each rollout).")
            toolset.classes[name] = cls
            wrapped = guarded_class(cls, timeout=env.timeout, stats=toolset.stats, where=where,
                                    max_chars=env.max_result_chars)
            toolset.environments[name] = guarded_factory(wrapped, env.params_for(name), env.timeout, where)
    return toolset


def make_environment(toolset: Toolset, name: str | None) -> Any:
    """One environment instance (its factory names the environment when the constructor fails)."""
    return toolset.environments[name]()
