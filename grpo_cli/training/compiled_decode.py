"""A static KV cache with compiled decode steps when TRL generates with transformers.

What it replaces: TRL 1.16 generates with transformers' dynamic cache (its `cache_implementation` default) and
builds its `GenerationConfig` with `disable_compile=True`, so every decode step launches each kernel from Python;
on an H100 that held generation at 330-960 tokens/s from 135M to 1.5B parameters (docs/performance.md, "GPU").
Here the run gets TRL's own settings, `cache_implementation: static` and `generation_kwargs.max_cache_len` (one
cache size for every round, the longest prompt plus the completion, so decoding compiles once, not per round),
and on CUDA the one value TRL hard-codes, `trainer.generation_config.disable_compile`, is set back to False after
TRL built the trainer: transformers then compiles the decode step (CUDA graphs) on the first round. On the CPU
transformers never compiles; a forced `sampling.compiled_decode: true` gives the static cache alone.

Where it does not apply (validation/fast_generation.py says why in the plan) nothing is changed.
Hooks: `GRPOConfig.cache_implementation`, `GRPOConfig.generation_kwargs` and `GRPOTrainer.generation_config`, read
by `_generate_single_turn` in TRL 1.16.0 with transformers 5.24.0 (tests/test_merged_generation.py pins them).
What depends on it: the plan's "generation path" line and scripts/gpu_check.sh's fast-path cases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.validation.fast_generation import GenerationPath


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


def allow_compile(trainer: Any, path: GenerationPath) -> bool:
    """Let transformers compile the decode step of TRL's generation (CUDA only); whether it was allowed."""
    config = getattr(trainer, "generation_config", None)
    if not path.compiled or config is None or not hasattr(config, "disable_compile"):
        return False
    config.disable_compile = False
    return True
