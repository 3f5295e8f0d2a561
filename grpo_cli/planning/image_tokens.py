"""How many tokens a vision-language prompt's images add, from the saved processor settings (no model loaded):
the memory plan's prompt length (planning/memory.py).
"""

from __future__ import annotations

from pathlib import Path

from grpo_cli.models.vision import max_image_tokens, processor_settings
from grpo_cli.paths import hub_cache_file
from grpo_cli.recipe.schema import Recipe


def image_tokens_per_image(recipe: Recipe) -> int | None:
    """The most tokens one image adds to a prompt, from the saved processor settings (local or HF cache)."""
    m = recipe.model
    local = recipe.local_model_dir(m.name_or_path)
    if local is None:
        for name in ("processor_config.json", "preprocessor_config.json"):
            cached = hub_cache_file(m.name_or_path, name, m.revision)
            if cached is not None:
                local = Path(cached).parent
                break
    settings = processor_settings(local) if local is not None else None
    return max_image_tokens(settings) if settings else None


def image_prompt_tokens(recipe: Recipe, prompt_tokens: int, explicit: bool, notes: list[str]) -> int:
    """Prompt tokens for the memory plan: image tokens are added to an assumed text length, never to
    `max_prompt_tokens`, which already counts them (grpo filters on text + image tokens)."""
    if recipe.data.images is None:
        return prompt_tokens
    per_image = image_tokens_per_image(recipe)
    if explicit:
        notes.append("data.max_prompt_tokens includes the image tokens" +
                     (f" (up to {per_image} per image from the processor settings)" if per_image else ""))
        return prompt_tokens
    if per_image is None:
        notes.append("image tokens per image unknown (no processor settings found locally): not counted")
        return prompt_tokens
    notes.append(f"prompts: {prompt_tokens} text tokens + {per_image} image tokens (one image per row assumed, "
                 "the most the processor settings allow)")
    return prompt_tokens + per_image
