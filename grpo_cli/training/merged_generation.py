"""The LoRA adapter folded into the base weights while TRL generates with transformers, then the base restored.

What it replaces: on its transformers path TRL 1.16 generates through PEFT's unmerged LoRA layers, so every
decode step runs each adapted projection three times (base, A, B) plus dropout and a cast; on an H100 that made
LoRA decoding about 2.3x slower than a full fine-tune's (docs/performance.md, "GPU"). TRL merges the adapter only
before a vLLM weight sync. Here, before each `generate`, every plain LoRA linear layer's delta (B @ A x scaling,
summed over the active adapters) is added to a kept copy of its base weight, the base `nn.Linear` itself is put in
the LoRA layer's place, and generation runs through plain linear layers. Afterwards the wrappers go back and each
base weight is copied back from the kept copy, never restored by subtracting (in bfloat16 that drifts): the
training step sees bit for bit the model it saw before. The kept copy is the size of the adapted base weights and
lives only while generating; the memory plan counts it ("LoRA merge: kept base copy"), and on CUDA a round whose
copy would not fit in free memory generates unmerged, with the reason logged once.

Left unmerged (the plan says so): 4-bit/8-bit bases (merging a quantized weight is lossy), DoRA and LoRA biases,
sharded weights (ZeRO-3/FSDP), vLLM (TRL merges there itself). Generation with merged weights samples from the
policy without LoRA dropout, as vLLM does; TRL's default path samples through the dropout masks of a model in
training mode. `GRPO_MERGED_GENERATION=0` turns it off.

Hook: the trainer's model instance's `generate`, which TRL 1.16's `_generate_single_turn` calls on the
unwrapped model inside `unwrap_model_for_generation` (the same object as `trainer.model` for a single process and
DDP). Verified with TRL 1.16.0, transformers 5.24.0, peft 0.21.2 (tests/training/test_merged_generation.py pins it).
What depends on it: `grpo validate`'s "generation path" plan line (planning/fast_generation.py decides it), the
memory plan's kept-copy line, and scripts/gpu_check.sh's fast-path cases.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpo_cli.planning.fast_generation import MERGE_ENV, merge_switched_off

if TYPE_CHECKING:
    from grpo_cli.planning.fast_generation import GenerationPath

OFF_ENV = MERGE_ENV
CUDA_MARGIN = 256 * 1024**2  # free memory kept beyond the copy when deciding whether a round can merge


class MergedGeneration:
    """Wraps one PEFT model instance's `generate`; counts the rounds it merged and why one was not."""

    def __init__(self, model: Any, layers: list[tuple[Any, str, Any]]) -> None:
        self.model = model
        self.layers = layers  # (parent module, attribute name, the LoRA layer in it)
        self.original: Callable[..., Any] = model.generate
        self.rounds = 0
        self.skipped: str | None = None
        model.generate = self.generate

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        why = self._why_not(kwargs)
        if why is not None:
            if self.skipped is None:  # said once: a run that cannot merge says why, not every round
                print(f"grpo: generating through the LoRA layers, unmerged: {why}", file=sys.stderr, flush=True)
            self.skipped = self.skipped or why
            return self.original(*args, **kwargs)
        kept: list[Any] = []  # filled layer by layer: whatever was merged is restored, even if merging failed
        try:
            self._merge(kept)
            return self.original(*args, **kwargs)
        finally:
            self._restore(kept)

    def copy_bytes(self) -> int:
        weights = (lora.base_layer.weight for _, _, lora in self.layers)
        return sum(w.numel() * w.element_size() for w in weights)

    def _why_not(self, kwargs: dict[str, Any]) -> str | None:
        """None when this round can merge; else the reason it generates through the LoRA layers."""
        import torch

        if "adapter_names" in kwargs:
            return "generate was asked for per-row adapters"
        for _, _, lora in self.layers:
            if lora.disable_adapters or lora.merged or any(a in lora.lora_variant for a in lora.active_adapters):
                return "an adapter is disabled, merged already or a variant (DoRA)"
        weight = self.layers[0][2].base_layer.weight
        if weight.device.type == "cuda" and torch.cuda.mem_get_info(weight.device)[0] < self.copy_bytes() + CUDA_MARGIN:
            return f"the kept copy ({self.copy_bytes() / 1024**3:.2f} GiB) does not fit in free GPU memory"
        return None

    def _merge(self, kept: list[Any]) -> None:
        """Keep each base weight (into `kept`), add its delta in float32 (one rounding), and put the plain layer in
        its place."""
        import torch

        with torch.no_grad():
            for parent, name, lora in self.layers:
                weight = lora.base_layer.weight
                kept.append(weight.detach().clone())
                delta = sum(lora.get_delta_weight(a).float() for a in lora.active_adapters if a in lora.lora_A)
                weight.copy_(weight.float() + delta)
                setattr(parent, name, lora.base_layer)
        self.rounds += 1

    def _restore(self, kept: list[Any]) -> None:
        import torch

        with torch.no_grad():
            for (parent, name, lora), weight in zip(self.layers, kept, strict=False):
                setattr(parent, name, lora)
                lora.base_layer.weight.copy_(weight)


def lora_layers(model: Any) -> tuple[list[tuple[Any, str, Any]], str]:
    """(parent, attribute, LoRA layer) for every plain LoRA linear layer over an `nn.Linear`, or ([], why not)."""
    import torch
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import Linear as LoraLinear

    found: list[tuple[Any, str, Any]] = []
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if module.lora_variant or any(module.lora_bias.values()):
            return [], "DoRA or LoRA biases: their merge is not a plain delta"
        if type(module) is LoraLinear and type(module.base_layer) is torch.nn.Linear:
            parent, _, attr = name.rpartition(".")
            found.append((model.get_submodule(parent), attr, module))
    if not found:
        return [], "no LoRA linear layer over a plain (unquantized) nn.Linear"
    return found, ""


def merge_for_generation(model: Any) -> MergedGeneration | None:
    """Install the merge on this PEFT model's `generate`; None when off (GRPO_MERGED_GENERATION=0) or not
    applicable (no plain LoRA linear layers, DoRA, quantized base)."""
    if merge_switched_off():
        return None
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False):
        return None
    layers, _ = lora_layers(model)
    return MergedGeneration(model, layers) if layers else None


def attach_merged_generation(trainer: Any, path: GenerationPath) -> MergedGeneration | None:
    """The one attach: merge the adapter around TRL's transformers `generate` where the plan chose it."""
    return merge_for_generation(trainer.model) if path.merge else None
