"""Load the policy model and tokenizer as the recipe says (dtype, LoRA, quantization)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.gguf.cache import materialize
from grpo_cli.models.sources import ModelSource, damaged_weights_error
from grpo_cli.models.vision import (
    freeze_vision_tower,
    is_vision_language,
    load_processor,
    lora_exclude_pattern,
    source_is_vision_language,
)
from grpo_cli.paths import check_hub_access, hub_cache_file, is_gguf_reference, read_text
from grpo_cli.recipe.profiles import launch_profile
from grpo_cli.recipe.schema import Recipe

_OFFLINE_FIX = ("Check the id or directory; without network access give a local directory "
                "(HF_HUB_OFFLINE=1 fails fast).")


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    peft_config: Any | None
    dtype: str
    device: str
    processor: Any = None  # vision-language models: image processor + tokenizer (TRL's processing_class)

    @property
    def processing_class(self) -> Any:
        """What TRL takes as `processing_class`: the processor of a VLM, else the tokenizer."""
        return self.processor if self.processor is not None else self.tokenizer


def resolve_dtype(requested: str, profile: str = "single") -> str:
    """`auto` means bfloat16 on a GPU that supports it, float32 otherwise (CPU, old GPUs)."""
    import torch

    on_gpu = torch.cuda.is_available() and not launch_profile(profile).cpu_only
    if requested != "auto":
        return requested  # bfloat16/float16 on CPU is allowed (slow): the user asked for it
    if on_gpu and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"


def model_reference(recipe: Recipe) -> str:
    """The string to hand to from_pretrained: a resolved local path or the hub id; a GGUF file's converted
    safetensors directory (converted once, then cached)."""
    local = recipe.local_model_dir(recipe.model.name_or_path)
    if local is not None and is_gguf_reference(str(local)):
        return str(materialize(local))
    return str(local) if local is not None else recipe.model.name_or_path


def source_reference(recipe: Recipe) -> str:
    """What to give resolve_model_source for the recipe's own model: a GGUF reference stays itself (tables and
    results then name the file, not its cache directory); anything else is its resolved path or hub id."""
    ref = recipe.model.name_or_path
    if is_gguf_reference(ref):
        return ref
    local = recipe.local_model_dir(ref)  # never a GGUF file here, so nothing to convert (model_reference's case)
    return str(local) if local is not None else ref


def load_tokenizer(recipe: Recipe, *, local_only: bool = False) -> Any:
    """The policy's tokenizer; `local_only` never touches the network (dry runs must not wait on retries)."""
    from transformers import AutoTokenizer

    ref = model_reference(recipe)
    if local_only and not Path(ref).is_dir() and hub_cache_file(ref, "tokenizer_config.json",
                                                                recipe.model.revision) is None:
        raise GrpoError(f"{ref} is not in the local Hugging Face cache", where="model.name_or_path",
                        fix=f"Download it once (`hf download {ref}`) or use a local directory.")
    try:
        tok = AutoTokenizer.from_pretrained(ref, revision=recipe.model.revision, local_files_only=local_only,
                                            trust_remote_code=recipe.model.trust_remote_code)
    except (OSError, ValueError) as exc:
        raise GrpoError(f"cannot load the tokenizer of {ref}: {str(exc).splitlines()[0]}", where="model.name_or_path",
                        fix=_OFFLINE_FIX) from None
    apply_overrides(tok, recipe)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_tokenizer_for(source: ModelSource, recipe: Recipe | None = None, *, trust_remote_code: bool = False) -> Any:
    """The tokenizer saved with the run/adapter when there is one, else the base model's (for a
    vision-language model: its processor, which holds the tokenizer); with `recipe`, its chat template and pad
    token applied, as training used them."""
    from transformers import AutoTokenizer

    ref = source.tokenizer or source.weights
    check_hub_access(ref, None, source.reference)  # seconds, not a minute of retries
    if source_is_vision_language(source.tokenizer, source.weights):
        tok = load_processor(ref, trust_remote_code=trust_remote_code)
    else:
        try:
            tok = AutoTokenizer.from_pretrained(ref, trust_remote_code=trust_remote_code)
        except (OSError, ValueError, AttributeError, TypeError) as exc:  # the last two: a damaged tokenizer file
            fix = "Check the directory (its tokenizer files) or hub id (offline: give a local directory)."
            if source.kind == "hub":
                fix = f"There is no local directory {source.reference}, so it was tried as a hub id. " + fix
            raise GrpoError(f"cannot load the tokenizer of {source.tokenizer}: {str(exc).splitlines()[0]}",
                            where=source.reference, fix=fix) from None
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
    if recipe is not None:
        apply_overrides(tok, recipe)
    return tok


