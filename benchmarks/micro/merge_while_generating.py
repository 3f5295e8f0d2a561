"""One SmolLM2 GRPO step's generation with the LoRA adapter unmerged (TRL's way) and merged (grpo's), on the CPU.

The batch and model are benchmarks/micro/prefill_generation.py's: the bundled SmolLM2 recipe's 2 word problems x 8
completions of 32 tokens, its LoRA adapter (r=16 on the attention projections, B drawn so it changes the logits)
in training mode, as grpo generates inside a step (the shared prefill on in both). The two alternate in pairs in
one process; each figure is the CPU seconds of one `generate` call, the merge and the restore included. Also
checks that both sample the same tokens for the same seed and that the base weights are bit-identical after.
Prints a table (docs/distributed.md keeps the figures).

    python benchmarks/micro/merge_while_generating.py [--pairs 5] [--threads 1] [--tokens 32]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.micro` and grpo_cli, however the script is run

from benchmarks.micro.prefill_generation import _setup, alternate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=32, help="completion tokens (a smoke run uses a few)")
    args = parser.parse_args()
    import torch

    from grpo_cli.training.merged_generation import merge_for_generation
    from grpo_cli.training.shared_prefill import SharedPrefill

    torch.set_num_threads(args.threads)
    model, batch, config = _setup(args.tokens)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    shared = SharedPrefill(model)
    merged = merge_for_generation(model)
    assert merged is not None
    p, m, same = alternate(shared.generate, merged.generate, batch, config, args.pairs)
    exact = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    print(f"load average {os.getloadavg()[0]:.1f}, {args.pairs} pairs, {args.threads} torch thread(s)\n")
    print("| unmerged LoRA (CPU s) | merged (CPU s) | change | same tokens | weights bit-identical after |")
    print("|---|---|---|---|---|")
    print(f"| {p:.2f} | {m:.2f} | {(m - p) / p:+.0%} | {'yes' if same else 'NO'} | {'yes' if exact else 'NO'} |")


if __name__ == "__main__":
    main()
