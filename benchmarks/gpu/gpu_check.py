"""The GPU proof kit's parts, each run in its own process by scripts/gpu_check.sh with its own time limit.

    python benchmarks/gpu/gpu_check.py parts [--dry-run] [--all]  # the ordered parts and their time limits
    python benchmarks/gpu/gpu_check.py run PART WORK [--dry-run]  # one part; writes WORK/PART.json
    python benchmarks/gpu/gpu_check.py table WORK OUTDIR          # OUTDIR/gpu_check.json and gpu_check.md
    python benchmarks/gpu/gpu_check.py record OUTDIR              # a new file in docs/performance/history/

Parts: `facts` (the machine, the versions, `grpo doctor --json`), `rates` (this card's bf16 matrix rate and copy
bandwidth), one `case` per model shape and tuning (benchmarks/gpu/gpu_cases.py: trained on TRL's default generation
path and on grpo's fast path, side by side: generation tokens/s, step time, their ratio, whether the first
round's sampled tokens agree; the memory plan against the CUDA peak, MFU), `merge` (`grpo merge` of a LoRA
adapter, verified by logits), `demo-amp` (the bundled demo on CUDA, fp32 weights with bf16 autocast: does it
complete and learn). Run only when GRPO_GPU_CHECK_PARTS names them (`parts --all` lists them): `demo-bf16` (bf16
weights) and the memory-only cases of the first H100 check. `--dry-run` runs the default parts on the CPU with tiny
sizes, so the kit cannot rot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: the kit as `benchmarks.gpu`

from benchmarks.gpu.gpu_cases import CASES, DRY_CASES, EXTRA_CASES, GIB, ROOT, build_model, find_case, run_case  # noqa: E402
from benchmarks.gpu.gpu_report import record, table  # noqa: E402

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
VERSIONS = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "pydantic", "typer", "rich",
            "huggingface_hub", "tokenizers", "safetensors", "pyarrow", "numpy", "vllm", "deepspeed", "bitsandbytes",
            "flash_attn", "liger_kernel")


def parts(dry: bool, extra: bool = False) -> list[tuple[str, int]]:
    """(part, time limit in seconds), in the order they run: the cheap facts first, then the side-by-side cases
    smallest first (the merge after the first), the demo; with `extra`, also the parts run only when named."""
    if dry:
        return ([("facts", 60), ("rates", 60)] + [(f"case-{c.name}", 90) for c in DRY_CASES]
                + [("merge", 60), ("demo-amp", 60)])
    # the merge right after the first (smallest) LoRA case, whose adapter it merges: a later time limit cannot cut it
    chosen = [("facts", 60), ("rates", 40), (f"case-{CASES[0].name}", 150), ("merge", 60)]
    chosen += [(f"case-{c.name}", 150) for c in CASES[1:]] + [("demo-amp", 90)]
    if extra or os.environ.get("GRPO_GPU_CHECK_PARTS"):  # scripts/gpu_check.sh checked the names against --all
        chosen += [(f"case-{c.name}", 90) for c in EXTRA_CASES] + [("demo-bf16", 80)]
    return chosen


def _facts(work: Path, dry: bool) -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                            "cores": os.cpu_count(), "torch_cuda_build": torch.version.cuda,
                            "cuda_available": torch.cuda.is_available(),
                            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                            "jobs": int(os.environ.get("GRPO_GPU_CHECK_JOBS", "1"))}
    info["versions"] = {}
    for name in VERSIONS:
        try:
            info["versions"][name] = md.version(name)
        except md.PackageNotFoundError:
            info["versions"][name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()  # after the context exists: what the context itself takes
        info.update(gpu=props.name, gpus=torch.cuda.device_count(), capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / GIB, 2), bf16=torch.cuda.is_bf16_supported(),
                    context_gib=round((total - free) / GIB, 3), multiprocessors=props.multi_processor_count,
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,power.limit,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, check=False)
        info["nvidia_smi"] = smi.stdout.strip()
    doctor = subprocess.run([sys.executable, "-m", "grpo_cli", "doctor", "--json"], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, **ENV}, check=False)
    try:
        info["doctor"] = json.loads(doctor.stdout)
    except json.JSONDecodeError:
        info["doctor"] = {"rc": doctor.returncode, "output": (doctor.stdout + doctor.stderr)[-2000:]}
    return info


def _rates(work: Path, dry: bool) -> dict[str, Any]:
    """The card's own ceilings: a square matrix product and a device-to-device copy, medians of timed repeats."""
    import torch

    cuda = torch.cuda.is_available()
    device, dtype, n = ("cuda", torch.bfloat16, 8192) if cuda else ("cpu", torch.float32, 512)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    src = torch.randn(256 * 1024**2 if cuda else 16 * 1024**2, device=device)
    dst = torch.empty_like(src)

    def timed(fn: Any, repeats: int = 10) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(repeats):
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    mm = timed(lambda: a @ b)
    copy = timed(lambda: dst.copy_(src))
    return {"matmul_dtype": str(dtype).removeprefix("torch."), "matmul_n": n, "matmul_tflops": 2 * n**3 / mm / 1e12,
            "copy_gb_per_s": 2 * src.numel() * src.element_size() / copy / 1e9}


