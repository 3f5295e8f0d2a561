"""A TrainerCallback that records a run's memory by phase, for the GPU proof kit (benchmarks/gpu/gpu_check.py).

A recipe names it in `callbacks:` (`benchmarks/gpu/gpu_probe.py:PhaseMemory`, params `{out: FILE}`), so the run
measured is an ordinary `grpo train` run. On CUDA it reads the caching allocator (`max_memory_allocated`,
`max_memory_reserved`); on the CPU (the kit's dry run) the process's resident set and its high-water mark.
Phases: the weights before the first step, the peak while `generate` runs, the memory held after each optimizer
step (weights and optimizer state), and the whole run's peak. It also keeps the first round's prompt and sampled
token ids, so two runs of one seed (TRL's default generation path and grpo's fast one) can be compared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback


def proc_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


class Meter:
    """Current and peak bytes: the CUDA allocator where a GPU is in use, else this process's RSS."""

    def __init__(self, baseline: int = 0) -> None:
        self.cuda = torch.cuda.is_available()
        self.baseline = 0 if self.cuda else baseline  # on the CPU: the RSS before the model loaded

    def now(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else proc_status("VmRSS") - self.baseline

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated() if self.cuda else proc_status("VmHWM") - self.baseline

    def peak_reserved(self) -> int:
        return torch.cuda.max_memory_reserved() if self.cuda else proc_status("VmHWM") - self.baseline

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM back to the current RSS


class PhaseMemory(TrainerCallback):
    """Writes {weights, generation_peak, after_step, peak, peak_reserved} (bytes) to `out` at the end of training."""

    def __init__(self, out: str, baseline: int = 0) -> None:
        self.out = Path(out)
        self.meter = Meter(baseline)
        self.record: dict[str, Any] = {"device": "cuda" if self.meter.cuda else "cpu", "after_step": [],
                                       "generation_peak": 0, "peak": 0, "peak_reserved": 0, "generate_seconds": []}

    def _fold_peaks(self) -> None:
        """Keep the run's peaks before a reset wipes them (the allocator has one peak counter)."""
        self.record["peak"] = max(self.record["peak"], self.meter.peak())
        self.record["peak_reserved"] = max(self.record["peak_reserved"], self.meter.peak_reserved())

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.record["weights"] = self.meter.now()
        if model is not None:
            self._wrap_generate(model)

    def _wrap_generate(self, model: Any) -> None:
        """The peak while generate runs (its own counter, reset before each call) and its synchronised time."""
        original: Callable[..., Any] = model.generate
        self.owner = getattr(original, "__self__", None)  # grpo's outermost generate hook (its compile fallback)

        def generate(*args: Any, **kwargs: Any) -> Any:
            self._fold_peaks()
            self.meter.reset_peak()
            start = time.perf_counter()
            try:
                out = original(*args, **kwargs)
                self._first_tokens(kwargs.get("input_ids"), out)
                return out
            finally:
                if self.meter.cuda:
                    torch.cuda.synchronize()
                self.record["generate_seconds"].append(time.perf_counter() - start)
                self.record["generation_peak"] = max(self.record["generation_peak"], self.meter.peak())

        model.generate = generate

    def _first_tokens(self, prompt: Any, out: Any) -> None:
        """The first round's prompts and completions (token ids), where generate returned the plain tensor."""
        if "first_tokens" in self.record or not isinstance(out, torch.Tensor) or not isinstance(prompt, torch.Tensor):
            return
        self.record["first_prompts"] = prompt.tolist()
        self.record["first_tokens"] = out[:, prompt.shape[1]:].tolist()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.record["after_step"].append(self.meter.now())

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter.cuda:
            torch.cuda.synchronize()
        self._fold_peaks()
        self.record["compile_failed"] = getattr(getattr(self, "owner", None), "failed", None)
        self.out.write_text(json.dumps(self.record), encoding="utf-8")
