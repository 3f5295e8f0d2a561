"""One memory-and-throughput case of the GPU proof kit: a randomly initialised model of a real shape, a few
`grpo train` steps with fixed completion lengths, the measured peak against `grpo memory`'s plan.

The shapes come from grpo's shipped shape table (no download); the weights are random, which changes no byte
count and no FLOP. Completions are forced to exactly `max_completion_length` tokens (`min_new_tokens`), so the
plan's sequence length is the real one. Run by benchmarks/gpu/gpu_check.py, each case in a fresh process.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "grpo_cli" / "assets" / "tiny-arith"
PROBE = Path(__file__).resolve().parent / "gpu_probe.py"
GIB = 1024**3
# The dry run's model: small enough for a CPU step in about a second.
TINY = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True}


@dataclass(frozen=True)
class Case:
    """A model shape (a hub id of the shipped table, or `tiny`) and how it is tuned."""

    name: str
    shape: str
    lora: bool = False
    checkpointing: bool = False


# The cases every call runs, smallest first, so a run cut short by its time limit still has the small ones: the four
# the H100 check of 2026-11-26 measured generation on (issue 47), each with TRL's default generation path and with
# grpo's fast one. The memory-only cases of that check run when GRPO_GPU_CHECK_PARTS names them.
CASES = [Case("smollm2-135m-lora", "HuggingFaceTB/SmolLM2-135M-Instruct", lora=True),
         Case("qwen2.5-0.5b-full", "Qwen/Qwen2.5-0.5B-Instruct"),
         Case("qwen2.5-0.5b-lora", "Qwen/Qwen2.5-0.5B-Instruct", lora=True),
         Case("qwen2.5-1.5b-lora", "Qwen/Qwen2.5-1.5B-Instruct", lora=True)]
EXTRA_CASES = [Case("smollm2-135m-full", "HuggingFaceTB/SmolLM2-135M-Instruct"),
               Case("qwen2.5-1.5b-full", "Qwen/Qwen2.5-1.5B-Instruct"),
               Case("qwen2.5-1.5b-full-ckpt", "Qwen/Qwen2.5-1.5B-Instruct", checkpointing=True)]
DRY_CASES = [Case("tiny-full", "tiny"), Case("tiny-lora", "tiny", lora=True)]
# (completions per step, completion tokens, steps) on a GPU and in the CPU dry run. The H100 runs of 2026-11-26
# used 128 tokens and 3 steps: 9 of the 12 parts fitted in one 450 s call. Each case now trains twice (TRL's path
# and grpo's), so 64 tokens and 2 steps: the second step is the measured one (the first warms up and compiles).
GPU_SIZES, DRY_SIZES = (32, 64, 2), (8, 8, 2)
# TRL's default generation path: grpo's hooks off (the shared prefill, the merged adapter) and TRL's dynamic cache.
TRL_PATH_ENV = {"GRPO_SHARED_PREFILL": "0", "GRPO_MERGED_GENERATION": "0"}

RECIPE = """
model:
  name_or_path: {model}
  dtype: {dtype}
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
  num_generations: 8
  per_device_train_batch_size: {batch}
  gradient_accumulation_steps: 1
  max_completion_length: {length}
  generation_kwargs: {{min_new_tokens: {length}}}
  temperature: 1.0
  max_steps: {steps}
  logging_steps: 1
  gradient_checkpointing: {ckpt}
  save_strategy: "no"
  seed: 0
{sampling}
eval: {{before_after: false}}
launch: {{profile: {profile}}}
callbacks:
  - {{callback: "{probe}:PhaseMemory", params: {{out: "{probe_out}", baseline: {baseline}}}}}
