"""Where one training step's time goes, on a real model: generation, rewards, log-probabilities, forward,
backward, optimizer and the rest, as `grpo train` logs it (`time/*` in metrics.jsonl).

    python benchmarks/micro/step_split.py                      # trains recipes/smollm2-word-arith.yaml for 6 steps
    python benchmarks/micro/step_split.py --run outputs/smollm2-word-arith   # the split of a run already made
    python benchmarks/micro/step_split.py --recipe recipes/demo.yaml --steps 20
    .venv-vllm/bin/python benchmarks/micro/step_split.py --plain-generate --set launch.vllm.mode=colocate \
        model.name_or_path=DIR                           # vLLM's in-step generation against plain `generate`

Prints a table with the load average and thread count (`--record`: also to docs/performance/history/). With
`--plain-generate` the same process then times plain batched `model.generate` of the base model on the recipe's
own prompts, at the step's batch (prompts x num_generations, the recipe's temperature and completion length) and
the run's torch thread count, and prints the in-step generation as a fraction of it: the "generation inside a step
against what `generate` alone reaches" comparison, timed in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402
from grpo_cli import runs  # noqa: E402
from grpo_cli.artefacts.time_split import time_split  # noqa: E402


def _train(recipe: str, steps: int, out: Path, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "grpo_cli", "train", recipe, "-o", str(out), "--force",
           f"training.max_steps={steps}", "training.logging_steps=1", "eval.before_after=false", *overrides]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _plain_generate(recipe_path: str, overrides: list[str], threads: int, batches: int) -> float:
    """Median seconds of one plain `model.generate` call at the step's batch, on the recipe's first prompts
    (mapped and templated as training maps them: `data.map_split`, `evaluation.prompt_texts`)."""
    import statistics
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from grpo_cli import load_recipe
    from grpo_cli.data import map_split
    from grpo_cli.evaluation import prompt_texts
    from grpo_cli.models import load_tokenizer, model_reference

    recipe = load_recipe(ROOT / recipe_path, overrides)
    torch.set_num_threads(threads)
    tok = load_tokenizer(recipe)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_reference(recipe), dtype=torch.float32).eval()
    rows = map_split(recipe, tok, recipe.data.split)
    per_step = recipe.training.generation_batch(1) // recipe.training.num_generations
    times = []
    for b in range(batches + 1):  # the first call warms up
        texts = prompt_texts(rows[b * per_step:(b + 1) * per_step]["prompt"], tok)
        batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(**batch, do_sample=True, temperature=recipe.training.temperature, top_p=1.0, top_k=0,
                           num_return_sequences=recipe.training.num_generations,
                           max_new_tokens=recipe.training.max_completion_length, pad_token_id=tok.pad_token_id)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/smollm2-word-arith.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--run", help="Read the split of this finished run instead of training.")
    parser.add_argument("--set", nargs="*", default=[], help="Overrides for the run (KEY=VALUE).")
    parser.add_argument("--plain-generate", action="store_true",
                        help="Then time plain `generate` at the step's batch and compare.")
    parser.add_argument("--batches", type=int, default=5, help="Plain `generate` calls timed (their median).")
    add_record(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpo-split-") as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "run"
        if not args.run:
            _train(args.recipe, args.steps, run, args.set)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        manifest = runs.read_manifest(run)
        hardware = manifest.hardware if manifest is not None else None
        run_threads = (hardware.torch_threads if hardware is not None else None) or 1
    split = time_split(rows)
    if not split:
        sys.exit(f"{run} logged no time/* split (trained before grpo logged it?)")
    total = sum(s for _, s, _ in split)
    lines = ["| part | s / step | share |", "|---|---:|---:|"]
    lines += [f"| {part} | {seconds:.2f} | {share:.0%} |" for part, seconds, share in split]
    lines.append(f"| **step** | **{total:.2f}** | 100% |")
    if args.plain_generate:
        plain = _plain_generate(args.recipe, args.set, run_threads, args.batches)
        generation = dict((part, seconds) for part, seconds, _ in split).get("generation")
        lines.append(f"| plain `generate`, same batch, {run_threads} thread(s), median of {args.batches} | {plain:.2f} "
                     "| |")
        if generation is not None:
            lines.append(f"| in-step generation / plain `generate` | {generation / plain:.2f}x | |")
    table = "\n".join(lines)
    print(table)
    if args.record:
        threads = os.environ.get("OMP_NUM_THREADS", "torch default")
        what = args.run or f"{args.recipe}, {args.steps} steps{' ' + ' '.join(args.set) if args.set else ''}"
        header = (f"### Where a step's time goes: {what} ({stamp()}, {platform.machine()}, {os.cpu_count()} "
                  f"cores, threads {threads}, load {load(all_three=True)})\n\n")
        record(header + table + "\n")


if __name__ == "__main__":
    main()
