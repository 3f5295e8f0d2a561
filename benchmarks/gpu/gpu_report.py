"""The GPU proof kit's results: one JSON and one Markdown table from the parts' files, and a real run's tables
recorded as a new file in docs/performance/history/ (benchmarks/gpu/gpu_check.py `table` and `record`)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from benchmarks.record import ROOT, history_path

GIB = 1024**3
# Dense bf16 tensor-core peaks from the vendors' datasheets (TFLOP/s), matched against the device name.
SPEC_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("GH200", 989.4),
                    ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10G", 70.0))


def spec_peak(gpu: str | None) -> float | None:
    """The datasheet's dense bf16 rate for a device name, in TFLOP/s (None for an unknown card or the CPU)."""
    return next((peak for key, peak in SPEC_BF16_TFLOPS if gpu and key in gpu), None)


def _gib(x: float | None) -> str:
    return "—" if x is None else f"{x / GIB:.2f}"


def _parts_rows(results: dict[str, Any], names: list[str]) -> list[str]:
    rows = ["| part | result | seconds |", "|---|---|---|"]
    for name in names:
        r = results.get(name)
        if r is None:
            rows.append(f"| {name} | did not finish (time limit or killed) | — |")
        else:
            what = "ok" if r.get("ok") else "FAILED: " + r.get("error", "").splitlines()[0][:160].replace("|", "/")
            rows.append(f"| {name} | {what} | {r.get('seconds', '—')} |")
    return rows


