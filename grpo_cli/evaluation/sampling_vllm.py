"""`grpo eval` on vLLM's offline engine, used when vLLM is installed and a GPU is present."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Sampler = Callable[[list[Any]], tuple[list[str], list[list[int]], list[bool]]]


def vllm_available(profile: str = "single") -> bool:
    """vLLM's offline engine is used when it is installed and a GPU is present."""
    import importlib.util

    if profile == "cpu" or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def vllm_sampler(source: Any, tokenizer: Any, settings: Any, dtype: str,
                 trust_remote_code: bool = False) -> tuple[Sampler, Callable[[], None]]:
    """A sampler backed by vLLM's offline engine (LoRA through a LoRARequest) and a function freeing it."""
    import gc

    import torch
    from vllm import LLM, SamplingParams

    from grpo_cli.evaluation.sampling import prompt_texts

    kwargs: dict[str, Any] = {"model": source.weights, "tokenizer": source.tokenizer or source.weights,
                              "dtype": dtype, "seed": settings.seed, "trust_remote_code": trust_remote_code,
                              "gpu_memory_utilization": 0.85}
    lora = None
    if source.adapter is not None:
        from vllm.lora.request import LoRARequest

        from grpo_cli.models.sources import read_json

        rank = int(read_json(source.adapter / "adapter_config.json").get("r") or 16)
        kwargs.update(enable_lora=True, max_lora_rank=next(r for r in (8, 16, 32, 64, 128, 256, 512) if r >= rank))
        lora = LoRARequest("adapter", 1, str(source.adapter))
    llm = LLM(**kwargs)
    greedy = settings.temperature == 0
    params = SamplingParams(n=1 if greedy else settings.k, temperature=settings.temperature, top_p=settings.top_p,
                            max_tokens=settings.max_new_tokens, seed=settings.seed)

    def sample(prompts: list[Any]) -> tuple[list[str], list[list[int]], list[bool]]:
        # Token ids, not text, so vLLM adds no second BOS: the model sees what `generate` would.
        special = not (prompts and isinstance(prompts[0], list))  # as TRL tokenizes prompts
        inputs = [{"prompt_token_ids": tokenizer(t, add_special_tokens=special)["input_ids"]}
                  for t in prompt_texts(prompts, tokenizer)]
        outs = llm.generate(inputs, params, lora_request=lora, use_tqdm=False)
        texts, ids, truncated = [], [], []
        for out in outs:
            for choice in out.outputs * (settings.k if greedy else 1):
                texts.append(choice.text)
                ids.append(list(choice.token_ids))
                truncated.append(choice.finish_reason == "length")
        return texts, ids, truncated

    def close() -> None:
        nonlocal llm
        del llm
        gc.collect()
        torch.cuda.empty_cache()

    return sample, close
