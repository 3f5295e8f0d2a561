"""Batched, left-padded sampling with transformers' `generate` (the backend when vLLM is not used)."""

from __future__ import annotations

from typing import Any


def prompt_texts(prompts: list[Any], tokenizer: Any) -> list[str]:
    texts = []
    for p in prompts:
        if isinstance(p, list):
            texts.append(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False))
        else:
            texts.append(p)
    return texts


def generate(model: Any, tokenizer: Any, prompts: list[Any], *, k: int, temperature: float, top_p: float,
             max_new_tokens: int, batch_size: int, seed: int) -> tuple[list[str], list[list[int]], list[bool]]:
    """k samples per prompt, batched with left padding; returns texts, token ids and truncation flags."""
    import torch

    torch.manual_seed(seed)
    device = next(model.parameters()).device
    texts = prompt_texts(prompts, tokenizer)
    # As TRL: plain prompts get the tokenizer's special tokens (e.g. BOS); chat templates carry their own.
    special = not (prompts and isinstance(prompts[0], list))
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    was_training = model.training
    model.eval()
    out_texts: list[str] = []
    out_ids: list[list[int]] = []
    truncated: list[bool] = []
    try:
        for start in range(0, len(texts), batch_size):
            chunk = texts[start:start + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=special).to(device)
            sample = temperature > 0
            with torch.inference_mode():
                gen = model.generate(**enc, do_sample=sample, temperature=temperature if sample else None,
                                     top_p=top_p if sample else None, top_k=0 if sample else None,
                                     max_new_tokens=max_new_tokens, num_return_sequences=k if sample else 1,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
            if not sample and k > 1:  # greedy is deterministic: k copies of the one answer
                gen = gen.repeat_interleave(k, dim=0)
            new = gen[:, enc["input_ids"].shape[1]:].tolist()
            for ids in new:
                if eos in ids:
                    ids = ids[:ids.index(eos) + 1]
                    truncated.append(False)
                else:
                    ids = [t for t in ids if t != tokenizer.pad_token_id] if tokenizer.pad_token_id != eos else ids
                    truncated.append(True)
                out_ids.append(ids)
                out_texts.append(tokenizer.decode(ids, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    return out_texts, out_ids, truncated
