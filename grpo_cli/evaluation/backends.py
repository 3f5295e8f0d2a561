"""The two samplers of an evaluation: batched, left-padded transformers `generate`, and vLLM's offline engine (by
default when vLLM is installed and a GPU is present; with `--backend vllm` also on the CPU, with vLLM's CPU build,
scripts/install_vllm_cpu.sh). Both take prompts and give (texts, token ids, truncated) per completion.
`check_backend` picks one; `one_model` holds one model loaded for it at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_cli.data.images import is_processor
from grpo_cli.errors import GrpoError
from grpo_cli.models.sources import load_source_model, read_json
from grpo_cli.planning.vllm_support import cpu_env, head_size_problem, vllm_is_cpu_build
from grpo_cli.progress import active, advance
from grpo_cli.recipe.profiles import launch_profile

if TYPE_CHECKING:
    from grpo_cli.evaluation.scoring import EvalSettings
    from grpo_cli.models.sources import ModelSource

Sampler = Callable[[list[Any]], tuple[list[str], list[list[int]], list[bool]]]
"""prompts -> (texts, token ids, truncated), k completions per prompt, prompt-major (vLLM's, in place of generate)."""


def prompt_texts(prompts: list[Any], tokenizer: Any) -> list[str]:
    texts = []
    for p in prompts:
        if isinstance(p, list):
            texts.append(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False))
        else:
            texts.append(p)
    return texts


def _image_batches(processor: Any, prompts: list[Any], images: list[Any], k: int, batch_size: int) -> Any:
    """Processor inputs for image prompts, each prompt repeated k times (pixel values are per image, so
    `num_return_sequences` cannot expand them for every architecture)."""
    from trl.data_utils import prepare_multimodal_messages

    texts = [processor.apply_chat_template(prepare_multimodal_messages(p, images=list(imgs or [])),
                                           add_generation_prompt=True, tokenize=False)
             for p, imgs in zip(prompts, images, strict=True)]
    texts = [t for t in texts for _ in range(k)]
    images = [list(imgs or []) for imgs in images for _ in range(k)]
    for start in range(0, len(texts), batch_size):
        chunk = images[start:start + batch_size]
        yield processor(text=texts[start:start + batch_size], images=chunk if any(chunk) else None,
                        padding=True, return_tensors="pt", add_special_tokens=False)


def _text_batches(tokenizer: Any, prompts: list[Any], batch_size: int) -> Any:
    texts = prompt_texts(prompts, tokenizer)
    # As TRL: plain prompts get the tokenizer's special tokens (e.g. BOS); chat templates carry their own.
    special = not (prompts and isinstance(prompts[0], list))
    for start in range(0, len(texts), batch_size):
        yield tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True, add_special_tokens=special)


def _ticker(prompt_len: int, eos: int | None, per_row: int, batch: str, max_new_tokens: int) -> list[Any]:
    """A stopping criterion that stops nothing: called after every generated token, it moves the progress by the
    completions that reached EOS and names the token, so a batch of 32 answers of 512 tokens (minutes on a CPU)
    shows movement inside the batch and a piped log gets its line every few seconds. Returns the rest of the
    batch's count to `advance` when it ends."""
    import torch
    from transformers import StoppingCriteria

    class Ticker(StoppingCriteria):
        finished = 0

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            done = int((input_ids[:, prompt_len:] == eos).any(dim=1).sum()) if eos is not None else 0
            step = input_ids.shape[1] - prompt_len
            advance((done - self.finished) * per_row, f"batch {batch}, token {step}/{max_new_tokens}")
            self.finished = done
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return [Ticker()] if active() else []


def generate(model: Any, tokenizer: Any, prompts: list[Any], *, k: int, temperature: float, top_p: float,
             max_new_tokens: int, batch_size: int, seed: int, images: list[Any] | None = None
             ) -> tuple[list[str], list[list[int]], list[bool]]:
    """k samples per prompt, batched with left padding; returns texts, token ids and truncation flags.

    `tokenizer` may be a vision-language processor; then `images` (a list of images per prompt) go with them.
    Sampling is seeded inside a forked RNG, so evaluating during training leaves training's random stream as it was.
    """
    import torch

    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        return _generate(model, tokenizer, prompts, k=k, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, batch_size=batch_size, images=images)


