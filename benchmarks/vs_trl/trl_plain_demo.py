#!/usr/bin/env python
"""Plain TRL GRPO on grpo_cli's embedded tiny arithmetic model, written by hand (no grpo_cli imports).

This is the side-by-side baseline for the wrapper-overhead benchmark: the same run the CLI's offline
default performs, but spelled out directly against TRL. It

1. loads the tiny Qwen2 model and its tokenizer from ``grpo_cli/assets/tiny-arith``,
2. loads ``grpo_cli/assets/tiny-arith-data/train.jsonl`` with ``datasets``; the prompt is
   ``question + "="`` (a standard, non-chat prompt, e.g. ``"3+5="``),
3. measures held-out accuracy on ``test.jsonl`` under sampling at temperature 1,
4. trains with ``trl.GRPOTrainer`` on CPU with an accuracy reward,
5. measures held-out accuracy again, and prints both, the wall time and the train steps/s.

    python benchmarks/vs_trl/trl_plain_demo.py --max-steps 200 --seed 0
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

ASSETS = Path(__file__).resolve().parents[2] / "grpo_cli" / "assets"
MODEL_DIR = ASSETS / "tiny-arith"
DATA_DIR = ASSETS / "tiny-arith-data"

_FIRST_NUMBER = re.compile(r"-?\d+")


def first_number(text: str) -> str | None:
    """The first integer in ``text`` after leading whitespace, e.g. ``" 12<junk>"`` -> ``"12"``."""
    match = _FIRST_NUMBER.match(text.strip())
    return match.group(0) if match else None


def accuracy_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """TRL reward contract: one float per completion; ``answer`` is the dataset column of that name."""
    return [1.0 if first_number(c) == a else 0.0 for c, a in zip(completions, answer, strict=True)]


@torch.no_grad()
def heldout_accuracy(model, tokenizer, rows, samples: int, seed: int) -> float:
    """Mean accuracy_reward over ``samples`` temperature-1 completions per test question (0 samples: no run, 0.0)."""
    if samples == 0:
        return 0.0
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    prompts = [row["question"] + "=" for row in rows for _ in range(samples)]
    answers = [row["answer"] for row in rows for _ in range(samples)]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    out = model.generate(
        **batch,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=4,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train(was_training)
    rewards = accuracy_reward(completions, answers)
    return sum(rewards) / len(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=MODEL_DIR)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--output-dir", default="outputs/trl_plain_demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-steps", type=int, default=0, help="Checkpoint every N steps (0: none).")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--loss-type", default="dapo")
    parser.add_argument(
        "--eval-samples",
        type=int,
        default=8,
        help="temperature-1 samples per test question; 0 skips both evaluations (the wrapper-overhead benchmark: "
        "generating before train() changes the heap that train() starts from)",
    )
    parser.add_argument("--eval-seed", type=int, default=1234)
    parser.add_argument(
        "--num-threads",
        type=int,
        default=1,
        help="torch CPU threads (0: torch's default). A 100k-parameter model gains nothing from more: on an idle "
        "2-core machine 1 and 2 threads train equally fast, on a busy one 1 thread was 5-8x faster.",
    )
    args = parser.parse_args()
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    t_start = time.perf_counter()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    train_dataset = load_dataset("json", data_files=str(args.data_dir / "train.jsonl"), split="train")
    train_dataset = train_dataset.map(lambda row: {"prompt": row["question"] + "="})
    test_rows = list(load_dataset("json", data_files=str(args.data_dir / "test.jsonl"), split="train"))

    before = heldout_accuracy(model, tokenizer, test_rows, args.eval_samples, args.eval_seed)
    print(f"held-out accuracy before GRPO: {before:.3f}", flush=True)

    config = GRPOConfig(
        output_dir=args.output_dir,
        seed=args.seed,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,  # TRL's default (1e-6) is far too small for a 100k-parameter model
        lr_scheduler_type="constant",
        warmup_steps=0,
        # one optimizer step = prompts_per_step prompts x num_generations completions, generated fresh
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        gradient_accumulation_steps=1,
        num_generations=args.num_generations,
        max_completion_length=4,  # at most two digits + EOS are ever needed
        temperature=1.0,
        beta=0.0,
        loss_type=args.loss_type,
        # CPU, full precision; TRL defaults to bf16=True and gradient_checkpointing=True
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        activation_checkpointing=False,  # transformers 5.23's name for it; setting it too avoids a FutureWarning
        report_to="none",
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        save_only_model=True,
        logging_steps=10,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=accuracy_reward,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    t_train = time.perf_counter()
    result = trainer.train()
    train_wall = time.perf_counter() - t_train

    after = heldout_accuracy(trainer.model, tokenizer, test_rows, args.eval_samples, args.eval_seed)
    total_wall = time.perf_counter() - t_start
    steps = result.global_step
    print(f"held-out accuracy before GRPO: {before:.3f}")
    print(f"held-out accuracy after  GRPO: {after:.3f}  (change {after - before:+.3f})")
    print(f"train: {steps} steps in {train_wall:.1f}s wall = {steps / train_wall:.2f} steps/s")
    print(f"trainer train_steps_per_second: {result.metrics['train_steps_per_second']:.4f}")
    print(f"total wall (load + 2 evals + train; imports not included): {total_wall:.1f}s")


if __name__ == "__main__":
    main()
