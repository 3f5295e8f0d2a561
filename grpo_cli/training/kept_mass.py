"""The probability mass vLLM's truncated sampling kept, from the trainer's own logits: the importance-sampling fix.

With `top_p < 1`, `top_k > 0` or `min_p > 0`, vLLM samples from the distribution left after truncation and returns
log-probabilities renormalised over the tokens it kept (`processed_logprobs`), while TRL 1.16's trainer scores the
same tokens over the whole vocabulary. Their difference is `log S`, S the kept mass, for every token: the
importance-sampling ratio `exp(old - sampling)` is S instead of 1 (TRL issue #6789; about 0.9 at top_p 0.8). TRL 1.17
renormalises the trainer's log-probabilities over the same kept set; grpo does the same on 1.16: the kept set is
replayed on the trainer's logits in vLLM's order (temperature, min_p, top_k, then top_p over what top_k left, as
`vllm/v1/sample/sampler.py` and `ops/topk_topp_sampler.py` apply them) and the ratio uses `old - log S`.

The logits are not at hand (TRL's fused LM head never materialises them), so the backbone's last hidden states are
captured by a forward hook during the log-probability forward TRL runs anyway, and the LM head is applied to the
completion positions again without gradient (one extra matmul over the completion tokens, no extra forward).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Truncation:
    """What vLLM's sampler truncates with (TRL passes the trainer's settings, then `generation_kwargs` over them)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0

    @property
    def active(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0 or self.min_p > 0.0


def truncation_of(trainer: Any) -> Truncation | None:
    """The trainer's vLLM truncation, or None when vLLM samples from the whole distribution (nothing to fix)."""
    if not getattr(trainer, "use_vllm", False):
        return None
    extra = dict(getattr(trainer.args, "generation_kwargs", None) or {})
    found = Truncation(temperature=float(extra.get("temperature", trainer.temperature)),
                       top_p=float(extra.get("top_p", trainer.top_p) or 1.0),
                       top_k=max(int(extra.get("top_k", trainer.top_k) or 0), 0),
                       min_p=float(extra.get("min_p", trainer.min_p) or 0.0))
    return found if found.active else None


def log_kept_mass(logits: Any, truncation: Truncation) -> Any:
    """log S per row of temperature-scaled logits (N, V): the mass of the tokens vLLM's sampler keeps, in (-inf, 0]."""
    import torch

    full = torch.logsumexp(logits, dim=-1)
    kept = logits
    if truncation.min_p > 0.0:
        probs = torch.softmax(kept, dim=-1)
        kept = kept.masked_fill(probs < probs.amax(dim=-1, keepdim=True) * truncation.min_p, -math.inf)
    if truncation.top_k > 0 and truncation.top_k < kept.size(-1):
        kth = torch.topk(kept, truncation.top_k, dim=-1).values[:, -1:]
        kept = kept.masked_fill(kept < kth, -math.inf)
    if truncation.top_p < 1.0:
        ordered, index = kept.sort(dim=-1, descending=False)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1.0 - truncation.top_p
        drop[:, -1] = False  # at least one token
        kept = kept.scatter(-1, index, ordered.masked_fill(drop, -math.inf))
    return (torch.logsumexp(kept, dim=-1) - full).clamp(max=0.0)


def language_model(trainer: Any, model: Any) -> Any:
    """The causal LM under accelerate's and PEFT's wrappers (TRL's fused head is patched on it)."""
    unwrapped = trainer.accelerator.unwrap_model(model)
    return unwrapped.get_base_model() if hasattr(unwrapped, "get_base_model") else unwrapped


def _backbone(lm: Any) -> Any:
    """The module TRL's fused forward calls for hidden states (`add_fused_lm_head`'s `backbone_attr`)."""
    import transformers
    from packaging.version import Version

    if lm.config.get_text_config() is not lm.config and Version(transformers.__version__) < Version("5.0.0"):
        return lm.model
    return lm.base_model


def _logits(lm: Any, hidden: Any, temperature: float) -> Any:
    """Temperature-scaled logits of hidden states, with the model's logit scale and soft-capping (as TRL's head)."""
    import torch

    config = lm.config.get_text_config()
    head = lm.get_output_embeddings()
    weight, bias = head.weight, head.bias
    if hasattr(weight, "full_tensor"):  # FSDP2's DTensor, gathered as TRL's fused head does
        weight, bias = weight.full_tensor(), bias.full_tensor() if bias is not None else None
    out = torch.nn.functional.linear(hidden.to(weight.dtype), weight, bias).float()
    scale = getattr(config, "logit_scale", None) or getattr(config, "output_multiplier", None) \
        or getattr(config, "lm_head_multiplier", None)
    if scale is None and getattr(config, "logits_scaling", None):
        scale = config.logits_scaling if config.model_type == "hyperclovax" else 1 / config.logits_scaling
    out = out * float(scale or 1.0)
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        out = cap * torch.tanh(out / cap)
    return out / temperature


_LEFT_OUT = [0]
"""How many `left_out()` blocks are open: their forwards score no completion token and are not captured."""


@contextmanager
def left_out() -> Iterator[None]:
    """Forwards inside are not captured by `captured_log_mass` (shared_prompt_forward.py's prompt pass and its
    one-time check against TRL's forward: their hidden states are not the ones that score the completions)."""
    _LEFT_OUT[0] += 1
    try:
        yield
    finally:
        _LEFT_OUT[0] -= 1


@contextmanager
def captured_log_mass(lm: Any, truncation: Truncation, logits_to_keep: int) -> Iterator[list[Any]]:
    """Inside: the causal LM's log-probability forwards (`language_model`); after: one (B, logits_to_keep) tensor
    of log S in the list.

    Each forward's last hidden states (several when TRL chunks the batch) are captured by a hook on the backbone;
    position t's state scores token t + 1, so the completion tokens are scored by the `logits_to_keep` states
    before the last.
    """
    import torch

    states: list[Any] = []

    def keep(module: Any, args: Any, output: Any) -> None:
        if _LEFT_OUT[0]:
            return
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        states.append(hidden[:, -logits_to_keep - 1:-1].detach())

    handle = _backbone(lm).register_forward_hook(keep)
    result: list[Any] = []
    try:
        yield result
    finally:
        handle.remove()
    with torch.no_grad():
        rows = [_log_mass_rows(lm, h, truncation) for h in states]
    result.append(torch.cat(rows, dim=0))


def _log_mass_rows(lm: Any, hidden: Any, truncation: Truncation, chunk: int = 256) -> Any:
    """log S for (B, T, H) hidden states, `chunk` positions at a time (a full-vocabulary row each)."""
    import torch
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    flat = hidden.reshape(-1, hidden.size(-1))
    head = lm.get_output_embeddings()
    with maybe_gather_lm_head_ctx(head.weight, head.bias):  # ZeRO-3's sharded head, gathered as TRL's fused head does
        parts = [log_kept_mass(_logits(lm, flat[i:i + chunk], truncation.temperature), truncation)
                 for i in range(0, flat.size(0), chunk)]
    return torch.cat(parts).view(hidden.size(0), hidden.size(1))