def chat_template_text(recipe: Recipe) -> str | None:
    """The recipe's `model.chat_template`: the text itself, or the contents of the file it names."""
    value = recipe.model.chat_template
    if value is None or "{{" in value or "{%" in value:
        return value

    path = recipe.resolve_path(value)
    return read_text(path, what="chat template file", where="model.chat_template")


def apply_overrides(processing_class: Any, recipe: Recipe) -> None:
    """The recipe's chat template and pad token on a tokenizer or processor (and a processor's tokenizer)."""
    template = chat_template_text(recipe)
    targets = [processing_class, getattr(processing_class, "tokenizer", None)]
    for target in [t for t in targets if t is not None]:
        if template is not None:
            target.chat_template = template
        if recipe.model.pad_token is not None and hasattr(target, "pad_token"):
            target.pad_token = recipe.model.pad_token


def lora_config(recipe: Recipe, model: Any = None, *, vision: bool = False) -> Any:
    """peft's LoraConfig; for a vision-language model the vision encoder and projector are excluded by default."""
    if recipe.model.lora is None:
        return None
    from peft import LoraConfig

    lo = recipe.model.lora
    exclude = None
    if vision and model is not None and not lo.vision_tower:
        exclude = lora_exclude_pattern(model)
    return LoraConfig(task_type="CAUSAL_LM", r=lo.r, lora_alpha=lo.alpha, lora_dropout=lo.dropout,
                      target_modules=lo.target_modules, bias=lo.bias, modules_to_save=lo.modules_to_save,
                      use_rslora=lo.use_rslora, use_dora=lo.use_dora, exclude_modules=exclude)


def quantization_config(recipe: Recipe, dtype: str) -> Any:
    q = recipe.model.quantization
    if q is None:
        return None
    import torch

    if not torch.cuda.is_available():
        raise GrpoError(f"{q} quantization needs a CUDA GPU (bitsandbytes), and none is available",
                        where="model.quantization",
                        fix="Remove `quantization` to train in full precision on this machine.")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise GrpoError("quantization needs bitsandbytes, which is not installed", where="model.quantization",
                        fix="pip install 'grpo-cli[quant]'") from None
    from transformers import BitsAndBytesConfig

    if q == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute)


def load_model(recipe: Recipe, *, with_tokenizer: bool = True) -> LoadedModel:
    """Load the policy (and tokenizer); LoRA is returned as a peft config for TRL to apply."""
    check_hub_access(model_reference(recipe), recipe.model.revision, "model.name_or_path")
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    dtype = resolve_dtype(recipe.model.dtype, recipe.launch.profile)
    device = "cuda" if torch.cuda.is_available() and not recipe.launch.spec.cpu_only else "cpu"
    quant = quantization_config(recipe, dtype)
    ref = model_reference(recipe)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "revision": recipe.model.revision,
                              "trust_remote_code": recipe.model.trust_remote_code}
    if recipe.model.attn_implementation:
        kwargs["attn_implementation"] = recipe.model.attn_implementation
    if quant is not None:
        kwargs["quantization_config"] = quant
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    from safetensors import SafetensorError

    vision = is_vision_language(recipe.model.kind, ref, recipe.model.revision)
    auto_class = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    try:
        model = auto_class.from_pretrained(ref, **kwargs)
    except SafetensorError as exc:
        raise damaged_weights_error(ref, exc, "model.name_or_path") from None
    except (OSError, ValueError) as exc:
        raise GrpoError(f"cannot load the model {ref}: {str(exc).splitlines()[0]}", where="model.name_or_path",
                        fix=_OFFLINE_FIX) from None
    if quant is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=recipe.training.checkpointing())
    if recipe.model.freeze_vision_tower and vision and recipe.model.lora is None:
        freeze_vision_tower(model)
    processor = None
    if vision and with_tokenizer:
        processor = load_processor(ref, revision=recipe.model.revision,
                                   trust_remote_code=recipe.model.trust_remote_code)
        apply_overrides(processor, recipe)
        tokenizer = processor.tokenizer
    else:
        tokenizer = load_tokenizer(recipe) if with_tokenizer else None
    return LoadedModel(model, tokenizer, lora_config(recipe, model, vision=vision), dtype, device, processor)


def record_base_reference(saved_dir: Path, recipe: Recipe) -> None:
    """Make a saved LoRA adapter name the recipe's GGUF reference as its base, not the machine-local cache
    directory it was loaded from (a pushed adapter then says what it was trained on; merge converts it again)."""
    import json

    if not is_gguf_reference(recipe.model.name_or_path):
        return
    path = saved_dir / "adapter_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    config["base_model_name_or_path"] = recipe.model.name_or_path
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
