"""The bundled tiny model with a trained LoRA adapter in training mode, as TRL holds it inside a GRPO step: what the
shared-prefill and shared-prompt-forward comparisons run on."""

from __future__ import annotations

from collections.abc import Callable

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from grpo_cli.paths import ASSETS_DIR

MODEL = ASSETS_DIR / "tiny-arith"


def tiny_lora(dropout: float = 0.0, patch: Callable[[torch.nn.Module], None] | None = None) -> torch.nn.Module:
    """Seeded; `patch` runs on the base model before PEFT wraps it (TRL's fused LM head is added there)."""
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    if patch is not None:
        patch(base)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=dropout,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    for name, param in model.named_parameters():  # a trained adapter, not the zero-initialised one
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    return model.train()