def _generate(model: Any, tokenizer: Any, prompts: list[Any], *, k: int, temperature: float, top_p: float,
              max_new_tokens: int, batch_size: int, images: list[Any] | None) -> tuple[list[str], list[list[int]],
                                                                                    list[bool]]:
    import torch

    device = next(model.parameters()).device
    processor = tokenizer if is_processor(tokenizer) else None
    if processor is not None:
        tokenizer = processor.tokenizer
    # A VLM's chat template lives in its processor: chat prompts go through it, with or without images.
    with_images = processor is not None and (images is not None or bool(prompts) and isinstance(prompts[0], list))
    per_call = 1 if with_images else k
    images = images if images is not None else [None] * len(prompts)
    batches = (_image_batches(processor, prompts, images, k, max(batch_size, 1) * k) if with_images
               else _text_batches(tokenizer, prompts, batch_size))
    extra: dict[str, Any] = {}
    image_token = getattr(model.config, "image_token_id", None)
    if processor is not None and image_token is not None:  # as TRL: a sampled image token breaks the features
        extra["suppress_tokens"] = [image_token]
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    sample = temperature > 0
    settings = dict(do_sample=sample, temperature=temperature if sample else None, top_p=top_p if sample else None,
                    top_k=0 if sample else None, max_new_tokens=max_new_tokens,
                    num_return_sequences=per_call if sample else 1, pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id, **extra,
                    # One process evaluates a whole model; under a ZeRO-3 launch transformers
                    # would otherwise wait at every token for ranks that are not generating.
                    synced_gpus=False)
    repeat = k if not sample and per_call > 1 else 1  # greedy is deterministic: k copies of the one answer
    n_batches = -(-len(prompts) // max(batch_size, 1))
    out: list[list[int]] = []
    try:
        for b, enc in enumerate(batches):
            enc = enc.to(device)
            ticker = _ticker(enc["input_ids"].shape[1], tokenizer.eos_token_id, repeat, f"{b + 1}/{n_batches}",
                             max_new_tokens)
            with torch.inference_mode():
                gen = model.generate(**enc, stopping_criteria=ticker, **settings)
            new = gen.repeat_interleave(repeat, dim=0)[:, enc["input_ids"].shape[1]:].tolist()
            advance(len(new) - (ticker[0].finished * repeat if ticker else 0))
            out += new
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    return _decoded(tokenizer, out)


def _decoded(tokenizer: Any, generated: list[list[int]]) -> tuple[list[str], list[list[int]], list[bool]]:
    """Texts, ids cut after EOS, and whether each ran to the token limit without one."""
    eos = tokenizer.eos_token_id
    out_texts: list[str] = []
    out_ids: list[list[int]] = []
    truncated: list[bool] = []
    for ids in generated:
        if eos in ids:
            ids = ids[:ids.index(eos) + 1]
            truncated.append(False)
        else:
            ids = [t for t in ids if t != tokenizer.pad_token_id] if tokenizer.pad_token_id != eos else ids
            truncated.append(True)
        out_ids.append(ids)
        out_texts.append(tokenizer.decode(ids, skip_special_tokens=True))
    return out_texts, out_ids, truncated


# ---------------------------------------------------------------------------- vLLM's offline engine


def vllm_usable() -> bool:
    """`--backend vllm` can run here: vLLM's CPU build is installed, or vLLM and a CUDA GPU."""
    import importlib.util

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


def _refuse_overlong(lengths: list[int], limit: int | None, offset: int) -> None:
    """One paragraph for prompts vLLM refuses: as long as its context or longer, so no token fits after them
    (vLLM's engine raises VLLMValidationError on the first, a traceback mid-run). `offset`: the prompts this
    sampler took before these, so the row counts from the first it was given."""
    if not isinstance(limit, int):
        return
    over = [(offset + i, n) for i, n in enumerate(lengths) if n >= limit]
    if not over:
        return
    (first, tokens), more = over[0], ""
    if len(over) > 1:
        more = f"; {len(over)} of the {len(lengths)} prompts sampled with it are that long"
    raise GrpoError(f"prompt row {first} (counting from 0) is {tokens} tokens, and vLLM holds at most {limit} for "
                    f"this model (its context, max_model_len) for prompt and completion together, so it refuses "
                    f"the row{more}",
                    where="--backend vllm",
                    fix=f"Shorten or drop the prompts longer than {limit - 1} tokens, or use a model with a longer "
                        "context.")


def vllm_sampler(source: ModelSource, tokenizer: Any, settings: EvalSettings, dtype: str,
                 trust_remote_code: bool = False) -> tuple[Sampler, Callable[[], None]]:
    """A sampler backed by vLLM's offline engine (LoRA through a LoRARequest) and a function freeing it."""
    import gc

    on_cpu = _prepare_cpu(source)
    import torch
    from vllm import LLM, SamplingParams

    kwargs: dict[str, Any] = {"model": source.weights, "tokenizer": source.tokenizer or source.weights,
                              "dtype": dtype, "seed": settings.seed, "trust_remote_code": trust_remote_code,
                              "gpu_memory_utilization": 0.85,
                              # On CPU torch.compile at start-up costs minutes (147 s vs 39 s, performance.md).
                              "enforce_eager": on_cpu}
    if on_cpu:
        # A seeded request has its own torch.Generator, which vLLM rewinds when the request's prefill is split over
        # engine steps (more prompt tokens than max_num_batched_tokens, 4096 on CPU: 8 SmolLM2 chat prompts x 8) with
        # Generator.set_offset; torch's CPU generator refuses ('CPU Generator does not use offset',
        # vllm/v1/worker/gpu_model_runner.py _bookkeeping_sync) and the engine died. Unsplit prefills (vLLM then
        # takes max_model_len tokens a step) keep the seed per request, so a batch samples the same every run.
        kwargs["enable_chunked_prefill"] = False
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

    taken = 0  # prompts sampled so far: calibrate samples its rows batch by batch

    def sample(prompts: list[Any]) -> tuple[list[str], list[list[int]], list[bool]]:
        nonlocal taken
        # Token ids, not text, so vLLM adds no second BOS: the model sees what `generate` would.
        special = not (prompts and isinstance(prompts[0], list))  # as TRL tokenizes prompts
        inputs = [{"prompt_token_ids": tokenizer(t, add_special_tokens=special)["input_ids"]}
                  for t in prompt_texts(prompts, tokenizer)]
        _refuse_overlong([len(i["prompt_token_ids"]) for i in inputs],
                         getattr(getattr(llm, "model_config", None), "max_model_len", None), taken)
        taken += len(inputs)
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


# ---------------------------------------------------------------------------- which sampler, one model at a time

BACKENDS = ("auto", "transformers", "vllm")


def check_backend(backend: str, *, images: bool = False, tools: bool = False, profile: str = "single") -> bool:
    """Validate --backend before any model loads; True when vLLM will be used."""
    if backend not in BACKENDS:
        raise GrpoError(f"unknown backend {backend!r}", where="--backend", fix="Use auto, transformers or vllm.")
    if tools and backend == "vllm":
        raise GrpoError("--backend vllm does not run multi-turn tool episodes", where="--backend",
                        fix="Use --backend transformers (the default for recipes with tools).")
    if images and backend == "vllm":
        raise GrpoError("grpo eval's vLLM backend does not pass images yet", where="--backend",
                        fix="Use --backend transformers (the default picks it for image rows).")
    if backend == "vllm" and not vllm_usable():
        raise GrpoError("--backend vllm needs vLLM with a CUDA GPU, or vLLM's CPU build", where="--backend",
                        fix="pip install 'grpo-cli[vllm]' on a GPU machine, or build the CPU environment with "
                            "scripts/install_vllm_cpu.sh (see docs/distributed.md), or use --backend transformers.")
    return not images and not tools and (backend == "vllm" or (backend == "auto" and vllm_available(profile)))


@dataclass
class Loaded:
    """The model being sampled: transformers' model, or vLLM's sampler (one of them)."""

    model: Any = None
    """transformers' model (theirs, untyped to us)."""
    sampler: Sampler | None = None


@contextlib.contextmanager
def one_model(source: ModelSource, tokenizer: Any, settings: EvalSettings, *, use_vllm: bool, dtype: str, device: str,
              trust_remote_code: bool = False, revision: str | None = None) -> Iterator[Loaded]:
    """`source` loaded for sampling (vLLM's engine or transformers' model) and freed afterwards, so an evaluation
    of several models (`grpo eval`, a recipe's or a suite's) holds one of them in memory at a time."""
    import gc

    loaded, close = Loaded(), None
    if use_vllm:
        loaded.sampler, close = vllm_sampler(source, tokenizer, settings, dtype, trust_remote_code)
    else:
        loaded.model = load_source_model(source, dtype=dtype, device=device, revision=revision,
                                         trust_remote_code=trust_remote_code)
    try:
        yield loaded
    finally:
        if close is not None:
            close()
        loaded.model = None
        gc.collect()
