#!/usr/bin/env python
"""Plain TRL GRPO of recipes/smollm2-word-arith.yaml, written by hand (no grpo_cli imports): the baseline of
benchmarks/vs_trl/time_to_accuracy.py.

What a user pastes from a TRL guide, with the recipe's settings: SmolLM2-135M-Instruct (a safetensors dir: the
benchmark passes the one `grpo` converted from the GGUF file), LoRA r 16 / alpha 32 on the attention projections,
the word problems as chat prompts under the recipe's system prompt, a last-number accuracy reward, 2 prompts x 8
completions of at most 32 tokens a step, DAPO loss, beta 0, learning rate 2e-4 constant, seed 42. torch keeps its
own thread default (what a plain script gets). Checkpoints every `--save-steps` so held-out accuracy can be read
against wall time afterwards (`grpo eval` scores them, the same way for every runner).

    python benchmarks/vs_trl/trl_plain_smollm2.py --model DIR --data-dir recipes/data/word-arith --max-steps 40
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "Solve the math word problem. Give only the final number inside <answer></answer>, like <answer>7</answer>."
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> float | None:
    """The last number in the reply ("1,080" reads as 1080), or None."""
    found = _NUMBER.findall(text)
    try:
        return float(found[-1].replace(",", "")) if found else None
    except ValueError:
        return None


def accuracy_reward(completions: list[list[dict[str, str]]], answer: list[str], **kwargs: object) -> list[float]:
    """1 when the reply's last number equals the reference, else 0 (TRL's conversational completions)."""
    return [1.0 if last_number(c[-1]["content"]) == float(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "recipes" / "data" / "word-arith")
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--save-steps", type=int, default=0, help="Checkpoint every N steps (0: none).")
    parser.add_argument("--output-dir", default="outputs/trl_plain_smollm2")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-completion-length", type=int, default=32, help="The recipe's 32 (fewer: smoke test).")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype="float32")
    train = load_dataset("json", data_files=str(args.data_dir / "train.jsonl"), split="train")
    train = train.map(lambda row: {"prompt": [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": row["question"]}]})
    config = GRPOConfig(
        output_dir=args.output_dir, seed=args.seed, max_steps=args.max_steps,
        learning_rate=2e-4, lr_scheduler_type="constant", beta=0.0, loss_type="dapo",
        num_generations=8, per_device_train_batch_size=16, max_completion_length=args.max_completion_length,
        temperature=1.0,
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, report_to="none",
        logging_steps=5, disable_tqdm=True,
        save_strategy="steps" if args.save_steps else "no", save_steps=args.save_steps or 500, save_only_model=True,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=accuracy_reward, args=config, train_dataset=train,
                          processing_class=tokenizer, peft_config=lora)
    trainer.train()
    trainer.save_model(args.output_dir)


if __name__ == "__main__":
    main()
