"""A static KV cache with compiled decode steps when TRL generates with transformers.

What it replaces: TRL 1.16 generates with transformers' dynamic cache (its `cache_implementation` default) and
builds its `GenerationConfig` with `disable_compile=True`, so every decode step launches each kernel from Python;
on an H100 that held generation at 330-960 tokens/s from 135M to 1.5B parameters (docs/performance.md, "GPU").
Here the run gets TRL's own settings, `cache_implementation: static` and `generation_kwargs.max_cache_len` (one
cache size for every round, the longest prompt plus the completion, so decoding compiles once, not per round),
and on CUDA the one value TRL hard-codes, `trainer.generation_config.disable_compile`, is set back to False after
TRL built the trainer: transformers then compiles the decode step (CUDA graphs) on the first round. Should
compiling fail on the machine, that round and every later one generate uncompiled (`CompileFallback`), with the
reason printed once. On the CPU transformers never compiles; a forced `sampling.compiled_decode: true` gives the
static cache alone.

Where it does not apply (planning/fast_generation.py says why in the plan) nothing is changed.
Hooks: `GRPOConfig.cache_implementation`, `GRPOConfig.generation_kwargs` and `GRPOTrainer.generation_config`, read
by `_generate_single_turn` in TRL 1.16.0 with transformers 5.24.0 (tests/training/test_merged_generation.py pins them).
What depends on it: the plan's "generation path" line and scripts/gpu_check.sh's fast-path cases.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo_cli.planning.fast_generation import GenerationPath
    from grpo_cli.recipe.schema import Recipe


def static_cache_settings(recipe: Recipe, path: GenerationPath, kwargs: dict[str, Any]) -> None:
    """Put TRL's static-cache settings into the GRPOConfig keyword arguments when the path uses them."""
    if not path.static:
        return
    kwargs["cache_implementation"] = "static"
    generation = dict(kwargs.get("generation_kwargs") or {})
    prompt = recipe.data.max_prompt_tokens
    if prompt is not None:  # else transformers grows the cache to the longest round so far (a recompile each time)
        generation.setdefault("max_cache_len", prompt + recipe.training.max_completion_length)
    kwargs["generation_kwargs"] = generation


def allow_compile(trainer: Any, path: GenerationPath) -> CompileFallback | None:
    """Let transformers compile the decode step of TRL's generation (CUDA only), with a fallback: the wrapper that
    generates uncompiled for the rest of the run if compiling fails on this machine; None where not allowed."""
    config = getattr(trainer, "generation_config", None)
    if not path.compiled or config is None or not hasattr(config, "disable_compile"):
        return None
    config.disable_compile = False
    return CompileFallback(trainer.model, config)


class CompileFallback:
    """Wraps the trainer model's `generate`: a round whose compiled decode fails (a machine without the C compiler
    or Python headers Triton builds with, an unsupported kernel) is generated again uncompiled, and so is every
    later round; the reason is printed once and kept in `failed`."""

    def __init__(self, model: Any, config: Any) -> None:
        self.config = config
        self.original: Callable[..., Any] = model.generate
        self.failed: str | None = None
        model.generate = self.generate

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.config.disable_compile:
            return self.original(*args, **kwargs)
        try:
            return self.original(*args, **kwargs)
        except Exception as exc:  # torch.compile's own errors are many types (Inductor, Triton, dynamo)
            self.config.disable_compile = True
            self.failed = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            print(f"grpo: compiled decode failed here ({self.failed[:300]}); generating uncompiled from now on "
                  "(sampling.compiled_decode: false skips the attempt)", file=sys.stderr, flush=True)
            return self.original(*args, **kwargs)