def _demo_rows(results: dict[str, Any]) -> list[str]:
    rows = ["| demo | device, weights | steps | steps/s | held-out accuracy before → after | wall (s) |",
            "|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name.startswith("demo-") and r.get("ok"):
            sps = f"{r['steps_per_s']:.1f}" if r.get("steps_per_s") else "—"
            rows.append(f"| {name} ({' '.join(r['overrides'])}) | {r['device']}, {r['dtype']} | {r['steps']} | {sps} "
                        f"| {r['before']:.3f} → {r['after']:.3f} ({r['after'] - r['before']:+.3f}) "
                        f"| {r['wall_s']:.0f} |")
    return rows


def _ratio(measured: float | None, planned: float | None) -> str:
    return "—" if not measured or not planned else f"{measured / planned:.2f}"


def _case_rows(results: dict[str, Any]) -> list[str]:
    rows = ["| case | params | plan (GiB) | measured peak (GiB) | measured / plan | peak allocated | "
            "weights plan / meas. | after step plan / meas. | generation peak plan / meas. | "
            "training peak plan / meas. |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not (name.startswith("case-") and r.get("ok")):
            continue
        p, m = r["plan"], r["measured"]
        outside = m.get("outside_allocator")
        if outside is None:  # NVML could not say while other parts shared the GPU: the context alone
            outside = results.get("facts", {}).get("context_gib", 0) * GIB
        measured = m["peak_reserved"] + outside
        after = m["after_step"][-1] if m["after_step"] else None
        rows.append(f"| {r['case']} | {r['params'] / 1e6:,.1f}M | {_gib(p['total'])} | {_gib(measured)} | "
                    f"**{_ratio(measured, p['total'])}** | {_gib(m['peak'])} | "
                    f"{_gib(p['weights'])} / {_gib(m['weights'])} | {_gib(p['after_step'])} / {_gib(after)} | "
                    f"{_gib(p['generation_peak'])} / {_gib(m['generation_peak'])} | "
                    f"{_gib(p['training_peak'])} / {_gib(m['peak'])} |")
    return rows


def _speed_rows(results: dict[str, Any], peak: float | None, measured_peak: float | None) -> list[str]:
    rows = ["| case | step (s) | generation (s) | generation tokens/s | training (s) | training tokens/s | "
            "training MFU (datasheet) | training MFU (measured matmul) | time plan: steady step planned (s) | "
            "measured / planned |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not (name.startswith("case-") and r.get("ok")):
            continue
        t = r["throughput"]
        flops = t["training_flops_per_s"] / 1e12
        mfu = f"{flops / peak:.1%}" if peak else "—"
        mfu_measured = f"{flops / measured_peak:.1%}" if measured_peak else "—"
        rows.append(f"| {r['case']} | {t['step_s']:.2f} | {t['generation_s']:.2f} | "
                    f"{t['generation_tokens_per_s']:,.0f} | {t['training_s']:.3f} | {t['training_tokens_per_s']:,.0f} "
                    f"| {mfu} | {mfu_measured} | {_planned(r)} |")
    return rows


def _times(a: float | None, b: float | None) -> str:
    return "—" if not a or not b else f"**{a / b:.2f}x**"


def _path_rows(results: dict[str, Any]) -> list[str]:
    """TRL's default generation path against grpo's fast path, per case (issue 47's goals: generation >= 3x for
    LoRA and >= 2x for full fine-tunes, the LoRA step >= 2x)."""
    rows = ["| case | generation tokens/s, TRL → grpo | gain | step (s), TRL → grpo | gain | first generate (s), "
            "TRL / grpo | first round's samples: identical, agreeing prefix, first token |",
            "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not (name.startswith("case-") and r.get("ok") and "trl_throughput" in r):
            continue
        trl, fast, agree = r["trl_throughput"], r["throughput"], r.get("agreement", {})
        samples = "—" if not agree.get("compared") else (
            f"{agree['identical']:.0%}, {agree['agreeing_prefix']:.0%}, {agree['first_token']:.0%} of "
            f"{agree['compared']}" + ("" if agree.get("same_prompts") else " (prompts differed)"))
        first = f"{r.get('trl_first_generate_s') or 0:.1f} / {r.get('first_generate_s') or 0:.1f}"
        rows.append(f"| {r['case']} | {trl['generation_tokens_per_s']:,.0f} → {fast['generation_tokens_per_s']:,.0f} | "
                    f"{_times(fast['generation_tokens_per_s'], trl['generation_tokens_per_s'])} | "
                    f"{trl['step_s']:.2f} → {fast['step_s']:.2f} | {_times(trl['step_s'], fast['step_s'])} | "
                    f"{first} | {samples} |")
    failed = [f"{r['case']}: {r['compile_failed']}" for n, r in results.items()
              if n.startswith("case-") and r.get("ok") and r.get("compile_failed")]
    if failed:  # grpo's fallback generated uncompiled: the gain above is without compiled decode
        rows += ["", "Compiled decode failed and grpo generated uncompiled: " + "; ".join(failed)[:1000]]
    return rows


def _planned(r: dict[str, Any]) -> str:
    """The time plan's steady step and the measured one over it (`—` for a case run before the plan existed)."""
    plan = r.get("time_plan") or {}
    planned, measured = plan.get("planned_s"), plan.get("measured_s")
    if not planned:
        return "— | —"
    return f"{planned:.2f} | " + (f"{measured / planned:.2f}" if measured else "—")


def _heading(results: dict[str, Any], dry: bool) -> list[str]:
    facts = results.get("facts", {})
    v = facts.get("versions", {})
    card = facts.get("gpu", "no GPU (CPU)")
    when = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [f"### GPU check{' (dry run, CPU)' if dry else ''} ({when}, {card}, torch {v.get('torch')} CUDA "
             f"{facts.get('torch_cuda_build')}, transformers {v.get('transformers')}, trl {v.get('trl')}, "
             f"peft {v.get('peft')}, Python {facts.get('python')})", ""]
    rates = results.get("rates", {})
    if facts.get("alloc_conf") or facts.get("jobs", 1) > 1:
        lines.append(f"PYTORCH_CUDA_ALLOC_CONF={facts.get('alloc_conf') or '(unset)'}; up to {facts.get('jobs', 1)} "
                     "cases and demos ran at once: memory is per process, but speed figures are not comparable "
                     "with a run of one part at a time.")
    if facts.get("gpu"):
        lines.append(f"{facts.get('gpus')} x {card}, {facts.get('memory_gib')} GiB, capability "
                     f"{facts.get('capability')}, bf16 {facts.get('bf16')}, NCCL {facts.get('nccl')}, "
                     f"nvidia-smi (driver, power limit, max SM clock): {facts.get('nvidia_smi')}; the CUDA context "
                     f"takes {facts.get('context_gib')} GiB; {facts.get('cores')} CPU cores.")
    if rates.get("ok"):
        lines.append(f"Measured ceilings: {rates['matmul_dtype']} {rates['matmul_n']}³ matrix product "
                     f"{rates['matmul_tflops']:.3g} TFLOP/s (datasheet {spec_peak(facts.get('gpu')) or '—'}), "
                     f"device copy {rates['copy_gb_per_s']:,.0f} GB/s (read + write).")
    return lines + [""]


def table(work: Path, outdir: Path, names: list[str], dry: bool) -> str:
    """Write OUTDIR/gpu_check.json (every part's result) and OUTDIR/gpu_check.md (the tables); return the tables."""
    results = {}
    for name in names:
        path = work / f"{name}.json"
        if path.is_file():
            results[name] = json.loads(path.read_text(encoding="utf-8"))
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "gpu_check.json").write_text(json.dumps({"dry_run": dry, "parts": names, "results": results},
                                                      indent=1, default=str), encoding="utf-8")
    facts, rates = results.get("facts", {}), results.get("rates", {})
    peak = spec_peak(facts.get("gpu"))
    lines = _heading(results, dry) + _parts_rows(results, names) + [""] + _demo_rows(results) + [""]
    sizes = next((f"{r['batch']} completions of {r['completion_length']} tokens per step, {r['steps']} steps; "
                  for k, r in results.items() if k.startswith("case-") and r.get("ok")), "")
    lines += [sizes + "Memory: the plan (`grpo memory`, its 1 GiB context allowance included) against the "
              "measured peak (the caching allocator's peak reserved bytes plus what the process holds outside it). "
              "Phases: weights before step 1, held after an optimizer step, the peak inside `generate`, the "
              "run's peak.", ""]
    lines += ["TRL's default transformers generation path (its dynamic cache, unmerged LoRA layers, grpo's hooks off) "
              "against grpo's fast path (`grpo validate`'s \"generation path\": the adapter merged while generating, "
              "a static cache with compiled decode on CUDA), the same recipe and seed, the steps after the first "
              "(the first compiles); the samples compare the first round of each (same prompts and weights; LoRA's B "
              "starts at zero, so the merge's own numerics are the CPU tests' to show).", ""]
    lines += _path_rows(results) + [""]
    lines += _case_rows(results) + [""]
    lines += ["Throughput of grpo's path, the steps after the first (synchronised generate time; forward + backward "
              "from the step timer); MFU counts 6 x params FLOPs per trained token (4 x for LoRA: no weight "
              "gradients).", ""]
    lines += _speed_rows(results, peak, rates.get("matmul_tflops") if rates.get("ok") else None)
    text = "\n".join(lines) + "\n"
    (outdir / "gpu_check.md").write_text(text, encoding="utf-8")
    return text


def record(outdir: Path) -> str:
    """Write a real run's tables to a new docs/performance/history/DATE-HHMM-gpu-check.md (nothing else changes:
    docs/performance.md's GPU figures are updated by hand from it)."""
    data = json.loads((outdir / "gpu_check.json").read_text(encoding="utf-8"))
    if data["dry_run"]:
        raise SystemExit("a dry run is a test of the kit, not a GPU measurement: nothing recorded")
    section = (outdir / "gpu_check.md").read_text(encoding="utf-8").strip()
    path = history_path("gpu-check")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(section + "\n", encoding="utf-8")
    return f"recorded in {path.relative_to(ROOT)}"
