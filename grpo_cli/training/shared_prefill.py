"""Each prompt of a GRPO group prefilled once, not once per completion, when TRL generates with transformers.

TRL repeats every prompt `num_generations` times and hands the batch to `generate`, which runs the prompt's forward
pass for every copy. On the SmolLM2 recipe (2 prompts x 8 completions of 32 tokens, 66-token prompts) that prefill
was a third of generation's CPU time. Here the unique rows are prefilled once, their KV cache is copied to every
row of the group, and `generate` goes on from the last prompt token: the same tokens, the same logits (a test
compares them), with no change to sampling. It is skipped where it could change anything: active dropout (each copy
would otherwise get its own mask), extra model inputs (images), a batch without repeats, or a cache that is not
transformers' DynamicCache. `GRPO_SHARED_PREFILL=0` turns it off.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

OFF_ENV = "GRPO_SHARED_PREFILL"
PLAIN_INPUTS = {"input_ids", "attention_mask", "generation_config"}


class SharedPrefill:
    """Wraps one model instance's `generate`; counts the prompt rows whose prefill it saved."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.original: Callable[..., Any] = model.generate
        self.calls = 0
        self.rows_saved = 0
        self.cache_arg = cache_argument(model)
        model.generate = self.generate

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        plan = self._plan(args, kwargs)
        if plan is None:
            return self.original(*args, **kwargs)
        first, mapping = plan
        cache = self._prefill(kwargs["input_ids"][first], kwargs["attention_mask"][first])
        if cache is None:
            return self.original(*args, **kwargs)
        cache.reorder_cache(mapping)  # row r of the batch gets the cache of its prompt's first copy
        self.calls += 1
        self.rows_saved += len(mapping) - len(first)
        return self.original(**kwargs, **{self.cache_arg: cache})

    def _plan(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """(rows to prefill, for each batch row the index of its prompt among them), or None to leave it alone."""
        import torch

        if args or not set(kwargs) <= PLAIN_INPUTS or "input_ids" not in kwargs or "attention_mask" not in kwargs:
            return None
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        if ids.dim() != 2 or ids.shape[1] < 2 or dropout_active(self.model):
            return None
        config = kwargs.get("generation_config")
        if config is not None and ((getattr(config, "num_beams", None) or 1) != 1
                                   or (getattr(config, "num_return_sequences", None) or 1) != 1
                                   or getattr(config, "cache_implementation", None) not in (None, "dynamic")):
            return None  # (transformers 5 leaves unset fields None)
        rows = torch.cat([ids, mask.to(ids.dtype)], dim=1)
        seen: dict[tuple[int, ...], int] = {}
        first: list[int] = []
        mapping: list[int] = []
        for r, row in enumerate(rows.tolist()):
            key = tuple(row)
            if key not in seen:
                seen[key] = len(first)
                first.append(r)
            mapping.append(seen[key])
        if len(first) == len(mapping):
            return None
        return torch.tensor(first, device=ids.device), torch.tensor(mapping, device=ids.device)

    def _prefill(self, ids: Any, mask: Any) -> Any:
        """The KV cache of every prompt token but the last (generate needs one to start from); None if the model
        does not hand back a DynamicCache."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate derives them for left padding
        with torch.no_grad():
            out = self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                             use_cache=True, logits_to_keep=1, **{self.cache_arg: cache})
        returned = out.get(self.cache_arg, cache) if hasattr(out, "get") else cache  # the model's output dict
        return returned if isinstance(returned, DynamicCache) else None


def peft_base(model: Any) -> Any:
    """The transformers model under PEFT's wrapper (the model itself without one)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_argument(model: Any) -> str:
    """The name under which the model's forward takes a KV cache (transformers 5.2x renamed `past_key_values`)."""
    return "cache" if "cache" in inspect.signature(peft_base(model).forward).parameters else "past_key_values"


def dropout_active(model: Any) -> bool:
    """Dropout that acts during generation (the model is in training mode inside a GRPO step)."""
    import torch

    if not model.training:
        return False
    if float(getattr(getattr(model, "config", None), "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def share_prompt_prefill(model: Any) -> SharedPrefill | None:
    """Install the shared prefill on this model's `generate` (None when turned off with GRPO_SHARED_PREFILL=0)."""
    if os.environ.get(OFF_ENV, "1").strip() in ("0", "false", "no", "off"):
        return None
    return SharedPrefill(model)
