"""A model's shape (layers, widths, heads, vocabulary, parameter counts) read from its config.json.

The memory plan needs only these numbers, so it never loads weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
NON_GATED_TYPES = {"gpt2", "gpt_neox", "gpt_bigcode", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2"}
QKV_BIAS_TYPES = {"qwen2", "qwen2_vl", "qwen2_5_vl"}
QK_NORM_TYPES = {"qwen3"}


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers that decide memory, read from config.json."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool = False
    o_bias: bool = False
    gated_mlp: bool = True
    qk_norm: bool = False
    extra_params: int = 0  # outside the decoder stack, e.g. a vision tower (the shipped table's `extra_params`)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelShape:
        """Raise ValueError (with the reason) for configs this plan cannot model."""
        if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
            cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings",
                                                                         cfg["text_config"].get("tie_word_embeddings"))}
        experts = max(int(cfg.get(k) or 0) for k in ("num_experts", "num_local_experts", "n_routed_experts"))
        if experts > 1:
            raise ValueError(f"mixture-of-experts models ({experts} experts) are not modeled")
        missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                               "vocab_size") if not cfg.get(k)]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(missing)}")
        model_type = str(cfg.get("model_type", ""))
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(hidden=hidden, intermediate=int(cfg["intermediate_size"]), layers=int(cfg["num_hidden_layers"]),
                   heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or hidden // heads), vocab=int(cfg["vocab_size"]),
                   # transformers' base default is True, but the llama-family classes default to False;
                   # counting an untied lm_head when unsure over-estimates instead of under-estimating.
                   tied=bool(cfg.get("tie_word_embeddings", False)),
                   qkv_bias=attention_bias or model_type in QKV_BIAS_TYPES, o_bias=attention_bias,
                   gated_mlp=model_type not in NON_GATED_TYPES, qk_norm=model_type in QK_NORM_TYPES,
                   extra_params=int(cfg.get("extra_params") or 0))

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linears(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each projection in one decoder layer."""
        h, i = self.hidden, self.intermediate
        shapes = {"q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
                  "o_proj": (self.q_dim, h), "up_proj": (h, i), "down_proj": (i, h)}
        if self.gated_mlp:
            shapes["gate_proj"] = (h, i)
        return shapes

    @property
    def layer_params(self) -> int:
        """One decoder layer: projections (+ biases), two norms, optional q/k norms."""
        n = sum(a * b for a, b in self.linears().values())
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.o_bias:
            n += self.hidden
        n += 2 * self.hidden if self.gated_mlp else 4 * self.hidden  # RMSNorm weight / LayerNorm weight+bias
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def linear_params(self) -> int:
        """Params in the decoder layers' projections (what 4/8-bit quantization shrinks)."""
        return self.layers * sum(a * b for a, b in self.linears().values())

    @property
    def params(self) -> int:
        final_norm = self.hidden if self.gated_mlp else 2 * self.hidden
        lm_head = 0 if self.tied else self.embedding_params
        return self.embedding_params + lm_head + self.layers * self.layer_params + final_norm + self.extra_params

    def lora_params(self, r: int, target_modules: list[str] | str) -> tuple[int, list[str]]:
        """Trainable LoRA params r x (in + out) per adapted projection, and the target names not recognised."""
        shapes = self.linears()
        names = list(shapes) if target_modules == "all-linear" else list(target_modules)
        total, unknown = 0, []
        for name in names:
            if name in shapes:
                total += r * sum(shapes[name])
            elif name in FUSED and all(p in shapes for p in FUSED[name]):
                parts = [shapes[p] for p in FUSED[name]]
                total += r * (parts[0][0] + sum(out for _, out in parts))
            else:
                unknown.append(name)
        return total * self.layers, unknown

    def adapted_weight_params(self, target_modules: list[str] | str) -> int:
        """Base weights of the adapted projections (in x out each, all layers): what a merged-generation round keeps
        a copy of (training/merged_generation.py)."""
        shapes = self.linears()
        names = list(shapes) if target_modules == "all-linear" else list(target_modules)
        total = 0
        for name in names:
            for part in (name,) if name in shapes else FUSED.get(name, ()):
                if part in shapes:
                    total += shapes[part][0] * shapes[part][1]
        return total * self.layers

    def lora_dropout_bytes_per_token_layer(self, target_modules: list[str] | str, activation_bytes: float) -> float:
        """What LoRA dropout adds to the activations kept for backward, per token per decoder layer.

        peft runs each adapter as `lora_B(lora_A(dropout(x)))`: with dropout > 0 every adapted projection keeps
        its own dropped-out copy of its input (for lora_A's gradient) and a one-byte mask, on top of what the
        layer keeps anyway. Measured with saved-tensor hooks on a Qwen2 stack: +1.25 x the summed input widths
        in fp32 (4.7k values per token per layer at h=384, I=1152, all-linear), the cause of LoRA runs peaking
        1.2-1.6x over a plan without it.
        """
        shapes = self.linears()
        names = list(shapes) if target_modules == "all-linear" else list(target_modules)
        widths = 0
        for name in names:
            if name in shapes:
                widths += shapes[name][0]
            elif name in FUSED and all(p in shapes for p in FUSED[name]):
                widths += shapes[FUSED[name][0]][0]
        return widths * (activation_bytes + 1.0)

    def activation_values_per_token_layer(self) -> int:
        """Values autograd keeps per token per decoder layer (fused attention), see module docstring."""
        mlp = 4 * self.intermediate if self.gated_mlp else 2 * self.intermediate
        return 6 * self.hidden + 3 * self.kv_dim + mlp