def _demo(work: Path, dry: bool, variant: str) -> dict[str, Any]:
    """`grpo train recipes/demo.yaml` on one GPU: completes, learns (held-out accuracy), steps/s."""
    out = work / "runs" / variant
    args = [f"output.dir={out}"]
    args += ["launch.profile=cpu", "training.max_steps=10", "training.logging_steps=5"] if dry else \
        ["launch.profile=single"] + (["training.bf16=true"] if variant == "demo-amp" else ["model.dtype=bfloat16"])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "train", "recipes/demo.yaml", *args, "--force"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, **ENV}, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"grpo train exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    final = next((r for r in reversed(rows) if "train_runtime" in r), {})
    return {"variant": variant, "overrides": args[1:], "status": manifest["status"], "device": manifest["device"],
            "dtype": manifest["dtype"], "steps": manifest["global_step"], "wall_s": wall,
            "train_runtime_s": final.get("train_runtime"), "steps_per_s": final.get("train_steps_per_second"),
            "before": manifest["eval_before"]["accuracy/mean"], "after": manifest["eval_after"]["accuracy/mean"]}


def _merge(work: Path, dry: bool) -> dict[str, Any]:
    """`grpo merge` of the first LoRA case's trained adapter, or of a fresh one on that case's shape when the case
    left none (cut by its time limit): the command verifies the merged logits itself."""
    case = next(c for c in (DRY_CASES if dry else CASES) if c.lora)
    adapter, source = work / "runs" / f"{case.name}.fast", "the case's trained adapter"
    if not (adapter / "adapter_config.json").is_file():
        adapter, source = _fresh_adapter(case.name, work), "a fresh adapter (the case left none)"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grpo_cli", "merge", str(adapter), "--out", str(work / "merged"),
                           "--force"], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **ENV},
                          check=False)
    tail = (done.stdout + done.stderr).strip().splitlines()[-6:]
    if done.returncode:
        raise RuntimeError(f"grpo merge of {source} exited {done.returncode}:\n" + "\n".join(tail))
    return {"adapter": case.name, "source": source, "merge_s": time.perf_counter() - start, "output": tail}


def _fresh_adapter(name: str, work: Path) -> Path:
    """A LoRA adapter with drawn B matrices (so it changes the logits) on the case's model, saved for `grpo merge`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model_dir = work / "models" / name
    if not (model_dir / "config.json").is_file():
        model_dir = build_model(find_case(name), work / "models")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                           LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    torch.manual_seed(0)
    for key, param in model.named_parameters():
        if "lora_B" in key:
            torch.nn.init.normal_(param, std=0.02)
    out = work / "adapter"
    model.save_pretrained(out)
    return out


def run_part(name: str, work: Path, dry: bool) -> dict[str, Any]:
    if name == "facts":
        return _facts(work, dry)
    if name == "rates":
        return _rates(work, dry)
    if name.startswith("demo-"):
        return _demo(work, dry, name)
    if name.startswith("case-"):
        return run_case(name.removeprefix("case-"), work, dry)
    if name == "merge":
        return _merge(work, dry)
    raise SystemExit(f"unknown part {name!r}; the parts are {[p for p, _ in parts(dry)]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verb", choices=("parts", "run", "table", "record"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: the kit's own test.")
    parser.add_argument("--all", action="store_true", help="parts: also those run only when named.")
    ns = parser.parse_args()
    if ns.verb == "parts":
        print("\n".join(f"{p} {limit}" for p, limit in parts(ns.dry_run, ns.all)))
    elif ns.verb == "run":
        name, work = ns.args[0], Path(ns.args[1])
        start = time.perf_counter()
        try:
            result = {"ok": True, **run_part(name, work, ns.dry_run)}
        except Exception as exc:  # a failing part is a row of the table, never the end of the run
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
        result["seconds"] = round(time.perf_counter() - start, 1)
        (work / f"{name}.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
        print(json.dumps({k: v for k, v in result.items() if k != "traceback"}, default=str)[:2000])
    elif ns.verb == "table":
        chosen = os.environ.get("GRPO_GPU_CHECK_PARTS", "").split()  # scripts/gpu_check.sh's subset, if any
        names = [p for p, _ in parts(ns.dry_run) if not chosen or p in chosen]
        print(table(Path(ns.args[0]), Path(ns.args[1]), names, ns.dry_run))
    else:
        print(record(Path(ns.args[0])))


if __name__ == "__main__":
    main()
