"""The `model` section: what to load and how (dtype, LoRA, quantization)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grpo_cli.recipe.schema.common import Section


class LoraSection(Section):
    """LoRA adapters through peft; training updates only these weights."""

    r: int = Field(16, gt=0)
    """Rank of the update matrices."""
    alpha: int = Field(32, gt=0)
    """Scaling numerator (peft's `lora_alpha`); the update is scaled by alpha / r."""
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    """Dropout on the LoRA input (peft's `lora_dropout`)."""
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Module names to adapt, e.g. [q_proj, v_proj], or `all-linear`."""
    bias: Literal["none", "all", "lora_only"] = "none"
    """Which biases to train."""
    modules_to_save: list[str] | None = None
    """Extra modules trained in full and saved with the adapter (e.g. lm_head)."""
    use_rslora: bool = False
    """Rank-stabilised scaling alpha / sqrt(r)."""
    use_dora: bool = False
    """Weight-decomposed LoRA (DoRA)."""
    vision_tower: bool = False
    """For a vision-language model, also adapt the vision tower and projector (by default LoRA targets the
    language model only)."""


class ShapeSection(Section):
    """A model's architecture numbers (config.json's keys) for the memory plan when its config.json is not
    local or cached and grpo's shipped table does not know it; a local or cached config.json wins."""

    hidden_size: int = Field(gt=0)
    """Width of the residual stream."""
    intermediate_size: int = Field(gt=0)
    """Width of the MLP."""
    num_hidden_layers: int = Field(gt=0)
    """Decoder layers."""
    num_attention_heads: int = Field(gt=0)
    """Query heads."""
    num_key_value_heads: int | None = Field(None, gt=0)
    """Key/value heads (grouped-query attention); defaults to num_attention_heads."""
    head_dim: int | None = Field(None, gt=0)
    """Per-head width; defaults to hidden_size / num_attention_heads."""
    vocab_size: int = Field(gt=0)
    """Vocabulary size (rows of the embedding and of lm_head)."""
    tie_word_embeddings: bool = False
    """Whether lm_head reuses the input embedding."""
    model_type: str = ""
    """config.json's model_type (e.g. qwen2 adds q/k/v biases, qwen3 q/k norms)."""
    extra_params: int = Field(0, ge=0)
    """Parameters outside the decoder stack, e.g. a vision tower."""


class ModelSection(Section):
    """The policy model: a hub id, a local directory, or `bundled:tiny-arith`."""

    name_or_path: str = Field(min_length=1)
    """Hub model id (e.g. Qwen/Qwen2.5-0.5B-Instruct), a local directory (relative to the recipe),
    or `bundled:<name>` for a model shipped with grpo."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) to load."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weights dtype; `auto` is bfloat16 on a GPU that supports it and float32 otherwise (CPU)."""
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"] | None = (
        None
    )
    """Attention kernel; None lets transformers choose."""
    trust_remote_code: bool = False
    """Allow model repositories that ship their own Python code."""
    kind: Literal["auto", "causal_lm", "vision_language"] = "auto"
    """auto: read the model's config (a `vision_config` means a vision-language model, loaded with
    AutoModelForImageTextToText and AutoProcessor); or force causal_lm / vision_language."""
    freeze_vision_tower: bool = False
    """Full fine-tunes of a vision-language model: keep the vision encoder's weights fixed (the projector
    and language model still train)."""
    lora: LoraSection | None = None
    """LoRA settings; full fine-tuning when absent."""
    quantization: Literal["4bit", "8bit"] | None = None
    """Load the base model quantized with bitsandbytes (QLoRA); needs CUDA and `model.lora`."""
    chat_template: str | None = None
    """A Jinja chat template replacing the tokenizer's own: the template text, or a path to a `.jinja` file
    (relative to the recipe). Used by training, eval, check-rewards and check-tools, and saved with the model;
    `grpo validate` renders the first prompt with it."""
    pad_token: str | None = None
    """The padding token, when the tokenizer's own (or the EOS it falls back to) is not wanted."""
    shape: ShapeSection | None = None
    """Architecture numbers for the memory plan of a model that is neither local, cached, nor in grpo's
    shipped table (see `grpo validate`'s "memory per GPU" line); ignored when a config.json is found."""

    @model_validator(mode="after")
    def _quantization_needs_lora(self) -> ModelSection:
        if self.quantization and self.lora is None:
            raise ValueError(
                f"quantization={self.quantization!r} freezes the base weights, so training needs LoRA adapters: "
                "add a `model.lora` section (e.g. `lora: {r: 16}`) or remove `quantization`"
            )
        if self.freeze_vision_tower and self.kind == "causal_lm":
            raise ValueError("freeze_vision_tower needs a vision-language model, but kind is causal_lm")
        return self
