"""Vision-language models: detect them, load them with their processor, and aim LoRA / freezing at the right part.

transformers 5 lays every VLM out the same way at the top: a vision encoder (`vision_tower`, `visual`,
`vision_model`), often a projector (`multi_modal_projector`, `connector`), and the language model
(`language_model`, or `text_model` for Idefics3). That layout is what LoRA targeting and freezing use, so no
per-architecture table is needed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.model_files import regular_file_problem
from grpo_cli.paths import hub_cache_file

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

LANGUAGE_PARTS = ("language_model", "text_model")
VISION_ENCODERS = ("vision_tower", "visual", "vision_model", "vision_encoder", "image_encoder")


def config_is_vision_language(config: dict[str, Any]) -> bool:
    """A model config with a vision sub-config is a vision-language model (LLaVA, Qwen2-VL, Idefics3, Gemma3...)."""
    return isinstance(config.get("vision_config"), dict) or "vision_config" in config


def local_config(model_dir: Path) -> dict[str, Any] | None:
    path = model_dir / "config.json"
    if regular_file_problem(path) is not None:  # a pipe or a device would block: the model checks name it
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None  # a damaged one is named by the model checks


def is_vision_language(kind: str, ref: str, revision: str | None = None, *, local_only: bool = False) -> bool:
    """Whether `ref` (a local directory or hub id) is a vision-language model; `kind` overrides detection."""
    if kind != "auto":
        return kind == "vision_language"
    path = Path(ref)
    if path.is_dir():
        config = local_config(path)
        return bool(config and config_is_vision_language(config))

    cached = hub_cache_file(ref, "config.json", revision)
    if cached is not None:
        config = local_config(Path(cached).parent)
        return bool(config and config_is_vision_language(config))
    if local_only:
        return False
    from transformers import AutoConfig

    try:
        return hasattr(AutoConfig.from_pretrained(ref, revision=revision), "vision_config")
    except (OSError, ValueError):
        return False


def source_is_vision_language(*refs: str | None) -> bool:
    """Whether the first existing of `refs` (adapter/run dir, then base weights) is a vision-language model:
    a saved processor next to a tokenizer, or a config with a vision sub-config."""
    for ref in refs:
        if not ref:
            continue
        path = Path(ref)
        names = ("preprocessor_config.json", "processor_config.json")
        if path.is_dir() and any((path / name).exists() for name in names):
            return True
    weights = next((r for r in reversed(refs) if r), None)
    return bool(weights) and is_vision_language("auto", str(weights))


def recipe_is_vision_language(recipe: Recipe) -> bool | None:
    """True/False when known without loading anything (model.kind, or a config.json on disk); None for unknown."""
    m = recipe.model
    if m.kind != "auto":
        return m.kind == "vision_language"
    local = recipe.local_model_dir(m.name_or_path)
    if local is not None and local.is_file():
        return False  # a GGUF file: transformers converts only text models from GGUF
    if local is not None:
        config = local_config(local)
    else:
        cached = hub_cache_file(m.name_or_path, "config.json", m.revision)
        config = local_config(Path(cached).parent) if cached is not None else None
    return None if config is None else config_is_vision_language(config)


def load_processor(ref: str, *, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    """The model's AutoProcessor (image processor + tokenizer), left-padded for batched generation."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, AttributeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GrpoError(f"cannot load the processor of {ref}: {first}", where="model.name_or_path",
                        fix="A vision-language model needs its processor files (processor_config.json or "
                            "preprocessor_config.json, tokenizer) next to the weights; set `model.kind: causal_lm` "
                            "for a text-only model.") from None
    if not hasattr(processor, "image_processor"):
        raise GrpoError(f"{ref} has no image processor, so it cannot take images", where="model.kind",
                        fix="Use a vision-language model, or set `model.kind: causal_lm`.")
    tok = processor.tokenizer
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return processor


def _core(model: Any) -> Any:
    """The module that holds vision encoder, projector and language model (`model.model` in transformers 5)."""
    inner = getattr(model, "model", None)
    return inner if inner is not None and any(hasattr(inner, p) for p in LANGUAGE_PARTS) else model


def vision_parts(model: Any) -> list[str]:
    """Names of the top-level non-language submodules (vision encoder, projector)."""
    return [name for name, _ in _core(model).named_children() if name not in LANGUAGE_PARTS]


def lora_exclude_pattern(model: Any) -> str | None:
    """A peft `exclude_modules` regex that keeps LoRA off the vision encoder and projector."""
    parts = vision_parts(model)
    if not parts:
        return None
    return rf"(.*\.)?({'|'.join(re.escape(p) for p in parts)})(\..*)?"


def freeze_vision_tower(model: Any) -> int:
    """Stop gradients into the vision encoder (the projector keeps training); returns the parameters frozen."""
    core = _core(model)
    frozen = 0
    for name, module in core.named_children():
        if name in VISION_ENCODERS:
            for p in module.parameters():
                p.requires_grad_(False)
                frozen += p.numel()
    if not frozen:
        raise GrpoError("model.freeze_vision_tower is set but no vision encoder was found "
                        f"(top-level parts: {', '.join(n for n, _ in core.named_children())})",
                        where="model.freeze_vision_tower", fix="Remove the key, or use a vision-language model.")
    return frozen


# ---------------------------------------------------------------------------- sizes from config files (no loading)


def processor_settings(model_dir: Path) -> dict[str, Any] | None:
    """The saved processor settings (processor_config.json, else preprocessor_config.json), or None."""
    for name in ("processor_config.json", "preprocessor_config.json"):
        config = local_config_file(model_dir / name)
        if config is not None:
            return config
    return None


def local_config_file(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def max_image_tokens(settings: dict[str, Any]) -> int | None:
    """The most prompt tokens one image becomes, from processor settings (Qwen2-VL, LLaVA, Idefics3, Gemma3...)."""
    inner = settings.get("image_processor")
    image: dict[str, Any] = inner if isinstance(inner, dict) else settings
    for key in ("image_seq_len", "image_seq_length"):  # fixed-length processors (Idefics3/SmolVLM, Gemma3)
        if isinstance(fixed := settings.get(key) or image.get(key), int):
            return fixed
    patch = image.get("patch_size") or settings.get("patch_size")
    if not isinstance(patch, int) or patch <= 0:
        return None
    size: dict[str, Any] = image["size"] if isinstance(image.get("size"), dict) else {}
    max_pixels = image.get("max_pixels") or size.get("longest_edge")
    merge = image.get("merge_size")
    if isinstance(max_pixels, int) and isinstance(merge, int):  # Qwen2-VL / Qwen2.5-VL: pixels / (patch x merge)^2
        return max_pixels // (patch * merge) ** 2
    crop = image.get("crop_size") if isinstance(image.get("crop_size"), dict) else None
    side = (crop or {}).get("height") or size.get("height") or size.get("shortest_edge")
    if isinstance(side, int):  # LLaVA-style square input
        return (side // patch) ** 2
    return None


def vision_params(config: dict[str, Any]) -> int:
    """Approximate parameters of the vision encoder from its config (attention + MLP per layer)."""
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    hidden = vc.get("hidden_size") or vc.get("embed_dim") or 0
    layers = vc.get("num_hidden_layers") or vc.get("depth") or 0
    inter = vc.get("intermediate_size") or int(hidden * (vc.get("mlp_ratio") or 4))
    return int(layers * (4 * hidden * hidden + 2 * hidden * inter))
