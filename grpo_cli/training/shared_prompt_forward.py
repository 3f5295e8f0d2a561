"""Each GRPO group's prompt through the loss forward once, not once per completion (`sampling.share_prompt_forward`).

TRL scores a batch by running every row, prompt and completion, through the model: with 8 completions per prompt the
prompt's forward and backward are computed 8 times. Here the distinct prompts run once (all their tokens but the
last), their KV cache is copied to every row of the group, and the completions run on top of it, through TRL's own
fused LM head. Positions, masks and the completion log-probabilities are those of TRL's forward; the gradient of
the copies flows back into the one prompt forward, so the update is the same sum. On the SmolLM2 recipe (60-token
prompts, 32-token completions, 16 rows) forward and backward take 2.4 s instead of 6.3 s on 2 cores.
Floating-point sums run in another order: log-probabilities agree to about 1e-5, not bit for bit, which is why a
recipe asks for it. Left to TRL where sharing could change the estimate or is unproven: active dropout (each copy
would get its own mask), gradient checkpointing, several processes, extra model inputs (images), an MoE router loss,
or a batch without repeated prompts. `tests/training/test_shared_prompt_forward.py` compares log-probabilities,
entropies and gradients with TRL's method.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from grpo_cli.training.kept_mass import left_out
from grpo_cli.training.shared_prefill import cache_argument, dropout_active, peft_base

TOLERANCE = {"float32": 0.01, "half": 0.25}
"""Nats: the largest gap to TRL's forward the first shared chunk may show, by the precision the forward runs in
(float order gives 1e-5 in float32, up to about 0.1 in bf16 at large logits)."""
METRIC = "shared_prompt_forward/rows_saved"
"""Logged per scored chunk: the rows whose prompt did not run a forward of its own."""


class SharedPromptForward:
    """Wraps one trainer's `_get_per_token_logps_and_entropies`; counts the prompt rows whose forward it saved."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.original: Callable[..., Any] = trainer._get_per_token_logps_and_entropies
        self.calls = 0
        self.rows_saved = 0
        self.checked: bool | None = None  # None until the first shared chunk is compared with TRL's forward
        model = trainer.model
        self.config = peft_base(model).config
        self.cache_arg = cache_argument(model)
        trainer._get_per_token_logps_and_entropies = self.per_token_logps

    def per_token_logps(self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                        batch_size: int | None = None, compute_entropy: bool = False, compute_aux_loss: bool = False,
                        **extra: Any) -> Any:
        """TRL's (log-probs, entropies, aux loss), computed with one forward per distinct prompt where it applies."""
        if not self._applies(model, input_ids, logits_to_keep, compute_aux_loss, extra):
            return self.original(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                                 compute_aux_loss, **extra)
        import torch

        size = batch_size or input_ids.size(0)  # TRL's chunks, kept: they bound the memory peak
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), size):
            ids, mask = input_ids[start:start + size], attention_mask[start:start + size]
            if self.checked is None:
                self.checked = self._agrees(model, ids, mask, logits_to_keep)
            shared = self._shared(model, ids, mask, logits_to_keep) if self.checked is not False else None
            if shared is None:
                out = self.original(model, ids, mask, logits_to_keep, None, compute_entropy, False)
                logps.append(out[0])
                entropies.append(out[1])
                continue
            self._count(shared.rows_saved)
            logps.append(shared.log_probs)
            entropies.append(shared.entropy if compute_entropy else None)
        return (torch.cat(logps, dim=0), torch.cat(entropies, dim=0) if compute_entropy else None, None)

    def _agrees(self, model: Any, ids: Any, mask: Any, keep: int) -> bool | None:
        """Once a run, before its first shared chunk: the shared log-probs against TRL's own forward of that chunk
        (no gradient, outside fused_is's capture). A model whose forward ignored the copied cache would score
        completions without their prompt: several nats off, where float order gives 1e-5 (bf16: 1e-2). On a
        mismatch the run goes TRL's way, said in one line. None: the chunk has no repeats, nothing to compare."""
        import torch

        with torch.no_grad(), left_out():
            shared = self._shared(model, ids, mask, keep)
            if shared is None:
                return None
            reference = self.original(model, ids, mask, keep, None, False, False)[0]
        log_probs = shared.log_probs
        scored = mask[:, -keep:].bool()
        gap = float((log_probs.detach() - reference)[scored].abs().max()) if scored.any() else 0.0
        tolerance = TOLERANCE["float32" if self._float32(model) else "half"]
        if gap <= tolerance:
            return True
        print(f"sampling.share_prompt_forward: off for this run; the shared prompt forward of "
              f"{type(self.config).__name__} scored completions {gap:.3g} nats away from TRL's forward (at most "
              f"{tolerance:g} expected), so every step runs TRL's forward", file=sys.stderr, flush=True)
        return False

    def _float32(self, model: Any) -> bool:
        import torch

        mixed = getattr(getattr(self.trainer, "accelerator", None), "mixed_precision", "no") not in ("no", None)
        return not mixed and all(p.dtype == torch.float32 for p in model.parameters() if p.is_floating_point())

    def _applies(self, model: Any, input_ids: Any, logits_to_keep: int, aux: bool, extra: dict[str, Any]) -> bool:
        accelerator = getattr(self.trainer, "accelerator", None)
        return (not aux and all(v is None for v in extra.values()) and input_ids.dim() == 2
                and input_ids.size(1) - logits_to_keep >= 2
                and getattr(accelerator, "num_processes", 1) == 1
                and not _checkpointing(self.trainer.model)
                and not dropout_active(self.trainer.model))

    def _shared(self, model: Any, ids: Any, mask: Any, keep: int) -> Any:
        """The fused head's output for one chunk (log_probs, entropy over the completion), or None without repeats."""
        import torch
        from transformers import DynamicCache

        prompt = ids.size(1) - keep
        rows = torch.cat([ids[:, :prompt], mask[:, :prompt].to(ids.dtype)], dim=1)
        distinct, inverse = torch.unique(rows, dim=0, return_inverse=True)
        if distinct.size(0) == rows.size(0):
            return None
        cache = DynamicCache(config=self.config)
        with self.trainer.accelerator.autocast():
            # every prompt token but the last: the last one's output scores the first completion token below
            with left_out():  # fused_is's kept-mass capture reads the completion pass's states only
                model(input_ids=distinct[:, :prompt - 1], attention_mask=distinct[:, prompt:-1].to(mask.dtype),
                      use_cache=True, logits_to_keep=1, **{self.cache_arg: cache})
            cache.reorder_cache(inverse)  # row r gets its prompt's cache; the gradients of the copies add up
            tail = ids[:, prompt - 1:]
            labels = tail.masked_fill(mask[:, prompt - 1:] == 0, -100)
            labels[:, 0] = -100
            out = model(input_ids=tail, attention_mask=mask, labels=labels, fused_lm_head=True,
                        **{self.cache_arg: cache})
        out.rows_saved = rows.size(0) - distinct.size(0)
        return out

    def _count(self, saved: int) -> None:
        """A shared chunk used: counted here and logged through TRL (which averages over the logging window)."""
        self.calls += 1
        self.rows_saved += saved
        metrics = getattr(self.trainer, "_metrics", None)
        if metrics is not None:
            mode = "train" if self.trainer.model.training else "eval"
            metrics[mode][METRIC].append(float(saved))


def _checkpointing(model: Any) -> bool:
    """Whether activations are checkpointed (transformers 5.2x renamed the property; the old name warns)."""
    base = peft_base(model)
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def share_prompt_forward(trainer: Any) -> SharedPromptForward:
    """Install the shared prompt forward on this trainer's log-probability method."""
    return SharedPromptForward(trainer)