output: {{dir: {out}}}
"""


def _rss() -> int:
    from benchmarks.gpu.gpu_probe import proc_status

    return proc_status("VmRSS")


def _process_gpu_bytes() -> int | None:
    """This process's GPU memory as the driver counts it (NVML); the whole device's use when the parts run one at
    a time and NVML cannot say; None when other parts share the GPU and NVML cannot say."""
    import os

    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory:
                return int(proc.usedGpuMemory)
    except Exception:  # no NVML bindings, or a driver that hides per-process use
        pass
    if os.environ.get("GRPO_GPU_CHECK_JOBS", "1") == "1":
        free, total = torch.cuda.mem_get_info()
        return total - free
    return None


def find_case(name: str) -> Case:
    return next(c for c in CASES + EXTRA_CASES + DRY_CASES if c.name == name)


def build_model(case: Case, where: Path) -> Path:
    """A random model of the case's shape saved with the bundled tokenizer (ids past its 260 decode to nothing)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_cli.planning.model_config import shipped_shape

    if case.shape == "tiny":
        shape = dict(TINY)
    else:
        found = shipped_shape(case.shape)
        assert found is not None, f"{case.shape} is not in grpo's shipped shape table"
        shape = found[0]
    model_type = shape.pop("model_type")
    config = AutoConfig.for_model(model_type, **shape, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model_dir = where / case.name
    model.save_pretrained(model_dir)
    del model
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(TOKENIZER / name, model_dir / name)
    return model_dir


def _phase_plan(plan: Any) -> dict[str, float]:
    """What the plan predicts for each phase the probe measures (bytes), context allowance excluded."""
    static = {i.name: i.bytes for i in plan.items if i.phase == "static" and not i.name.startswith("CUDA context")}
    weights = static.get("weights", 0.0) + static.get("LoRA adapters", 0.0)
    after_step = sum(static.values()) - static.get("gradients", 0.0)
    gen = sum(i.bytes for i in plan.items if i.phase == "generation")
    train = sum(i.bytes for i in plan.items if i.phase == "training")
    return {"weights": weights, "after_step": after_step, "generation_peak": after_step + gen,
            "training_peak": sum(static.values()) + train, "total": plan.total_bytes}


def _throughput(run_dir: Path, probe: dict[str, Any], params: int, lora: bool) -> dict[str, Any]:
    """Generation and training tokens/s over the steps after the first (the first compiles and warms caches)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "step_time" in r]
    later = steps[1:] or steps
    tokens = [b["num_tokens"] - a["num_tokens"] for a, b in zip(steps, steps[1:], strict=False)] or \
        [steps[0]["num_tokens"]]
    completion = statistics.median(r["completions/mean_length"] for r in later)
    batch = probe["batch"]
    gen_s = statistics.median(probe["generate_seconds"][1:] or probe["generate_seconds"])
    train_s = statistics.median(r.get("time/forward", 0.0) + r.get("time/backward", 0.0) for r in later)
    flops_per_token = (4 if lora else 6) * params  # LoRA: no weight gradients for the frozen weights
    train_tps = statistics.median(tokens) / train_s if train_s else 0.0
    return {"step_s": statistics.median(r["step_time"] for r in later), "generation_s": gen_s,
            "training_s": train_s, "completion_tokens": completion,
            "generation_tokens_per_s": batch * completion / gen_s if gen_s else 0.0,
            "training_tokens_per_s": train_tps, "training_flops_per_s": flops_per_token * train_tps,
            "generation_flops_per_s": 2 * params * batch * completion / gen_s if gen_s else 0.0}


def _train_variant(case: Case, path: str, model_dir: Path, work: Path, dry: bool) -> tuple[Any, Any, dict[str, Any]]:
    """`grpo train` on one generation path ("trl": TRL's default; "fast": grpo's): (plan, result, probe record)."""
    import gc
    import os

    import torch

    from grpo_cli.planning import memory_plan
    from grpo_cli.recipe import load_recipe
    from grpo_cli.training import train

    cuda = torch.cuda.is_available()
    batch, length, steps = DRY_SIZES if dry else GPU_SIZES
    gc.collect()
    if cuda:  # the other path's cached blocks and peaks are not this one's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    baseline = 0 if cuda else _rss()  # on the CPU the probe reads the process's RSS: count from here
    lora = "  lora: {r: 16, alpha: 32, dropout: 0.0, target_modules: all-linear}" if case.lora else ""
    # TRL's path keeps its dynamic cache; grpo's chooses for itself on CUDA, and is forced to the static cache in the
    # CPU dry run (where it is off by default) so the dry run exercises it
    forced = "" if cuda else "sampling: {compiled_decode: true}"
    sampling = {"trl": "sampling: {compiled_decode: false}", "fast": forced}
    tag = f"{case.name}.{path}"
    probe_out = work / f"{tag}.probe.json"
    recipe_path = work / f"{tag}.recipe.yaml"
    recipe_path.write_text(RECIPE.format(
        model=model_dir, dtype="auto" if cuda else "float32", lora=lora, batch=batch, length=length,
        steps=steps, ckpt=str(case.checkpointing).lower(), profile="single" if cuda else "cpu", probe=PROBE,
        probe_out=probe_out, baseline=baseline, out=work / "runs" / tag, sampling=sampling[path]), encoding="utf-8")
    recipe = load_recipe(recipe_path)
    gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB if cuda else None
    plan, why = memory_plan(recipe, gpu_memory_gb=gpu_gib, world_size=1)
    assert plan is not None, why
    saved = {k: os.environ.get(k) for k in TRL_PATH_ENV}
    if path == "trl":
        os.environ.update(TRL_PATH_ENV)
    try:
        result = train(recipe, force=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    probe = json.loads(probe_out.read_text()) | {"batch": batch}
    if cuda:  # what the process holds outside PyTorch's allocator: context, cuBLAS/cuDNN workspaces
        used = _process_gpu_bytes()
        if used is not None:
            probe["outside_allocator"] = used - torch.cuda.memory_reserved()
    return plan, result, probe


def agreement(trl: dict[str, Any], fast: dict[str, Any]) -> dict[str, Any]:
    """How far the first round's sampled tokens of the two paths agree (same seed, same prompts, same weights)."""
    a, b = trl.get("first_tokens"), fast.get("first_tokens")
    if not a or not b or len(a) != len(b):
        return {"compared": 0}
    prefixes = []
    for x, y in zip(a, b, strict=True):
        same = next((i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), min(len(x), len(y)))
        prefixes.append(same / max(len(x), 1))
    return {"compared": len(a), "same_prompts": trl.get("first_prompts") == fast.get("first_prompts"),
            "identical": sum(x == y for x, y in zip(a, b, strict=True)) / len(a),
            "agreeing_prefix": sum(prefixes) / len(prefixes),
            "first_token": sum(x[:1] == y[:1] for x, y in zip(a, b, strict=True)) / len(a)}


def run_case(name: str, work: Path, dry: bool) -> dict[str, Any]:
    """Build the model; train it on TRL's default generation path, then on grpo's fast path (planned and probed);
    return the plan, the fast run's peaks, both runs' rates and how far their first samples agree."""
    case = find_case(name)
    model_dir = build_model(case, work / "models")  # kept: the merge part merges an adapter onto it
    plan, trl_result, trl_probe = _train_variant(case, "trl", model_dir, work, dry)
    trl_rates = _throughput(Path(trl_result.output_dir), trl_probe, plan.params, case.lora)
    # what is known if the time limit kills the part during grpo's path (the first round compiles): its table row
    # then says so, with TRL's figures, instead of "did not finish"
    (work / f"case-{name}.json").write_text(json.dumps(
        {"ok": False, "error": "cut during grpo's path (TRL's path finished)", "trl_throughput": trl_rates}),
        encoding="utf-8")
    plan, result, probe = _train_variant(case, "fast", model_dir, work, dry)
    batch, length, _ = DRY_SIZES if dry else GPU_SIZES
    return {"case": name, "shape": case.shape, "lora": case.lora, "checkpointing": case.checkpointing,
            "status": result.status, "trl_status": trl_result.status, "steps": result.global_step,
            "params": plan.params, "trainable_params": plan.trainable_params, "batch": batch,
            "completion_length": length, "plan": _phase_plan(plan), "plan_items": {i.name: i.bytes for i in plan.items},
            "measured": probe, "throughput": _throughput(Path(result.output_dir), probe, plan.params, case.lora),
            "trl_throughput": trl_rates, "trl_first_generate_s": (trl_probe["generate_seconds"] or [None])[0],
            "first_generate_s": (probe["generate_seconds"] or [None])[0],
            "agreement": agreement(trl_probe, probe), "compile_failed": probe.get("compile_failed"),
            "time_plan": _time_plan(Path(result.output_dir))}


def _time_plan(run_dir: Path) -> dict[str, Any]:
    """The run's planned steady step (`grpo validate`'s time plan, recorded by the run) against the measured one."""
    from grpo_cli import runs

    manifest = runs.read_manifest(run_dir)
    plan = manifest.time_plan.step if manifest and manifest.time_plan else None
    measured = manifest.step_rates.seconds["step"].mean if manifest and manifest.step_rates else None
    return {"planned_s": plan.mean if plan else None, "measured_s": measured,
            "source": manifest.time_plan.parts[0].source if plan and manifest and manifest.time_plan else ""}
